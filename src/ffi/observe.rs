//! A `fencelock_store`'s metrics and its observer callback.

use std::ffi::{c_char, c_void, CString};
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use super::lists::unix_ms;
use super::store::{buffer_into_raw, fencelock_store};
use super::{fencelock_error, fencelock_status, guard, handle, Out, FENCELOCK_OK};
use crate::Status;
use crate::{Event, Observer};
use crate::{Metrics, Scope};

/// Writes every field of `$value`, a `$ty`, into `$out`, a `MaybeUninit<$ty>` made with
/// `zeroed()`, one field at a time: its padding stays zero. A C struct passed out whole (a
/// typed copy, a byte view of a local) carries padding that Rust leaves undefined: the
/// library's stack, read by a caller that copies or compares the struct (valgrind reports it).
/// The pattern names every field, so a field added to `$ty` and not here fails to compile.
macro_rules! write_fields {
    ($out:expr, $value:expr, $ty:ident { $($field:ident),* $(,)? }) => {{
        let out: &mut MaybeUninit<$ty> = $out;
        let ptr = out.as_mut_ptr();
        let $ty { $($field),* } = $value;
        #[allow(unused_unsafe)] // for a caller already in an unsafe block
        // SAFETY: `ptr` points to `out`, valid for writes; each write fills one field in place
        // and leaves the other bytes as they were.
        unsafe {
            $((&raw mut (*ptr).$field).write($field);)*
        }
    }};
}

/// Metrics scope: every process on this host that opened the store counts into them.
pub const FENCELOCK_SCOPE_STORE: i32 = 0;
/// Metrics scope: this open store only (single-process mode, or no shared area usable).
pub const FENCELOCK_SCOPE_PROCESS: i32 = 1;

/// A snapshot of a store's counters (`fencelock_store_metrics`). New fields are only ever added
/// at the end.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fencelock_metrics {
    /// `FENCELOCK_SCOPE_STORE` or `FENCELOCK_SCOPE_PROCESS`.
    pub scope: i32,
    /// When counting started, in milliseconds since the Unix epoch.
    pub since_unix_ms: i64,
    /// Leases granted.
    pub grants: u64,
    /// Leases released by their holders.
    pub releases: u64,
    /// Acquires refused because the lock was held.
    pub refused_locked: u64,
    /// Waiting acquires whose timeout passed first.
    pub refused_timeout: u64,
    /// Waiting acquires cancelled.
    pub refused_cancelled: u64,
    /// Acquires refused for another reason.
    pub refused_other: u64,
    /// Writes and fences refused for a stale token.
    pub stale_writes: u64,
    /// Holders' writes and extends refused because the lease was lost.
    pub lock_lost: u64,
    /// Acquires that waited, and their total wait in nanoseconds.
    pub waits: u64,
    pub wait_ns: u64,
    /// Waits at or under 1 ms, 10 ms, 100 ms, 1 s, 10 s, 60 s, 600 s, and longer (not
    /// cumulative).
    pub wait_buckets: [u64; 8],
    /// How replaced leases had ended.
    pub ended_released: u64,
    pub ended_expired: u64,
    pub ended_taken_over: u64,
    pub ended_holder_died: u64,
    /// Write transactions committed, and the operations they carried.
    pub commits: u64,
    pub committed_ops: u64,
    // The second version's fields, read with the snapshot: a caller that passes the first
    // version's size gets the fields before them only.
    /// Live leases (granted, not expired, holder alive) by kind: exclusive leases, shared
    /// holders, semaphore permits.
    pub live_exclusive: u64,
    pub live_shared: u64,
    pub live_permits: u64,
    /// Waiting acquires of live processes in the store's waiting queue (0 without a shared ring).
    pub queued_waiters: u64,
    /// The store file's size in bytes.
    pub file_bytes: u64,
    // The third version's field.
    /// Lease ends left out of the history: while it could not be written to the store file, the
    /// shared memory kept at most 2,048 pending ends and dropped later ones rather than refuse
    /// grants.
    pub history_dropped: u64,
}

impl From<&Metrics> for fencelock_metrics {
    fn from(m: &Metrics) -> Self {
        fencelock_metrics {
            scope: match m.scope {
                Scope::Process => FENCELOCK_SCOPE_PROCESS,
                _ => FENCELOCK_SCOPE_STORE,
            },
            since_unix_ms: unix_ms(m.since),
            grants: m.grants,
            releases: m.releases,
            refused_locked: m.refused_locked,
            refused_timeout: m.refused_timeout,
            refused_cancelled: m.refused_cancelled,
            refused_other: m.refused_other,
            stale_writes: m.stale_writes,
            lock_lost: m.lock_lost,
            waits: m.waits,
            wait_ns: ns(m.wait_time),
            wait_buckets: m.wait_buckets,
            ended_released: m.ended_released,
            ended_expired: m.ended_expired,
            ended_taken_over: m.ended_taken_over,
            ended_holder_died: m.ended_holder_died,
            commits: m.commits,
            committed_ops: m.committed_ops,
            live_exclusive: m.live_exclusive,
            live_shared: m.live_shared,
            live_permits: m.live_permits,
            queued_waiters: m.queued_waiters,
            file_bytes: m.file_bytes,
            history_dropped: m.history_dropped,
        }
    }
}

/// The size of the first `fencelock_metrics`: what every caller has room for.
const METRICS_V1_SIZE: usize = 208;
const _: () = assert!(std::mem::offset_of!(fencelock_metrics, live_exclusive) == METRICS_V1_SIZE);
/// The second, with the gauges, and the third, with the dropped history.
const _: () =
    assert!(std::mem::offset_of!(fencelock_metrics, history_dropped) == METRICS_V1_SIZE + 5 * 8);
const _: () = assert!(std::mem::size_of::<fencelock_metrics>() == METRICS_V1_SIZE + 6 * 8);

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Writes a snapshot of the store's counters, and of its gauges (live leases, queued waiters,
/// file size: read from the store, as `fencelock_store_locks` reads it), to `*metrics_out`.
/// Pass `sizeof(fencelock_metrics)` as `metrics_size`: a program built with an older header
/// gets the fields it knows, one built with a newer header zeros in the fields this library
/// does not know.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `metrics_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (`metrics_size` smaller than the first version's struct, or an
/// etcd store, which keeps no metrics), `FENCELOCK_TIMEOUT`, `FENCELOCK_FORKED`, `FENCELOCK_IO`,
/// `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described; `metrics_out` points to `metrics_size`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_metrics(
    store: *const fencelock_store,
    metrics_out: *mut fencelock_metrics,
    metrics_size: usize,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let out = Out::required(metrics_out.cast::<u8>(), "metrics_out")?;
            if metrics_size < METRICS_V1_SIZE {
                return Err(fencelock_error::new(
                    Status::InvalidArgument,
                    format!(
                        "metrics_size {metrics_size} is smaller than the first fencelock_metrics \
                         ({METRICS_V1_SIZE} bytes)"
                    ),
                ));
            }
            let mut metrics = MaybeUninit::<fencelock_metrics>::zeroed();
            write_fields!(
                &mut metrics,
                fencelock_metrics::from(&store.store.metrics()?),
                fencelock_metrics {
                    scope,
                    since_unix_ms,
                    grants,
                    releases,
                    refused_locked,
                    refused_timeout,
                    refused_cancelled,
                    refused_other,
                    stale_writes,
                    lock_lost,
                    waits,
                    wait_ns,
                    wait_buckets,
                    ended_released,
                    ended_expired,
                    ended_taken_over,
                    ended_holder_died,
                    commits,
                    committed_ops,
                    live_exclusive,
                    live_shared,
                    live_permits,
                    queued_waiters,
                    file_bytes,
                    history_dropped,
                }
            );
            // The fields the caller's struct has room for; a larger one (of a newer header)
            // gets zeros past them. Every byte is initialised: zeroed, then the fields written.
            let mut bytes = std::slice::from_raw_parts(
                metrics.as_ptr().cast::<u8>(),
                std::mem::size_of::<fencelock_metrics>(),
            )
            .to_vec();
            bytes.resize(metrics_size, 0);
            out.set_all(&bytes);
            Ok(())
        })
    }
}

/// The store's counters and gauges in Prometheus' text exposition format, every series
/// labelled with the store's path. On success `*text_out` and `*text_len_out` receive a new
/// buffer of UTF-8 text (not NUL-terminated), to be freed with
/// `fencelock_buffer_free(*text_out, *text_len_out)`.
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`, `text_out`, `text_len_out`),
/// `FENCELOCK_INVALID_ARGUMENT` (an etcd store), `FENCELOCK_TIMEOUT`, `FENCELOCK_FORKED`,
/// `FENCELOCK_IO`, `FENCELOCK_CORRUPT`, `FENCELOCK_STORAGE`, `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_metrics_prometheus(
    store: *const fencelock_store,
    text_out: *mut *mut u8,
    text_len_out: *mut usize,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let text_out = Out::required(text_out, "text_out")?;
            let text_len_out = Out::required(text_len_out, "text_len_out")?;
            let path = store.store.path().display().to_string();
            let text = store.store.metrics()?.prometheus(&path);
            let (ptr, len) = buffer_into_raw(text.into_bytes());
            text_out.set(ptr);
            text_len_out.set(len);
            Ok(())
        })
    }
}

/// Event of an observer: an acquire ended (granted, or refused with `status`).
pub const FENCELOCK_EVENT_ACQUIRE: i32 = 0;
/// Event of an observer: a holder released its lease.
pub const FENCELOCK_EVENT_RELEASE: i32 = 1;
/// Event of an observer: a holder learned its lease was lost.
pub const FENCELOCK_EVENT_LOST: i32 = 2;

/// What an observer is told (`fencelock_store_set_observer`).
#[repr(C)]
pub struct fencelock_event {
    /// `FENCELOCK_EVENT_ACQUIRE`, `_RELEASE` or `_LOST`.
    pub event: i32,
    /// The lock's name, NUL-terminated UTF-8; valid during the call only.
    pub name: *const c_char,
    /// How the lease holds the name: `FENCELOCK_KIND_*`, and the permit count (0 unless a
    /// semaphore).
    pub kind: i32,
    pub permits: u32,
    /// The lease's token; 0 for a refused acquire.
    pub token: u64,
    /// For an acquire: `FENCELOCK_OK`, or the status its caller got.
    pub status: fencelock_status,
    /// For an acquire: how long it waited, in nanoseconds (0 for a try-once acquire).
    pub waited_ns: u64,
    /// For a release or a loss: how long after the grant, in nanoseconds.
    pub held_ns: u64,
}

/// An observer callback: `context` is the pointer given with it.
pub type fencelock_observer_fn =
    Option<unsafe extern "C" fn(context: *mut c_void, event: *const fencelock_event)>;

/// A C callback and its context, as an engine observer.
struct CObserver {
    callback: unsafe extern "C" fn(*mut c_void, *const fencelock_event),
    context: *mut c_void,
}

// SAFETY: the caller of `fencelock_store_set_observer` promises a callback that may be called
// from any thread with its context.
unsafe impl Send for CObserver {}
// SAFETY: as above.
unsafe impl Sync for CObserver {}

impl Observer for CObserver {
    fn observe(&self, event: &Event<'_>) {
        let (code, name, kind, token, status, waited, held) = match *event {
            Event::Acquire {
                name,
                kind,
                ref result,
                waited,
            } => {
                let (token, status) = match result {
                    Ok(token) => (*token, FENCELOCK_OK),
                    Err(err) => (0, err.status() as fencelock_status),
                };
                (
                    FENCELOCK_EVENT_ACQUIRE,
                    name,
                    kind,
                    token,
                    status,
                    waited,
                    Duration::ZERO,
                )
            }
            Event::Release {
                name,
                kind,
                token,
                held,
            }
            | Event::Lost {
                name,
                kind,
                token,
                held,
            } => {
                let code = if matches!(event, Event::Release { .. }) {
                    FENCELOCK_EVENT_RELEASE
                } else {
                    FENCELOCK_EVENT_LOST
                };
                (code, name, kind, token, FENCELOCK_OK, Duration::ZERO, held)
            }
        };
        // Lock names are checked to hold no NUL byte before they are granted or refused.
        let Ok(name) = CString::new(name) else {
            return;
        };
        let (kind, permits) = super::kinds::kind_code(kind);
        let mut event = MaybeUninit::<fencelock_event>::zeroed();
        write_fields!(
            &mut event,
            fencelock_event {
                event: code,
                name: name.as_ptr(),
                kind,
                permits,
                token,
                status,
                waited_ns: ns(waited),
                held_ns: ns(held),
            },
            fencelock_event {
                event,
                name,
                kind,
                permits,
                token,
                status,
                waited_ns,
                held_ns,
            }
        );
        // SAFETY: the callback and context as the caller of `fencelock_store_set_observer`
        // gave them; the event, every field written, lives through the call.
        unsafe { (self.callback)(self.context, event.as_ptr()) };
    }
}

/// Sets the observer of the store: `callback(context, event)` is called after each acquire of
/// this process's store (of every handle of this store and its holders) ends, after each
/// release, and when a holder learns its lease was lost, replacing any observer set before.
/// A NULL `callback` removes it. The callback runs on the thread whose operation ended (a
/// keep-alive thread for some losses), with no lock of the store held; it must be thread-safe,
/// return quickly, and neither free the store nor set its observer. This call returns once no
/// call of the observer it replaces is running: the old `context` may be freed then (and once
/// the store and all its holders are freed).
///
/// Returns `FENCELOCK_OK`, `FENCELOCK_NULL_POINTER` (`store`), `FENCELOCK_INVALID_ARGUMENT`
/// (an etcd store), `FENCELOCK_PANIC`.
///
/// Thread-safe.
///
/// # Safety
/// Every pointer is NULL or valid as described.
#[no_mangle]
pub unsafe extern "C" fn fencelock_store_set_observer(
    store: *const fencelock_store,
    callback: fencelock_observer_fn,
    context: *mut c_void,
    err_out: *mut *mut fencelock_error,
) -> fencelock_status {
    // SAFETY: upheld by the caller.
    unsafe {
        guard(err_out, || {
            let store = handle(store, "store")?;
            let observer = callback
                .map(|callback| Arc::new(CObserver { callback, context }) as Arc<dyn Observer>);
            store.store.set_observer(observer)?;
            Ok(())
        })
    }
}
