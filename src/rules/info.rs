//! What the store tells of itself: fenced values, lock records and their states, counts.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A fenced value and the token of the write that stored it.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// holder.put(b"nightly/report", b"done")?;
/// let fenced = store.get(b"nightly/report")?.expect("just written");
/// assert_eq!((fenced.value.as_slice(), fenced.token), (&b"done"[..], holder.token()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The value.
    pub value: Vec<u8>,
    /// The token of the write that stored it.
    pub token: u64,
}

/// The state of a lock record.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::LockState;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// assert_eq!(store.lock_info("nightly")?.map(|l| l.state), Some(LockState::Held));
/// holder.release()?;
/// assert_eq!(store.lock_info("nightly")?.map(|l| l.state), Some(LockState::Released));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockState {
    /// Held by a live holder and not expired.
    Held,
    /// The TTL ran out; the next acquire takes the lock.
    Expired,
    /// The holder released it (its process still runs).
    Released,
    /// The holder's process died, or the lease is from an earlier boot.
    HolderDead,
}

impl LockState {
    /// A lower-case name: `held`, `expired`, `released`, `holder-dead`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(fencelock::LockState::HolderDead.as_str(), "holder-dead");
    /// ```
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::Expired => "expired",
            LockState::Released => "released",
            LockState::HolderDead => "holder-dead",
        }
    }
}

/// What the store records of one lock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::Kind;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let _holder = store.acquire_kind("gpu", Kind::Semaphore(2), Duration::from_secs(30))?;
/// let info = store.lock_info("gpu")?.expect("just granted");
/// assert_eq!((info.name.as_str(), info.kind), ("gpu", Kind::Semaphore(2)));
/// assert!(info.expires_at > info.granted_at);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// The token of the last grant.
    pub token: u64,
    /// The holder's process id.
    pub pid: u32,
    /// When the lease was granted (wall-clock estimate from the boot-time clock).
    pub granted_at: SystemTime,
    /// When the lease expires or expired (wall-clock estimate).
    pub expires_at: SystemTime,
    /// Time left before expiry; zero once expired.
    pub remaining: Duration,
    /// The lock's state.
    pub state: LockState,
    /// How the grant holds the name: exclusive, shared, or a permit of a semaphore (with the
    /// name's permit count).
    pub kind: crate::rules::kind::Kind,
}

/// An acquire waiting for a lock in the store's waiting queue (what `pg_locks` shows as a row
/// with `granted = false`): the process, and since when. Waiters are served oldest first.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
/// let other = fencelock::Store::open(&path)?;
/// let waiting = std::thread::spawn(move || {
///     other.acquire_wait("nightly", Duration::from_secs(30), Duration::from_millis(300))
/// });
/// # let give_up = std::time::Instant::now() + Duration::from_secs(60);
/// while store.waiters("nightly")?.is_empty() {
/// #   assert!(std::time::Instant::now() < give_up);
///     std::thread::sleep(Duration::from_millis(5));
/// }
/// let waiter = &store.waiters("nightly")?[0];
/// assert_eq!((waiter.name.as_str(), waiter.pid), ("nightly", std::process::id()));
/// assert!(waiting.join().unwrap().is_err()); // its wait ran out
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterInfo {
    /// The lock it waits for.
    pub name: String,
    /// The waiting process's id.
    pub pid: u32,
    /// Its place in the queue: a lower ticket waits longer and is served first.
    pub ticket: u64,
    /// When it took its place in the queue (wall-clock estimate from the boot-time clock).
    pub waiting_since: SystemTime,
    /// How long it has waited.
    pub waited: Duration,
}

/// Counts and settings of a store.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
/// let info = store.info()?;
/// assert_eq!((info.last_token, info.lock_records, info.keys, info.fences), (1, 1, 0, 0));
/// assert!(info.file_size > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    /// The store file.
    pub path: PathBuf,
    /// The file's size in bytes.
    pub file_size: u64,
    /// The schema version recorded in the file.
    pub schema_version: u64,
    /// The highest token granted so far (0 before the first grant).
    pub last_token: u64,
    /// Lock records, of any state.
    pub lock_records: u64,
    /// Fenced keys holding a value.
    pub keys: u64,
    /// External fence resources.
    pub fences: u64,
}
