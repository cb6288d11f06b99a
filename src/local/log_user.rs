//! This store's fenced writes through the redo log ([`LogUser`]; issue 35,
//! docs/design/writes.md), where [`crate::Options::write_log`] turned it on: puts, deletes,
//! fences and an acquire's write go into the log beside the store file (`storage/wal/`) through
//! the claims of the key index (`share/claims.rs`) and the group sync of the ring
//! (`ring/flush.rs`), instead of a commit of the store file. The store file stays the store of
//! record: checkpoints move the log into it, in the background every [`CHECKPOINT_EVERY`]
//! segments and by the last process that closes the store, and a ring set up anew recovers the
//! log into it before any write goes there.
//!
//! - **Whose log.** The first process of a ring's lifetime decides whether the ring's processes
//!   write through the log (`Ring::decide_log`), and recovers it first; every later process
//!   follows, whatever its own option, so that no fenced write of a ring commits to the store
//!   file beside a log that holds newer ones of the same key. A server (`fencelock serve`)
//!   refuses a store whose processes write through the log.
//! - **A key's state** is its entry in the key index when it has one (its highest token, its
//!   version, its newest record in the log: `newest`, [`IN_STORE`] for "the store file's"),
//!   else the store file's value, token and stored version, read after the index (a checkpoint
//!   commits before it prunes, so an entry gone from the index is in the store file).
//! - **A get** reads the newest record whose fate is known: the log's, or the store file's once
//!   a checkpoint retired the log's segment there.
//! - **The checks** run between the record's reservation and its claim, in the claim's unit:
//!   the lease of a holder's write (in the lease map), the token's grant, and the token rule.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::{ReadTransaction, ReadableTable};

use crate::base::cancel::Waiting;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::check_granted;
use crate::local::lease_map::MapHost;
use crate::local::route::bounded;
use crate::ring::flush::{Fate, GroupSync, LogPlace, LogTurn};
use crate::rules::admit::check_current;
use crate::rules::info::Fenced;
use crate::rules::record::decode_value;
use crate::rules::tables::{BLOBS, FENCES, META, VALUES, VERSIONS, WAL_ID_KEY};
use crate::rules::tokens::admit;
use crate::share::claims::{Claims, Outcome};
use crate::share::keys::{self, Entry, Space};
use crate::share::member::RingMember;
use crate::storage::db::Db;
use crate::storage::liveness::Liveness;
use crate::storage::wal::apply::{applied_position, apply, opened, recover};
use crate::storage::wal::file::{ReadDisk, SegmentLog, DEFAULT_SIZE, HEADER_BLOCK};
use crate::storage::wal::record::{Record, INLINE_MAX};
use crate::storage::wal::scan::scan;

/// An entry's `newest` when the key's newest record is the store file's.
const IN_STORE: u64 = u64::MAX;
/// A writer that finds the log this many segments past the checkpoint starts a checkpoint.
const CHECKPOINT_EVERY: u64 = 2;
/// The environment variable that sets the log's segment size (bytes, a multiple of 4096, at
/// least [`MIN_SEGMENT`]; a record larger than a segment is refused): every process of a store
/// must agree. For tests that cross
/// segments and checkpoints with few writes; the default is 16 MiB.
const SEGMENT_VAR: &str = "FENCELOCK_LOG_SEGMENT";
/// The smallest segment [`SEGMENT_VAR`] may ask for.
const MIN_SEGMENT: u64 = 64 << 10;

/// What the log user needs of the engine: the map host's (its liveness, database, router,
/// lease map and counters), the store's path, and this part again, for a thread of its own.
pub(crate) trait LogHost: MapHost {
    /// The store file's path: the log's segments are `PATH.wal.<seq>`.
    fn store_path(&self) -> &Path;

    /// The engine's log user, when its writes go through the log.
    fn log_user(&self) -> Option<&LogUser>;

    /// Whether every handle of the store in this process was dropped.
    fn handles_dropped(&self) -> bool;

    /// What the last user of the store in this process does as it goes (its releases, and the
    /// last checkpoint of the store's last process): for a thread of its own that outlived the
    /// handles.
    fn last_user_gone(&self);
}

/// A value over the log's inline limit committed to the store file (`BLOBS`, under `blob`)
/// for a write, and whether an attempt of the write made a record that names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stored {
    blob: u64,
    named: bool,
}

/// This process's use of its store's redo log.
pub(crate) struct LogUser {
    member: Arc<RingMember>,
    log: SegmentLog,
    /// Whether a checkpoint of this process runs in a thread of its own now.
    checkpointing: AtomicBool,
    /// That thread, for the store's close to wait for.
    background: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The log's segment size: [`SEGMENT_VAR`], or the default.
fn segment_size() -> Result<u64> {
    let Ok(text) = std::env::var(SEGMENT_VAR) else {
        return Ok(DEFAULT_SIZE);
    };
    match text.trim().parse::<u64>() {
        Ok(size) if size % HEADER_BLOCK == 0 && size >= MIN_SEGMENT => Ok(size),
        _ => Err(Error::invalid(format!(
            "{SEGMENT_VAR}={text}: a log segment is a multiple of {HEADER_BLOCK} bytes of at \
             least {MIN_SEGMENT}"
        ))),
    }
}

/// The redo log of the store file at `path`, whose id is `id`.
fn open_log(path: &Path, id: u64) -> Result<SegmentLog> {
    open_log_at(&log_name(path)?.base, id)
}

/// The redo log whose segments' names begin with `base` ([`LogName::base`]), whose id is `id`.
fn open_log_at(base: &Path, id: u64) -> Result<SegmentLog> {
    Ok(SegmentLog::open(base, id, segment_size()?)?)
}

/// The refusal of a process that reached the store at `path` by another name than the one its
/// log lies beside.
fn log_elsewhere(path: &Path) -> Error {
    Error::invalid(format!(
        "{}: the processes that have this store open write its redo log beside another name \
         of the file, the one the first of them opened it by (the store was renamed or moved \
         since, or this name reaches the file through a bind mount); open it by that name, \
         and rename or move it only once every process has closed it",
        path.display()
    ))
}

/// [`open_log`] for reading only: a read-only store's (`crashed.rs`).
pub(crate) fn open_log_to_read(path: &Path, id: u64) -> Result<SegmentLog<ReadDisk>> {
    Ok(SegmentLog::open_to_read(
        &log_name(path)?.base,
        id,
        segment_size()?,
    )?)
}

/// Where the log of a store file lies ([`log_name`]).
struct LogName {
    /// The path the names of its segments begin with (`NAME.wal`).
    base: PathBuf,
    /// Its directory's device and inode, and a hash of `base`'s name (FNV-1a), for the ring.
    place: LogPlace,
}

/// Where the log of the store file at `path` lies: beside the file under its one name,
/// whatever the name `path` reached it by. Every process of the store must find the same log:
/// the processes that share a ring (one per file, `ring/file.rs`) share its positions, and one
/// that wrote where another does not read would lose acknowledged writes. So a symbolic link
/// is resolved, and a file with several names (hard links) is refused, as no name of it is the
/// one name; so is a file mounted over its name (a bind mount of one file), whose log would lie
/// beside the mount point, where processes that reach the file by its own name never look.
fn log_name(path: &Path) -> Result<LogName> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let real =
        std::fs::canonicalize(path).map_err(|err| Error::Io(err).at_path("resolve", path))?;
    let dir = real.parent().unwrap_or(Path::new("/"));
    let file = std::fs::metadata(&real).map_err(|err| Error::Io(err).at_path("stat", &real))?;
    let dir_meta = std::fs::metadata(dir).map_err(|err| Error::Io(err).at_path("stat", dir))?;
    let refused = |why: String| {
        Error::invalid(format!(
            "{}: {why}; a redo log (Options::write_log, which this open asks for or the store \
             has) lies beside the file's name",
            real.display()
        ))
    };
    if file.nlink() > 1 {
        return Err(refused(format!(
            "the store file has {} names (hard links), and must have one: remove the others, \
             keeping the name its log's files (NAME.wal.*) lie beside, if it has any \
             (symbolic links to it are fine)",
            file.nlink()
        )));
    }
    if mounted_over(&real, &file, &dir_meta)? {
        return Err(refused(
            "the store file is mounted over this name (a bind mount of one file, as a \
             container's volume of a single file is), and the processes that reach the file \
             by its own name would not find a log beside this one: mount its directory instead"
                .into(),
        ));
    }
    let mut base = real.clone().into_os_string();
    base.push(".wal");
    let base = PathBuf::from(base);
    let mut name: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in base.file_name().unwrap_or_default().as_bytes() {
        name = (name ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let place = LogPlace {
        dir_dev: dir_meta.dev(),
        dir_ino: dir_meta.ino(),
        name,
    };
    Ok(LogName { base, place })
}

/// Whether a file (metadata `file`) is mounted over the name `real` (a path without symbolic
/// links, in the directory of metadata `dir`): the file is on another device than its
/// directory, or the directory's entry for the name is another inode than the file.
fn mounted_over(real: &Path, file: &std::fs::Metadata, dir: &std::fs::Metadata) -> Result<bool> {
    use std::os::unix::fs::{DirEntryExt, MetadataExt};
    if file.dev() != dir.dev() {
        return Ok(true);
    }
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Ok(false);
    };
    let entries =
        std::fs::read_dir(parent).map_err(|err| Error::Io(err).at_path("read", parent))?;
    for entry in entries {
        let entry = entry.map_err(|err| Error::Io(err).at_path("read", parent))?;
        if entry.file_name() == name {
            return Ok(entry.ino() != file.ino());
        }
    }
    // Renamed or removed meanwhile: the next checks of the file say so.
    Ok(false)
}

/// The id of the store's redo log (`WAL_ID_KEY`), `None` for a store that never had one.
fn log_id(db: &Db) -> Result<Option<u64>> {
    let txn = db.begin_read()?;
    let Some(meta) = opened(txn.open_table(META))? else {
        return Ok(None);
    };
    Ok(meta.get(WAL_ID_KEY)?.map(|id| id.value()))
}

/// The id of the store's redo log, `new` (random, committed) when it has none yet: by the
/// process that sets the log up.
fn make_log_id(db: &Db, new: u64) -> Result<u64> {
    let txn = db.writable()?.begin_write()?;
    let id = {
        let mut meta = txn.open_table(META)?;
        let found = meta.get(WAL_ID_KEY)?.map(|id| id.value());
        match found {
            Some(id) => id,
            None => {
                meta.insert(WAL_ID_KEY, new)?;
                new
            }
        }
    };
    txn.commit()?;
    Ok(id)
}

/// Recovers into `db` (opened by a single process) the redo log a crash left beside the store
/// file at `path`, if it has one: the records a process of a ring acknowledged before it died
/// with every other, which the next ring would have recovered.
pub(crate) fn recover_alone(path: &Path, db: &Db) -> Result<()> {
    let Some(id) = log_id(db)? else {
        return Ok(());
    };
    let log = open_log(path, id)?;
    if log.seqs()?.is_empty() {
        return Ok(());
    }
    recover(db.writable()?, &log)?;
    Ok(())
}

impl LogUser {
    /// The log user of the engine `host` in the ring `member`, once its fenced writes go
    /// through the log: decided by the first process of the ring's lifetime (`want`, this
    /// process's option, counts only when it is first). That process recovers the log into
    /// the store file first, whatever it decides; the others wait for it, within `waiting`.
    pub(crate) fn join<H: LogHost>(
        host: &H,
        member: &Arc<RingMember>,
        want: bool,
        waiting: Waiting<'_>,
    ) -> Result<Option<LogUser>> {
        let ring = member.ring();
        loop {
            match ring.decide_log(member.id(), host.live()) {
                LogTurn::Off => return Ok(None),
                LogTurn::On => break,
                LogTurn::SetUp => {
                    let set_up = || -> Result<()> {
                        let db = host.database()?;
                        let found = log_id(&db)?;
                        // A store that never had a log: nothing to recover, and a ring that
                        // does not write through one makes none.
                        if found.is_none() && !want {
                            ring.log_set_up(None);
                            return Ok(());
                        }
                        let name = log_name(host.store_path())?;
                        // Named after what the path named then: still this store's file (a
                        // symbolic link re-pointed meanwhile would name another file's log).
                        host.check_file()?;
                        let id = match found {
                            Some(id) => id,
                            None => {
                                // The log is opened (its name, its segment size, and no
                                // other store's segments at its names checked) before the
                                // store is given it, so that a refusal changes nothing.
                                let id = crate::base::random_u64()?;
                                drop(open_log_at(&name.base, id)?);
                                make_log_id(&db, id)?
                            }
                        };
                        let log = open_log_at(&name.base, id)?;
                        // No other process of the ring is making a segment now.
                        log.remove_leftovers()?;
                        if !want {
                            if !log.seqs()?.is_empty() {
                                recover(db.writable()?, &log)?;
                            }
                            ring.log_set_up(None);
                            return Ok(());
                        }
                        let end = recover(db.writable()?, &log)?.applied.end;
                        log.prepare(end / log.size())?;
                        ring.log_set_up(Some((end, name.place)));
                        Ok(())
                    };
                    if let Err(err) = set_up() {
                        ring.log_set_up_failed(member.id());
                        return Err(err);
                    }
                    if !want {
                        return Ok(None);
                    }
                    break;
                }
                LogTurn::Wait => {
                    waiting.step()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        LogUser::reader(host, member).map(Some)
    }

    /// The log user of the engine `host` in the ring `member`, whose processes write through
    /// the log (decided and set up): for its reads alone when `host` is read-only.
    pub(crate) fn reader<H: LogHost>(host: &H, member: &Arc<RingMember>) -> Result<LogUser> {
        let db = host.database()?;
        let id = log_id(&db)?.ok_or_else(|| {
            Error::Corrupt("the store's redo log is on, and the store file holds no log id".into())
        })?;
        // The log the ring's positions are of, not one beside another name of the file.
        let name = log_name(host.store_path())?;
        if name.place != member.ring().log_place() {
            return Err(log_elsewhere(host.store_path()));
        }
        Ok(LogUser {
            member: Arc::clone(member),
            log: open_log_at(&name.base, id)?,
            checkpointing: AtomicBool::new(false),
            background: parking_lot::Mutex::new(None),
        })
    }

    fn claims<'a>(&'a self, live: &'a Liveness, deadline: Instant) -> Claims<'a, Liveness> {
        Claims::new(self.member.ring(), live, self.member.id(), &self.log).until(deadline)
    }

    fn sync<'a>(&'a self, live: &'a Liveness) -> GroupSync<'a> {
        GroupSync::new(self.member.ring(), self.member.id(), live, &self.log)
    }

    /// Writes `value` under `key` (deletes it with `None`) with `token`, fenced; with `lease`,
    /// only while the lease `token` of that lock is current (checked in the claim's unit).
    /// For a delete, whether the key held a value before; a put says `false` (it does not
    /// look: no caller reads a put's answer).
    pub(crate) fn put<H: LogHost>(
        &self,
        host: &H,
        key: &[u8],
        value: Option<&[u8]>,
        token: u64,
        lease: Option<&str>,
        waiting: Waiting<'_>,
    ) -> Result<bool> {
        let stored = Cell::new(None);
        let result = self.put_stored(host, key, value, &stored, token, lease, waiting);
        LogUser::forget(host, stored.get(), &result, waiting);
        result
    }

    /// Commits `value` to the store file now when it is over the log's inline limit, for
    /// [`LogUser::put_stored`]: an acquire that writes does so before its grant, so that the
    /// commit does not lengthen the moment its grant is visible and its value not written.
    pub(crate) fn store_large<H: LogHost>(
        host: &H,
        value: &[u8],
        waiting: Waiting<'_>,
    ) -> Result<Option<Stored>> {
        if value.len() <= INLINE_MAX {
            return Ok(None);
        }
        host.check_fork()?;
        Ok(Some(Stored {
            blob: store_value(host, value, waiting)?,
            named: false,
        }))
    }

    /// Removes the stored value of a write that ended with `result` if no record of it could
    /// name the value: the write was refused, or cancelled, before any attempt of it wrote its
    /// record. A record a skipper voided names it still, and recovery (which trusts the scan)
    /// may apply that record; after any other error a record may count. The next recovery
    /// removes what none names.
    pub(crate) fn forget<H: LogHost, T>(
        host: &H,
        stored: Option<Stored>,
        result: &Result<T>,
        waiting: Waiting<'_>,
    ) {
        let Some(stored) = stored.filter(|stored| !stored.named) else {
            return;
        };
        let unnamed = match result {
            Ok(_) => false,
            Err(Error::Cancelled) => true,
            Err(err) => err.is_refusal(),
        };
        if unnamed {
            let _ = drop_value(host, stored.blob, waiting);
        }
    }

    /// [`LogUser::put`], its value committed to the store file first when it is over the log's
    /// inline limit (or already, `stored`), which then says whether a record named it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_stored<H: LogHost>(
        &self,
        host: &H,
        key: &[u8],
        value: Option<&[u8]>,
        stored: &Cell<Option<Stored>>,
        token: u64,
        lease: Option<&str>,
        waiting: Waiting<'_>,
    ) -> Result<bool> {
        // As a commit checks (`Router::submit`): a child of fork() writes nothing of its
        // parent's, and a store whose path names another file now refuses (`Replaced`).
        host.check_fork()?;
        host.check_file()?;
        let lease_holds = || -> Result<()> {
            match lease {
                Some(name) => {
                    let current = host.shared_lease(name).unwrap_or(Ok(None))?;
                    check_current(host, current.as_ref(), token, clock::now_ns()).map(drop)
                }
                None => check_granted(token, host.shared_last_token().unwrap_or(0)),
            }
        };
        // A value over the log's inline limit is committed to the store file first, and the
        // log's record names it; the lease is looked at first, so that a stale holder's large
        // write commits nothing (the claim's check below is the one that counts).
        if let Some(value) = value.filter(|_| stored.get().is_none()) {
            if value.len() > INLINE_MAX {
                lease_holds()?;
                stored.set(LogUser::store_large(host, value, waiting)?);
            }
        }
        let blob = stored.get().map(|stored| stored.blob);
        let record = |version| match (value, blob) {
            (Some(_), Some(blob)) => Record::PutStored {
                key: key.to_vec(),
                blob,
                token,
                version,
            },
            (Some(value), None) => Record::Put {
                key: key.to_vec(),
                value: value.to_vec(),
                token,
                version,
            },
            (None, _) => Record::Delete {
                key: key.to_vec(),
                token,
                version,
            },
        };
        let existed = Cell::new(false);
        let mut check = |now: &Entry| -> Result<u64> {
            lease_holds()?;
            admit(token, Some(now.highest))?;
            // Only a delete says whether the key held a value (`Holder::delete`); a put's
            // answer is read by nobody, and here it would cost a read of the key's newest
            // record at every write.
            if value.is_none() {
                existed.set(self.holds_value(host, key, now, waiting)?);
            }
            Ok(token)
        };
        let outcome = self
            .claims(host.live(), deadline(waiting))
            .cancellable(waiting.cancel)
            .write(
                Space::Key,
                key,
                &mut || Ok(stored_key(host, key, waiting)?.0),
                record(0).encoded_len(),
                &mut check,
                &mut |lsn, version| {
                    // Made right before the claim's swap, so perhaps never written: erring
                    // toward keeping the stored value.
                    if let Some(blob) = blob {
                        stored.set(Some(Stored { blob, named: true }));
                    }
                    record(version).encode(lsn)
                },
            )?;
        self.done(host, outcome)?;
        Ok(existed.get())
    }

    /// Records `token` as the highest the fence `resource` accepted, fenced.
    pub(crate) fn fence<H: LogHost>(
        &self,
        host: &H,
        resource: &str,
        token: u64,
        waiting: Waiting<'_>,
    ) -> Result<()> {
        host.check_fork()?;
        host.check_file()?;
        check_granted(token, host.shared_last_token().unwrap_or(0))?;
        // A token equal to the recorded one passes without a write, as without the log.
        let recorded = self.fence_token(host, resource)?;
        admit(token, recorded)?;
        if recorded == Some(token) {
            return Ok(());
        }
        let record = |version| Record::Fence {
            resource: resource.to_owned(),
            token,
            version,
        };
        let outcome = self
            .claims(host.live(), deadline(waiting))
            .cancellable(waiting.cancel)
            .write(
                Space::Fence,
                resource.as_bytes(),
                &mut || stored_fence(host, resource, waiting),
                record(0).encoded_len(),
                &mut |now: &Entry| -> Result<u64> {
                    admit(token, Some(now.highest))?;
                    Ok(token)
                },
                &mut |lsn, version| record(version).encode(lsn),
            )?;
        self.done(host, outcome)
    }

    /// An acknowledged write counted and told, a checkpoint started when the log has grown
    /// enough; a refusal returned.
    fn done<H: LogHost>(&self, host: &H, outcome: Outcome<Error>) -> Result<()> {
        match outcome {
            Outcome::Acknowledged { .. } => {
                host.counters()
                    .commit(Some(crate::storage::commit::Committed {
                        ops: 1,
                        ends: crate::rules::history::Ends::default(),
                    }));
                let (end, checkpointed) = self.member.ring().log_positions();
                if end.saturating_sub(checkpointed) >= CHECKPOINT_EVERY * self.log.size() {
                    self.checkpoint_ahead(host);
                }
                Ok(())
            }
            Outcome::Refused(err) => Err(err),
        }
    }

    /// Whether `key`, whose settled entry is `now`, holds a value (not nothing, not a
    /// tombstone).
    fn holds_value<H: LogHost>(
        &self,
        host: &H,
        key: &[u8],
        now: &Entry,
        waiting: Waiting<'_>,
    ) -> Result<bool> {
        match self.newest(now)? {
            Some(Record::Put { .. } | Record::PutStored { .. }) => Ok(true),
            Some(Record::Delete { .. }) => Ok(false),
            Some(other) => Err(not_a_key(&other)),
            None => Ok(stored_key(host, key, waiting)?.1),
        }
    }

    /// The newest record of an entry, `None` when it is the store file's (its segment retired
    /// since: a checkpoint moved it there). A segment gone that no checkpoint passed is not the
    /// store file's to answer: this process's name of the log no longer reaches it (the store's
    /// directory was renamed or moved while in use), and the store file would answer an older
    /// write.
    fn newest(&self, entry: &Entry) -> Result<Option<Record>> {
        if entry.newest == IN_STORE {
            return Ok(None);
        }
        match self.log.read_record(entry.newest)? {
            None if entry.newest >= self.member.ring().log_checkpointed() => {
                Err(Error::Replaced(format!(
                    "{}: the log's segment holding position {} is gone from there, though no \
                     checkpoint passed it: the store or its directory was renamed or moved \
                     while in use; open it again by its name now",
                    self.log.path(entry.newest / self.log.size()).display(),
                    entry.newest
                )))
            }
            found => Ok(found),
        }
    }

    /// The value of `key`: its newest acknowledged write.
    pub(crate) fn get<H: LogHost>(&self, host: &H, key: &[u8]) -> Result<Option<Fenced>> {
        let claims = self.claims(host.live(), deadline(bounded(host)));
        if let Some(entry) = claims.read(Space::Key, key)? {
            match self.newest(&entry)? {
                Some(Record::Put { value, token, .. }) => return Ok(Some(Fenced { value, token })),
                Some(Record::PutStored { blob, token, .. }) => {
                    // Gone from `BLOBS`: a checkpoint moved it (or a newer value of the key)
                    // into the store file's value of the key since the entry was read.
                    if let Some(value) = stored_value(host, blob)? {
                        return Ok(Some(Fenced { value, token }));
                    }
                }
                Some(Record::Delete { .. }) => return Ok(None),
                Some(other) => return Err(not_a_key(&other)),
                None => {}
            }
        }
        host.router().value_of(host, key)
    }

    /// The keys under `prefix` that hold a value, without a checkpoint (a read-only store's,
    /// which cannot make one): the key index's newest records laid over the store file's list
    /// (`stored`). The index is read first: an entry that a checkpoint took out of it meanwhile
    /// was committed to the store file before, and the list read after has it.
    pub(crate) fn keys<H: LogHost>(
        &self,
        host: &H,
        prefix: &[u8],
        stored: impl FnOnce() -> Result<Vec<Vec<u8>>>,
    ) -> Result<Vec<Vec<u8>>> {
        let claims = self.claims(host.live(), deadline(bounded(host)));
        let mut newer = Vec::new();
        for key in keys::listed(self.member.ring(), Space::Key, prefix)? {
            let Some(entry) = claims.read(Space::Key, &key)? else {
                continue;
            };
            match self.newest(&entry)? {
                Some(Record::Put { .. } | Record::PutStored { .. }) => newer.push((key, true)),
                Some(Record::Delete { .. }) => newer.push((key, false)),
                Some(other) => return Err(not_a_key(&other)),
                // The store file's (its segment retired since).
                None => {}
            }
        }
        let mut keys: std::collections::BTreeSet<Vec<u8>> = stored()?.into_iter().collect();
        for (key, holds) in newer {
            if holds {
                keys.insert(key);
            } else {
                keys.remove(&key);
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// The highest token the fence `resource` accepted.
    pub(crate) fn fence_token<H: LogHost>(&self, host: &H, resource: &str) -> Result<Option<u64>> {
        let claims = self.claims(host.live(), deadline(bounded(host)));
        if let Some(entry) = claims.read(Space::Fence, resource.as_bytes())? {
            match self.newest(&entry)? {
                Some(Record::Fence { token, .. }) => return Ok(Some(token)),
                Some(other) => {
                    return Err(Error::Corrupt(format!(
                        "the fence {resource} points at a log record that is not a fence: \
                         {other:?}"
                    )))
                }
                None => {}
            }
        }
        host.router().fence_of(host, resource, bounded(host))
    }

    /// Moves every record the log holds durably into the store file, in one transaction of
    /// it (taken without waiting for a stopped holder past `waiting`), then settles the claims
    /// below, raises the checkpoint, takes the entries it moved out of the key index and
    /// retires the segments wholly below (docs/design/writes.md, section 6).
    pub(crate) fn checkpoint<H: LogHost>(&self, host: &H, waiting: Waiting<'_>) -> Result<()> {
        let db = host.database()?;
        let txn = begin_write(&db, waiting)?;
        let ring = self.member.ring();
        let live = host.live();
        let sync = self.sync(live);
        let flushed = sync.flushed();
        let from = applied_position(&txn.open_table(META)?)?;
        let end = if from < flushed {
            let scanned = scan(&self.log, from)?;
            let end = scanned.end.min(flushed).max(from);
            // The scan takes a whole record at its own position, and leaves out those the
            // skip records it read void. A mark still in the window says more: a skipper's
            // claim voids a record its late writer wrote all the same (its skip record may lie
            // past a hole the scan stops at). A mark the window moved on from is left to the
            // scan, as recovery leaves it (asking the log's skip records for each would read a
            // window of log per record).
            let mut records = Vec::with_capacity(scanned.records.len());
            for (lsn, record) in scanned.records {
                if lsn >= end {
                    continue;
                }
                let fate = match sync.fate(lsn) {
                    // A stored put is asked of the log itself: its value is removed from the
                    // store file once applied, and the write's record that counts (its writer
                    // wrote it again after the skip) must find it (`apply::stored_value`).
                    Fate::Unknown if matches!(record, Record::PutStored { .. }) => {
                        sync.fate_in_log(lsn)?
                    }
                    fate => fate,
                };
                if fate != Fate::Void {
                    records.push((lsn, record));
                }
            }
            apply(&txn, &records, end)?;
            txn.commit()?;
            end
        } else {
            drop(txn);
            from
        };
        // Every claim below the new checkpoint settles by its fate while the log still holds
        // it: a claim made below it later is void (`SegmentLog::skipped`).
        let claims = self.claims(live, deadline(waiting));
        for (space, key) in keys::pending_below(ring, end)? {
            claims.settle(space, &key)?;
        }
        sync.checkpointed(end);
        keys::prune(ring, live, self.member.id(), end)?;
        self.log.retire_below(end)
    }

    /// Starts a checkpoint in a thread of its own, unless one of this process's runs.
    fn checkpoint_ahead<H: LogHost>(&self, host: &H) {
        if self.checkpointing.swap(true, Ordering::AcqRel) {
            return;
        }
        let engine = host.arc();
        let spawned = std::thread::Builder::new()
            .name("fencelock-checkpoint".into())
            .spawn(move || {
                if let Some(user) = engine.log_user() {
                    let _ = user.checkpoint(&*engine, bounded(&*engine));
                    user.checkpointing.store(false, Ordering::Release);
                }
                // The store was closed meanwhile: its close found this thread holding the
                // engine, and left its last steps to whoever holds it last.
                if engine.handles_dropped() && Arc::strong_count(&engine) == 1 {
                    engine.last_user_gone();
                }
            });
        match spawned {
            Ok(thread) => *self.background.lock() = Some(thread),
            Err(_) => self.checkpointing.store(false, Ordering::Release),
        }
    }

    /// Waits for this process's background checkpoint, if one runs: the store's last handle
    /// does, so that the thread's hold on the engine ends and the close's last steps (the
    /// last checkpoint among them) are not skipped, nor cut short by the process's exit.
    pub(crate) fn finish_background(&self) {
        let thread = self.background.lock().take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// A write transaction of the store file, taken without waiting for a stopped holder of its
/// write lock past `waiting` (retried each millisecond).
fn begin_write(db: &Db, waiting: Waiting<'_>) -> Result<redb::WriteTransaction> {
    let database = db.writable()?;
    loop {
        match database.try_begin_write() {
            Ok(txn) => return Ok(txn),
            Err(redb::TransactionError::WouldBlock) => {
                waiting.step()?;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// Commits `value` (over the log's inline limit) to the store file's `BLOBS` under a new
/// random id, which the log's stored put then names.
fn store_value<H: LogHost>(host: &H, value: &[u8], waiting: Waiting<'_>) -> Result<u64> {
    let blob = crate::base::random_u64()?;
    let db = host.database()?;
    let txn = begin_write(&db, waiting)?;
    txn.open_table(BLOBS)?.insert(blob, value)?;
    txn.commit()?;
    Ok(blob)
}

/// Removes the stored value `blob` that no record names.
fn drop_value<H: LogHost>(host: &H, blob: u64, waiting: Waiting<'_>) -> Result<()> {
    let db = host.database()?;
    let txn = begin_write(&db, waiting)?;
    txn.open_table(BLOBS)?.remove(blob)?;
    txn.commit()?;
    Ok(())
}

/// The stored value `blob`, `None` once a checkpoint moved it into the key's value.
fn stored_value<H: LogHost>(host: &H, blob: u64) -> Result<Option<Vec<u8>>> {
    host.read_within(bounded(host), |txn: &ReadTransaction| {
        Ok(match opened(txn.open_table(BLOBS))? {
            Some(blobs) => blobs.get(blob)?.map(|value| value.value().to_vec()),
            None => None,
        })
    })
}

/// The deadline of `waiting`, for the claims.
fn deadline(waiting: Waiting<'_>) -> Instant {
    Instant::now() + Duration::from_nanos(waiting.deadline.saturating_sub(clock::now_ns()))
}

fn not_a_key(record: &Record) -> Error {
    Error::Corrupt(format!(
        "a key of the store points at a log record that is not a put or a delete: {record:?}"
    ))
}

/// `key` as the store file holds it: its entry (highest token, stored version, newest
/// [`IN_STORE`]), and whether it holds a value.
fn stored_key<H: LogHost>(host: &H, key: &[u8], waiting: Waiting<'_>) -> Result<(Entry, bool)> {
    host.read_within(waiting, |txn: &ReadTransaction| {
        let (highest, present) = match opened(txn.open_table(VALUES))? {
            Some(values) => match values.get(key)? {
                Some(record) => {
                    let (token, value) = decode_value(record.value())?;
                    (token, value.is_some())
                }
                None => (0, false),
            },
            None => (0, false),
        };
        let version = match opened(txn.open_table(VERSIONS))? {
            Some(versions) => versions.get(key)?.map_or(0, |v| v.value()),
            None => 0,
        };
        Ok((
            Entry {
                highest,
                before: highest,
                version,
                newest: IN_STORE,
                pending: None,
                voided: 0,
            },
            present,
        ))
    })
}

/// The fence `resource` as the store file holds it (a fence's state is its token: no
/// version is stored).
fn stored_fence<H: LogHost>(host: &H, resource: &str, waiting: Waiting<'_>) -> Result<Entry> {
    host.read_within(waiting, |txn: &ReadTransaction| {
        let highest = match opened(txn.open_table(FENCES))? {
            Some(fences) => fences.get(resource)?.map_or(0, |v| v.value()),
            None => 0,
        };
        Ok(Entry {
            highest,
            before: highest,
            version: 0,
            newest: IN_STORE,
            pending: None,
            voided: 0,
        })
    })
}

#[cfg(all(test, not(fencelock_loom)))]
mod tests {
    use std::time::Duration;

    use crate::{Error, Options, Store};

    /// The environment is the process's: a test that sets the segment size holds this, and
    /// so does every test that opens a store meanwhile.
    static ENV: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    fn logged() -> Options {
        Options {
            write_log: true,
            ..Options::default()
        }
    }

    /// A fresh store with the redo log, its path, and the directory that holds it (removed
    /// when dropped).
    fn logged_store() -> (tempfile::TempDir, std::path::PathBuf, Store) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        let store = Store::open_with(&path, &logged()).unwrap();
        (dir, path, store)
    }

    /// The segment files of the log of `store`.
    fn segments(store: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut prefix = store.file_name().unwrap().to_owned();
        prefix.push(".wal.");
        let prefix = prefix.into_string().unwrap();
        let mut found: Vec<_> = std::fs::read_dir(store.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .unwrap()
                    .to_str()
                    .is_some_and(|name| name.starts_with(&prefix))
            })
            .collect();
        found.sort();
        found
    }

    #[test]
    fn the_walkthrough_goes_through_the_log_and_a_stale_holder_is_refused() {
        let _env = ENV.lock();
        let (_dir, path, store) = logged_store();
        let a = store
            .acquire("payment-export", Duration::from_millis(50))
            .unwrap();
        a.put(b"export/batch", b"from A").unwrap();
        assert_eq!(
            store.get(b"export/batch").unwrap().unwrap().value,
            b"from A"
        );
        assert!(!segments(&path).is_empty(), "the write went to the log");
        std::thread::sleep(Duration::from_millis(80));
        let b = store
            .acquire("payment-export", Duration::from_secs(10))
            .unwrap();
        assert_eq!(b.token(), a.token() + 1);
        b.put(b"export/batch", b"from B").unwrap();
        let refused = a.put(b"export/batch", b"stale A").unwrap_err();
        assert!(
            matches!(refused, Error::LockLost { .. } | Error::StaleToken { .. }),
            "{refused:?}"
        );
        let got = store.get(b"export/batch").unwrap().unwrap();
        assert_eq!(
            (got.value.as_slice(), got.token),
            (&b"from B"[..], b.token())
        );
        // A lower token is refused at the store level too, and changes nothing.
        let lower = store.put(b"export/batch", b"lower", a.token()).unwrap_err();
        assert!(matches!(lower, Error::StaleToken { .. }), "{lower:?}");
        assert_eq!(
            store.get(b"export/batch").unwrap().unwrap().token,
            b.token()
        );
    }

    /// An acquire that writes, stopped between its grant and its write for longer than its
    /// TTL, as a process is by SIGSTOP: its grant was visible, so its write is not refused for
    /// the lease's expiry (the default path's transaction, stopped as long, commits too); it
    /// is fenced by the key alone, and a later grant's write still wins. Refused as stale,
    /// with its grant ended meanwhile, it is granted anew, or refused as `LockLost`.
    #[test]
    fn an_acquire_stopped_past_its_ttl_between_its_grant_and_its_write_is_granted_and_written() {
        use crate::local::lease_map::hooks::pause_before_write;
        let _env = ENV.lock();
        let (_dir, _path, store) = logged_store();
        let ttl = Duration::from_millis(40);
        let stop = move || std::thread::sleep(ttl * 3);
        let value = |key: &[u8]| {
            let got = store.get(key).unwrap().unwrap();
            (got.value, got.token)
        };

        // Nobody acquires meanwhile: granted and written, its lease expired.
        pause_before_write(stop);
        let a = store
            .acquire_and_put("export", ttl, b"batch", b"from A")
            .unwrap();
        assert_eq!(value(b"batch"), (b"from A".to_vec(), a.token()));
        let history = store.history("export").unwrap();
        assert!(
            history.iter().any(|entry| entry.token == a.token()),
            "{history:?}"
        );

        // Another holder takes the lock meanwhile and keeps it, writing nothing yet: the
        // stopped acquire's write lands with its lower token, and the later holder's write
        // then supersedes it; the stopped one's lease is lost.
        let (send, later) = std::sync::mpsc::channel();
        let other = store.clone();
        pause_before_write(move || {
            stop();
            send.send(other.acquire("export", Duration::from_secs(60)).unwrap())
                .unwrap();
        });
        let b = store
            .acquire_and_put("export", ttl, b"batch", b"from B")
            .unwrap();
        let c = later.recv().unwrap();
        assert_eq!(c.token(), b.token() + 1);
        assert_eq!(value(b"batch"), (b"from B".to_vec(), b.token()));
        c.put(b"batch", b"from C").unwrap();
        let refused = b.put(b"batch", b"stale B").unwrap_err();
        assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
        assert_eq!(value(b"batch"), (b"from C".to_vec(), c.token()));
        c.release().unwrap();

        // Another holder takes the lock and writes the key meanwhile, then lets it go: the
        // stopped write is refused as stale and gives its grant back, and the acquire is
        // granted anew, above that holder, and written.
        let other = store.clone();
        pause_before_write(move || {
            stop();
            let d = other.acquire("export", Duration::from_secs(60)).unwrap();
            d.put(b"batch", b"from D").unwrap();
            d.release().unwrap();
        });
        let e = store
            .acquire_and_put("export", ttl, b"batch", b"from E")
            .unwrap();
        assert_eq!(value(b"batch"), (b"from E".to_vec(), e.token()));
        assert_eq!(e.token(), c.token() + 3);
        e.release().unwrap();

        // Another holder takes the lock, writes the key meanwhile and keeps the lock: the
        // stopped write is refused as stale, its grant (which others may have been refused in
        // the name of) is gone, and the acquire is refused as having lost it, not as `Locked`
        // by a holder that came after it. Nothing of it is written.
        let other = store.clone();
        let (send, later) = std::sync::mpsc::channel();
        pause_before_write(move || {
            stop();
            let taker = other.acquire("export", Duration::from_secs(60)).unwrap();
            taker.put(b"batch", b"from G").unwrap();
            send.send(taker).unwrap();
        });
        let lost = store
            .acquire_and_put("export", ttl, b"batch", b"from F")
            .unwrap_err();
        let taker = later.recv().unwrap();
        match lost {
            Error::LockLost { token, current } => {
                assert_eq!((token, current), (e.token() + 1, Some(taker.token())));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(value(b"batch"), (b"from G".to_vec(), taker.token()));
        assert_eq!(store.locks().unwrap()[0].token, taker.token());
    }

    /// An acquire that writes, whose key another lock's holder writes with a higher token
    /// between its grant and its write: its write is refused as stale, and it is written again
    /// with a new token that its grant takes in place. The lock stays held throughout, so
    /// nobody is granted it between the two (others were refused in the first grant's name),
    /// and the acquire ends granted above the other write, its value written.
    #[test]
    fn an_acquire_whose_write_is_refused_as_stale_keeps_its_lock_while_granted_again() {
        use crate::local::lease_map::hooks::{pause_after_stale, pause_before_write};
        use std::cell::RefCell;
        use std::rc::Rc;
        let _env = ENV.lock();
        let (_dir, _path, store) = logged_store();
        let ttl = Duration::from_secs(60);
        // (the first grant's token as a refusal named it, the other writer's token)
        let seen = Rc::new(RefCell::new((None, 0)));

        let (other, wrote) = (store.clone(), Rc::clone(&seen));
        pause_before_write(move || {
            let refused = other.acquire("export", ttl).unwrap_err();
            if let Error::Locked { token, .. } = refused {
                wrote.borrow_mut().0 = Some(token);
            }
            let f = other.acquire("elsewhere", ttl).unwrap();
            f.put(b"batch", b"from F").unwrap();
            wrote.borrow_mut().1 = f.token();
            f.release().unwrap();
        });
        let (other, between) = (store.clone(), Rc::new(RefCell::new(None)));
        let taken = Rc::clone(&between);
        pause_after_stale(move || {
            *taken.borrow_mut() = Some(other.acquire("export", ttl).map(|h| h.token()));
        });
        let e = store
            .acquire_and_put("export", ttl, b"batch", b"from E")
            .unwrap();

        let (first, f) = *seen.borrow();
        let first = first.expect("refused in the first grant's name");
        match between.borrow_mut().take().expect("refused once as stale") {
            Err(Error::Locked { token, .. }) => assert_eq!(token, first),
            other => panic!("the lock was free between the grants: {other:?}"),
        }
        assert!(e.token() > f && f > first, "{} {f} {first}", e.token());
        let got = store.get(b"batch").unwrap().unwrap();
        assert_eq!(
            (got.value.as_slice(), got.token),
            (&b"from E"[..], e.token())
        );
        // The lock's history names the grant returned, not the one whose write was refused.
        e.release().unwrap();
        let history = store.history("export").unwrap();
        assert!(
            history.iter().any(|entry| entry.token == e.token()),
            "{history:?}"
        );
        assert!(
            history.iter().all(|entry| entry.token != first),
            "{history:?}"
        );
    }

    /// An acquire that writes, whose write is refused as stale and whose wait has run out by
    /// then, gives its grant back and fails with `Timeout`, not with a `StaleToken` that names
    /// a token it never returned (the torture run's finding, seed 41): nothing is written, and
    /// the lock is free.
    #[test]
    fn an_acquire_refused_as_stale_past_its_wait_times_out_and_writes_nothing() {
        use crate::local::lease_map::hooks::pause_before_write;
        let _env = ENV.lock();
        let dir = tempfile::tempdir().unwrap();
        let wait = Duration::from_millis(50);
        let options = Options {
            busy_timeout: wait,
            ..logged()
        };
        let store = Store::open_with(dir.path().join("store.redb"), &options).unwrap();
        let ttl = Duration::from_secs(60);
        let value = |store: &Store| {
            let got = store.get(b"batch").unwrap().unwrap();
            (got.value, got.token)
        };
        let free = |store: &Store| store.acquire("export", ttl).unwrap().release().unwrap();

        // Another lock's holder writes the key higher, and the wait runs out meanwhile.
        let other = store.clone();
        pause_before_write(move || {
            let f = other.acquire("elsewhere", ttl).unwrap();
            f.put(b"batch", b"from F").unwrap();
            f.release().unwrap();
            std::thread::sleep(wait * 2);
        });
        let late = store
            .acquire_and_put("export", ttl, b"batch", b"from E")
            .unwrap_err();
        assert!(matches!(late, Error::Timeout { .. }), "{late:?}");
        assert_eq!(value(&store).0, b"from F");
        free(&store);
    }

    #[test]
    fn keys_info_and_a_closed_store_read_alone_see_every_logged_write() {
        let _env = ENV.lock();
        let (_dir, path, store) = logged_store();
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        for i in 0..20u32 {
            holder
                .put(format!("k/{i:02}").as_bytes(), &i.to_le_bytes())
                .unwrap();
        }
        assert!(holder.delete(b"k/00").unwrap(), "k/00 held a value");
        assert!(!holder.delete(b"k/00").unwrap(), "deleted already");
        let fenced_at = holder.token();
        store.fence("printer", fenced_at).unwrap();
        assert_eq!(store.fence_token("printer").unwrap(), Some(holder.token()));
        let keys = store.keys(b"k/").unwrap();
        assert_eq!(keys.len(), 19, "every key but the deleted one: {keys:?}");
        assert_eq!(store.info().unwrap().keys, 19);
        store.verify().unwrap();
        holder.release().unwrap();
        drop(holder);
        drop(store);
        // Closed: the last user moved the log into the store file, which a read-only open
        // reads alone (it uses no log).
        let read = Store::open_with(
            &path,
            &Options {
                read_only: true,
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(
            read.get(b"k/07").unwrap().unwrap().value,
            7u32.to_le_bytes()
        );
        assert_eq!(read.get(b"k/00").unwrap(), None);
        assert_eq!(read.fence_token("printer").unwrap(), Some(fenced_at));
    }

    fn read_only() -> Options {
        Options {
            read_only: true,
            ..Options::default()
        }
    }

    #[test]
    fn a_read_only_store_reads_the_logs_writes_and_after_the_writers_close_so_does_a_new_one() {
        let _env = ENV.lock();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        {
            // A key in the store file, which the log then deletes.
            let store = Store::open(&path).unwrap();
            let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
            holder.put(b"old", b"from the file").unwrap();
        }
        // Open before any process of the ring turned the log on.
        let reader = Store::open_with(&path, &read_only()).unwrap();
        let store = Store::open_with(&path, &logged()).unwrap();
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        holder.put(b"kept", b"v1").unwrap();
        holder.put(b"gone", b"soon").unwrap();
        assert!(holder.delete(b"gone").unwrap());
        assert!(holder.delete(b"old").unwrap());
        store.fence("printer", holder.token()).unwrap();
        let seen = |reader: &Store| {
            (
                reader
                    .get(b"kept")
                    .unwrap()
                    .map(|got| (got.value, got.token)),
                reader.get(b"gone").unwrap(),
                reader.get(b"old").unwrap(),
                reader.fence_token("printer").unwrap(),
                reader.keys(b"").unwrap(),
            )
        };
        let written = (
            Some((b"v1".to_vec(), holder.token())),
            None,
            None,
            Some(holder.token()),
            vec![b"kept".to_vec()],
        );
        assert_eq!(seen(&reader), written, "right after the acknowledgements");
        // A read-only store writes nothing, through the log or not.
        let refused = reader.put(b"kept", b"v2", holder.token()).unwrap_err();
        assert!(matches!(refused, Error::InvalidArgument(_)), "{refused:?}");
        let refused = reader.fence("printer", holder.token() + 1).unwrap_err();
        assert!(matches!(refused, Error::InvalidArgument(_)), "{refused:?}");
        assert_eq!(seen(&reader), written);
        // The writer closes while the reader keeps the ring: it checkpoints all the same, so
        // the store file holds its writes for a read-only open that has no log to read.
        drop(holder);
        drop(store);
        assert_eq!(seen(&reader), written, "after the writer closed");
        drop(reader);
        let again = Store::open_with(&path, &read_only()).unwrap();
        assert_eq!(
            seen(&again),
            written,
            "a new read-only open of the closed store"
        );
    }

    /// How many values the store file at `path` holds in `BLOBS` (read by a read-only open of
    /// its own).
    fn stored_values(path: &std::path::Path) -> usize {
        let db =
            crate::storage::db::open_now(path, redb::ConcurrencyMode::MultiWriter, true).unwrap();
        let txn = db.begin_read().unwrap();
        super::opened(txn.open_table(super::BLOBS))
            .unwrap()
            .map_or(0, |table| {
                use redb::ReadableTable;
                table.iter().unwrap().count()
            })
    }

    #[test]
    fn values_over_the_inline_limit_are_stored_in_the_store_file_and_named_by_the_log() {
        let _env = ENV.lock();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        drop(Store::open(&path).unwrap());
        let reader = Store::open_with(&path, &read_only()).unwrap();
        let store = Store::open_with(&path, &logged()).unwrap();
        let earlier = store.acquire("earlier", Duration::from_secs(10)).unwrap();
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        let large = vec![0x5a; super::INLINE_MAX + 1];
        let larger = vec![0xa5; 4 << 20];
        holder.put(b"big", &large).unwrap();
        holder.put(b"bigger", &larger).unwrap();
        holder.put(b"small", b"inline").unwrap();
        for store in [&store, &reader] {
            assert_eq!(store.get(b"big").unwrap().unwrap().value, large);
            assert_eq!(store.get(b"bigger").unwrap().unwrap().value, larger);
        }
        // Replaced by a small value and back: each reads the newest.
        holder.put(b"big", b"now small").unwrap();
        assert_eq!(store.get(b"big").unwrap().unwrap().value, b"now small");
        holder.put(b"big", &larger).unwrap();
        assert_eq!(reader.get(b"big").unwrap().unwrap().value, larger);
        // A write refused as stale commits nothing that stays.
        let refused = store.put(b"big", &large, earlier.token()).unwrap_err();
        assert!(matches!(refused, Error::StaleToken { .. }), "{refused:?}");
        assert_eq!(store.get(b"big").unwrap().unwrap().value, larger);
        // An acquire that writes one commits it before its grant; one refused (the lock is
        // held) leaves nothing behind.
        let acquired = store
            .acquire_and_put("other", Duration::from_secs(10), b"acquired", &large)
            .unwrap();
        let got = reader.get(b"acquired").unwrap().unwrap();
        assert_eq!((got.value, got.token), (large.clone(), acquired.token()));
        let refused = store
            .acquire_and_put("other", Duration::from_secs(10), b"never", &large)
            .unwrap_err();
        assert!(matches!(refused, Error::Locked { .. }), "{refused:?}");
        assert_eq!(store.get(b"never").unwrap(), None);
        assert_eq!(
            stored_values(&path),
            4,
            "the four the log names, not the refused writes'"
        );
        // A checkpoint (keys runs one) moves them into the keys' values.
        assert_eq!(store.keys(b"").unwrap().len(), 4);
        assert_eq!(stored_values(&path), 0);
        assert_eq!(store.get(b"big").unwrap().unwrap().value, larger);
        drop((earlier, holder, acquired, store, reader));
        let again = Store::open_with(&path, &read_only()).unwrap();
        assert_eq!(again.get(b"bigger").unwrap().unwrap().value, larger);
        assert_eq!(again.get(b"big").unwrap().unwrap().value, larger);
    }

    #[test]
    fn a_store_whose_path_names_another_file_refuses_writes_through_the_log() {
        let _env = ENV.lock();
        let (dir, path, store) = logged_store();
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        holder.put(b"k", b"before").unwrap();
        std::fs::rename(&path, dir.path().join("moved.redb")).unwrap();
        let refused = holder.put(b"k", b"after").unwrap_err();
        assert!(matches!(refused, Error::Replaced { .. }), "{refused:?}");
        let refused = store.put(b"k", b"after", holder.token()).unwrap_err();
        assert!(matches!(refused, Error::Replaced { .. }), "{refused:?}");
        let refused = store.fence("printer", holder.token()).unwrap_err();
        assert!(matches!(refused, Error::Replaced { .. }), "{refused:?}");
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"before");
    }

    #[test]
    fn a_copy_of_a_closed_store_without_its_extended_attributes_opens_with_its_log() {
        let _env = ENV.lock();
        let (_dir, path, store) = logged_store();
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        holder.put(b"k", b"v").unwrap();
        drop(holder);
        drop(store);
        // `fs::copy` copies no extended attribute (the ring's nonce): the log's id is the
        // store file's own.
        let copy = tempfile::tempdir().unwrap();
        for file in std::iter::once(path.clone()).chain(segments(&path)) {
            let name = file.file_name().unwrap();
            std::fs::copy(&file, copy.path().join(name)).unwrap();
        }
        let copied = copy.path().join("store.redb");
        assert!(
            !segments(&copied).is_empty(),
            "the log's newest segment was copied"
        );
        let store = Store::open_with(&copied, &logged()).unwrap();
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        holder.put(b"k", b"w").unwrap();
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"w");
    }

    #[test]
    fn the_logs_segments_have_the_store_files_mode() {
        use std::os::unix::fs::PermissionsExt;
        let _env = ENV.lock();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        drop(Store::open(&path).unwrap());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let store = Store::open_with(&path, &logged()).unwrap();
        let holder = store.acquire("writer", Duration::from_secs(10)).unwrap();
        holder.put(b"k", b"v").unwrap();
        let found = segments(&path);
        assert!(!found.is_empty());
        for segment in found {
            let mode = std::fs::metadata(&segment).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o640, "{}", segment.display());
        }
    }

    #[test]
    fn a_write_log_store_crosses_segments_and_checkpoints_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        // 64 KiB segments (the environment is the process's: this test alone sets it, and
        // only its store's log reads it at open).
        let store = with_segment(|| Store::open_with(&path, &logged()).unwrap());
        let holder = store.acquire("writer", Duration::from_secs(30)).unwrap();
        let value = vec![7u8; 1000];
        for i in 0..600u32 {
            holder
                .put(format!("k/{}", i % 50).as_bytes(), &value)
                .unwrap();
        }
        // 600 records of about 1 KiB: nine segments of 64 KiB, checkpointed every two.
        let left = segments(&path).len();
        assert!(left <= 6, "the checkpoints retired segments: {left} left");
        assert_eq!(store.keys(b"k/").unwrap().len(), 50);
        assert_eq!(store.get(b"k/3").unwrap().unwrap().value, value);
    }

    fn with_segment<T>(f: impl FnOnce() -> T) -> T {
        let _env = ENV.lock();
        std::env::set_var(super::SEGMENT_VAR, "65536");
        let result = f();
        std::env::remove_var(super::SEGMENT_VAR);
        result
    }
}
