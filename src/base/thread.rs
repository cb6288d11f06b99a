//! Which thread a lease belongs to, as a number: the identity under which a store records the
//! leases it granted to each thread, so that a wait only that thread could end is refused
//! (`engine/holds.rs`).
//!
//! A number rather than [`std::thread::ThreadId`] so that it can cross the C ABI: a binding that
//! waits for its caller from a helper thread (Python's main thread, so that Ctrl-C ends the
//! wait) reads the caller's tag and sets it on the wait's [`Cancel`](crate::Cancel).

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next tag to hand out. Only uniqueness matters, so `Relaxed` serves: `fetch_add` never
/// hands one number out twice, whatever the ordering.
static NEXT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static MINE: ThreadTag = ThreadTag::fresh();
}

/// A thread of this process as a store records the leases it was granted: non-zero, and never
/// given to another thread, even after this one ended.
///
/// A wait is judged, and its grant recorded, as the calling thread's, unless its [`Cancel`] says
/// otherwise ([`Cancel::set_thread`]).
///
/// [`Cancel`]: crate::Cancel
/// [`Cancel::set_thread`]: crate::Cancel::set_thread
///
/// # Examples
///
/// ```
/// use fencelock::ThreadTag;
/// let here = ThreadTag::current();
/// assert_eq!(here, ThreadTag::current(), "one thread, one tag");
/// let there = std::thread::spawn(ThreadTag::current).join().unwrap();
/// assert_ne!(here, there);
/// assert_eq!(ThreadTag::from_u64(here.get()), Some(here));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThreadTag(NonZeroU64);

impl ThreadTag {
    /// The calling thread's tag.
    ///
    /// # Examples
    ///
    /// ```
    /// let tag = fencelock::ThreadTag::current();
    /// assert_eq!(tag, fencelock::ThreadTag::current());
    /// ```
    #[must_use]
    pub fn current() -> ThreadTag {
        // A thread whose thread-locals are being torn down (a holder dropped by another
        // thread-local's destructor) gets a tag of its own that no lease carries.
        MINE.try_with(|tag| *tag)
            .unwrap_or_else(|_| ThreadTag::fresh())
    }

    /// The tag as a number, for passing through C (`fencelock_thread_self`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_ne!(fencelock::ThreadTag::current().get(), 0);
    /// ```
    #[must_use]
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The tag with number `n`; `None` for 0, which no thread has. A number no thread was given
    /// is a tag that holds no lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::ThreadTag;
    /// let tag = ThreadTag::current();
    /// assert_eq!(ThreadTag::from_u64(tag.get()), Some(tag));
    /// assert_eq!(ThreadTag::from_u64(0), None);
    /// ```
    #[must_use]
    pub fn from_u64(n: u64) -> Option<ThreadTag> {
        NonZeroU64::new(n).map(ThreadTag)
    }

    /// A tag no thread has: for a wait made on behalf of no thread (an async task's).
    pub(crate) fn fresh() -> ThreadTag {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        ThreadTag(NonZeroU64::new(n).expect("2^64 thread tags are never handed out"))
    }
}
