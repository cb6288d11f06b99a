//! Cancellation of waits from another thread.
//!
//! Every wait of the engine looks at its `Cancel` between its own steps: an open behind a busy
//! store and a waiting acquire, which test other processes' locks once a millisecond anyway, at
//! each of those steps; a wait for a lost lease, which otherwise sleeps until it is woken,
//! every 10 ms (a watched holder then costs little CPU). So a signal thread, a Python main
//! thread that caught Ctrl-C or a Go goroutine watching a context can end it at once. A
//! cancelled wait ends with [`Error::Cancelled`] and changes nothing in the store.
//!
//! A handle may also carry a deadline ([`Cancel::set_timeout`]), which bounds every call given
//! it, a write's wait for a busy store included, as a Go context's deadline bounds a call.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use std::time::Duration;

use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::duration_ns;
use crate::base::thread::ThreadTag;

/// The longest a wait for the store or a lock goes without looking at its cancel handle.
pub(crate) const POLL: std::time::Duration = std::time::Duration::from_millis(1);
/// The longest a wait for a lost lease goes without looking at its cancel handle.
pub(crate) const LOST_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A handle that ends the waits it is passed to, once [`Cancel::cancel`] is called from any
/// thread. Cheap to clone; clones share one state. Once cancelled it stays cancelled: use a new
/// one for the next wait.
///
/// It may also bound the calls given it by a deadline ([`Cancel::set_timeout`]), and say whose
/// a wait is ([`Cancel::set_thread`]), for a wait made on another thread's behalf.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{Cancel, Error, Store};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let store = Store::open(&path)?;
/// let _held = Store::open(&path)?.acquire("nightly", Duration::from_secs(30))?;
/// let cancel = Cancel::new();
/// let stop = cancel.clone(); // for a signal thread, say
/// let (ttl, timeout) = (Duration::from_secs(30), Duration::from_secs(600));
/// let waiter = std::thread::spawn(move || {
///     store.acquire_wait_cancellable("nightly", ttl, timeout, &cancel)
/// });
/// stop.cancel();
/// assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Cancel {
    shared: Arc<Shared>,
}

/// The state clones share. Atomics, so that a handle is set and fired from any thread (the C
/// ABI hands out one handle to many), each read on its own: no field orders another.
#[derive(Default)]
struct Shared {
    fired: AtomicBool,
    /// The deadline of the calls given this handle, `CLOCK_BOOTTIME` ns; 0 for none.
    deadline: AtomicU64,
    /// The [`ThreadTag`] the waits given this handle are judged as, 0 for the calling thread's.
    thread: AtomicU64,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .field("deadline_ns", &self.deadline())
            .field("thread", &self.thread())
            .finish()
    }
}

impl Cancel {
    /// A handle not yet cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = fencelock::Cancel::new();
    /// assert!(!cancel.is_cancelled());
    /// ```
    #[must_use]
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Ends every wait given this handle (or a clone of it), now and later. Lock-free and
    /// async-signal-safe: one atomic store.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = fencelock::Cancel::new();
    /// let clone = cancel.clone();
    /// clone.cancel();
    /// assert!(cancel.is_cancelled(), "clones share one state");
    /// ```
    pub fn cancel(&self) {
        self.shared.fired.store(true, Ordering::Release);
    }

    /// Whether [`Cancel::cancel`] was called.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = fencelock::Cancel::new();
    /// assert!(!cancel.is_cancelled());
    /// cancel.cancel();
    /// assert!(cancel.is_cancelled());
    /// ```
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.shared.fired.load(Ordering::Acquire)
    }

    /// Bounds every call given this handle (or a clone of it) from now on to `timeout` from now:
    /// a call still waiting then (for a lock, for another process that holds the store, for a
    /// server) ends with [`Error::Timeout`], as at a timeout of its own. A wait with a timeout of
    /// its own ends at the earlier of the two; a write, an extend or a try-once acquire, which
    /// otherwise wait for a busy store up to the store's busy timeout
    /// ([`Options::busy_timeout`]), wait until this deadline instead, shorter or longer. A write
    /// given up on waiting for the store was not posted or was withdrawn, so changed nothing,
    /// unless a process had taken it into a commit of its own and was then paused: as with any
    /// database, it may land when that process resumes. Setting it again moves the deadline.
    ///
    /// [`Options::busy_timeout`]: crate::Options::busy_timeout
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let cancel = Cancel::new();
    /// cancel.set_timeout(Duration::from_secs(2)); // a request's deadline, say
    /// store.put_cancellable(b"nightly/report", b"done", holder.token(), &cancel)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_timeout(&self, timeout: Duration) {
        // Never 0, which means none: a deadline at boot would have passed long ago anyway.
        let deadline = clock::now_ns().saturating_add(duration_ns(timeout)).max(1);
        self.shared.deadline.store(deadline, Ordering::Relaxed);
    }

    /// The deadline [`Cancel::set_timeout`] set (`CLOCK_BOOTTIME` ns), if it was called.
    pub(crate) fn deadline(&self) -> Option<u64> {
        Some(self.shared.deadline.load(Ordering::Relaxed)).filter(|&ns| ns != 0)
    }

    /// Makes every wait given this handle (or a clone of it) `thread`'s, instead of the calling
    /// thread's: a wait for a lease `thread` holds through the same store is refused with
    /// [`Error::WouldDeadlock`] (see [`Options::refuse_own_waits`]), and the lease a wait or
    /// acquire given this handle is granted is recorded as `thread`'s. For a wait made on
    /// another thread's behalf, from a helper thread that the waiting thread watches (so that a
    /// signal it handles, or a deadline, can end the wait).
    ///
    /// [`Options::refuse_own_waits`]: crate::Options::refuse_own_waits
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error, Store, ThreadTag};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let ttl = Duration::from_secs(30);
    /// let held = store.acquire("nightly", ttl)?;
    /// // A helper waits for this thread, which holds the lock: the wait could never end.
    /// let cancel = Cancel::new();
    /// cancel.set_thread(ThreadTag::current());
    /// let helper = std::thread::spawn(move || {
    ///     store.acquire_wait_cancellable("nightly", ttl, Duration::from_secs(600), &cancel)
    /// });
    /// assert!(matches!(helper.join().unwrap(), Err(Error::WouldDeadlock { token, .. }) if token == held.token()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_thread(&self, thread: ThreadTag) {
        self.shared.thread.store(thread.get(), Ordering::Relaxed);
    }

    /// The thread [`Cancel::set_thread`] named, if it was called.
    pub(crate) fn thread(&self) -> Option<ThreadTag> {
        ThreadTag::from_u64(self.shared.thread.load(Ordering::Relaxed))
    }

    /// [`Error::Cancelled`] once cancelled.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Checks an optional handle.
pub(crate) fn check(cancel: Option<&Cancel>) -> Result<()> {
    cancel.map_or(Ok(()), Cancel::check)
}

/// A wait bounded by a deadline and, optionally, a cancel handle.
#[derive(Clone, Copy)]
pub(crate) struct Waiting<'a> {
    pub(crate) deadline: u64,
    pub(crate) cancel: Option<&'a Cancel>,
}

impl<'a> Waiting<'a> {
    /// A wait of `timeout` from now, or less: to the deadline of `cancel`, if that is earlier.
    pub(crate) fn new(timeout: Duration, cancel: Option<&'a Cancel>) -> Self {
        Waiting {
            deadline: deadline(timeout, cancel),
            cancel,
        }
    }

    /// The wait of a call with no timeout of its own (a write): to the deadline of `cancel`, or
    /// else `busy_timeout` (the store's) from now.
    pub(crate) fn bounded(busy_timeout: Duration, cancel: Option<&'a Cancel>) -> Self {
        Waiting {
            deadline: cancel
                .and_then(Cancel::deadline)
                .unwrap_or_else(|| clock::now_ns().saturating_add(duration_ns(busy_timeout))),
            cancel,
        }
    }

    /// [`Error::Cancelled`] or [`Error::Timeout`] when the wait must end.
    pub(crate) fn step(&self) -> Result<()> {
        self.given_up(clock::now_ns()).map_or(Ok(()), Err)
    }

    /// Why the wait ends at `now`, if it does.
    pub(crate) fn given_up(&self, now: u64) -> Option<Error> {
        ended(self.cancel, self.deadline, now)
    }

    /// The thread the wait is for (see [`thread_of`]).
    pub(crate) fn thread(&self) -> ThreadTag {
        thread_of(self.cancel)
    }
}

/// The deadline (`CLOCK_BOOTTIME` ns) of a wait of `timeout` from now given `cancel`: the
/// earlier of the two.
pub(crate) fn deadline(timeout: Duration, cancel: Option<&Cancel>) -> u64 {
    let own = clock::now_ns().saturating_add(duration_ns(timeout));
    cancel
        .and_then(Cancel::deadline)
        .map_or(own, |bound| bound.min(own))
}

/// The thread a call given `cancel` is made for: the one [`Cancel::set_thread`] named, else
/// the calling thread.
pub(crate) fn thread_of(cancel: Option<&Cancel>) -> ThreadTag {
    cancel
        .and_then(Cancel::thread)
        .unwrap_or_else(ThreadTag::current)
}

/// Why a wait with `cancel` and `deadline` (`CLOCK_BOOTTIME` ns) ends at `now`, if it does: a
/// fired cancel first, then the deadline.
pub(crate) fn ended(cancel: Option<&Cancel>, deadline: u64, now: u64) -> Option<Error> {
    if cancel.is_some_and(Cancel::is_cancelled) {
        Some(Error::Cancelled)
    } else if now >= deadline {
        Some(Error::timed_out())
    } else {
        None
    }
}
