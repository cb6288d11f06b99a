//! How a store is opened: its mode, limits, busy timeout and cancel handle.

use std::time::Duration;

use crate::base::cancel::Cancel;
use crate::base::limits::DEFAULT_MAX_VALUE_LEN;

/// How processes share the store file.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{Mode, Options, Store};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// assert_eq!(Mode::default(), Mode::MultiProcess);
/// let options = Options { mode: Mode::SingleProcess, ..Options::default() };
/// let store = Store::open_with(&path, &options)?; // this process alone: commits without an fsync
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// assert_eq!(holder.token(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Any number of processes open the file at once (redb's multi-writer mode). The default.
    #[default]
    MultiProcess,
    /// Only this process opens the file; a second process's open is refused with
    /// [`Error::InUse`](crate::Error::InUse). Grants and extends commit without an fsync (a lease cannot outlive
    /// this process); fenced values and fences commit with one fsync instead of two.
    SingleProcess,
}

/// Default of [`Options::busy_timeout`].
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for opening a store.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{Options, Store};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let options = Options {
///     busy_timeout: Duration::from_secs(2),
///     max_value_len: 1 << 10,
///     ..Options::default()
/// };
/// let store = Store::open_with(&path, &options)?;
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// assert!(holder.put(b"nightly/report", &[0; 1 << 10]).is_ok());
/// assert!(holder.put(b"nightly/report", &[0; 1 << 11]).is_err(), "over max_value_len");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    /// How processes share the file.
    pub mode: Mode,
    /// Largest fenced value accepted, in bytes (at most [`crate::MAX_VALUE_LEN_LIMIT`]).
    pub max_value_len: usize,
    /// How long the open, and each later write that has no deadline of its own (a
    /// [`Cancel`]'s, [`Cancel::set_timeout`]), waits for another process that holds the store:
    /// one inside a commit or inside its own open, which may be paused (a SIGSTOP, Ctrl-Z, a
    /// debugger). Past it they fail with [`Error::Timeout`](crate::Error::Timeout) and change
    /// nothing. Like SQLite's `busy_timeout`.
    pub busy_timeout: Duration,
    /// Ends a waiting open early with [`Error::Cancelled`](crate::Error::Cancelled).
    pub cancel: Option<Cancel>,
    /// Opens for reading only: grants and writes are refused, and neither the open nor a read
    /// waits for a process that holds the write lock (one paused inside a commit). The store
    /// must exist; the file need not be writable, unless a crash left it needing a repair.
    pub read_only: bool,
    /// In multi-process mode, writes go through a request ring shared by the processes that
    /// open the store (in `/dev/shm`), so that one commit carries the writes of all of them.
    /// The default; off, each process commits its own writes (for comparison or diagnosis).
    /// Either way the results and guarantees are the same.
    pub share_commits: bool,
    /// Records how each lease ended in the lock's grant history ([`crate::Store::history`]),
    /// in the transaction of the grant that replaces it: one more read and write of a small
    /// record per grant (about a third more CPU for a grant in single-process mode; nothing
    /// next to the fsync of a multi-process commit). The default; off, the grants this store
    /// commits record nothing (the metrics still count how leases ended). Through a server,
    /// the server's setting ([`crate::ServeOptions::history`]) decides.
    pub history: bool,
    /// Refuses at once, with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock), a waiting
    /// acquire that would wait for a live lease granted to the same thread through this store
    /// (`engine/holds.rs`). The default. A lease counts as the thread's that called the acquire
    /// which granted it: turn this off where holders are handed between threads that each may
    /// wait for the lock, as in a thread pool (tokio's blocking pool) or through Go, whose
    /// goroutines move between threads.
    pub refuse_own_waits: bool,
    /// In multi-process mode, fenced writes (puts, deletes, fences, an acquire's write) go to a
    /// redo log beside the store file (`STORE.wal.*`) instead of a commit of the store file:
    /// one `fdatasync` shared by every process writing at that moment, and no process stopped
    /// in a write holds another's (docs/design/writes.md). The first process that opens the
    /// store decides for every process that opens it while it is open: the others follow it,
    /// whatever their own setting. Checkpoints move the log into the store file, and the last
    /// process to close the store leaves it one file again. Off by default while it is new
    /// (issue 35); no effect in single-process mode, which recovers a log a crash left.
    pub write_log: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::MultiProcess,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            cancel: None,
            read_only: false,
            share_commits: true,
            history: true,
            refuse_own_waits: true,
            write_log: false,
        }
    }
}
