//! Leader election, built on the store's public operations and one wait of the engines
//! ([`Store::wait_values`]), so that it runs on every backend (a file of this host, served or
//! not, and etcd) with the same rules.
//!
//! An election of the name `N` is made of:
//!
//! - the lock `N`, exclusive: its holder is the leader, and the grant's token is the **term**.
//!   Candidates wait for it in the lock's queue ([`Store::acquire_wait`]), so they are granted
//!   oldest first, and a cancelled wait leaves nothing behind;
//! - the **leader record** of each term, the fenced value `fencelock.election/N/term/<term>`
//!   (the term in 20 decimal digits, so that byte order is term order), written by the leader
//!   with its lease checked in the same transaction ([`Holder::put`]): its value's version,
//!   pid, start, generation (one more than the term before it's) and value. A deposed leader
//!   cannot write it (nor anything else through its holder). Each new leader deletes all but
//!   the latest [`TERMS_KEPT`] records.
//!
//! A leadership ends for its holder a safety margin before its lease could be granted to
//! another (client-go's renew deadline): a thread of its own watches the lease, and marks the
//! leadership lost once the lease is lost or less than the margin is left on it, whichever
//! comes first; the leader learns of it at once from [`Leadership::wait_lost`]. Its writes
//! through [`Leadership::put`] are refused from then on, and after the lease is taken over the
//! store refuses them anyway (the term is the fencing token).
//!
//! An observer tells new terms and proclaims, and each is a write of a leader record: it waits
//! for the next write under the records' prefix, woken by the write itself (the engines' wait
//! for a change of values: on a local store the change bell that every commit rings, in the
//! store's shared memory; on etcd a watch from the revision of its last read). It takes the
//! mark of that wait before it reads, so a write between its read and its sleep ends the sleep
//! at once: it never sleeps through a change, needs no timer to look again, and makes no
//! candidate wait for it (it holds nothing). A lock's release could not do this: after a time
//! with no leader, nothing is held whose release would tell of the next term. What remains a
//! poll is a read-only store that cannot use the store's shared memory (it hears no other
//! process's bell): it looks again every 10 ms. Between two reads a leader may proclaim
//! twice: the observer then tells the second value only (every term, in order, but not every
//! version of a value).

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use crate::api::holder::Holder;
use crate::api::store::Store;
use crate::base::cancel::{check, Cancel, LOST_POLL};
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::{check_name, MAX_NAME_LEN, MAX_TTL, MIN_KEEP_ALIVE_TTL};
use crate::rules::info::LockState;
use crate::rules::kind::Kind;

/// How many leader records (terms) of an election the store keeps: an observer that falls
/// further behind than that misses the terms between.
pub const TERMS_KEPT: usize = 64;

/// Marks a leader record, and its layout's version.
const RECORD_MAGIC: &[u8; 4] = b"fle1";
/// Magic, version, generation, pid, start (Unix ms).
const RECORD_HEADER: usize = 4 + 8 + 8 + 4 + 8;

/// A wait with no end of its own (a campaign or observation without a timeout).
const FOREVER: Duration = MAX_TTL;

/// How a candidate campaigns ([`Store::campaign`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::CampaignOptions;
/// let options = CampaignOptions {
///     ttl: Duration::from_secs(15),
///     margin: Some(Duration::from_secs(5)), // client-go's 15 s lease, 10 s renew deadline
///     ..CampaignOptions::default()
/// };
/// assert_eq!(options.timeout, None);
/// ```
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    /// The leader's lease, renewed in the background every third of it. Default 15 s.
    pub ttl: Duration,
    /// How long before its lease could run out the leadership ends for its holder; `None` for a
    /// third of `ttl`. At most half of `ttl`, and not zero.
    pub margin: Option<Duration>,
    /// How long to wait to become the leader; `None` waits until it does (or `cancel` fires).
    pub timeout: Option<Duration>,
    /// Ends the wait with [`Error::Cancelled`], leaving nothing behind, once it fires.
    pub cancel: Option<Cancel>,
}

impl Default for CampaignOptions {
    fn default() -> CampaignOptions {
        CampaignOptions {
            ttl: Duration::from_secs(15),
            margin: None,
            timeout: None,
            cancel: None,
        }
    }
}

impl CampaignOptions {
    /// The safety margin these options ask for, checked.
    fn checked_margin(&self) -> Result<Duration> {
        if self.ttl < MIN_KEEP_ALIVE_TTL || self.ttl > MAX_TTL {
            return Err(Error::invalid(format!(
                "ttl {:?} is outside {MIN_KEEP_ALIVE_TTL:?} to {MAX_TTL:?}",
                self.ttl
            )));
        }
        let margin = self.margin.unwrap_or(self.ttl / 3);
        if margin.is_zero() || margin > self.ttl / 2 {
            return Err(Error::invalid(format!(
                "margin {margin:?} is outside (0, ttl / 2] (ttl {:?})",
                self.ttl
            )));
        }
        Ok(margin)
    }
}

/// A leader of an election, as [`Store::leader`] and [`LeaderWatch`] tell it.
///
/// # Examples
///
/// ```
/// use fencelock::{CampaignOptions, Store};
/// # let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path().join("locks.db"))?;
/// let leadership = store.campaign("scheduler", b"10.0.0.7:8080", &CampaignOptions::default())?;
/// let leader = store.leader("scheduler")?.expect("it leads");
/// assert_eq!((leader.term, leader.version), (leadership.term(), 1));
/// assert_eq!((leader.value.as_slice(), leader.pid), (&b"10.0.0.7:8080"[..], std::process::id()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The election's name.
    pub name: String,
    /// The term: the token of the leader's grant, higher than every earlier term's.
    pub term: u64,
    /// The version of the value within the term: 1 at the start, one more at each proclaim.
    pub version: u64,
    /// The leader's value (its address, say).
    pub value: Vec<u8>,
    /// The leader's process id.
    pub pid: u32,
    /// When the term began (the leader's wall clock).
    pub since: SystemTime,
}

/// The key prefix of an election's leader records.
fn term_prefix(name: &str) -> Vec<u8> {
    format!("fencelock.election/{name}/term/").into_bytes()
}

fn term_key(name: &str, term: u64) -> Vec<u8> {
    let mut key = term_prefix(name);
    key.extend_from_slice(format!("{term:020}").as_bytes());
    key
}

/// Refuses an election name whose lock or keys the store would refuse.
fn check_election_name(name: &str) -> Result<()> {
    check_name("election name", name)?;
    let longest = term_key(name, 0).len();
    if longest > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "election name is {} bytes; the limit is {}",
            name.len(),
            MAX_NAME_LEN - (longest - name.len())
        )));
    }
    Ok(())
}

/// What a leader record holds beside the leader: the generation of its term.
struct Record {
    leader: Leader,
    generation: u64,
}

fn encode_record(
    version: u64,
    generation: u64,
    pid: u32,
    since: SystemTime,
    value: &[u8],
) -> Vec<u8> {
    let since_ms = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut bytes = Vec::with_capacity(RECORD_HEADER + value.len());
    bytes.extend_from_slice(RECORD_MAGIC);
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend_from_slice(&generation.to_le_bytes());
    bytes.extend_from_slice(&pid.to_le_bytes());
    bytes.extend_from_slice(&since_ms.to_le_bytes());
    bytes.extend_from_slice(value);
    bytes
}

/// The record of term `term` of `name` from its bytes.
fn decode_record(name: &str, term: u64, bytes: &[u8]) -> Result<Record> {
    let corrupt = || {
        Error::Corrupt(format!(
            "the leader record of term {term} of election {name:?} is not one ({} bytes)",
            bytes.len()
        ))
    };
    if bytes.len() < RECORD_HEADER || &bytes[..4] != RECORD_MAGIC {
        return Err(corrupt());
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let pid = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    Ok(Record {
        leader: Leader {
            name: name.to_owned(),
            term,
            version: u64_at(4),
            value: bytes[RECORD_HEADER..].to_vec(),
            pid,
            since: UNIX_EPOCH + Duration::from_millis(u64_at(24)),
        },
        generation: u64_at(12),
    })
}

/// The term a leader record's key names.
fn term_of_key(prefix: &[u8], key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(prefix)?;
    if digits.len() != 20 {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Store {
    /// Campaigns to lead the election `name` with `value` (the candidate's address, say):
    /// waits, fairly (candidates are granted oldest first, across processes), to hold the lock
    /// `name`, and returns the [`Leadership`], whose term is that grant's token. The leader
    /// record is written with the term, with the lease checked in the same transaction; the
    /// lease is kept alive in the background until the leadership is resigned or dropped.
    /// Nothing an observer does delays it.
    ///
    /// The leadership ends for its holder `options.margin` before its lease could be granted to
    /// another ([`Leadership::wait_lost`]), as client-go's renew deadline. A campaign ended by
    /// `options.cancel` or `options.timeout` while it waits leaves nothing behind.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `options.timeout` passes first; [`Error::Cancelled`] once
    /// `options.cancel` fires; [`Error::InvalidArgument`] for a bad name (empty, a NUL byte,
    /// too long for the election's keys), a TTL or margin out of range, a value over the
    /// store's limit, and on a read-only store; [`Error::WouldDeadlock`] when this thread
    /// leads the election already through this store; otherwise as [`Store::acquire_wait`]
    /// and [`Holder::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{CampaignOptions, Error, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let leadership = store.campaign("scheduler", b"node-a", &CampaignOptions::default())?;
    /// // Another candidate (another process, say) waits its turn; here it gives up.
    /// let other = Store::open(&path)?;
    /// let quick = CampaignOptions {
    ///     timeout: Some(Duration::from_millis(50)),
    ///     ..CampaignOptions::default()
    /// };
    /// let waiter = std::thread::spawn(move || other.campaign("scheduler", b"node-b", &quick).err());
    /// assert!(matches!(waiter.join().unwrap(), Some(Error::Timeout { .. })));
    /// leadership.put(b"schedule", b"made by the leader")?; // fenced by the term
    /// assert_eq!(store.get(b"schedule")?.unwrap().token, leadership.term());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn campaign(
        &self,
        name: &str,
        value: &[u8],
        options: &CampaignOptions,
    ) -> Result<Leadership> {
        check_election_name(name)?;
        let margin = options.checked_margin()?;
        let (ttl, cancel) = (options.ttl, options.cancel.as_ref());
        let timeout = options.timeout.unwrap_or(FOREVER);
        let holder = match cancel {
            Some(cancel) => self.acquire_wait_cancellable(name, ttl, timeout, cancel)?,
            None => self.acquire_wait(name, ttl, timeout)?,
        };
        // From here every failure drops what it took, which releases it.
        holder.keep_alive(ttl)?;
        let generation = match self.latest_record(name)? {
            Some(record) => record.generation + 1,
            None => 1,
        };
        let since = SystemTime::now();
        let term = holder.token();
        holder.put(
            &term_key(name, term),
            &encode_record(1, generation, std::process::id(), since, value),
        )?;
        self.prune_terms(name, &holder);
        Leadership::start(
            self.clone(),
            holder,
            Current {
                version: 1,
                value: value.to_vec(),
            },
            Settings {
                name: name.to_owned(),
                margin,
                since,
                generation,
            },
        )
    }

    /// Deletes the leader records of `name` but the latest [`TERMS_KEPT`], with the new
    /// leader's holder (its term is higher than theirs). Best effort: a record left over is
    /// deleted by the next leader.
    fn prune_terms(&self, name: &str, holder: &Holder) {
        let Ok(keys) = self.keys(&term_prefix(name)) else {
            return;
        };
        let excess = keys.len().saturating_sub(TERMS_KEPT);
        for key in &keys[..excess] {
            if holder.delete(key).is_err() {
                return;
            }
        }
    }

    /// The current leader of the election `name`: the holder of its lock, live now, with its
    /// record. `None` while nobody leads (or a new leader has not yet written its record).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::Corrupt`] for a leader record that
    /// is not one; otherwise as [`Store::lock`] and [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{CampaignOptions, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// assert_eq!(store.leader("scheduler")?, None);
    /// let leadership = store.campaign("scheduler", b"node-a", &CampaignOptions::default())?;
    /// assert_eq!(store.leader("scheduler")?.map(|l| l.term), Some(leadership.term()));
    /// leadership.resign()?;
    /// assert_eq!(store.leader("scheduler")?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn leader(&self, name: &str) -> Result<Option<Leader>> {
        check_election_name(name)?;
        let Some(term) = self.live_term(name)? else {
            return Ok(None);
        };
        Ok(self.leader_record(name, term)?.map(|record| record.leader))
    }

    /// The record of the latest term of `name` the store keeps, if any.
    fn latest_record(&self, name: &str) -> Result<Option<Record>> {
        let prefix = term_prefix(name);
        let keys = self.keys(&prefix)?;
        match keys.iter().rev().find_map(|key| term_of_key(&prefix, key)) {
            Some(term) => self.leader_record(name, term),
            None => Ok(None),
        }
    }

    /// The term of the live exclusive holder of the lock `name`, if one holds it.
    fn live_term(&self, name: &str) -> Result<Option<u64>> {
        Ok(self
            .lock_info(name)?
            .filter(|info| info.state == LockState::Held && info.kind == Kind::Exclusive)
            .map(|info| info.token))
    }

    /// The record of term `term` of `name`, if the store has it.
    fn leader_record(&self, name: &str, term: u64) -> Result<Option<Record>> {
        let Some(fenced) = self.get(&term_key(name, term))? else {
            return Ok(None);
        };
        if fenced.token != term {
            return Err(Error::Corrupt(format!(
                "the leader record of term {term} of election {name:?} was written with token {}",
                fenced.token
            )));
        }
        decode_record(name, term, &fenced.value).map(Some)
    }

    /// Watches the election `name`: [`LeaderWatch::next_change`] gives the leader of the time
    /// of this call first (if one led), then every later change, in order of terms and, within
    /// a term, of versions, never going back. An observer changes nothing the candidates see.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; otherwise as [`LeaderWatch::next_change`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{CampaignOptions, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("locks.db"))?;
    /// let mut watch = store.observe_leader("scheduler")?;
    /// let leadership = store.campaign("scheduler", b"node-a", &CampaignOptions::default())?;
    /// let first = watch.next_change(Duration::from_secs(10))?.expect("a leader");
    /// assert_eq!((first.term, first.value.as_slice()), (leadership.term(), &b"node-a"[..]));
    /// leadership.proclaim(b"node-a, v2")?;
    /// let second = watch.next_change(Duration::from_secs(10))?.expect("a change");
    /// assert_eq!((second.term, second.version), (leadership.term(), 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn observe_leader(&self, name: &str) -> Result<LeaderWatch> {
        check_election_name(name)?;
        let mut watch = LeaderWatch {
            store: self.clone(),
            name: name.to_owned(),
            prefix: term_prefix(name),
            seen: None,
            started: false,
            pending: VecDeque::new(),
            looks: 0,
        };
        // What leads now is decided now: every change after this call is told.
        watch.look()?;
        Ok(watch)
    }
}

/// What a leadership knows that does not change.
struct Settings {
    name: String,
    margin: Duration,
    since: SystemTime,
    /// The term's generation, as its record keeps it.
    generation: u64,
}

/// What a proclaim changes.
struct Current {
    version: u64,
    value: Vec<u8>,
}

struct Shared {
    store: Store,
    holder: Holder,
    settings: Settings,
    current: Mutex<Current>,
    /// Set once the leadership ended for its holder; never unset.
    ended: Mutex<bool>,
    changed: Condvar,
}

impl Shared {
    /// Whether the leadership ended: marked so, or found so now (the lease is lost, or less
    /// than the margin is left on it), which marks it.
    fn is_lost(&self) -> bool {
        if *self.ended.lock() {
            return true;
        }
        if self.holder.is_lost() || self.holder.remaining() <= self.settings.margin {
            self.end();
            return true;
        }
        false
    }

    /// Marks the leadership ended and tells its waiters.
    fn end(&self) {
        let mut ended = self.ended.lock();
        *ended = true;
        self.changed.notify_all();
    }

    /// The watch of the lease, on a thread of its own: ends the leadership at the first of
    /// the lease lost and the margin reached; woken by a loss, or at the margin's time.
    fn watch(&self) {
        while !self.is_lost() {
            let left = self.holder.remaining().saturating_sub(self.settings.margin);
            let _ = self.holder.wait_lost(left.max(Duration::from_millis(1)));
        }
    }

    /// Waits until the leadership ended, or `timeout` passes; whether it ended.
    fn wait_lost(&self, timeout: Duration, cancel: Option<&Cancel>) -> Result<bool> {
        let deadline = crate::base::cancel::deadline(timeout, cancel);
        let mut ended = self.ended.lock();
        loop {
            if *ended {
                return Ok(true);
            }
            check(cancel)?;
            let now = clock::now_ns();
            if now >= deadline {
                return Ok(false);
            }
            let mut slice = Duration::from_nanos(deadline - now);
            if cancel.is_some() {
                slice = slice.min(LOST_POLL);
            }
            let _ = self.changed.wait_for(&mut ended, slice);
        }
    }

    fn lost_error(&self) -> Error {
        Error::LockLost {
            token: self.holder.token(),
            current: None,
        }
    }
}

/// The leadership of an election that [`Store::campaign`] won. Its lease is kept alive in the
/// background; dropping it resigns.
///
/// # Examples
///
/// ```
/// use fencelock::{CampaignOptions, Store};
/// # let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path().join("locks.db"))?;
/// {
///     let leadership = store.campaign("scheduler", b"node-a", &CampaignOptions::default())?;
///     leadership.put(b"schedule", b"v1")?;
/// } // dropped: resigned
/// assert_eq!(store.leader("scheduler")?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping the leadership resigns at once; keep it while leading"]
pub struct Leadership {
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name())
            .field("term", &self.term())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    fn start(
        store: Store,
        holder: Holder,
        current: Current,
        settings: Settings,
    ) -> Result<Leadership> {
        let shared = Arc::new(Shared {
            store,
            holder,
            settings,
            current: Mutex::new(current),
            ended: Mutex::new(false),
            changed: Condvar::new(),
        });
        let watched = Arc::clone(&shared);
        let watcher = std::thread::Builder::new()
            .name("fencelock-leader".into())
            .spawn(move || watched.watch())?;
        Ok(Leadership {
            shared,
            watcher: Some(watcher),
        })
    }

    /// The election's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// assert_eq!(leadership.name(), "scheduler");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.settings.name
    }

    /// The term: the token of the grant, higher than every earlier term's, and the fencing
    /// token of the leader's writes.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let first = store.campaign("scheduler", b"", &Default::default())?;
    /// let term = first.term();
    /// first.resign()?;
    /// assert!(store.campaign("scheduler", b"", &Default::default())?.term() > term);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn term(&self) -> u64 {
        self.shared.holder.token()
    }

    /// The leader's value, as the last proclaim set it.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"node-a", &Default::default())?;
    /// leadership.proclaim(b"node-a:9090")?;
    /// assert_eq!(leadership.value(), b"node-a:9090");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn value(&self) -> Vec<u8> {
        self.shared.current.lock().value.clone()
    }

    /// When the term began (this process's wall clock).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// assert!(leadership.since() <= std::time::SystemTime::now());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn since(&self) -> SystemTime {
        self.shared.settings.since
    }

    /// The holder of the election's lock: for what [`Holder`] offers beyond the leadership's
    /// own writes. Releasing it resigns.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// assert_eq!(leadership.holder().token(), leadership.term());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn holder(&self) -> &Holder {
        &self.shared.holder
    }

    /// Whether the leadership ended for its holder: resigned, its lease lost, or less than the
    /// safety margin left on it. Once it says so it always does. Reads no storage.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// assert!(!leadership.is_lost());
    /// leadership.resign()?;
    /// assert!(leadership.is_lost());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.shared.is_lost()
    }

    /// Blocks until the leadership ends for its holder (as [`Leadership::is_lost`] tells),
    /// woken at once by the end, or until `timeout` passes. Returns whether it ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::CampaignOptions;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let options = CampaignOptions { ttl: Duration::from_millis(300), ..Default::default() };
    /// let leadership = store.campaign("scheduler", b"", &options)?;
    /// assert!(!leadership.wait_lost(Duration::from_millis(500)), "kept alive");
    /// leadership.holder().release()?; // as if the lease were lost
    /// assert!(leadership.wait_lost(Duration::from_secs(10)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    #[allow(clippy::missing_panics_doc)] // Only a cancel handle cancels, and there is none.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.wait_lost_inner(timeout, None)
            .expect("a wait without a cancel handle is never cancelled")
    }

    /// Like [`Leadership::wait_lost`], and ends within about 10 ms with [`Error::Cancelled`]
    /// once `cancel` fires.
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// let cancel = Cancel::new();
    /// cancel.cancel();
    /// let waited = leadership.wait_lost_cancellable(Duration::from_secs(600), &cancel);
    /// assert!(matches!(waited, Err(Error::Cancelled)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_lost_cancellable(&self, timeout: Duration, cancel: &Cancel) -> Result<bool> {
        self.wait_lost_inner(timeout, Some(cancel))
    }

    fn wait_lost_inner(&self, timeout: Duration, cancel: Option<&Cancel>) -> Result<bool> {
        self.shared.wait_lost(timeout, cancel)
    }

    /// The wait of [`Leadership::wait_lost_cancellable`], owning what it needs: for a wait on
    /// another thread than the leadership owner's (the async API).
    #[cfg(feature = "tokio")]
    pub(crate) fn lost_waiter(
        &self,
    ) -> impl FnOnce(Duration, &Cancel) -> Result<bool> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        move |timeout, cancel| shared.wait_lost(timeout, Some(cancel))
    }

    /// Changes the leader's value: writes the next version of the leader record, fenced by
    /// the term with the lease checked in the same transaction, and wakes the observers.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] once the leadership ended (nothing written); otherwise as
    /// [`Holder::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"starting", &Default::default())?;
    /// leadership.proclaim(b"ready")?;
    /// let leader = store.leader("scheduler")?.unwrap();
    /// assert_eq!((leader.version, leader.value.as_slice()), (2, &b"ready"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn proclaim(&self, value: &[u8]) -> Result<()> {
        let shared = &self.shared;
        let settings = &shared.settings;
        if shared.is_lost() {
            return Err(shared.lost_error());
        }
        let mut current = shared.current.lock();
        let version = current.version + 1;
        let term = self.term();
        let record = encode_record(
            version,
            settings.generation,
            std::process::id(),
            settings.since,
            value,
        );
        shared
            .holder
            .put(&term_key(&settings.name, term), &record)?;
        current.version = version;
        current.value = value.to_vec();
        Ok(())
    }

    /// Writes `value` under `key` fenced by the term, with the lease checked in the same
    /// transaction ([`Holder::put`]); refused once the leadership ended, even while the lease
    /// itself still has its safety margin left.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] once the leadership ended; otherwise as [`Holder::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// leadership.put(b"schedule", b"v1")?;
    /// leadership.resign()?;
    /// assert!(matches!(leadership.put(b"schedule", b"late"), Err(fencelock::Error::LockLost { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.shared.is_lost() {
            return Err(self.shared.lost_error());
        }
        self.shared.holder.put(key, value)
    }

    /// Deletes `key` fenced by the term, checked as [`Leadership::put`]; whether it held a
    /// value.
    ///
    /// # Errors
    ///
    /// As [`Leadership::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// leadership.put(b"schedule", b"v1")?;
    /// assert!(leadership.delete(b"schedule")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        if self.shared.is_lost() {
            return Err(self.shared.lost_error());
        }
        self.shared.holder.delete(key)
    }

    /// Checks the term at the external fence `resource` ([`Store::fence`]), for storage of the
    /// user's own; refused once the leadership ended.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] once the leadership ended; otherwise as [`Store::fence`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let leadership = store.campaign("scheduler", b"", &Default::default())?;
    /// leadership.fence("s3://bucket/schedule.json")?;
    /// assert_eq!(store.fence_token("s3://bucket/schedule.json")?, Some(leadership.term()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fence(&self, resource: &str) -> Result<()> {
        if self.shared.is_lost() {
            return Err(self.shared.lost_error());
        }
        self.shared.store.fence(resource, self.term())
    }

    /// Steps down at once: the next candidate is granted without waiting for the lease to run
    /// out. Like [`Holder::release`], the first resign of a leadership whose lease was lost
    /// before it reports [`Error::LockLost`]; a later one is a no-op.
    ///
    /// # Errors
    ///
    /// As [`Holder::release`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{CampaignOptions, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let slow = CampaignOptions { ttl: Duration::from_secs(600), ..CampaignOptions::default() };
    /// let first = store.campaign("scheduler", b"a", &slow)?;
    /// let other = Store::open(&path)?;
    /// let next = std::thread::spawn(move || other.campaign("scheduler", b"b", &slow).map(|l| l.term()));
    /// first.resign()?; // the next is granted now, not in ten minutes
    /// assert!(next.join().unwrap()? > first.term());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resign(&self) -> Result<()> {
        let shared = &self.shared;
        let released = shared.holder.release();
        shared.end();
        released
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let _ = self.resign();
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

/// The changes of an election's leader, as [`Store::observe_leader`] watches them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
/// let mut watch = store.observe_leader("scheduler")?;
/// assert_eq!(watch.next_change(Duration::from_millis(20))?, None, "nobody leads");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeaderWatch {
    store: Store,
    name: String,
    prefix: Vec<u8>,
    /// The latest (term, version) told, or passed over at the start.
    seen: Option<(u64, u64)>,
    started: bool,
    pending: VecDeque<Leader>,
    /// How many times it read the leader records.
    looks: u64,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("name", &self.name)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    /// The next change of the leader, waiting up to `timeout` for it; `None` when none came.
    /// The first is the current leader, if one leads; then each new term and each proclaim,
    /// in order, woken by the write of the new leader record itself (never a timer: see
    /// [`LeaderWatch::looks`]). Every term is told, but of two proclaims between two of its
    /// reads only the second. A term that began and ended while the watch was not looking is
    /// still told (from its record), unless more than [`TERMS_KEPT`] terms passed meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] for a leader record that is not one; otherwise the storage errors of
    /// [`Store::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let mut watch = store.observe_leader("scheduler")?;
    /// let first = store.campaign("scheduler", b"a", &Default::default())?;
    /// first.resign()?;
    /// let second = store.campaign("scheduler", b"b", &Default::default())?;
    /// let terms: Vec<u64> = (0..2)
    ///     .map(|_| watch.next_change(Duration::from_secs(10)).map(|l| l.unwrap().term))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(terms, [first.term(), second.term()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next_change(&mut self, timeout: Duration) -> Result<Option<Leader>> {
        self.next_inner(timeout, None)
    }

    /// Like [`LeaderWatch::next_change`], and ends within about 10 ms with
    /// [`Error::Cancelled`] once `cancel` fires (from any thread).
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] once `cancel` fires; otherwise as [`LeaderWatch::next_change`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{Cancel, Error};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let mut watch = store.observe_leader("scheduler")?;
    /// let cancel = Cancel::new();
    /// let stop = cancel.clone();
    /// let watcher = std::thread::spawn(move || watch.next_change_cancellable(Duration::from_secs(600), &cancel));
    /// stop.cancel();
    /// assert!(matches!(watcher.join().unwrap(), Err(Error::Cancelled)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next_change_cancellable(
        &mut self,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Option<Leader>> {
        self.next_inner(timeout, Some(cancel))
    }

    fn next_inner(&mut self, timeout: Duration, cancel: Option<&Cancel>) -> Result<Option<Leader>> {
        self.fill(timeout, cancel)?;
        Ok(self.take_pending())
    }

    /// Waits up to `timeout` until a change is pending (told by [`LeaderWatch::take_pending`]),
    /// ended by `cancel`.
    pub(crate) fn fill(&mut self, timeout: Duration, cancel: Option<&Cancel>) -> Result<()> {
        let deadline = crate::base::cancel::deadline(timeout, cancel);
        while self.pending.is_empty() {
            check(cancel)?;
            // The mark before the read: a write after it ends the wait below at once.
            let mark = self.store.values_mark(&self.prefix)?;
            self.look()?;
            if !self.pending.is_empty() {
                break;
            }
            let now = clock::now_ns();
            if now >= deadline {
                break;
            }
            let left = Duration::from_nanos(deadline - now);
            if !self.store.wait_values(&self.prefix, mark, left, cancel)? {
                break;
            }
        }
        Ok(())
    }

    /// The oldest change not told yet, if [`LeaderWatch::fill`] found one.
    pub(crate) fn take_pending(&mut self) -> Option<Leader> {
        self.pending.pop_front()
    }

    /// How many times the watch has read the leader records: once at its start, and then once
    /// a wake-up, which only a write to the store (a local store) or to the election's records
    /// (etcd) gives it, never a timer; but on a read-only store that cannot use the store's
    /// shared memory, which looks again every 10 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let mut watch = store.observe_leader("scheduler")?;
    /// assert_eq!(watch.next_change(Duration::from_millis(200))?, None);
    /// assert_eq!(watch.looks(), 2, "one at the start, one in the wait; no poll meanwhile");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn looks(&self) -> u64 {
        self.looks
    }

    /// Reads the leader records newer than the last told into `pending`, oldest first. At the
    /// start only the latest, and only if its leader leads still.
    fn look(&mut self) -> Result<()> {
        self.looks += 1;
        let keys = self.store.keys(&self.prefix)?;
        let terms: Vec<u64> = keys
            .iter()
            .filter_map(|key| term_of_key(&self.prefix, key))
            .collect();
        if !self.started {
            self.started = true;
            let Some(&latest) = terms.last() else {
                self.seen = Some((0, 0));
                return Ok(());
            };
            self.seen = Some((latest, 0));
            let Some(record) = self.store.leader_record(&self.name, latest)? else {
                return Ok(()); // pruned meanwhile: a newer term follows
            };
            self.seen = Some((latest, record.leader.version));
            if self.store.live_term(&self.name)? == Some(latest) {
                self.pending.push_back(record.leader);
            }
            return Ok(());
        }
        let seen_term = self.seen.map_or(0, |(term, _)| term);
        for term in terms.into_iter().filter(|&term| term >= seen_term) {
            let Some(record) = self.store.leader_record(&self.name, term)? else {
                continue; // pruned meanwhile
            };
            let at = (term, record.leader.version);
            if self.seen.is_none_or(|seen| at > seen) {
                self.seen = Some(at);
                self.pending.push_back(record.leader);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_decodes_as_it_was_encoded() {
        let since = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let bytes = encode_record(7, 3, 4242, since, b"10.0.0.7:8080");
        let record = decode_record("jobs", 12, &bytes).unwrap();
        assert_eq!(record.generation, 3);
        assert_eq!(
            record.leader,
            Leader {
                name: "jobs".into(),
                term: 12,
                version: 7,
                value: b"10.0.0.7:8080".to_vec(),
                pid: 4242,
                since,
            }
        );
        assert!(matches!(
            decode_record("jobs", 12, &bytes[..RECORD_HEADER - 1]),
            Err(Error::Corrupt(_))
        ));
        assert!(matches!(
            decode_record("jobs", 12, b"not a record at all, no"),
            Err(Error::Corrupt(_))
        ));
    }

    #[test]
    fn term_keys_sort_by_term_and_parse_back() {
        let prefix = term_prefix("jobs");
        let (low, high) = (term_key("jobs", 9), term_key("jobs", 10));
        assert!(low < high);
        assert_eq!(term_of_key(&prefix, &high), Some(10));
        assert_eq!(
            term_of_key(&prefix, b"fencelock.election/jobs/term/12"),
            None
        );
    }
}
