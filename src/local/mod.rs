//! Layer 6, the local engine: a store in a file of this host, shared by its processes (or held
//! by one, in single-process mode, or served by one, `fencelock serve`).
//!
//! - `mod.rs`: the engine's state, its open, its handle of the database and its reopen after
//!   a full disk, where its leases are read (the lease map or the file), and the facts the
//!   rules ask of it (`rules::context::Context`) and its parts ask of it (`route::Host`,
//!   `lease_map::MapHost`).
//! - `acquire.rs`: grants and waits; `handle.rs`: a granted lease, its holder's handle;
//!   `history.rs`: a lock's history, and the recording of releases; `serve.rs`: a server.
//! - The parts the engine holds, each with its own state, importing nothing of the engine:
//!   `route.rs` (`route::Router`: who commits an operation or answers a read, a server, a
//!   combiner in the shared ring, or this process's group commit; the engine is its
//!   `route::Host`), `lease_map.rs` (`lease_map::MapUser`: the leases kept in the ring's lease
//!   map, their tokens and the ends they judge; the engine is its `lease_map::MapHost`),
//!   `observe.rs` (`observe::Counters`: counters and the observer), `notes.rs`
//!   (`notes::HistoryNotes`: releases to record, the history sweep's cursor), `released.rs`
//!   (`released::Released`: this process's releases, told to its waiting threads).
//!
//! Imports every layer below it (base, rules, storage, ring, share, engine), never the public
//! types above it.

pub(crate) mod acquire;
mod crashed;
pub(crate) mod handle;
pub(crate) mod history;
pub(crate) mod lease_map;
pub(crate) mod log_user;
pub(crate) mod notes;
pub(crate) mod observe;
pub(crate) mod released;
pub(crate) mod route;
pub(crate) mod serve;

use std::fs;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use redb::ConcurrencyMode;

use crate::base::cancel::{Cancel, Waiting};
use crate::base::clock::{self, ProcessId};
use crate::base::error::{io_error, Error, Result};
use crate::base::limits::{check_key, check_name, check_token, MAX_NAME_LEN, MAX_VALUE_LEN_LIMIT};
use crate::engine::holds::Holds;
use crate::engine::observe::Observer;
use crate::engine::options::{Mode, Options};
use crate::engine::{Acquire, Engine, LeaseHandle};
use crate::local::lease_map::{records, MapHost, MapUser};
use crate::local::log_user::{recover_alone, LogHost, LogUser};
use crate::local::notes::HistoryNotes;
use crate::local::observe::Counters;
use crate::local::released::Released;
use crate::local::route::{Host, Router};
use crate::ring::lock_hash;
use crate::rules::admit::describe_record;
use crate::rules::context::{Context, LeaseMap};
use crate::rules::history::HistoryEntry;
use crate::rules::info::{Fenced, LockInfo, StoreInfo, WaiterInfo};
use crate::rules::kind::Kind;
use crate::rules::metrics::{Metrics, Scope};
use crate::rules::ops::{unexpected, Done, Op};
use crate::rules::query::{mismatched, Answer, Query};
use crate::rules::record::Record;
use crate::rules::tokens::admit;
use crate::share::member::RingMember;
use crate::storage::db::{damaged, open_now, open_shared, redb_builder, restore_counter, Db};
use crate::storage::liveness::Liveness;

pub(crate) struct LocalEngine {
    /// This engine, for what must hold it beyond a call (a holder, a job in another
    /// process's commit).
    this: Weak<LocalEngine>,
    /// The open database; `None` while a reopen after an I/O error has not succeeded. Dropped
    /// only in the process that opened it: see `Drop for LocalEngine`.
    db: ManuallyDrop<RwLock<Option<Arc<Db>>>>,
    pub(crate) read_only: bool,
    mode: ConcurrencyMode,
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
    /// Who commits its operations and answers its reads (`route.rs`): a server, a combiner in
    /// the shared ring, or its own group commit; it holds the ring, where one is used.
    pub(crate) router: Router,
    /// Its counters and its observer (`observe.rs`); the ring's page where it has one.
    pub(crate) counters: Counters,
    /// Its use of the ring's lease map (`lease_map.rs`), where it keeps its leases there: in
    /// multi-process mode (and a server's); in single-process mode they are in the file,
    /// committed without an fsync.
    pub(crate) lease_map: MapUser,
    /// The last lease name the pruner looked at; it resumes after it.
    pub(crate) prune_cursor: Mutex<String>,
    /// The `Store` handles of this store (clones included; holders not).
    pub(crate) handles: std::sync::atomic::AtomicUsize,
    /// What it notes for the history of its locks (`notes.rs`).
    pub(crate) history: HistoryNotes,
    /// The thread each live lease of this engine was granted to (`engine/holds.rs`).
    pub(crate) holds: Holds,
    /// The releases of this process, told to its waiting threads (`released.rs`).
    pub(crate) released: Released,
    /// Whether this store asked for its fenced writes to go through the redo log
    /// ([`Options::write_log`]); the first process of the ring decides.
    write_log: bool,
    /// This store's use of the redo log, once its ring's processes write through it
    /// (`log_user.rs`).
    pub(crate) log: std::sync::OnceLock<LogUser>,
    /// For a read-only store: the log a crash left, as its last read found it (`crashed.rs`).
    crashed: parking_lot::Mutex<Option<Arc<crashed::Crashed>>>,
}

impl LocalEngine {
    /// Opens the store file at `path` (see [`crate::Store::open_with`]).
    pub(crate) fn open(path: &Path, options: &Options) -> Result<Arc<LocalEngine>> {
        let path = path.to_path_buf();
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
            if !read_only {
                // The log a crash of a ring's processes left: what they acknowledged.
                recover_alone(&path, &db)?;
            }
            let live = Liveness::private()?;
            return LocalEngine::assemble(path, options, mode, Some(db), live, None, false);
        }
        // The leases of a multi-process store are kept in its ring (`lease_map.rs`): a store that
        // writes cannot do without it. A read-only store reads them there when it may (a ring
        // nobody uses holds no live lease).
        let live = if read_only {
            // Never creates the file.
            let exists = path.metadata().is_ok_and(|meta| meta.len() > 0);
            exists.then(|| Liveness::shared(&path).ok()).flatten()
        } else {
            Some(Liveness::shared(&path)?)
        };
        let shared = match &live {
            Some(live) if read_only => RingMember::join(&path, live, clock::boot_id()?, None).ok(),
            Some(live) => Some(RingMember::join(
                &path,
                live,
                clock::boot_id()?,
                Some(waiting),
            )?),
            None => None,
        }
        .map(Arc::new);
        // A store that a server serves is not opened here (the server holds the file): every
        // operation goes through the server.
        let served = |shared: &Option<Arc<RingMember>>, live: &Option<Liveness>| matches!((shared, live), (Some(shared), Some(live)) if shared.served(live));
        if served(&shared, &live) {
            let live = live.expect("a ring needs liveness");
            return LocalEngine::ready(LocalEngine::assemble(
                path, options, mode, None, live, shared, false,
            )?);
        }
        let db = loop {
            match open_shared(&path, read_only, waiting) {
                Ok(db) => break db,
                // A server that started meanwhile holds it.
                Err(Error::InUse) if served(&shared, &live) => {
                    let live = live.expect("a ring needs liveness");
                    return LocalEngine::ready(LocalEngine::assemble(
                        path, options, mode, None, live, shared, false,
                    )?);
                }
                // A server starting, stopping or just killed holds the file for a moment
                // while the ring does not show it serving: the open waits, within the busy
                // timeout, as behind any process that holds the store.
                Err(Error::InUse) if shared.as_deref().is_some_and(RingMember::in_transition) => {
                    waiting.step()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                // A user who may not write the store cannot use its server (the ring).
                Err(Error::InUse)
                    if live.is_none() && crate::storage::liveness::held_by_a_server(&path)? =>
                {
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        format!(
                            "{} is served by `fencelock serve`, which only users who may write \
                             the store can use: this user may only read it, and cannot while \
                             it is served",
                            path.display()
                        ),
                    )));
                }
                Err(err) => return Err(err),
            }
        };
        let live = match live {
            Some(live) => live,
            None => Liveness::observer(&path)?,
        };
        LocalEngine::ready(LocalEngine::assemble(
            path,
            options,
            mode,
            Some(db),
            live,
            shared,
            false,
        )?)
    }

    /// `engine`, once the tokens of its lease map are set up (see `setup_tokens`).
    pub(crate) fn ready(engine: Arc<LocalEngine>) -> Result<Arc<LocalEngine>> {
        if let Some(member) = engine.lease_map.member() {
            if !engine.read_only {
                engine.lease_map.setup_map(&*engine, member)?;
            }
        }
        // The redo log, decided by the ring's first process (recovered by it first). A store
        // that a server serves has its writes made there.
        if let Some(member) = engine.router.member() {
            if !engine.read_only && !engine.router.served(&*engine) {
                let waiting = Waiting::bounded(engine.busy_timeout, None);
                let want = engine.write_log && !engine.router.serving();
                if let Some(user) = LogUser::join(&*engine, member, want, waiting)? {
                    let _ = engine.log.set(user);
                }
            }
        }
        Ok(engine)
    }

    /// The engine of the database `db` (`None`: served, see `local/serve.rs`).
    pub(crate) fn assemble(
        path: PathBuf,
        options: &Options,
        mode: ConcurrencyMode,
        db: Option<Db>,
        live: Liveness,
        shared: Option<Arc<RingMember>>,
        serving: bool,
    ) -> Result<Arc<LocalEngine>> {
        let file = crate::storage::file::Identity::of(&path)?;
        let boot_id = clock::boot_id()?;
        let me = ProcessId::current()?;
        Ok(Arc::new_cyclic(|this| LocalEngine {
            this: this.clone(),
            live,
            lease_map: MapUser::new(
                shared
                    .clone()
                    .filter(|_| mode == ConcurrencyMode::MultiWriter || serving),
            ),
            counters: Counters::new(shared.clone()),
            router: Router::new(
                shared,
                options.share_commits,
                mode == ConcurrencyMode::ExclusiveWriter && !serving,
                serving,
            ),
            db: ManuallyDrop::new(RwLock::new(db.map(Arc::new))),
            read_only: options.read_only,
            mode,
            io_failed: AtomicBool::new(false),
            file,
            path,
            boot_id,
            me,
            max_value_len: options.max_value_len,
            busy_timeout: options.busy_timeout,
            prune_cursor: Mutex::new(String::new()),
            handles: std::sync::atomic::AtomicUsize::new(0),
            history: HistoryNotes::new(options.history),
            holds: Holds::new(options.refuse_own_waits),
            released: Released::new(),
            write_log: options.write_log,
            log: std::sync::OnceLock::new(),
            crashed: parking_lot::Mutex::new(None),
        }))
    }

    /// This engine, shared.
    pub(crate) fn arc(&self) -> Arc<LocalEngine> {
        self.this
            .upgrade()
            .expect("an engine is alive while one of its methods runs")
    }
}

impl Drop for LocalEngine {
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

impl LocalEngine {
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

    /// Runs `f` in a read transaction, waiting for the file's header at most within `waiting`.
    /// redb may panic on some forms of file damage; that becomes [`Error::Corrupt`] rather
    /// than unwinding into the caller.
    pub(crate) fn read_within<T>(
        &self,
        waiting: Waiting<'_>,
        f: impl FnOnce(&redb::ReadTransaction) -> Result<T>,
    ) -> Result<T> {
        self.check_fork()?;
        let db = self.database()?;
        self.wait_for_header(waiting)?;
        let txn = crate::base::quiet::catch(|| db.begin_read()).unwrap_or_else(damaged);
        let result =
            txn.and_then(|txn| crate::base::quiet::catch(|| f(&txn)).unwrap_or_else(damaged));
        self.note_io_failure(result)
    }

    /// In multi-process mode, waits (within `waiting`, by default the busy timeout, then
    /// [`Error::Timeout`]) while a commit of another open file holds redb's header lock:
    /// `begin_read` would block behind it, without a timeout, for as long as a process stays
    /// paused inside that commit. A process paused there in the moment between this test and
    /// the `begin_read` still blocks the read until it resumes.
    fn wait_for_header(&self, waiting: Waiting<'_>) -> Result<()> {
        if self.mode != ConcurrencyMode::MultiWriter {
            return Ok(());
        }
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
        if self.router.served(self) {
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
                    // (Not `Router::served`, which would close the handle this guard holds.)
                    Err(Error::InUse)
                        if self
                            .router
                            .member()
                            .is_some_and(|shared| shared.served(&self.live)) =>
                    {
                        return Err(Error::InUse)
                    }
                    // The server may still be closing it.
                    Err(Error::InUse) => {
                        waiting.step()?;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    other => break other?,
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
            } else if self.router.serving() {
                // As the server opened it: its backend leaves the liveness bytes free.
                crate::storage::carved::open_carved(&self.path)
            } else if self.mode == ConcurrencyMode::MultiWriter {
                // As any store opens it: serialized with other opens, and restoring the leases
                // of a server that died.
                let waiting = Waiting::new(self.busy_timeout, None);
                open_shared(&self.path, false, waiting)
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
                    return Err(Error::Io(io_error(
                        std::io::ErrorKind::Other,
                        format!("the store could not be reopened after an I/O error: {err}"),
                        err.raw_os_error(),
                    )));
                }
            }
        }
        Ok(Arc::clone(slot.as_ref().expect("reopened above")))
    }

    /// Closes this store's handle of the database, for a server to open the file; the next
    /// direct operation opens it again. Operations still running on it keep it open.
    pub(crate) fn close_database(&self) {
        if self.db.read().is_some() {
            *self.db.write() = None;
        }
    }

    /// The record of the lock `name` (its lease, or the grants of a semaphore or shared
    /// lock), if there is one.
    pub(crate) fn lease_of(&self, name: &str) -> Result<Option<Record>> {
        if let Some(member) = self.lease_map.member() {
            self.check_fork()?;
            // A server waiting to start needs this process to let go of the file, even when
            // it only touches its leases.
            self.router.make_way(self);
            return Ok(crate::share::buckets::entry_of(member.ring(), name)?
                .and_then(|entry| entry.record));
        }
        self.check_leases_in_file()?;
        match self.router.query(self, &Query::Record(name.to_owned()))? {
            Answer::Record(lease) => Ok(lease),
            other => Err(mismatched(&other)),
        }
    }

    /// Refuses to answer from the file what only the shared memory holds: for a read-only
    /// store of a user who may not use the ring (who may not write the store), while processes
    /// use it, so that such a user is never told that a held lock is free.
    fn check_leases_in_file(&self) -> Result<()> {
        if self.read_only
            && self.mode == redb::ConcurrencyMode::MultiWriter
            && self.router.member().is_none()
            && self.live.maps_in_use()?
        {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "the leases of {} are in its shared memory (its ring in /dev/shm), which \
                     only users who may write the store can use: this user cannot see them",
                    self.path.display()
                ),
            )));
        }
        Ok(())
    }

    pub(crate) fn leases(&self) -> Result<Vec<(String, Record)>> {
        if let Some(member) = self.lease_map.member() {
            self.check_fork()?;
            self.router.make_way(self);
            return records(member);
        }
        self.check_leases_in_file()?;
        match self.router.query(self, &Query::Records)? {
            Answer::Records(records) => Ok(records),
            other => Err(mismatched(&other)),
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

impl Context for LocalEngine {
    fn boot_id(&self) -> [u8; 16] {
        self.boot_id
    }

    fn is_held(&self, live: u64) -> Result<bool> {
        Ok(self.live.is_held(live)?)
    }

    fn waits_before(&self, name: &str, ticket: u64, now: u64) -> bool {
        self.router.member().is_some_and(|shared| {
            shared
                .ring()
                .waits_before(lock_hash(name), Some(ticket), now, &self.live)
        })
    }

    fn released_at(&self, token: u64) -> Option<u64> {
        self.counters.activity().release_of(token)
    }

    /// In single-process mode (and for a server, whose every batch is durable now: it grants
    /// nothing, the leases being in the store's shared memory).
    fn relaxed(&self) -> bool {
        self.mode == ConcurrencyMode::ExclusiveWriter
    }

    fn keeps_history(&self) -> bool {
        self.history.keeps()
    }

    fn prune_cursor(&self) -> &Mutex<String> {
        &self.prune_cursor
    }

    fn history_cursor(&self) -> &Mutex<String> {
        self.history.cursor()
    }

    fn shared_lease(&self, name: &str) -> Option<Result<Option<Record>>> {
        let member = self.lease_map.member()?;
        Some(
            crate::share::buckets::entry_of(member.ring(), name)
                .map(|entry| entry.and_then(|entry| entry.record)),
        )
    }

    fn shared_last_token(&self) -> Option<u64> {
        let member = self.lease_map.member()?;
        Some(member.ring().last_token())
    }
}

impl LeaseMap for LocalEngine {
    fn grant_exclusive(
        &self,
        name: &str,
        ttl: Duration,
        holder: ProcessId,
        live: u64,
        ticket: Option<u64>,
    ) -> Result<(u64, u64)> {
        let member = self.lease_map.member().ok_or_else(|| {
            Error::Storage("internal error: a grant in a lease map this store does not use".into())
        })?;
        self.lease_map.grant_in_map(
            self,
            member,
            name,
            Kind::Exclusive,
            ttl,
            ticket,
            holder,
            live,
        )
    }
}

impl Host for LocalEngine {
    fn arc(&self) -> Arc<LocalEngine> {
        LocalEngine::arc(self)
    }

    fn live(&self) -> &Liveness {
        &self.live
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    fn check_fork(&self) -> Result<()> {
        LocalEngine::check_fork(self)
    }

    fn check_file(&self) -> Result<()> {
        LocalEngine::check_file(self)
    }

    fn database(&self) -> Result<Arc<Db>> {
        LocalEngine::database(self)
    }

    fn close_database(&self) {
        LocalEngine::close_database(self);
    }

    fn note_io_failure<T>(&self, result: Result<T>) -> Result<T> {
        LocalEngine::note_io_failure(self, result)
    }

    fn read_within<T>(
        &self,
        waiting: Waiting<'_>,
        f: impl FnOnce(&redb::ReadTransaction) -> Result<T>,
    ) -> Result<T> {
        LocalEngine::read_within(self, waiting, f)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl MapHost for LocalEngine {
    fn me(&self) -> ProcessId {
        self.me
    }

    fn router(&self) -> &Router {
        &self.router
    }

    fn lease_map(&self) -> &MapUser {
        &self.lease_map
    }
}

impl LogHost for LocalEngine {
    fn store_path(&self) -> &Path {
        &self.path
    }

    fn log_user(&self) -> Option<&LogUser> {
        self.log.get()
    }

    fn handles_dropped(&self) -> bool {
        self.handles.load(Ordering::Acquire) == 0
    }

    fn last_user_gone(&self) {
        self.record_releases();
    }
}

impl Engine for LocalEngine {
    fn path(&self) -> &Path {
        &self.path
    }

    fn server(&self) -> Option<u32> {
        let shared = self.router.member()?;
        if self.router.serving() {
            return None;
        }
        shared.server_pid(&self.live)
    }

    fn acquire(&self, request: &Acquire<'_>) -> Result<Vec<Arc<dyn LeaseHandle>>> {
        self.grant_request(request)
    }

    /// The store's change bell (`local/observe.rs`), whatever the prefix.
    fn values_mark(&self, _prefix: &[u8]) -> Result<u64> {
        Ok(self.counters.change_mark())
    }

    fn wait_values(
        &self,
        _prefix: &[u8],
        mark: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        self.counters.wait_change(self.mode, mark, timeout, cancel)
    }

    fn write(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        token: u64,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        check_key(key)?;
        if let Some(value) = value {
            self.check_value(value)?;
        }
        check_token(token)?;
        if let Some(user) = self.log_writer() {
            crate::base::cancel::check(cancel)?;
            return self.counters.counted(user.put(
                self,
                key,
                value,
                token,
                None,
                self.bounded(cancel),
            ));
        }
        let op = Op::Put {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            token,
            lease: None,
        };
        self.counters.counted(
            match self.router.submit(self, op, Some(self.bounded(cancel))) {
                Ok(Done::Put { existed }) => Ok(existed),
                Ok(other) => Err(unexpected(&other)),
                Err(err) => Err(err),
            },
        )
    }

    fn get(&self, key: &[u8]) -> Result<Option<Fenced>> {
        check_key(key)?;
        if let Some(user) = self.log_reader()? {
            self.check_fork()?;
            return user.get(self, key);
        }
        self.value_over_crash(key)
    }

    fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        if prefix.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "prefix is {} bytes; the limit is {MAX_NAME_LEN}",
                prefix.len()
            )));
        }
        // A writer moves the log's records into the store file first and lists the file; a
        // read-only store cannot, and lays the log's newest records (through the ring, or
        // those a crash left: `crashed.rs`) over the file's list.
        if self.read_only {
            if let Some(user) = self.log_reader()? {
                self.check_fork()?;
                return user.keys(self, prefix, || self.router.keys_of(self, prefix));
            }
            return self.keys_over_crash(prefix);
        }
        self.checkpointed()?;
        self.router.keys_of(self, prefix)
    }

    fn fence(&self, resource: &str, token: u64, cancel: Option<&Cancel>) -> Result<()> {
        self.counters
            .counted(self.fence_checked(resource, token, cancel))
    }

    fn fence_token(&self, resource: &str) -> Result<Option<u64>> {
        check_name("fence resource", resource)?;
        if let Some(user) = self.log_reader()? {
            self.check_fork()?;
            return user.fence_token(self, resource);
        }
        self.fence_over_crash(resource)
    }

    fn locks(&self) -> Result<Vec<LockInfo>> {
        let records = self.leases()?;
        let now = clock::now_ns();
        let mut locks = Vec::new();
        for (name, record) in &records {
            locks.extend(describe_record(self, name, record, now)?);
        }
        Ok(locks)
    }

    fn lock_holders(&self, name: &str) -> Result<Vec<LockInfo>> {
        check_name("lock name", name)?;
        match self.lease_of(name)? {
            Some(record) => describe_record(self, name, &record, clock::now_ns()),
            None => Ok(Vec::new()),
        }
    }

    fn info(&self) -> Result<StoreInfo> {
        self.checkpointed()?;
        let counts = self.router.counts(self)?;
        let (last_token, lock_records) = match self.lease_map.member() {
            Some(member) => (
                counts.last_token.max(self.shared_last_token().unwrap_or(0)),
                crate::share::buckets::entries(member.ring())?
                    .iter()
                    .filter(|entry| entry.record.is_some())
                    .count() as u64,
            ),
            None => (counts.last_token, counts.lock_records),
        };
        Ok(StoreInfo {
            file_size: fs::metadata(&self.path)?.len(),
            path: self.path.clone(),
            schema_version: counts.schema_version,
            last_token,
            lock_records,
            keys: counts.keys,
            fences: counts.fences,
        })
    }

    fn verify(&self) -> Result<()> {
        self.checkpointed()?;
        self.router.verified(self)
    }

    fn history(&self, name: &str) -> Result<Vec<HistoryEntry>> {
        check_name("lock name", name)?;
        self.read_history(name)
    }

    /// The counters, and the store's gauges read now: its live leases (a scan of its lease
    /// records, testing each holder's liveness lock), its queued waiters, its file's size.
    fn metrics(&self) -> Result<Metrics> {
        let scope = if self.router.member().is_some() {
            Scope::Store
        } else {
            Scope::Process
        };
        let mut metrics = self.counters.activity().snapshot(scope);
        metrics.count_live(&Engine::locks(self)?);
        metrics.queued_waiters = self
            .router
            .member()
            .map_or(0, |shared| shared.ring().queued_waiters(&self.live) as u64);
        metrics.file_bytes = std::fs::metadata(&self.path)?.len();
        Ok(metrics)
    }

    fn waiters(&self, name: &str) -> Result<Vec<WaiterInfo>> {
        check_name("lock name", name)?;
        self.check_fork()?;
        // Without a ring (single-process mode, a ring it may not use) waits are not queued.
        let Some(shared) = self.router.member() else {
            return Ok(Vec::new());
        };
        let now = clock::now_ns();
        let wall = std::time::SystemTime::now();
        Ok(shared
            .ring()
            .waiters_of(crate::ring::lock_hash(name), &self.live)
            .into_iter()
            .map(|queued| {
                let waited = Duration::from_nanos(now.saturating_sub(queued.since_ns));
                WaiterInfo {
                    name: name.to_owned(),
                    pid: queued.pid,
                    ticket: queued.ticket,
                    waiting_since: wall - waited,
                    waited,
                }
            })
            .collect())
    }

    fn set_observer(&self, observer: Option<Arc<dyn Observer>>) -> Result<()> {
        self.counters.replace_observer(observer);
        Ok(())
    }

    fn handle_opened(&self) {
        self.handles.fetch_add(1, Ordering::AcqRel);
    }

    fn handle_dropped(&self) {
        // The last user of the store in this process records its releases (`local/history.rs`): the
        // last handle, or else the last of its holders to be dropped.
        if self.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(user) = self.log.get() {
                user.finish_background();
            }
            if self.this.strong_count() == 1 {
                self.record_releases();
            }
        }
    }
}

impl LocalEngine {
    /// The wait of a write given `cancel`: to its deadline, or the busy timeout from now.
    pub(crate) fn bounded<'a>(&self, cancel: Option<&'a Cancel>) -> Waiting<'a> {
        Waiting::bounded(self.busy_timeout, cancel)
    }

    /// The log user of this store's writes: `None` where they do not go through the log, and
    /// for a read-only store (whose writes the router refuses).
    fn log_writer(&self) -> Option<&LogUser> {
        self.log.get().filter(|_| !self.read_only)
    }

    /// The log user of this store's gets and fence reads: a writer's, or, for a read-only
    /// store, one made at its first read after the ring's processes turned the log on (it
    /// may have opened before the first of them), so that a get from a read-only store
    /// right after an acknowledgement returns the write as any process's get does. `None`
    /// without a ring (a read-only user who may not write its shared memory): the store file
    /// alone, what checkpoints moved there.
    fn log_reader(&self) -> Result<Option<&LogUser>> {
        if let Some(user) = self.log.get() {
            return Ok(Some(user));
        }
        if !self.read_only {
            return Ok(None);
        }
        match self.router.member() {
            Some(member) if member.ring().log_on() => {
                let user = LogUser::reader(self, member)?;
                Ok(Some(self.log.get_or_init(|| user)))
            }
            _ => Ok(None),
        }
    }

    /// Moves the redo log into the store file first, where the store writes through it: for
    /// the reads that go over the whole file (keys, counts, verification).
    fn checkpointed(&self) -> Result<()> {
        match self.log_writer() {
            Some(user) => {
                self.check_fork()?;
                user.checkpoint(self, self.bounded(None))
            }
            None => Ok(()),
        }
    }

    fn fence_checked(&self, resource: &str, token: u64, cancel: Option<&Cancel>) -> Result<()> {
        check_name("fence resource", resource)?;
        check_token(token)?;
        crate::base::cancel::check(cancel)?;
        if let Some(user) = self.log_writer() {
            return user.fence(self, resource, token, self.bounded(cancel));
        }
        // A token equal to the recorded one passes without a write. A read-only store reads
        // the fence as its `fence_token` does (through the log, or the one a crash left), so
        // that it passes a token that answer shows, and refuses a lower one as stale (one
        // outside the writers' shared memory reads the store file alone, README, Limits).
        let highest = if self.read_only {
            self.fence_token(resource)?
        } else {
            self.router.fence_of(self, resource, self.bounded(cancel))?
        };
        admit(token, highest)?;
        if highest == Some(token) {
            return Ok(());
        }
        let op = Op::Fence {
            resource: resource.to_owned(),
            token,
        };
        match self.router.submit(self, op, Some(self.bounded(cancel)))? {
            Done::Fenced => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}
