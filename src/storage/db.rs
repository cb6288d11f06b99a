//! The database handle: opening the redb file (writable or read-only, bounded by the busy
//! timeout), the tables and the schema, and turning redb's panics on damaged pages into errors.

use std::path::Path;

use redb::{ConcurrencyMode, Database, ReadableDatabase, ReadableTable};

use crate::base::cancel::Waiting;
use crate::base::error::{Error, Result};
use crate::rules::tables::{COUNTER_KEY, FENCES, LEASES, META, RESERVED_KEY, SCHEMA_KEY, VALUES};
use crate::rules::tokens::read_counter;
use crate::storage::liveness::Liveness;

/// Schema version of the tables this library writes. Version 2 added the liveness id to lease
/// records; version 3 added the records of names with several holders (semaphores and shared
/// locks, record format 3); version 4 keeps the leases of multi-process stores in shared memory
/// (and their tokens bounded by a durable reservation), not in the leases table; version 5 may
/// keep acknowledged writes in a redo log beside the file (`Options::write_log`) until a
/// checkpoint moves them in, which a library of version 4 would not read: after a crash it would
/// show older values and fences than were acknowledged, and grant beside them. A store of an
/// older version is upgraded when it is opened for writing (its records are read as they are),
/// after which libraries that know only the older version refuse to open it rather than meet
/// records they cannot read.
pub const SCHEMA_VERSION: u64 = 5;

/// The error for a panic of the storage engine, which it raises on some forms of damage.
#[allow(clippy::needless_pass_by_value)] // the shape `unwrap_or_else` gives a panic's message
pub(crate) fn damaged<T>(panic: String) -> Result<T> {
    Err(damage(&panic))
}

fn damage(panic: &str) -> Error {
    Error::Corrupt(format!(
        "the storage engine failed on a damaged page ({panic})"
    ))
}

/// An open database: writable, or read-only.
pub(crate) enum Db {
    Writable(Database),
    ReadOnly(redb::ReadOnlyDatabase),
}

impl Db {
    pub(crate) fn begin_read(&self) -> Result<redb::ReadTransaction> {
        Ok(match self {
            Db::Writable(db) => db.begin_read()?,
            Db::ReadOnly(db) => db.begin_read()?,
        })
    }

    /// The database for a write; refused on a read-only store.
    pub(crate) fn writable(&self) -> Result<&Database> {
        match self {
            Db::Writable(db) => Ok(db),
            Db::ReadOnly(_) => Err(read_only()),
        }
    }
}

/// The refusal of a write on a read-only store.
pub(crate) fn read_only() -> Error {
    Error::invalid(
        "the store was opened read-only (Options::read_only): it grants and writes nothing",
    )
}

/// Opens the database at `path` in this thread, without waiting for other processes.
pub(crate) fn open_now(path: &Path, mode: ConcurrencyMode, read_only: bool) -> Result<Db> {
    let existing = crate::storage::file::is_existing_database(path, !read_only)?;
    open_known(path, mode, read_only, existing)
}

/// Opens the database at `path`, which holds a redb database if `existing`.
fn open_known(path: &Path, mode: ConcurrencyMode, read_only: bool, existing: bool) -> Result<Db> {
    let builder = redb_builder(mode);
    if !read_only {
        if !existing {
            // Created here rather than by redb, with the mode of `open_or_create`.
            drop(crate::storage::mode::open_or_create(path)?);
        }
        return crate::base::quiet::catch(|| {
            open_database(
                &builder,
                path,
                existing,
                mode == ConcurrencyMode::ExclusiveWriter,
            )
            .map(Db::Writable)
        })
        .unwrap_or_else(damaged);
    }
    if !existing {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no store at {} to open read-only", path.display()),
        )));
    }
    crate::base::quiet::catch(|| {
        let db = match builder.open_read_only(path) {
            // A crash left the file needing the repair that only a writable open performs (no
            // live writer would do it): it is repaired, and the read-only open tried again.
            // redb marks the file for it while any process has it open to write, not only
            // inside a commit: any such process that dies leaves it.
            Err(redb::DatabaseError::RepairAborted) => {
                match open_database(&builder, path, true, false) {
                    Err(Error::Io(err))
                        if matches!(
                            err.kind(),
                            std::io::ErrorKind::PermissionDenied
                                | std::io::ErrorKind::ReadOnlyFilesystem
                        ) =>
                    {
                        let why = if err.kind() == std::io::ErrorKind::PermissionDenied {
                            "this user may only read it, and can once a user who may write it \
                             has opened it"
                        } else {
                            "its file system is read-only: open it once where it may be \
                             written (remounted, or a copy of it and of its NAME.wal.* files, \
                             under their own names, in one directory)"
                        };
                        return Err(Error::Io(std::io::Error::new(
                            err.kind(),
                            format!(
                                "{} needs the repair that follows the death of a process that \
                                 had it open to write (one killed, say), which only an open \
                                 that may write the store makes: {why}",
                                path.display()
                            ),
                        )));
                    }
                    other => drop(other?),
                }
                builder.open_read_only(path)?
            }
            other => other?,
        };
        match check_schema(&db)? {
            Some(_) => Ok(Db::ReadOnly(db)),
            None => Err(Error::NotAStore(format!(
                "{} holds no fencelock tables yet",
                path.display()
            ))),
        }
    })
    .unwrap_or_else(damaged)
}

/// Opens the database at `path` in multi-process mode within `waiting`.
///
/// The look at what the file holds is serialized with other opens, so that no open mistakes a
/// file another process is creating right now (not yet holding redb's header) for a foreign
/// file, and the creation of a new store stays serialized to its end. An open of an existing
/// database lets the other opens go on. redb's writable open then waits, with no timeout, for
/// the write lock, which a process paused inside a commit holds indefinitely; so the open runs
/// in a thread of its own, and the caller stops waiting for it at the deadline or on
/// cancellation. An open given up on finishes in its thread once the other process moves on,
/// and closes the database again.
pub(crate) fn open_shared(path: &Path, read_only: bool, waiting: Waiting<'_>) -> Result<Db> {
    let opening =
        Liveness::lock_for_open(path, read_only, || waiting.step())?.ok_or(Error::InUse)?;
    let existing = crate::storage::file::is_existing_database(path, !read_only)?;
    let creating = (!existing).then_some(opening);
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    let owned = path.to_owned();
    let thread = std::thread::Builder::new()
        .name("fencelock-open".into())
        .spawn(move || {
            let result = open_known(&owned, ConcurrencyMode::MultiWriter, read_only, existing);
            drop(creating);
            // A caller that gave up is gone; the database then closes here.
            let _ = sender.send(result);
        })?;
    loop {
        match receiver.recv_timeout(crate::base::cancel::POLL) {
            Ok(result) => {
                // It has nothing left to do; joined so that no thread of ours outlives the open.
                let _ = thread.join();
                return result;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => waiting.step()?,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::Storage("the open ended without a result".into()))
            }
        }
    }
}

pub(crate) fn redb_builder(mode: ConcurrencyMode) -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(mode);
    // The value cache is for reads of this process; leases and values are small.
    builder.set_cache_size(64 << 20);
    builder
}

/// Opens the database at `path` and checks (or, for a new file, creates) the schema.
pub(crate) fn open_database(
    builder: &redb::Builder,
    path: &Path,
    existing: bool,
    restore: bool,
) -> Result<Database> {
    open_database_with(
        existing,
        restore,
        || builder.open_read_only(path),
        || builder.create(path),
    )
}

/// As [`open_database`], with `open_read_only` and `create` opening the database (through a
/// backend of their own). With `restore`, moves the counter past the durable reservation (see
/// [`restore_counter`]): for a store whose grants write the counter (single-process mode), not
/// one whose tokens come from its shared memory (multi-process mode), whose reservation is
/// not the last token.
pub(crate) fn open_database_with(
    existing: bool,
    restore: bool,
    open_read_only: impl FnOnce() -> std::result::Result<redb::ReadOnlyDatabase, redb::DatabaseError>,
    create: impl FnOnce() -> std::result::Result<Database, redb::DatabaseError>,
) -> Result<Database> {
    if existing {
        // A writable open may write redb's header, so another program's database is recognized
        // through a read-only open first and left as it was.
        match open_read_only() {
            Ok(db) => {
                check_schema(&db)?;
            }
            // A store left by a crash needs the repair that the writable open performs; its
            // schema is checked after that.
            Err(redb::DatabaseError::RepairAborted) => {}
            Err(err) => return Err(err.into()),
        }
    }
    let db = create()?;
    // Caught here, while `db` is still this frame's: a panic on a damaged page must not drop the
    // database as it unwinds, since redb's close may panic on the same page, and a panic while
    // unwinding aborts the process.
    let checked = crate::base::quiet::catch(|| {
        match check_schema(&db)? {
            None => initialize(&db)?,
            Some(found) if found < SCHEMA_VERSION => upgrade(&db)?,
            Some(_) => {}
        }
        if restore {
            restore_counter(&db)?;
        }
        Ok(())
    });
    let failure = match checked {
        Ok(Ok(())) => return Ok(db),
        Ok(Err(err)) => err,
        Err(panic) => damage(&panic),
    };
    let _ = crate::base::quiet::catch(move || drop(db));
    Err(failure)
}

/// The schema version of a fencelock store, `None` for a database with no tables yet (a new
/// file), or an error for another program's database or a newer schema.
pub(crate) fn check_schema(db: &impl ReadableDatabase) -> Result<Option<u64>> {
    let txn = db.begin_read()?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return if txn.list_tables()?.next().is_some() {
                Err(Error::NotAStore(
                    "a redb database of another program".into(),
                ))
            } else {
                Ok(None)
            };
        }
        Err(err) => return Err(err.into()),
    };
    match meta.get(SCHEMA_KEY)?.map(|v| v.value()) {
        None => Err(Error::NotAStore("no fencelock schema version".into())),
        Some(found) if found > SCHEMA_VERSION => Err(Error::IncompatibleVersion {
            found,
            supported: SCHEMA_VERSION,
        }),
        Some(found) => Ok(Some(found)),
    }
}

/// Moves a store to the current schema version, in one transaction. Versions 1 and 2 differ
/// only in the lease records, which are read in every format, so only the version changes.
fn upgrade(db: &Database) -> Result<()> {
    let txn = db.begin_write()?;
    let mut meta = txn.open_table(META)?;
    // Another process may have upgraded it since the check.
    if meta
        .get(SCHEMA_KEY)?
        .is_some_and(|v| v.value() < SCHEMA_VERSION)
    {
        meta.insert(SCHEMA_KEY, SCHEMA_VERSION)?;
    }
    drop(meta);
    txn.commit()?;
    Ok(())
}

/// Creates the tables of a new store. Another process may race to do the same; write
/// transactions are serialized, so the second finds the schema and leaves it.
pub(crate) fn initialize(db: &Database) -> Result<()> {
    let txn = db.begin_write()?;
    let mut meta = txn.open_table(META)?;
    if meta.get(SCHEMA_KEY)?.is_none() {
        meta.insert(SCHEMA_KEY, SCHEMA_VERSION)?;
        meta.insert(COUNTER_KEY, 0)?;
    }
    drop(meta);
    txn.open_table(LEASES)?;
    txn.open_table(VALUES)?;
    txn.open_table(FENCES)?;
    txn.commit()?;
    Ok(())
}

/// After a crash in single-process mode the counter may be older than tokens handed out; they
/// are all at most the durable reservation, so the counter moves up to it.
pub(crate) fn restore_counter(db: &Database) -> Result<()> {
    {
        let txn = db.begin_read()?;
        let meta = txn.open_table(META)?;
        if meta.get(RESERVED_KEY)?.map_or(0, |v| v.value()) <= read_counter(&meta)? {
            return Ok(());
        }
    }
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        let reserved = meta.get(RESERVED_KEY)?.map_or(0, |v| v.value());
        if reserved <= read_counter(&meta)? {
            drop(meta);
            txn.abort()?;
            return Ok(());
        }
        meta.insert(COUNTER_KEY, reserved)?;
    }
    txn.commit()?;
    Ok(())
}
