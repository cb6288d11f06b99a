// The crate's front page (docs.rs, `cargo doc`) is README.md, as walkdir's: its Rust snippets
// run as doc tests (`cargo test --doc`), and `make lint` builds the documentation with
// `-D warnings`, so the page a crates.io user reads compiles and has no broken link.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

// The layers, lowest first. A module imports its own folder or lower ones only; each folder's
// opening comment says what it owns.
// 0: errors, clock, cancellation, limits.
mod base;
// 1: kinds, records, tables, tokens, the lease rules, operations, queries, history.
mod rules;
// 2: the redb file, what is at the path, liveness locks, group commit.
mod storage;
// 3: the shared request ring in /dev/shm: bytes and futexes.
mod ring;
// 4: what processes exchange through the ring: the wire format, a seat, the journal.
mod share;
// 5: the Engine and LeaseHandle traits.
mod engine;
// 6: the local engine (a file of this host) and the etcd engine.
#[cfg(feature = "etcd")]
mod etcd;
mod local;
// 7: Store and Holder.
mod api;
// 8: the C ABI, with the `capi` feature only (a Rust user's build compiles none of it). Public for
// the C library (`cargo rustc --crate-type cdylib,staticlib`), the fuzz targets and tests/ffi.rs,
// but not part of the Rust API (Rust users call the engine's types); it uses what this file
// exports.
#[cfg(feature = "capi")]
#[doc(hidden)]
pub mod ffi;
// 9: a check for each decoder of bytes another process or an older version wrote, for the fuzz
// target `decoders` (scripts/fuzz.sh builds with `--cfg fuzzing`); not part of the API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(all(test, not(fuzzing)))]
mod fuzzing;

#[cfg(feature = "tokio")]
pub use api::async_tokio::LeaderStream;
pub use api::election::{CampaignOptions, Leader, LeaderWatch, Leadership, TERMS_KEPT};
pub use api::holder::Holder;
pub use api::lock::{Lock, LockAll, DEFAULT_TTL};
pub use api::store::Store;
pub use base::cancel::Cancel;
// The boot-time clock the leases use, for the benches and the torture checker only.
#[doc(hidden)]
pub use base::clock::now_ns as boottime_ns;
pub use base::error::{Error, Result, Status};
pub use base::limits::{
    DEFAULT_MAX_VALUE_LEN, MAX_NAME_LEN, MAX_TTL, MAX_VALUE_LEN_LIMIT, MIN_KEEP_ALIVE_TTL, MIN_TTL,
};
pub use base::thread::ThreadTag;
// The group sync of the redo log over a plain file, for tests/group_sync.rs and the bench only.
pub use engine::observe::{Event, Observer};
pub use engine::options::{Mode, Options, DEFAULT_BUSY_TIMEOUT};
#[cfg(feature = "etcd")]
pub use etcd::ETCD_MIN_TTL;
pub use local::serve::{Heartbeat, ServeOptions, Server};
#[cfg(not(fencelock_loom))]
#[doc(hidden)]
pub use ring::flush::SharedLogFile;
pub use rules::history::{Ending, HistoryEntry, HISTORY_LOCKS, HISTORY_PER_LOCK};
pub use rules::info::{Fenced, LockInfo, LockState, StoreInfo, WaiterInfo};
pub use rules::kind::{Kind, MAX_HOLDERS};
pub use rules::metrics::{Metrics, Scope, WAIT_BUCKET_BOUNDS};
pub use storage::db::SCHEMA_VERSION;

/// The library's version, as Cargo knows it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
