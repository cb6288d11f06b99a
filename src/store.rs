//! The store: one redb file holding leases, the token counter, fenced values and external fences.

use std::fs;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use redb::{ConcurrencyMode, WriteTransaction};

use crate::backend::{on_etcd, Backend, Remote};
use crate::base::cancel::{Cancel, Waiting};
use crate::base::clock::{self, ProcessId};
use crate::base::error::{Error, Result};
use crate::base::limits::{
    check_key, check_name, check_token, check_ttl, duration_ns, MAX_NAME_LEN, MAX_VALUE_LEN_LIMIT,
};
use crate::holder::Holder;
use crate::leases::Grant;
use crate::observe::Attempt;
use crate::options::{Mode, Options};
use crate::ring::lock_hash;
use crate::rules::context::Context;
use crate::rules::info::{Fenced, LockInfo, StoreInfo};
use crate::rules::kind::Kind;
use crate::rules::leases::{blocker, check_join, check_turn, describe_record};
use crate::rules::ops::{run, unexpected, Done, Op};
use crate::rules::record::Record;
use crate::rules::tokens::admit;
use crate::share::member::{Place, RingMember};
use crate::storage::commit::GroupCommit;
use crate::storage::db::restore_counter;
use crate::storage::db::{damaged, open_now, open_shared, redb_builder, Db};
use crate::storage::liveness::Liveness;

/// A fencelock store. Cheap to clone; every clone shares one open database, and a store is
/// `Send + Sync`.
///
/// When the last user of the store in this process goes (its last handle is dropped, or the
/// last of its holders, whichever is later), it records the releases this process made in the
/// grant history ([`Store::history`]; a release itself writes nothing): one write, which waits
/// at most half a second for the store and is skipped with [`Options::history`] off.
pub struct Store {
    pub(crate) inner: Backend<Arc<Inner>, Remote>,
}

pub(crate) struct Inner {
    /// The open database; `None` while a reopen after an I/O error has not succeeded. Dropped
    /// only in the process that opened it: see `Drop for Inner`.
    db: ManuallyDrop<RwLock<Option<Arc<Db>>>>,
    pub(crate) read_only: bool,
    mode: ConcurrencyMode,
    /// This store is a server's (serve.rs): it holds the file exclusively, and commits every
    /// batch durably.
    pub(crate) serving: bool,
    /// A server's lease journal (journal.rs).
    pub(crate) journal: Option<crate::share::journal::Journal>,
    /// Set when an operation failed for lack of space. redb refuses every later operation of a
    /// handle that saw an I/O error, so the next operation reopens the database first.
    io_failed: AtomicBool,
    path: PathBuf,
    /// The file the store opened, to notice when `path` names another one.
    file: crate::storage::file::Identity,
    pub(crate) live: Liveness,
    pub(crate) boot_id: [u8; 16],
    pub(crate) me: ProcessId,
    max_value_len: usize,
    pub(crate) busy_timeout: Duration,
    commits: GroupCommit,
    /// The shared request ring, in multi-process mode when it can be used.
    pub(crate) shared: Option<Arc<RingMember>>,
    /// The last lease name the pruner looked at; it resumes after it.
    pub(crate) prune_cursor: Mutex<String>,
    /// The counters and recent releases of a store without a shared ring (metrics.rs).
    pub(crate) own_activity: Box<crate::rules::metrics::Activity>,
    pub(crate) observer: RwLock<Option<Arc<dyn crate::observe::Observer>>>,
    /// Releases this process made, to record in the history as it closes the store.
    pub(crate) unrecorded: Mutex<std::collections::VecDeque<(String, u64, u64)>>,
    /// The `Store` handles of this store (clones included; holders not).
    pub(crate) handles: std::sync::atomic::AtomicUsize,
    /// Whether grants record the ends they learn of in the history (`Options::history`).
    pub(crate) history: bool,
    /// The last lock name whose history the history's sweep looked at (history.rs).
    pub(crate) history_cursor: Mutex<String>,
    /// Bumped at every release in this process, so in-process waiters wake at once.
    pub(crate) releases: Mutex<u64>,
    pub(crate) released: Condvar,
}

impl Clone for Store {
    fn clone(&self) -> Store {
        match &self.inner {
            Backend::Local(inner) => Store::local(Arc::clone(inner)),
            etcd => Store {
                inner: etcd.clone(),
            },
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // The last user of the store in this process records its releases (history.rs): the
        // last handle, or else the last of its holders to be dropped.
        if let Backend::Local(inner) = &self.inner {
            if inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 && Arc::strong_count(inner) == 1 {
                inner.record_releases();
            }
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store at `path`, creating it if it does not exist, with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(path, &Options::default())
    }

    /// Opens the store at `path`, creating it if it does not exist (unless `options.read_only`).
    ///
    /// A file that is not a fencelock store, one of a newer schema, or a damaged one gives an
    /// error, and is not modified. Behind another process that holds the store (paused inside a
    /// commit or inside its own open), the open waits at most `options.busy_timeout` and then
    /// fails with [`Error::Timeout`], or with [`Error::Cancelled`] once `options.cancel` fires.
    ///
    /// `path` may instead be an etcd store string, `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`:
    /// with the cargo feature `etcd` it opens the store on that etcd cluster (README: "Beyond
    /// one host: etcd"); without it the open fails with [`Error::InvalidArgument`].
    pub fn open_with(path: impl AsRef<Path>, options: &Options) -> Result<Store> {
        if let Some(text) = crate::backend::etcd_string(path.as_ref()) {
            return crate::backend::open_etcd(text, options);
        }
        let path = path.as_ref().to_path_buf();
        if options.max_value_len > MAX_VALUE_LEN_LIMIT {
            return Err(Error::invalid(format!(
                "max_value_len {} exceeds the limit of {MAX_VALUE_LEN_LIMIT} bytes",
                options.max_value_len
            )));
        }
        let mode = match options.mode {
            Mode::MultiProcess => ConcurrencyMode::MultiWriter,
            Mode::SingleProcess => ConcurrencyMode::ExclusiveWriter,
        };
        if path.is_dir() {
            return Err(Error::invalid(format!("{} is a directory", path.display())));
        }
        crate::base::cancel::check(options.cancel.as_ref())?;
        let read_only = options.read_only;
        let waiting = Waiting::new(options.busy_timeout, options.cancel.as_ref());
        if mode != ConcurrencyMode::MultiWriter {
            // A single-process open never waits: redb refuses at once when the file is held.
            let db = open_now(&path, mode, read_only)?;
            let live = Liveness::private()?;
            return Store::assemble(path, options, mode, Some(db), live, None, false);
        }
        // A store that a server serves is not opened here (the server holds the file): every
        // operation goes through the server.
        let exists = path.metadata().is_ok_and(|meta| meta.len() > 0);
        // A read-only store goes through a server too, when it may take liveness locks (the
        // ring names its requests by one).
        let live = match (options.share_commits && exists, read_only) {
            (true, false) => Some(Liveness::shared(&path)?),
            (true, true) => Liveness::shared(&path).ok(),
            (false, _) => None,
        };
        let shared = live
            .as_ref()
            .and_then(|live| RingMember::open(&path, live, clock::boot_id().ok()?))
            .map(Arc::new);
        let served = |shared: &Option<Arc<RingMember>>, live: &Option<Liveness>| matches!((shared, live), (Some(shared), Some(live)) if shared.served(live));
        if served(&shared, &live) {
            let live = live.expect("a ring needs liveness");
            return Store::assemble(path, options, mode, None, live, shared, false);
        }
        let db = loop {
            match open_shared(&path, read_only, waiting) {
                Ok(db) => break restored(db, &path, shared.as_deref(), waiting)?,
                // A server that started meanwhile holds it.
                Err(Error::InUse) if served(&shared, &live) => {
                    let live = live.expect("a ring needs liveness");
                    return Store::assemble(path, options, mode, None, live, shared, false);
                }
                // A server starting, stopping or just killed holds the file for a moment
                // while the ring does not show it serving: the open waits, within the busy
                // timeout, as behind any process that holds the store.
                Err(Error::InUse) if shared.as_deref().is_some_and(RingMember::in_transition) => {
                    waiting.step()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(err) => return Err(err),
            }
        };
        let live = match live {
            Some(live) => live,
            None if read_only => Liveness::observer(&path)?,
            None => Liveness::shared(&path)?,
        };
        // A store created by this open gets its ring now.
        let shared = match shared {
            None if !read_only && options.share_commits => {
                RingMember::open(&path, &live, clock::boot_id()?).map(Arc::new)
            }
            other => other,
        };
        Store::assemble(path, options, mode, Some(db), live, shared, false)
    }

    /// A store of the database `db` (`None`: served, see serve.rs).
    pub(crate) fn assemble(
        path: PathBuf,
        options: &Options,
        mode: ConcurrencyMode,
        db: Option<Db>,
        live: Liveness,
        shared: Option<Arc<RingMember>>,
        serving: bool,
    ) -> Result<Store> {
        let inner = Inner {
            live,
            shared,
            db: ManuallyDrop::new(RwLock::new(db.map(Arc::new))),
            read_only: options.read_only,
            mode,
            serving,
            journal: serving.then(crate::share::journal::Journal::default),
            io_failed: AtomicBool::new(false),
            file: crate::storage::file::Identity::of(&path)?,
            path,
            boot_id: clock::boot_id()?,
            me: ProcessId::current()?,
            max_value_len: options.max_value_len,
            busy_timeout: options.busy_timeout,
            commits: GroupCommit::new(mode == ConcurrencyMode::ExclusiveWriter && !serving),
            prune_cursor: Mutex::new(String::new()),
            own_activity: crate::rules::metrics::Activity::private(),
            observer: RwLock::new(None),
            unrecorded: Mutex::new(std::collections::VecDeque::new()),
            handles: std::sync::atomic::AtomicUsize::new(0),
            history: options.history,
            history_cursor: Mutex::new(String::new()),
            releases: Mutex::new(0),
            released: Condvar::new(),
        };
        Ok(Store::local(Arc::new(inner)))
    }

    /// A handle of the store `inner`.
    pub(crate) fn local(inner: Arc<Inner>) -> Store {
        inner.handles.fetch_add(1, Ordering::AcqRel);
        Store {
            inner: Backend::Local(inner),
        }
    }

    /// The store file (an etcd store's string).
    #[must_use]
    pub fn path(&self) -> &Path {
        on_etcd!(self.inner, remote => remote.path());
        &self.inner.path
    }

    /// The process id of the server ([`crate::Server`]) that this store's operations go
    /// through now, or `None` when the store uses the file itself.
    #[must_use]
    pub fn server(&self) -> Option<u32> {
        on_etcd!(self.inner, _remote => None);
        let shared = self.inner.shared.as_ref()?;
        if self.inner.serving {
            return None;
        }
        shared.server_pid(&self.inner.live)
    }

    /// Tries once to acquire the lock `name` for `ttl`. On contention returns
    /// [`Error::Locked`] with the current holder's token, pid and time left.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] while a live lease holds the lock; [`Error::InvalidArgument`] for an empty, too long
    /// or NUL-containing name or a TTL outside [`crate::MIN_TTL`] to [`crate::MAX_TTL`], and on a
    /// read-only store; [`Error::Timeout`] behind a process that holds the store past the busy
    /// timeout; [`Error::Replaced`] when the path names another file now; [`Error::Forked`] in a
    /// child of `fork()`; [`Error::Io`], [`Error::Corrupt`] or [`Error::Storage`] from the file.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = fencelock::Store::open(&path)?;
    /// let holder = store.acquire("payment-export", Duration::from_secs(30))?;
    /// assert!(matches!(
    ///     store.acquire("payment-export", Duration::from_secs(30)),
    ///     Err(fencelock::Error::Locked { .. })
    /// ));
    /// holder.put(b"payments/today.csv", b"...")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, name: &str, ttl: Duration) -> Result<Holder> {
        on_etcd!(self.inner, remote => remote.acquire(name, ttl));
        let attempt = Attempt::start();
        let result = self.acquire_inner(name, ttl, None, None, None);
        self.observed(name, Kind::Exclusive, &attempt, result)
    }

    /// `result`, an acquire of `name` as `kind`, once counted and told (observe.rs).
    pub(crate) fn observed(
        &self,
        name: &str,
        kind: Kind,
        attempt: &Attempt,
        result: Result<Holder>,
    ) -> Result<Holder> {
        self.inner.acquired(
            &[name],
            kind,
            attempt,
            result.as_ref().map(std::slice::from_ref),
        );
        result
    }

    /// Acquires the lock `name` for `ttl`, waiting up to `timeout` for it to be free. Wakes at
    /// once when a holder of this process releases, within about a millisecond when a holder of
    /// another process releases or dies, and when the holder's lease expires. Returns
    /// [`Error::Timeout`] when the timeout passes first.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire`], but
    /// never [`Error::Locked`].
    pub fn acquire_wait(&self, name: &str, ttl: Duration, timeout: Duration) -> Result<Holder> {
        on_etcd!(self.inner, remote => remote.acquire_wait(name, ttl, timeout, None));
        self.wait_for(name, Kind::Exclusive, ttl, Waiting::new(timeout, None))
    }

    /// Like [`Store::acquire_wait`], and ends within about a millisecond with
    /// [`Error::Cancelled`], changing nothing, once `cancel` fires (from any thread).
    pub fn acquire_wait_cancellable(
        &self,
        name: &str,
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        on_etcd!(self.inner, remote => remote.acquire_wait(name, ttl, timeout, Some(cancel)));
        self.wait_for(
            name,
            Kind::Exclusive,
            ttl,
            Waiting::new(timeout, Some(cancel)),
        )
    }

    /// Waits for a grant of `name` as `kind`, in the lock's waiting queue.
    pub(crate) fn wait_for(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        waiting: Waiting<'_>,
    ) -> Result<Holder> {
        let mut attempt = Attempt::start();
        let result = self.wait_in_turn(name, kind, ttl, waiting, &mut attempt);
        self.observed(name, kind, &attempt, result)
    }

    fn wait_in_turn(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        waiting: Waiting<'_>,
        attempt: &mut Attempt,
    ) -> Result<Holder> {
        crate::base::cancel::check(waiting.cancel)?;
        // A place in the lock's waiting queue, taken at the first refusal and left when the
        // wait ends: waiters of every process are granted the lock oldest first.
        let mut place: Option<Place<'_>> = None;
        loop {
            // A waiting acquire not queued yet stands behind every queued waiter.
            let ticket = Some(place.as_ref().map_or(u64::MAX, Place::ticket));
            let tried = match kind {
                Kind::Exclusive => self.acquire_inner(name, ttl, None, Some(waiting), ticket),
                kind => self.acquire_kind_inner(name, kind, ttl, Some(waiting), ticket),
            };
            match tried {
                Err(Error::Locked { remaining, .. }) => {
                    attempt.waited = true;
                    waiting.step()?;
                    if place.is_none() {
                        place = self.inner.queue_up(name);
                    }
                    // The holder's liveness lock, as the record names it now.
                    let record = self.inner.lease_of(name)?;
                    let now = clock::now_ns();
                    let lease = blocker(&**self.inner, record.as_ref(), now)?;
                    // A semaphore's waiter waits on one permit, but any permit let go is its
                    // turn: it looks again every millisecond.
                    let deadline = match kind {
                        Kind::Semaphore(_) => waiting
                            .deadline
                            .min(now.saturating_add(duration_ns(crate::base::cancel::POLL))),
                        _ => waiting.deadline,
                    };
                    match &place {
                        // It watches the lease's expiry itself; a refusal for an earlier
                        // waiter has no time left to wait out.
                        Some(place) => {
                            place.wait_turn(lease.as_ref(), deadline, waiting.cancel)?;
                        }
                        None => {
                            let until = deadline
                                .min(clock::now_ns().saturating_add(duration_ns(remaining)));
                            if let Some(lease) = lease {
                                self.inner
                                    .wait_until_free(lease.live, until, waiting.cancel)?;
                            }
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// Acquires the lock `name` and writes `value` under `key` with the new token, in one
    /// transaction: either both happen or neither.
    ///
    /// # Errors
    ///
    /// As [`Store::acquire`], and [`Error::InvalidArgument`] for an empty or too long key or a
    /// value over the store's limit; nothing is written when the grant is refused.
    pub fn acquire_and_put(
        &self,
        name: &str,
        ttl: Duration,
        key: &[u8],
        value: &[u8],
    ) -> Result<Holder> {
        on_etcd!(self.inner, remote => remote.acquire_and_put(name, ttl, key, value));
        self.inner.check_value(value)?;
        check_key(key)?;
        let attempt = Attempt::start();
        let result =
            self.acquire_inner(name, ttl, Some((key.to_vec(), value.to_vec())), None, None);
        self.observed(name, Kind::Exclusive, &attempt, result)
    }

    pub(crate) fn acquire_inner(
        &self,
        name: &str,
        ttl: Duration,
        write: Option<(Vec<u8>, Vec<u8>)>,
        waiting: Option<Waiting<'_>>,
        ticket: Option<u64>,
    ) -> Result<Holder> {
        check_name("lock name", name)?;
        check_ttl(ttl)?;
        // A refusal needs no write transaction: most are answered from a read.
        let now = clock::now_ns();
        // Through a server the read would cost a round trip of its own: the grant's own check
        // refuses there.
        let record = if self.inner.served() {
            None
        } else {
            self.inner.lease_of(name)?
        };
        check_join(&**self.inner, record.as_ref(), Kind::Exclusive, now)?;
        let lease = blocker(&**self.inner, record.as_ref(), now)?;
        check_turn(&**self.inner, name, lease.as_ref(), ticket, now)?;
        if self.inner.read_only {
            return Err(crate::storage::db::read_only());
        }
        // The liveness lock is this process's before the grant is asked for, whichever
        // process commits it; it is released again unless the grant is reported.
        let grant = Grant::take(&self.inner)?;
        let op = Op::Acquire {
            name: name.to_owned(),
            ttl,
            write,
            holder: self.inner.me,
            live: grant.live,
            ticket,
        };
        match self.inner.submit(op, waiting)? {
            Done::Granted { token, expires_ns } => Ok(Holder::new(
                Arc::clone(&self.inner),
                name.to_owned(),
                Kind::Exclusive,
                token,
                grant.keep(),
                expires_ns,
            )),
            other => Err(unexpected(&other)),
        }
    }

    /// Stores `value` under `key` with `token`. Refused with [`Error::StaleToken`] when the key
    /// accepted a higher token before; an equal token is accepted, so one holder can write many
    /// times. The token must have been granted by this store.
    ///
    /// # Errors
    ///
    /// [`Error::StaleToken`] when the key accepted a higher token; [`Error::InvalidArgument`]
    /// for token 0, a token above every grant, an empty or too long key or a value over the
    /// limit; [`Error::Timeout`] behind a process that holds the store past the busy timeout
    /// (the write may still land if that process had taken it into its commit); and the
    /// storage errors of [`Store::acquire`].
    pub fn put(&self, key: &[u8], value: &[u8], token: u64) -> Result<()> {
        on_etcd!(self.inner, remote => remote.put(key, value, token));
        check_key(key)?;
        self.inner.check_value(value)?;
        check_token(token)?;
        self.inner
            .counted(self.submit_put(key, Some(value), token))
            .map(|_| ())
    }

    /// Deletes `key`, fenced like [`Store::put`]. The key keeps the delete's token, so a stale
    /// write after the delete is still refused. Returns whether the key held a value.
    ///
    /// # Errors
    ///
    /// As [`Store::put`].
    pub fn delete(&self, key: &[u8], token: u64) -> Result<bool> {
        on_etcd!(self.inner, remote => remote.delete(key, token));
        check_key(key)?;
        check_token(token)?;
        self.inner.counted(self.submit_put(key, None, token))
    }

    fn submit_put(&self, key: &[u8], value: Option<&[u8]>, token: u64) -> Result<bool> {
        let op = Op::Put {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            token,
            lease: None,
        };
        match self.inner.submit(op, None)? {
            Done::Put { existed } => Ok(existed),
            other => Err(unexpected(&other)),
        }
    }

    /// The value under `key` and the token that wrote it, or `None` if there is none.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long key; [`Error::Timeout`] while another
    /// process stays paused in the middle of writing the file's header; [`Error::Io`] or
    /// [`Error::Corrupt`] from the file.
    pub fn get(&self, key: &[u8]) -> Result<Option<Fenced>> {
        on_etcd!(self.inner, remote => remote.get(key));
        check_key(key)?;
        self.inner.value_of(key)
    }

    /// The keys holding a value that start with `prefix`, in byte order.
    pub fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        on_etcd!(self.inner, remote => remote.keys(prefix));
        if prefix.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "prefix is {} bytes; the limit is {MAX_NAME_LEN}",
                prefix.len()
            )));
        }
        self.inner.keys_of(prefix)
    }

    /// Checks `token` against the external fence `resource`, recording it as the highest seen
    /// when it is. Refused with [`Error::StaleToken`] when a higher token was seen before; an
    /// equal token passes. For guarding storage of the user's own with fencelock's tokens.
    ///
    /// # Errors
    ///
    /// [`Error::StaleToken`] when the resource accepted a higher token; otherwise as
    /// [`Store::put`].
    pub fn fence(&self, resource: &str, token: u64) -> Result<()> {
        on_etcd!(self.inner, remote => remote.fence(resource, token));
        self.inner.counted(self.fence_inner(resource, token))
    }

    fn fence_inner(&self, resource: &str, token: u64) -> Result<()> {
        check_name("fence resource", resource)?;
        check_token(token)?;
        // A token equal to the recorded one passes without a write.
        let highest = self.inner.fence_of(resource)?;
        admit(token, highest)?;
        if highest == Some(token) {
            return Ok(());
        }
        let op = Op::Fence {
            resource: resource.to_owned(),
            token,
        };
        match self.inner.submit(op, None)? {
            Done::Fenced => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// The highest token the external fence `resource` has accepted, if any.
    pub fn fence_token(&self, resource: &str) -> Result<Option<u64>> {
        on_etcd!(self.inner, remote => remote.fence_token(resource));
        check_name("fence resource", resource)?;
        self.inner.fence_of(resource)
    }

    /// Every lock record with its state, in name order.
    pub fn locks(&self) -> Result<Vec<LockInfo>> {
        on_etcd!(self.inner, remote => remote.locks());
        let records = self.inner.leases()?;
        let now = clock::now_ns();
        let mut locks = Vec::new();
        for (name, record) in &records {
            locks.extend(describe_record(&**self.inner, name, record, now)?);
        }
        Ok(locks)
    }

    /// What the store records of the lock `name`, if anything: its latest grant. For a
    /// semaphore or shared lock, [`Store::lock_holders`] lists every grant.
    pub fn lock(&self, name: &str) -> Result<Option<LockInfo>> {
        on_etcd!(self.inner, remote => remote.lock(name));
        Ok(self.lock_holders(name)?.into_iter().next())
    }

    /// Every grant the record of the lock `name` holds, latest first (one for an exclusive
    /// lock; the permits of a semaphore or the shared holders of a lock, live or not yet
    /// cleared). Empty when the store records nothing of it.
    pub fn lock_holders(&self, name: &str) -> Result<Vec<LockInfo>> {
        on_etcd!(self.inner, remote => remote.lock(name).map(|lock| lock.into_iter().collect()));
        check_name("lock name", name)?;
        match self.inner.lease_of(name)? {
            Some(record) => describe_record(&**self.inner, name, &record, clock::now_ns()),
            None => Ok(Vec::new()),
        }
    }

    /// Counts and settings of the store.
    pub fn info(&self) -> Result<StoreInfo> {
        on_etcd!(self.inner, remote => remote.info());
        let counts = self.inner.counts()?;
        Ok(StoreInfo {
            file_size: fs::metadata(&self.inner.path)?.len(),
            path: self.inner.path.clone(),
            schema_version: counts.schema_version,
            last_token: counts.last_token,
            lock_records: counts.lock_records,
            keys: counts.keys,
            fences: counts.fences,
        })
    }

    /// Checks the store's own invariants: every record decodes, and no lease, value or fence
    /// carries a token above the counter. Returns the first violation as [`Error::Corrupt`].
    pub fn verify(&self) -> Result<()> {
        on_etcd!(self.inner, remote => remote.verify());
        self.inner.verified()
    }
}

/// `db`, after restoring the leases of a server that died (journal.rs).
/// `db`, after restoring the leases of a server that died (journal.rs), from the ring of
/// `shared`, or from the store's ring opened for this when the store shares none.
fn restored(db: Db, path: &Path, shared: Option<&RingMember>, waiting: Waiting<'_>) -> Result<Db> {
    let Db::Writable(database) = &db else {
        return Ok(db);
    };
    match shared {
        Some(shared) => crate::share::journal::restore(database, Some(shared.ring()), waiting)?,
        None if crate::share::journal::marked(database)? => {
            let ring =
                crate::share::member::open_ring(&fs::metadata(path)?, clock::boot_id()?).ok();
            crate::share::journal::restore(database, ring.as_ref(), waiting)?;
        }
        None => {}
    }
    Ok(db)
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A child of fork() shares the parent's open file descriptions, and with them redb's file
        // locks: closing the database there would end them for the parent. The child leaks it.
        if self.check_fork().is_ok() {
            // Closing may write (redb commits its allocator state), and redb panics on some
            // damaged pages there too: the damage was reported by the call that met it, so the
            // close stays quiet.
            // SAFETY: dropped once, here, and never used again.
            let _ = crate::base::quiet::catch(|| unsafe { ManuallyDrop::drop(&mut self.db) });
        }
    }
}

impl Inner {
    /// [`Error::Replaced`] when the store's path no longer names the file it opened.
    pub(crate) fn check_file(&self) -> Result<()> {
        self.file.check(&self.path)
    }

    pub(crate) fn check_fork(&self) -> Result<()> {
        if std::process::id() == self.me.pid {
            Ok(())
        } else {
            Err(Error::Forked)
        }
    }

    /// Runs `op` in a write transaction shared with other writes: through the shared request
    /// ring with every process's (sharing.rs), or else with this process's other threads'
    /// (group commit). Gives up with [`Error::Timeout`] if another process keeps the write lock
    /// past `waiting` (by default, the busy timeout), or with [`Error::Cancelled`] when its
    /// handle fires.
    pub(crate) fn submit(self: &Arc<Self>, op: Op, waiting: Option<Waiting<'_>>) -> Result<Done> {
        self.check_fork()?;
        if self.read_only {
            return Err(crate::storage::db::read_only());
        }
        let waiting = waiting.unwrap_or_else(|| Waiting::new(self.busy_timeout, None));
        let db = loop {
            if let Some(shared) = &self.shared {
                self.check_file()?;
                if let Some(done) = self.submit_shared(shared, &op, waiting)? {
                    return Ok(done);
                }
            }
            match self.database() {
                // A server took the file since the request was withdrawn: it goes there.
                Err(Error::InUse) if self.served() => {}
                other => break other?,
            }
        };
        db.writable()?;
        // The file check runs once a commit, not once an operation.
        let admit = || self.check_file();
        // A batch that holds the write lock takes along what other processes posted.
        let others = || {
            self.shared
                .as_ref()
                .map_or_else(Vec::new, |shared| self.ring_jobs(shared))
        };
        let inner = Arc::clone(self);
        let run = move |txn: &WriteTransaction| run(&*inner, &op, txn, false);
        let committed = |ops| self.counted_commit(ops);
        let result = self
            .commits
            .run(&db, &admit, &others, &committed, waiting, run);
        drop(db);
        self.make_way();
        if let Some(shared) = &self.shared {
            shared.wake();
        }
        self.note_io_failure(result)
    }

    /// Runs `f` in a read transaction. redb may panic on some forms of file damage; that
    /// becomes [`Error::Corrupt`] rather than unwinding into the caller.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<T>) -> Result<T> {
        self.check_fork()?;
        let db = self.database()?;
        self.wait_for_header()?;
        let txn = crate::base::quiet::catch(|| db.begin_read()).unwrap_or_else(damaged);
        let result =
            txn.and_then(|txn| crate::base::quiet::catch(|| f(&txn)).unwrap_or_else(damaged));
        self.note_io_failure(result)
    }

    /// In multi-process mode, waits (up to the busy timeout, then [`Error::Timeout`]) while a
    /// commit of another open file holds redb's header lock: `begin_read` would block behind
    /// it, without a timeout, for as long as a process stays paused inside that commit. A
    /// process paused there in the moment between this test and the `begin_read` still blocks
    /// the read until it resumes.
    fn wait_for_header(&self) -> Result<()> {
        if self.mode != ConcurrencyMode::MultiWriter {
            return Ok(());
        }
        let waiting = Waiting::new(self.busy_timeout, None);
        while self.live.header_busy()? {
            waiting.step()?;
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Marks the handle for a reopen after a full disk or file-size limit. Other I/O errors (an
    /// fsync that failed, say) leave it refusing work: the page cache may then hold writes that
    /// never reached the disk, and a reopened handle would build on them.
    pub(crate) fn note_io_failure<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Io(err)) = &result {
            use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
            if matches!(err.kind(), StorageFull | FileTooLarge | QuotaExceeded) {
                self.io_failed.store(true, Ordering::Release);
            }
        }
        result
    }

    /// The open database, reopened first if an operation failed for lack of space since the
    /// last one. Holders keep their leases across the reopen: their liveness
    /// locks are not the database handle's.
    pub(crate) fn database(&self) -> Result<Arc<Db>> {
        if self.served() {
            return Err(Error::InUse);
        }
        if !self.io_failed.load(Ordering::Acquire) {
            if let Some(db) = self.db.read().as_ref() {
                return Ok(Arc::clone(db));
            }
        }
        let mut slot = self.db.write();
        if slot.is_none() && !self.io_failed.load(Ordering::Acquire) {
            // Closed for a server that has gone since: opened again as any store opens.
            let waiting = Waiting::new(self.busy_timeout, None);
            let db = loop {
                match open_shared(&self.path, self.read_only, waiting) {
                    // The next server has it now: operations go there.
                    // (Not `served()`, which would close the handle this guard holds.)
                    Err(Error::InUse)
                        if self
                            .shared
                            .as_ref()
                            .is_some_and(|shared| shared.served(&self.live)) =>
                    {
                        return Err(Error::InUse)
                    }
                    // The server may still be closing it.
                    Err(Error::InUse) => {
                        waiting.step()?;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    other => break restored(other?, &self.path, self.shared.as_deref(), waiting)?,
                }
            };
            *slot = Some(Arc::new(db));
        }
        if self.io_failed.swap(false, Ordering::AcqRel) || slot.is_none() {
            // Never reopen another file than the one opened.
            self.file.check(&self.path)?;
            // In single-process mode the old handle must close before the file opens again;
            // operations still running on it keep it open, and the next operation retries.
            *slot = None;
            let reopened = if self.read_only {
                redb_builder(self.mode)
                    .open_read_only(&self.path)
                    .map(Db::ReadOnly)
                    .map_err(Error::from)
            } else if self.serving {
                // As the server opened it: its backend leaves the liveness bytes free.
                crate::storage::carved::open_carved(&self.path)
            } else if self.mode == ConcurrencyMode::MultiWriter {
                // As any store opens it: serialized with other opens, and restoring the leases
                // of a server that died.
                let waiting = Waiting::new(self.busy_timeout, None);
                open_shared(&self.path, false, waiting)
                    .and_then(|db| restored(db, &self.path, self.shared.as_deref(), waiting))
            } else {
                redb_builder(self.mode)
                    .create(&self.path)
                    .map_err(Error::from)
                    .and_then(|db| restore_counter(&db).map(|()| Db::Writable(db)))
            };
            match reopened {
                Ok(db) => *slot = Some(Arc::new(db)),
                Err(err) => {
                    self.io_failed.store(true, Ordering::Release);
                    return Err(Error::Io(std::io::Error::other(format!(
                        "the store could not be reopened after an I/O error: {err}"
                    ))));
                }
            }
        }
        Ok(Arc::clone(slot.as_ref().expect("reopened above")))
    }

    /// Whether a server serves the store (serve.rs): operations then go through it, and this
    /// store's own handle of the database is closed, since the server needs the file alone.
    pub(crate) fn served(&self) -> bool {
        match &self.shared {
            Some(shared) if !self.serving && shared.served(&self.live) => {
                self.close_database();
                true
            }
            _ => false,
        }
    }

    /// After an operation: closes this store's handle of the database while a server waits to
    /// start, so that it can take the file (operations meanwhile open it again).
    pub(crate) fn make_way(&self) {
        if let Some(shared) = &self.shared {
            if !self.serving && shared.wanted(&self.live) {
                self.close_database();
            }
        }
    }

    /// Closes this store's handle of the database, for a server to open the file; the next
    /// direct operation opens it again. Operations still running on it keep it open.
    pub(crate) fn close_database(&self) {
        if self.db.read().is_some() {
            *self.db.write() = None;
        }
    }

    pub(crate) fn check_value(&self, value: &[u8]) -> Result<()> {
        if value.len() > self.max_value_len {
            return Err(Error::invalid(format!(
                "value is {} bytes; the limit is {}",
                value.len(),
                self.max_value_len
            )));
        }
        Ok(())
    }
}

impl Context for Inner {
    fn boot_id(&self) -> [u8; 16] {
        self.boot_id
    }

    fn is_held(&self, live: u64) -> Result<bool> {
        Ok(self.live.is_held(live)?)
    }

    fn waits_before(&self, name: &str, ticket: u64, now: u64) -> bool {
        self.shared.as_deref().is_some_and(|shared| {
            shared
                .ring()
                .waits_before(lock_hash(name), Some(ticket), now, &self.live)
        })
    }

    fn released_at(&self, token: u64) -> Option<u64> {
        self.activity().release_of(token)
    }

    /// In single-process mode, and for a server (which keeps a journal of them).
    fn relaxed(&self) -> bool {
        self.mode == ConcurrencyMode::ExclusiveWriter
    }

    fn keeps_history(&self) -> bool {
        self.history
    }

    fn prune_cursor(&self) -> &Mutex<String> {
        &self.prune_cursor
    }

    fn history_cursor(&self) -> &Mutex<String> {
        &self.history_cursor
    }

    fn note_lease(&self, name: &str, record: &Record) {
        if let Some(journal) = &self.journal {
            journal.note(name, record);
        }
    }
}
