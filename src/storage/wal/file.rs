//! The segment files of the log: `STORE.wal.<seq>` (`seq` in 16 hex digits, so that names
//! sort), each a header block and then `size` bytes of log, written once with zeros when the
//! segment is created and afterwards only written in place, so that its size and its blocks
//! never change and `fdatasync` is a data-only sync. Position (LSN) `lsn` lives in segment
//! `lsn / size` at `HEADER_BLOCK + lsn % size`.
//!
//! Header (the first [`HEADER_BLOCK`] bytes, written once, at creation; zeros after the fields):
//!
//! ```text
//! [magic 8: "fencelog"][format u32][header length u32][store id u64][segment size u64][seq u64][crc32c u32]
//! ```
//!
//! The checksum covers the 40 bytes before it.
//!
//! **Created whole, retired by unlink, never reused** (docs/design/writes.md, "Why segments, not
//! a ring in place"). A segment is written whole under a temporary name beside it, synced,
//! linked to its name (refused when the name exists: two creators cannot replace each other's
//! segment, so [`SegmentLog::prepare`] is idempotent across processes) and the directory
//! synced: a segment is at its name whole, or not at all. Segments are only created above the
//! newest one that exists (those between are created too, so the sequence has no gap), and
//! [`SegmentLog::retire_below`] never unlinks the newest: so a name that is missing below the
//! newest was retired, and is never made again. A writer stopped between its reservation and
//! its `pwrite` then either writes through its still-open descriptor into an unlinked inode,
//! which no one reads, or finds its segment gone and is refused ([`LogError::Retired`]); while
//! its segment is still linked, its late bytes land only on its own reservation, which a skip
//! record already voids.
//!
//! The log's first segment is made by whoever sets the log up (recovery: [`SegmentLog::prepare`]
//! of the segment of the scan's end), before any writer reserves: a log with no segment at all
//! makes only the segment asked for, as it cannot tell which below were retired.
//!
//! Each handle keeps the descriptors of the segments it opened, by `seq`; those of retired
//! segments are dropped when this handle retires them or lists the directory and finds them
//! gone.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::base::error::{Error, Result};
use crate::base::owner;
use crate::storage::wal::crc;
use crate::storage::wal::record::{self, Frame, Record, ALIGN, HEADER, MIN_RECORD};
use crate::storage::wal::Segments;

/// The header block's length: a segment's log bytes start after it.
pub(crate) const HEADER_BLOCK: u64 = 4096;
/// [`HEADER_BLOCK`] as a length in memory.
pub(crate) const HEADER_BYTES: usize = 4096;
/// The segment size unless the caller asks for another.
pub(crate) const DEFAULT_SIZE: u64 = 16 << 20;
/// The smallest segment (tests use small ones); sizes are multiples of it.
pub(crate) const MIN_SIZE: u64 = 4096;
/// The largest segment.
pub(crate) const MAX_SIZE: u64 = 1 << 40;
/// The format this code writes, and the newest it reads (1 was the ring in one file, which
/// this code does not read: no store ever wrote one).
pub(crate) const FORMAT: u32 = 2;
const MAGIC: [u8; 8] = *b"fencelog";
/// The header's fields, before their checksum.
const FIELDS: usize = 40;
/// The digits of a segment's `seq` in its name.
const SEQ_DIGITS: usize = 16;

/// Why a segment could not be opened, created or written.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum LogError {
    /// The file does not start with the log's magic: another program's file.
    NotALog { path: PathBuf },
    /// The magic is there but the header's checksum does not match, or its fields are not
    /// ones this code writes.
    DamagedHeader { path: PathBuf },
    /// A segment of another store's log (the id the caller gave is not the header's).
    OtherStore {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    /// The header states another segment size than the caller asked for.
    OtherSize {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    /// The header states another `seq` than the segment's name: a file copied or renamed.
    OtherSeq {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    /// Written by a newer version of fencelock, in a format this one does not read.
    NewerFormat { path: PathBuf, found: u32 },
    /// The file is shorter than its header and the segment it states.
    Short { path: PathBuf, len: u64, needs: u64 },
    /// A segment size this code does not make.
    BadSize { path: PathBuf, size: u64 },
    /// A write into a segment that was retired (a newer one exists and this one is gone): the
    /// writer came too late, and its write does not happen.
    Retired { path: PathBuf },
    /// The system refused an operation on the file.
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::NotALog { path } => {
                write!(f, "{}: not a fencelock log (no log header)", path.display())
            }
            LogError::DamagedHeader { path } => write!(
                f,
                "{}: the log segment's header is damaged (its checksum does not match)",
                path.display()
            ),
            LogError::OtherStore {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: a log segment of another store (id {found:#018x}, this store's is \
                 {expected:#018x}), one that had this name before it was deleted, renamed or \
                 restored over; remove the file once that store needs it no more (every \
                 process that used it closed it, or it is gone)",
                path.display()
            ),
            LogError::OtherSize {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: the log segment holds {found} bytes of log, not the {expected} asked for",
                path.display()
            ),
            LogError::OtherSeq {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: the log segment's header says it is segment {found:#x}, its name {expected:#x} \
                 (copied or renamed)",
                path.display()
            ),
            LogError::NewerFormat { path, found } => write!(
                f,
                "{}: the log is of format {found}, newer than this version reads ({FORMAT})",
                path.display()
            ),
            LogError::Short { path, len, needs } => write!(
                f,
                "{}: the log segment is cut short: {len} bytes, its header and log need {needs}",
                path.display()
            ),
            LogError::BadSize { path, size } => write!(
                f,
                "{}: a log segment of {size} bytes is not a multiple of {MIN_SIZE} from \
                 {MIN_SIZE} to {MAX_SIZE}",
                path.display()
            ),
            LogError::Retired { path } => write!(
                f,
                "{}: the log segment was retired (checkpointed and removed): a write there \
                 came too late and did not happen",
                path.display()
            ),
            LogError::Io { path, op, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<LogError> for Error {
    fn from(err: LogError) -> Error {
        match err {
            LogError::NotALog { .. } | LogError::OtherStore { .. } => {
                Error::NotAStore(err.to_string())
            }
            LogError::NewerFormat { found, .. } => Error::IncompatibleVersion {
                found: u64::from(found),
                supported: u64::from(FORMAT),
            },
            LogError::BadSize { .. } => Error::InvalidArgument(err.to_string()),
            // As a write whose reservation was skipped (ring/flush.rs `written`): it did not
            // happen.
            LogError::Retired { .. } => Error::timed_out(),
            LogError::Io { path, op, source } => Error::Io(source).at_path(op, &path),
            LogError::DamagedHeader { .. }
            | LogError::Short { .. }
            | LogError::OtherSize { .. }
            | LogError::OtherSeq { .. } => Error::Corrupt(err.to_string()),
        }
    }
}

/// What the log needs of a segment file: positional reads and writes, its length and a
/// data-only sync. `std::fs::File` in the store; a recorder in the crash tests.
pub(crate) trait LogIo {
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    fn read_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()>;
    fn sync_data(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
}

impl LogIo for File {
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(bytes, offset)
    }

    fn read_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_exact_at(bytes, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// What the log needs of the directory its segments live in: the real one ([`Disk`]), or a
/// recorder in the crash tests, which builds from what it saw every image a power loss may
/// leave.
pub(crate) trait LogDir {
    type File: LogIo;
    /// Opens the file at `path` for reading and writing; an error of kind `NotFound` when
    /// there is none.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// Makes the file at `path` whole, or not at all: `header`, then zeros up to `len` bytes,
    /// written under a temporary name, synced, linked to `path` (`AlreadyExists` when there is
    /// a file there already, which is kept) and the directory synced.
    fn create(&self, path: &Path, header: &[u8], len: u64) -> io::Result<()>;
    /// Unlinks each of `paths`, then syncs the directory.
    fn remove(&self, paths: &[PathBuf]) -> io::Result<()>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// What is done with `file`, opened at `path`, once its header showed it a segment of this
    /// log (nothing, but on the disk).
    fn checked(&self, _path: &Path, _file: &Self::File) -> io::Result<()> {
        Ok(())
    }
    /// Makes the names in `dir` durable (`fsync` of the directory). A directory whose
    /// creations and removals are durable at once (the crash tests' recorder) has nothing to do.
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

/// The file system.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Disk;

/// A temporary name unique among the creators of this process (threads) and of others (pids).
static CREATING: AtomicU64 = AtomicU64::new(0);

/// The metadata of the store file whose log segment is `segment` (`STORE.wal.<seq>`), `None`
/// when there is none.
fn store_of(segment: &Path) -> io::Result<Option<fs::Metadata>> {
    // `STORE.wal.<seq>` without its last two extensions.
    match fs::metadata(segment.with_extension("").with_extension("")) {
        Ok(meta) => Ok(Some(meta)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Opens the segment at `path`, for writing too with `write`: never through a symbolic link,
/// and only a regular file that a user who may write the store made
/// ([`owner::made_by_a_writer_in`]). Anyone may make files in a shared directory such as `/tmp`,
/// and a user who may read the store may copy a segment's bytes: a segment planted by such a
/// user would let it forge records, or read the values written into it. Opened without
/// waiting (a FIFO at the name would hold an open for reading until someone writes it).
fn open_segment(path: &Path, write: bool) -> io::Result<File> {
    let opened = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let Some(store) = store_of(path)? else {
        return opened;
    };
    let file = match opened {
        Ok(file) => file,
        // ELOOP for a symbolic link (or EACCES where the kernel protects them in sticky
        // directories), EISDIR for a directory opened to write.
        Err(err) => {
            return Err(match fs::symlink_metadata(path) {
                Ok(found) if !found.file_type().is_file() => owner::planted(path, &found, &store),
                _ => err,
            })
        }
    };
    let found = file.metadata()?;
    let dir = fs::metadata(parent(path))?;
    if !found.file_type().is_file() || !owner::made_by_a_writer_in(&found, &store, &dir) {
        return Err(owner::planted(path, &found, &store));
    }
    // A regular file's reads and writes ignore the flag; cleared all the same.
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)?;
    Ok(file)
}

/// Gives the segment `file`, of this store's log (its header checked), the store's owner, group
/// and mode (`store`, read just before) again where a `chmod` or `chgrp` of the store changed
/// them since the segment was made (the newest segment stays beside a closed store), so that
/// the users the store now trusts may open it: when this process may (it owns the segment, or
/// is root). A segment it may not change stays as it is until its owner or root opens the
/// store; so does one whose store is narrowed while this runs, until the next such open.
fn follow_the_store(file: &File, store: &fs::Metadata) -> io::Result<()> {
    let found = file.metadata()?;
    let me = rustix::process::geteuid();
    if !me.is_root() && me.as_raw() != found.uid() {
        return Ok(());
    }
    let mode = store.mode() & 0o777;
    if found.mode() & 0o777 == mode
        && found.gid() == store.gid()
        && (!me.is_root() || found.uid() == store.uid())
    {
        return Ok(());
    }
    owner::take_the_stores(file, store, mode)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl LogDir for Disk {
    type File = File;

    fn open(&self, path: &Path) -> io::Result<File> {
        open_segment(path, true)
    }

    // Only once the header showed it this log's: a segment of another store's log at the name
    // (a deleted store's) is refused as it is, never given this store's mode.
    fn checked(&self, path: &Path, file: &File) -> io::Result<()> {
        match store_of(path)? {
            Some(store) => follow_the_store(file, &store),
            None => Ok(()),
        }
    }

    fn create(&self, path: &Path, header: &[u8], len: u64) -> io::Result<()> {
        let mut temporary = path.as_os_str().to_owned();
        // Relaxed: a counter for a unique name, nothing else hangs on it.
        let n = CREATING.fetch_add(1, Ordering::Relaxed);
        // And a random part: another user who may make files here could make a name it
        // foresees (the pid is public, the counter starts at 0) first.
        let random = crate::base::random_u64()?;
        temporary.push(format!(
            ".creating-{}-{n}-{random:016x}",
            std::process::id()
        ));
        let temporary = PathBuf::from(temporary);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(|err| match err.kind() {
                // Not the segment's name taken (another creator linked it first), which is
                // what `AlreadyExists` tells the caller; and not removed, being another's.
                io::ErrorKind::AlreadyExists => io::Error::other(format!(
                    "{}: another file has this temporary name",
                    temporary.display()
                )),
                _ => err,
            })?;
        let made = (|| {
            // Readable and writable by those who may read and write the store, and no one
            // else: the store file's mode, owner and group (a log holds its values); the
            // owner's alone without a store file (the log's own tests).
            if let Some(store) = store_of(path)? {
                owner::take_the_stores(&file, &store, store.mode() & 0o777)?;
                // A segment every process would refuse (a member of the store's group, in a
                // directory where anyone's files get that group) is not made: its name would
                // stop the store until root removed it.
                let dir = fs::metadata(parent(path))?;
                if !owner::made_by_a_writer_in(&file.metadata()?, &store, &dir) {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{}: in this directory (mode {:o}) only segments of the store's \
                             owner or root are used, and this user is neither",
                            path.display(),
                            dir.mode() & 0o7777
                        ),
                    ));
                }
            }
            // Real zeros, not a hole or fallocate's unwritten extents: the first write to
            // either changes the file's block map, and its sync would then be a metadata sync.
            let chunk = vec![0u8; usize::try_from(len.min(1 << 20)).expect("1 MiB")];
            let mut at = 0;
            while at < len {
                let n = (len - at).min(chunk.len() as u64);
                file.write_all_at(&chunk[..usize::try_from(n).expect("1 MiB")], at)?;
                at += n;
            }
            file.write_all_at(header, 0)?;
            file.sync_data()?;
            fs::hard_link(&temporary, path)
        })();
        // The temporary name goes in every case; the file stays under `path` once linked.
        let _ = fs::remove_file(&temporary);
        made?;
        sync_dir(parent(path))
    }

    fn remove(&self, paths: &[PathBuf]) -> io::Result<()> {
        // Each one tried, whatever the others do (one another user made, in a sticky
        // directory, may not be removed by this user); the first failure is the answer.
        let mut failed = None;
        for path in paths {
            match fs::remove_file(path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => {
                    failed.get_or_insert(io::Error::new(
                        err.kind(),
                        format!("{}: {err}", path.display()),
                    ));
                }
                _ => {}
            }
        }
        if let Some(path) = paths.first() {
            sync_dir(parent(path))?;
        }
        failed.map_or(Ok(()), Err)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        fs::read_dir(dir)?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }
}

/// The file system, for a reader of a log it may not write (a read-only store's, on a file
/// system that may be mounted read-only): segments opened for reading; it makes and removes
/// none.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadDisk;

impl LogDir for ReadDisk {
    type File = File;

    fn open(&self, path: &Path) -> io::Result<File> {
        open_segment(path, false)
    }

    fn create(&self, path: &Path, _header: &[u8], _len: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{}: a reader of the log makes no segment", path.display()),
        ))
    }

    fn remove(&self, paths: &[PathBuf]) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{paths:?}: a reader of the log removes no segment"),
        ))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        Disk.list(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match sync_dir(dir) {
            // Nothing there changes: what it holds is as durable as it will be.
            Err(err) if err.kind() == io::ErrorKind::ReadOnlyFilesystem => Ok(()),
            other => other,
        }
    }
}

/// The error of `op` on `path`, as a function of the system's.
fn io_err(path: PathBuf, op: &'static str) -> impl FnOnce(io::Error) -> LogError {
    move |source| LogError::Io { path, op, source }
}

/// The directory of `path`.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

fn check_size(path: &Path, size: u64) -> std::result::Result<(), LogError> {
    if size % MIN_SIZE != 0 || !(MIN_SIZE..=MAX_SIZE).contains(&size) {
        return Err(LogError::BadSize {
            path: path.to_owned(),
            size,
        });
    }
    Ok(())
}

fn header(id: u64, size: u64, seq: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_BYTES);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&FORMAT.to_le_bytes());
    header.extend_from_slice(&u32::try_from(HEADER_BLOCK).expect("4096").to_le_bytes());
    header.extend_from_slice(&id.to_le_bytes());
    header.extend_from_slice(&size.to_le_bytes());
    header.extend_from_slice(&seq.to_le_bytes());
    let crc = crc::crc32c(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    header.resize(HEADER_BYTES, 0);
    header
}

/// Checks a segment's header, `head` (the file's first bytes, up to [`HEADER_BLOCK`]), of a
/// file of `len` bytes, against the store's `id`, the segment `size` and the `seq` of its name.
fn check_header(
    path: &Path,
    head: &[u8],
    id: u64,
    size: u64,
    seq: u64,
    len: u64,
) -> std::result::Result<(), LogError> {
    let path = || path.to_owned();
    if head.get(..8) != Some(MAGIC.as_slice()) {
        return Err(LogError::NotALog { path: path() });
    }
    let Some(fields) = head.get(..FIELDS + 4) else {
        return Err(LogError::Short {
            path: path(),
            len,
            needs: HEADER_BLOCK,
        });
    };
    let u32_at = |at: usize| u32::from_le_bytes(fields[at..at + 4].try_into().expect("4"));
    let u64_at = |at: usize| u64::from_le_bytes(fields[at..at + 8].try_into().expect("8"));
    // The format first: a newer one may lay out the rest differently.
    let format = u32_at(8);
    if format > FORMAT {
        return Err(LogError::NewerFormat {
            path: path(),
            found: format,
        });
    }
    if crc::crc32c(&fields[..FIELDS]) != u32_at(FIELDS)
        || format != FORMAT
        || u64::from(u32_at(12)) != HEADER_BLOCK
    {
        return Err(LogError::DamagedHeader { path: path() });
    }
    let found_id = u64_at(16);
    if found_id != id {
        return Err(LogError::OtherStore {
            path: path(),
            expected: id,
            found: found_id,
        });
    }
    let found_size = u64_at(24);
    check_size(&path(), found_size).map_err(|_| LogError::DamagedHeader { path: path() })?;
    if found_size != size {
        return Err(LogError::OtherSize {
            path: path(),
            expected: size,
            found: found_size,
        });
    }
    let found_seq = u64_at(32);
    if found_seq != seq {
        return Err(LogError::OtherSeq {
            path: path(),
            expected: seq,
            found: found_seq,
        });
    }
    if len < HEADER_BLOCK + size {
        return Err(LogError::Short {
            path: path(),
            len,
            needs: HEADER_BLOCK + size,
        });
    }
    Ok(())
}

/// The log of one store: its segments `BASE.<seq>`, through one handle per process (or per
/// thread: every method takes `&self`).
pub(crate) struct SegmentLog<D: LogDir = Disk> {
    dir: D,
    /// `STORE.wal`: a segment's name is this and `.<seq>`.
    base: PathBuf,
    id: u64,
    size: u64,
    /// The descriptors this handle opened, by `seq`.
    open: Mutex<BTreeMap<u64, Arc<D::File>>>,
}

impl<D: LogDir> fmt::Debug for SegmentLog<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentLog")
            .field("base", &self.base)
            .field("id", &self.id)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl SegmentLog<Disk> {
    /// Opens the log whose segments are `base.<seq>` (`base` is `STORE.wal`), of the store
    /// `id`, in segments of `size` bytes ([`DEFAULT_SIZE`] in the store), and checks the header
    /// of every segment there is. Creates nothing: a log with no segment is empty.
    pub(crate) fn open(base: &Path, id: u64, size: u64) -> std::result::Result<Self, LogError> {
        SegmentLog::on(Disk, base, id, size)
    }
}

impl SegmentLog<ReadDisk> {
    /// [`SegmentLog::open`] for reading only ([`ReadDisk`]).
    pub(crate) fn open_to_read(
        base: &Path,
        id: u64,
        size: u64,
    ) -> std::result::Result<Self, LogError> {
        SegmentLog::on(ReadDisk, base, id, size)
    }
}

impl<D: LogDir> SegmentLog<D> {
    /// [`SegmentLog::open`] on the directory `dir`.
    pub(crate) fn on(
        dir: D,
        base: &Path,
        id: u64,
        size: u64,
    ) -> std::result::Result<Self, LogError> {
        check_size(base, size)?;
        let log = SegmentLog {
            dir,
            base: base.to_owned(),
            id,
            size,
            open: Mutex::new(BTreeMap::new()),
        };
        for seq in log.seqs()? {
            log.segment(seq)?;
        }
        Ok(log)
    }

    /// The segment size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The store's id in the headers.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The path of segment `seq`.
    pub(crate) fn path(&self, seq: u64) -> PathBuf {
        let mut path = self.base.as_os_str().to_owned();
        path.push(format!(".{seq:0SEQ_DIGITS$x}"));
        PathBuf::from(path)
    }

    /// The directory it runs on (the crash tests' recorder).
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &D {
        &self.dir
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<D::File>>> {
        // A panic while the cache is held leaves it whole (an insert or a remove).
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The segments there are, in order.
    pub(crate) fn seqs(&self) -> std::result::Result<Vec<u64>, LogError> {
        let dir = parent(&self.base);
        let names = self.dir.list(dir).map_err(io_err(dir.to_owned(), "list"))?;
        let mut prefix = self.base.file_name().unwrap_or_default().to_owned();
        prefix.push(".");
        let prefix = prefix.as_encoded_bytes();
        let mut seqs: Vec<u64> = names
            .iter()
            .filter_map(|name| {
                let digits = name.as_encoded_bytes().strip_prefix(prefix)?;
                if digits.len() != SEQ_DIGITS
                    || !digits
                        .iter()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
                {
                    return None;
                }
                u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
            })
            .collect();
        seqs.sort_unstable();
        // Segments below the oldest there is were retired (in order, and never made again):
        // this handle's descriptors of them go.
        if let Some(&oldest) = seqs.first() {
            self.cache().retain(|&seq, _| seq >= oldest);
        }
        Ok(seqs)
    }

    /// Segment `seq`'s descriptor, its header checked; `None` when it does not exist.
    fn segment(&self, seq: u64) -> std::result::Result<Option<Arc<D::File>>, LogError> {
        if let Some(file) = self.cache().get(&seq) {
            return Ok(Some(Arc::clone(file)));
        }
        let path = self.path(seq);
        let file = match self.dir.open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(io_err(path, "open")(err)),
        };
        let len = file.len().map_err(io_err(path.clone(), "open"))?;
        let mut head = vec![0u8; usize::try_from(len.min(HEADER_BLOCK)).expect("4096")];
        file.read_at(&mut head, 0)
            .map_err(io_err(path.clone(), "read"))?;
        check_header(&path, &head, self.id, self.size, seq, len)?;
        self.dir
            .checked(&path, &file)
            .map_err(io_err(path.clone(), "open"))?;
        // Its name durable before this handle writes into it, or acknowledges what it reads:
        // its creator (another process, or the loser of a race to create it) may not have
        // synced the directory yet, and a power loss would take the name and every record
        // synced into the file with it. Once a handle, for each segment.
        let dir = parent(&self.base);
        self.dir
            .sync_dir(dir)
            .map_err(io_err(dir.to_owned(), "sync"))?;
        let file = Arc::new(file);
        Ok(Some(Arc::clone(self.cache().entry(seq).or_insert(file))))
    }

    /// Segment `seq`, created when it does not exist and no newer one does (with those
    /// between the newest and it). Refused with [`LogError::Retired`] when it is gone and a
    /// newer one exists.
    fn segment_or_create(&self, seq: u64) -> std::result::Result<Arc<D::File>, LogError> {
        loop {
            if let Some(file) = self.segment(seq)? {
                return Ok(file);
            }
            let newest = self.seqs()?.last().copied();
            if let Some(newest) = newest.filter(|&newest| newest >= seq) {
                // Created by another process meanwhile, or retired.
                if let Some(file) = self.segment(seq)? {
                    return Ok(file);
                }
                // Retired, if the newer name is a segment: one that a user who may not write
                // the store made is refused as it is opened, naming it.
                self.segment(newest)?;
                return Err(LogError::Retired {
                    path: self.path(seq),
                });
            }
            let first = newest.map_or(seq, |newest| newest + 1);
            for each in first..=seq {
                let path = self.path(each);
                match self.dir.create(
                    &path,
                    &header(self.id, self.size, each),
                    HEADER_BLOCK + self.size,
                ) {
                    Ok(()) => {}
                    // Another creator linked it first: as good.
                    Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(err) => return Err(io_err(path, "create")(err)),
                }
            }
        }
    }

    /// Removes the temporary files of segment creations that a killed process left (`Disk`'s
    /// `.creating-` names): for the process that sets the log up, when no other process can be
    /// creating one. One this user cannot remove (another user's in a sticky directory such as
    /// `/tmp`, or a directory made at such a name) stays: no segment is made or opened under
    /// such a name, and it must not keep the store from opening.
    pub(crate) fn remove_leftovers(&self) -> Result<()> {
        let dir = parent(&self.base);
        let names = self.dir.list(dir).map_err(io_err(dir.to_owned(), "list"))?;
        let mut prefix = self.base.file_name().unwrap_or_default().to_owned();
        prefix.push(".");
        let prefix = prefix.as_encoded_bytes();
        let leftovers: Vec<PathBuf> = names
            .iter()
            .filter(|name| {
                let name = name.as_encoded_bytes();
                name.starts_with(prefix) && name.windows(10).any(|w| w == b".creating-")
            })
            .map(|name| dir.join(name))
            .collect();
        for leftover in &leftovers {
            let _ = self.dir.remove(std::slice::from_ref(leftover));
        }
        Ok(())
    }

    /// Whether segment `seq` was retired: gone, with a newer one there (segments are made in
    /// order and never made again).
    fn retired(&self, seq: u64) -> Result<bool> {
        if self.segment(seq)?.is_some() {
            return Ok(false);
        }
        match self.seqs()?.last() {
            Some(&newest) if newest > seq => {
                // If the newer name is a segment: one that a user who may not write the store
                // made is refused as it is opened, naming it. (One retired since, by a newer
                // one, leaves the answer as it was.)
                self.segment(newest)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The record at position `lsn`, which counts (its writer's mark said written and a sync
    /// covered it): `None` when its segment was retired since (a checkpoint moved it into the
    /// store file). Refused as [`Error::Corrupt`] when the bytes there are not a whole record
    /// of that position.
    pub(crate) fn read_record(&self, lsn: u64) -> Result<Option<Record>> {
        let seq = lsn / self.size;
        let Some(file) = self.segment(seq)? else {
            return Ok(None);
        };
        let offset = HEADER_BLOCK + lsn % self.size;
        let failed = |e| Error::Io(e).at_path("read", &self.path(seq));
        let corrupt = |what: &str| {
            Error::Corrupt(format!(
                "{}: the log record at position {lsn}, which was acknowledged, {what}",
                self.path(seq).display()
            ))
        };
        // The header and a record's usual length in one read; a longer record's rest next.
        let room = self.size - lsn % self.size;
        let mut bytes = vec![0u8; usize::try_from(room.min(256)).expect("small")];
        file.read_at(&mut bytes, offset).map_err(failed)?;
        let frame = Frame::read(&bytes)?;
        if frame.lsn != lsn || frame.total() > room {
            return Err(corrupt("is not there whole"));
        }
        let total = usize::try_from(frame.total()).expect("at most a record");
        if total > bytes.len() {
            let read = bytes.len();
            bytes.resize(total, 0);
            file.read_at(&mut bytes[read..], offset + read as u64)
                .map_err(failed)?;
        }
        bytes.truncate(total);
        if !frame.intact(&bytes) {
            return Err(corrupt("fails its checksum"));
        }
        frame.record(&bytes).map(Some)
    }

    /// Creates segment `seq` ahead of need, if it does not exist yet (idempotent: another
    /// handle, in this process or another, may have created it; one that was already used
    /// and retired is not made again). A writer calls it, in a thread of its own, when its
    /// reservation crosses into the second half of a segment, so that writes into the next one
    /// find it made; a write into a segment that does not exist yet creates it first (the slow
    /// path).
    pub(crate) fn prepare(&self, seq: u64) -> Result<()> {
        match self.segment_or_create(seq) {
            Ok(_) | Err(LogError::Retired { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// [`SegmentLog::prepare`] of segment `seq` in a thread of its own, through a handle of its
    /// own, and returns at once (fire and forget). Its errors, and a thread that cannot be
    /// started, are dropped: they are not the caller's, whose write into a segment that does
    /// not exist makes it (the slow path of [`SegmentLog::write_at`]) or meets the error there.
    // For the group sync's `Log`, which the models replace with their own.
    #[cfg_attr(fencelock_loom, allow(dead_code))]
    pub(crate) fn prepare_ahead(&self, seq: u64)
    where
        D: Clone + Send + 'static,
        D::File: Send + Sync,
    {
        let log = SegmentLog {
            dir: self.dir.clone(),
            base: self.base.clone(),
            id: self.id,
            size: self.size,
            open: Mutex::new(BTreeMap::new()),
        };
        let _ = std::thread::Builder::new()
            .name("fencelock-log-ahead".into())
            .spawn(move || {
                let _ = log.prepare(seq);
            });
    }

    /// Where position `lsn` is: its segment and the offset in it, when `len` bytes from there
    /// stay within the segment.
    fn place(&self, lsn: u64, len: usize) -> Result<(u64, u64)> {
        let at = lsn % self.size;
        if lsn % ALIGN != 0 || len as u64 > self.size - at {
            return Err(Error::invalid(format!(
                "{}: {len} bytes at log position {lsn} are not aligned to {ALIGN} or run past \
                 the end of its segment ({} bytes)",
                self.path(lsn / self.size).display(),
                self.size
            )));
        }
        Ok((lsn / self.size, HEADER_BLOCK + at))
    }

    /// Writes `bytes` (records) at position `lsn`, in place: `pwrite` into segment
    /// `lsn / size`, created first when it does not exist. Refused with
    /// [`Error::InvalidArgument`] when they would run past the segment's end (see
    /// [`crate::storage::wal::Placement`]), and with [`Error::Timeout`] when the segment was
    /// retired (the writer came too late: its write did not happen), and for nothing else: the
    /// group sync's `Log` (`ring/flush.rs`) tells that writer alone by it, and fails the log on
    /// every other error.
    pub(crate) fn write_at(&self, lsn: u64, bytes: &[u8]) -> Result<()> {
        let (seq, offset) = self.place(lsn, bytes.len())?;
        let file = self.segment_or_create(seq)?;
        file.write_at(bytes, offset)
            .map_err(|e| Error::Io(e).at_path("write", &self.path(seq)))
    }

    /// Makes durable every write that returned before this call at the positions
    /// `[from, to)`, whichever process made it: `fdatasync` of each segment they touch
    /// (usually one; two at a segment's end), a data-only sync, as a segment's size never
    /// changes. A segment that does not exist holds nothing to sync (never written, or
    /// retired).
    pub(crate) fn sync(&self, from: u64, to: u64) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        for seq in from / self.size..=(to - 1) / self.size {
            if let Some(file) = self.segment(seq)? {
                file.sync_data()
                    .map_err(|e| Error::Io(e).at_path("sync", &self.path(seq)))?;
            }
        }
        Ok(())
    }

    /// Retires the segments wholly below position `lsn` (which the checkpoint has passed):
    /// unlinks them, never the newest, and syncs the directory; drops this handle's
    /// descriptors of them. Their names are never made again.
    pub(crate) fn retire_below(&self, lsn: u64) -> Result<()> {
        let seqs = self.seqs()?;
        let newest = seqs.last().copied();
        // Wholly below `lsn`: `(seq + 1) * size <= lsn`, without overflowing.
        let below: Vec<u64> = seqs
            .into_iter()
            .filter(|&seq| seq < lsn / self.size && Some(seq) != newest)
            .collect();
        self.cache()
            .retain(|&seq, _| seq >= lsn / self.size || Some(seq) == newest);
        let paths: Vec<PathBuf> = below.iter().map(|&seq| self.path(seq)).collect();
        self.dir.remove(&paths).map_err(|e| {
            Error::Io(e).at_path("remove", paths.first().map_or(&self.base, |p| p.as_path()))
        })
    }
}

/// What the group sync (`ring/flush.rs`) writes besides records: skip records and fillers.
impl<D: LogDir> SegmentLog<D> {
    /// Writes at `at`, in exactly `space` bytes (within one segment), a `Skip { lsn: gap, len }`
    /// record, and after it a void record over the rest of `space` when there is a rest:
    /// `space` is the skip record's length or at least [`MIN_RECORD`] more. A gap of no bytes
    /// (`len` 0: a skipper that lost its claim and keeps its place filled) is a void record
    /// over the whole space: a skip of nothing is not a record the scan takes.
    pub(crate) fn write_skip(&self, at: u64, space: u64, gap: u64, len: u64) -> Result<()> {
        if len == 0 {
            return self.write_at(at, &Record::void_filling(space)?.encode(at)?);
        }
        let mut bytes = Record::Skip { lsn: gap, len }.encode(at)?;
        let rest = space.checked_sub(bytes.len() as u64).ok_or_else(|| {
            Error::invalid(format!(
                "a skip record takes {} bytes, not {space}",
                bytes.len()
            ))
        })?;
        if rest > 0 {
            bytes.extend(Record::void_filling(rest)?.encode(at + bytes.len() as u64)?);
        }
        self.write_at(at, &bytes)
    }

    /// Fills the `len` bytes at `at` up to its segment's end with a void record, or leaves
    /// them as they are when they are fewer than [`MIN_RECORD`] (the scan jumps over such a
    /// tail by itself). Refused when they do not end at the segment's end.
    pub(crate) fn fill(&self, at: u64, len: u64) -> Result<()> {
        if len == 0 || (at + len) % self.size != 0 || len > self.size {
            return Err(Error::invalid(format!(
                "a filler of {len} bytes at log position {at} does not run to its segment's end \
                 ({} bytes)",
                self.size
            )));
        }
        if len < MIN_RECORD {
            return Ok(());
        }
        self.write_at(at, &Record::void_filling(len)?.encode(at)?)
    }

    /// Whether a skip record in `[lsn, lsn + within)` voids the position `lsn`: a record counts
    /// only at its own position (the LSN in its header) and whole (its checksum), as the scan
    /// takes records. Segments that do not exist there (retired, or not made yet) hold none.
    ///
    /// A position in a retired segment is void: a checkpoint settles every claim below it
    /// before it retires a segment, so a claim still asked about there was made after, by a
    /// writer that resumed past its skip and the checkpoint (its own write was refused as gone).
    pub(crate) fn skipped(&self, lsn: u64, within: u64) -> Result<bool> {
        if self.retired(lsn / self.size)? {
            return Ok(true);
        }
        let end = lsn.saturating_add(within);
        let mut from = lsn - lsn % ALIGN;
        while from < end {
            let seq = from / self.size;
            let upto = end.min((seq + 1).saturating_mul(self.size));
            if !self.exists(seq)? {
                from = upto;
                continue;
            }
            // As far as a skip record starting before `upto` reaches, within the segment.
            let whole = Record::Skip { lsn: 0, len: 0 }.encoded_len();
            let reach = (self.size * (seq + 1)).min(upto + whole);
            let mut bytes = vec![0u8; usize::try_from(reach - from).expect("within a segment")];
            self.read(from, &mut bytes)?;
            for at in (0..upto - from).step_by(ALIGN_STEP) {
                let here = usize::try_from(at).expect("within the bytes read");
                if bytes.len() - here < HEADER {
                    break;
                }
                if let Ok((own, Record::Skip { lsn: gap, len }, _)) = record::decode(&bytes[here..])
                {
                    if own == from + at && (gap..gap.saturating_add(len)).contains(&lsn) {
                        return Ok(true);
                    }
                }
            }
            from = upto;
        }
        Ok(false)
    }
}

/// [`ALIGN`] as a step over offsets.
const ALIGN_STEP: usize = 8;

impl<D: LogDir> Segments for SegmentLog<D> {
    fn segment_size(&self) -> u64 {
        self.size
    }

    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()> {
        let (seq, offset) = self.place(lsn, bytes.len())?;
        // The path only for an error: a scan reads each record.
        let Some(file) = self.segment(seq)? else {
            return Err(Error::Io(io::Error::from(io::ErrorKind::NotFound))
                .at_path("read", &self.path(seq)));
        };
        file.read_at(bytes, offset)
            .map_err(|e| Error::Io(e).at_path("read", &self.path(seq)))
    }

    fn exists(&self, seq: u64) -> Result<bool> {
        Ok(self.segment(seq)?.is_some())
    }

    fn seqs(&self) -> Result<Vec<u64>> {
        Ok(SegmentLog::seqs(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Status;
    use crate::storage::wal::scan::scan;
    use crate::storage::wal::scan::tests::{put, Log};
    use crate::storage::wal::Placement;

    /// The records from `lsn` to its segment's end, each with its own position, up to the
    /// first that does not decode.
    fn records_at(log: &SegmentLog, lsn: u64, bytes: u64) -> Vec<(u64, Record)> {
        let mut buf = vec![0u8; usize::try_from(bytes).unwrap()];
        log.read(lsn, &mut buf).unwrap();
        let mut at = 0;
        let mut found = Vec::new();
        while let Ok((own, record, len)) = record::decode(&buf[at..]) {
            found.push((own, record));
            at += usize::try_from(len).unwrap();
        }
        found
    }

    #[test]
    fn a_skip_record_fills_its_space_with_a_void_after_it_and_is_found_at_its_place() {
        let dir = dir();
        let log = SegmentLog::open(&dir.path().join("store.wal"), 4, MIN_SIZE).unwrap();
        log.write_skip(0, 40, 8, 16).unwrap();
        assert_eq!(
            records_at(&log, 0, 40),
            [(0, Record::Skip { lsn: 8, len: 16 })]
        );
        log.write_skip(MIN_SIZE + 64, 64, MIN_SIZE + 8, 48).unwrap();
        assert_eq!(
            records_at(&log, MIN_SIZE + 64, 64),
            [
                (
                    MIN_SIZE + 64,
                    Record::Skip {
                        lsn: MIN_SIZE + 8,
                        len: 48
                    }
                ),
                (MIN_SIZE + 104, Record::Void { len: 4 })
            ]
        );
        // A space a skip record does not fit, or fits with a rest no void fills, is refused.
        for space in [32, 48] {
            let err = log.write_skip(128, space, 8, 16).unwrap_err();
            assert_eq!(err.status(), Status::InvalidArgument, "{space}: {err}");
        }
        // The gap's positions are skipped, looking from each; the others are not.
        for lsn in (MIN_SIZE + 8..MIN_SIZE + 56).step_by(8) {
            assert!(log.skipped(lsn, 4096).unwrap(), "{lsn}");
        }
        for lsn in [MIN_SIZE, MIN_SIZE + 56, MIN_SIZE + 64] {
            assert!(!log.skipped(lsn, 4096).unwrap(), "{lsn}");
        }
        // Only within the range asked: the skip record is at MIN_SIZE + 64.
        assert!(!log.skipped(MIN_SIZE + 8, 56).unwrap());
        assert!(log.skipped(MIN_SIZE + 8, 64).unwrap());
        // Only at or after the position: the skip record at 0 voids 8, but is before it.
        assert!(!log.skipped(8, 3 * MIN_SIZE).unwrap());
        // Across a segment's end (a gap at the end of segment 0, its skip record in segment 1),
        // and over segments that do not exist.
        assert!(!log.skipped(MIN_SIZE - 16, 4096).unwrap());
        log.write_skip(MIN_SIZE + 128, 40, MIN_SIZE - 16, 16)
            .unwrap();
        assert!(log.skipped(MIN_SIZE - 16, 4096).unwrap());
        assert!(log.skipped(MIN_SIZE - 8, 4096).unwrap());
        assert!(!log.skipped(5 * MIN_SIZE, 3 * MIN_SIZE).unwrap());
    }

    #[test]
    fn a_record_is_read_back_at_its_place_and_a_retired_one_is_gone() {
        let dir = dir();
        let size = 4 * MIN_SIZE;
        let log = SegmentLog::open(&dir.path().join("store.wal"), 4, size).unwrap();
        // Records shorter and longer than the first read (256 bytes), one at a segment's end.
        let (short, long) = (put(1, 10), put(2, 3000));
        let at_end = size - put(3, 10).encoded_len();
        log.write_at(0, &short.encode(0).unwrap()).unwrap();
        let second = short.encoded_len();
        log.write_at(second, &long.encode(second).unwrap()).unwrap();
        log.write_at(at_end, &put(3, 10).encode(at_end).unwrap())
            .unwrap();
        assert_eq!(log.read_record(0).unwrap(), Some(short));
        assert_eq!(log.read_record(second).unwrap(), Some(long));
        assert_eq!(log.read_record(at_end).unwrap(), Some(put(3, 10)));
        // Another position than a record's: refused, never taken for the record there.
        for wrong in [8, second + 8] {
            let err = log.read_record(wrong).unwrap_err();
            assert_eq!(err.status(), Status::Corrupt, "{wrong}: {err}");
        }
        // Retired (a checkpoint passed it, a newer segment exists): gone, and void.
        log.prepare(1).unwrap();
        log.retire_below(size).unwrap();
        assert_eq!(log.read_record(0).unwrap(), None);
        assert!(log.skipped(second, 64).unwrap());
        assert!(!log.skipped(size, 64).unwrap());
    }

    #[test]
    fn a_skip_of_no_bytes_is_a_void_record_the_scan_steps_over() {
        // A skipper that lost its claim fills its place so: before, it wrote `Skip { len: 0 }`,
        // which the scan refuses as corrupt (the log of four writer threads on a loaded
        // machine could not be read back).
        let dir = dir();
        let log = SegmentLog::open(&dir.path().join("store.wal"), 4, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let put = Record::Put {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            token: 1,
            version: 0,
        };
        let len = put.encoded_len();
        log.write_at(0, &put.encode(0).unwrap()).unwrap();
        log.write_skip(len, 64, 0, 0).unwrap();
        assert_eq!(
            records_at(&log, len, 64),
            [(len, Record::void_filling(64).unwrap())]
        );
        let after = put.encode(len + 64).unwrap();
        log.write_at(len + 64, &after).unwrap();
        let scanned = crate::storage::wal::scan::scan(&log, 0).unwrap();
        assert_eq!(scanned.records, [(0, put.clone()), (len + 64, put)]);
        assert!(scanned.skipped.is_empty());
        assert_eq!(scanned.end, 2 * len + 64);
    }

    #[test]
    fn a_skip_record_counts_only_whole_and_at_its_own_position() {
        let dir = dir();
        let log = SegmentLog::open(&dir.path().join("store.wal"), 4, MIN_SIZE).unwrap();
        // A skip record's bytes encoded for another position (as a record's value could hold
        // them): not one.
        let copied = Record::Skip { lsn: 8, len: 48 }.encode(2048).unwrap();
        log.write_at(1024, &copied).unwrap();
        assert!(!log.skipped(8, 4000).unwrap());
        // At its own position, but torn (one bit of its payload flipped): not one.
        let mut torn = Record::Skip { lsn: 8, len: 48 }.encode(2048).unwrap();
        torn[HEADER + 8] ^= 1;
        log.write_at(2048, &torn).unwrap();
        assert!(!log.skipped(8, 4000).unwrap());
        // Whole: one.
        log.write_at(2048, &copied).unwrap();
        assert!(log.skipped(8, 4000).unwrap());
    }

    #[test]
    fn a_filler_is_a_void_to_its_segment_end_or_nothing_in_a_short_tail() {
        let dir = dir();
        let log = SegmentLog::open(&dir.path().join("store.wal"), 4, MIN_SIZE).unwrap();
        log.fill(MIN_SIZE - 96, 96).unwrap();
        assert_eq!(
            records_at(&log, MIN_SIZE - 96, 96),
            [(MIN_SIZE - 96, Record::Void { len: 76 })]
        );
        // Shorter than any record: the bytes stay zeros (the scan jumps such a tail).
        log.prepare(1).unwrap();
        log.write_at(2 * MIN_SIZE - 16, &[1; 16]).unwrap();
        log.fill(2 * MIN_SIZE - 16, 16).unwrap();
        let mut tail = [0u8; 16];
        log.read(2 * MIN_SIZE - 16, &mut tail).unwrap();
        assert_eq!(tail, [1; 16], "left as they are");
        // A filler that does not end at its segment's end is refused, and writes nothing.
        for (at, len) in [(MIN_SIZE - 96, 88), (0, 0), (MIN_SIZE + 8, 2 * MIN_SIZE)] {
            let err = log.fill(at, len).unwrap_err();
            assert_eq!(err.status(), Status::InvalidArgument, "{at} {len}: {err}");
        }
        let mut head = [1u8; 8];
        log.read(MIN_SIZE - 96, &mut head[..]).unwrap();
        assert_eq!(
            head,
            (MIN_SIZE - 96).to_le_bytes(),
            "the void is there as written"
        );
    }

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn prepare_makes_a_segment_whole_and_open_checks_it() {
        let dir = dir();
        let base = dir.path().join("store.wal");
        let log = SegmentLog::open(&base, 0xfeed, 3 * MIN_SIZE).unwrap();
        assert_eq!((log.size(), log.id()), (3 * MIN_SIZE, 0xfeed));
        assert_eq!(log.seqs().unwrap(), [], "a new log has no segment");
        // The store's size is one this code makes.
        check_size(&base, DEFAULT_SIZE).unwrap();
        log.prepare(0).unwrap();
        let path = log.path(0);
        assert_eq!(path, dir.path().join("store.wal.0000000000000000"));
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, HEADER_BLOCK + 3 * MIN_SIZE);
        assert_eq!(&bytes[..8], b"fencelog");
        assert_eq!(&bytes[..HEADER_BYTES], header(0xfeed, 3 * MIN_SIZE, 0));
        assert!(bytes[HEADER_BYTES..].iter().all(|&b| b == 0));
        // Idempotent: made once, never replaced, nothing left under a temporary name.
        log.write_at(8, b"12345678").unwrap();
        log.prepare(0).unwrap();
        SegmentLog::open(&base, 0xfeed, 3 * MIN_SIZE)
            .unwrap()
            .prepare(0)
            .unwrap();
        assert_eq!(names(dir.path()), ["store.wal.0000000000000000"]);
        assert_eq!(
            &fs::read(&path).unwrap()[HEADER_BYTES + 8..][..8],
            b"12345678"
        );
        // Names that are not segments of this log are none of its business.
        fs::write(dir.path().join("store.wal.00000000000000zz"), b"x").unwrap();
        fs::write(
            dir.path().join("store.wal.0000000000000001.creating-1-2"),
            b"x",
        )
        .unwrap();
        fs::write(dir.path().join("other.wal.0000000000000001"), b"x").unwrap();
        let log = SegmentLog::open(&base, 0xfeed, 3 * MIN_SIZE).unwrap();
        assert_eq!(log.seqs().unwrap(), [0]);
        // A creation's leftover temporary file goes at the log's set-up; nothing else does.
        log.remove_leftovers().unwrap();
        assert_eq!(
            names(dir.path()),
            [
                "other.wal.0000000000000001",
                "store.wal.0000000000000000",
                "store.wal.00000000000000zz"
            ]
        );
    }

    #[test]
    fn writes_land_in_their_segment_and_read_back() {
        let dir = dir();
        let base = dir.path().join("store.wal");
        let log = SegmentLog::open(&base, 1, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        log.write_at(8, b"12345678").unwrap();
        // Position 16 of the next segment: a file of its own, made by the write (slow path).
        log.write_at(MIN_SIZE + 16, b"abcdefgh").unwrap();
        // Two segments ahead: the one between is made too, so the sequence has no gap.
        log.write_at(3 * MIN_SIZE, b"ABCDEFGH").unwrap();
        log.sync(0, 3 * MIN_SIZE + 8).unwrap();
        assert_eq!(log.seqs().unwrap(), [0, 1, 2, 3]);
        let segment = |seq| fs::read(log.path(seq)).unwrap()[HEADER_BYTES..].to_vec();
        assert_eq!(&segment(0)[8..24], b"12345678\0\0\0\0\0\0\0\0");
        assert_eq!(&segment(1)[8..24], b"\0\0\0\0\0\0\0\0abcdefgh");
        assert!(segment(2).iter().all(|&b| b == 0));
        assert_eq!(&segment(3)[..8], b"ABCDEFGH");
        let mut back = [0u8; 8];
        log.read(MIN_SIZE + 16, &mut back).unwrap();
        assert_eq!(&back, b"abcdefgh");
        // A record never spans a segment's end; positions are aligned.
        for (lsn, len) in [
            (MIN_SIZE - 8, 16),
            (MIN_SIZE + 4, 8),
            (0, usize::try_from(MIN_SIZE).unwrap() + 8),
        ] {
            let err = log.write_at(lsn, &vec![1; len]).unwrap_err();
            assert_eq!(err.status(), Status::InvalidArgument, "{err}");
            let name = format!("store.wal.{:016x}", lsn / MIN_SIZE);
            assert!(err.to_string().contains(&name), "{err}");
        }
        log.write_at(MIN_SIZE - 8, &[2; 8]).unwrap();
        for seq in 0..4 {
            assert_eq!(
                fs::metadata(log.path(seq)).unwrap().len(),
                HEADER_BLOCK + MIN_SIZE
            );
        }
    }

    /// Two handles (two processes, as far as the files go) race to make the same segments,
    /// ahead of need and by their writes: each is made once, whole, and both handles' writes
    /// are in it.
    #[test]
    fn creation_ahead_is_idempotent_across_racing_handles() {
        let dir = dir();
        let base = dir.path().join("store.wal");
        SegmentLog::open(&base, 9, MIN_SIZE)
            .unwrap()
            .prepare(0)
            .unwrap();
        for round in 0..20u64 {
            let barrier = std::sync::Barrier::new(2);
            std::thread::scope(|threads| {
                for writer in 0..2u64 {
                    let (base, barrier) = (&base, &barrier);
                    threads.spawn(move || {
                        let log = SegmentLog::open(base, 9, MIN_SIZE).unwrap();
                        barrier.wait();
                        log.prepare(2 * round + 1).unwrap();
                        log.write_at(
                            2 * round * MIN_SIZE + 8 * writer,
                            &[u8::try_from(writer).unwrap() + 1; 8],
                        )
                        .unwrap();
                        log.write_at(
                            (2 * round + 1) * MIN_SIZE + 8 * writer,
                            &[u8::try_from(writer).unwrap() + 1; 8],
                        )
                        .unwrap();
                    });
                }
            });
        }
        let log = SegmentLog::open(&base, 9, MIN_SIZE).unwrap();
        assert_eq!(log.seqs().unwrap(), (0..40).collect::<Vec<u64>>());
        assert_eq!(names(dir.path()).len(), 40, "a temporary name was left");
        for seq in 0..40 {
            let mut back = [0u8; 16];
            log.read(seq * MIN_SIZE, &mut back).unwrap();
            assert_eq!(back, [[1; 8], [2; 8]].concat().as_slice(), "segment {seq}");
        }
    }

    #[test]
    fn retired_segments_are_unlinked_and_never_made_again() {
        let dir = dir();
        let base = dir.path().join("store.wal");
        let log = SegmentLog::open(&base, 1, MIN_SIZE).unwrap();
        // The log's first segment is made by whoever sets it up (recovery: the end's segment).
        log.prepare(0).unwrap();
        log.write_at(3 * MIN_SIZE, b"newest!!").unwrap();
        assert_eq!(log.seqs().unwrap(), [0, 1, 2, 3]);
        // Wholly below the position only; never the newest.
        log.retire_below(2 * MIN_SIZE + 8).unwrap();
        assert_eq!(log.seqs().unwrap(), [2, 3]);
        log.retire_below(10 * MIN_SIZE).unwrap();
        assert_eq!(log.seqs().unwrap(), [3]);
        log.retire_below(u64::MAX).unwrap();
        assert_eq!(log.seqs().unwrap(), [3], "the newest is kept");
        // A late write into a retired segment, through a handle that never opened it: refused
        // as a write that did not happen, and the name is not made again.
        let late = SegmentLog::open(&base, 1, MIN_SIZE).unwrap();
        for lsn in [0, MIN_SIZE + 64, 2 * MIN_SIZE] {
            let err = late.write_at(lsn, b"too late").unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
            late.prepare(lsn / MIN_SIZE).unwrap();
        }
        assert_eq!(late.seqs().unwrap(), [3]);
        // A sync of retired positions has nothing to do.
        late.sync(0, 3 * MIN_SIZE).unwrap();
        // Later segments are made as before.
        late.write_at(4 * MIN_SIZE, b"next one").unwrap();
        assert_eq!(log.seqs().unwrap(), [3, 4]);
    }

    /// A later segment's name that a user who may not write the store made (in a directory
    /// where anyone may make files) is refused where the log reaches it, naming it and its
    /// owner: not taken for a sign that the segments before it were retired, which made a
    /// write there fail as one that did not happen (`Timeout`) and a claim there void.
    #[test]
    fn a_later_name_another_user_made_is_refused_naming_it_not_taken_for_a_retirement() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root, to make a file of another user");
            return;
        }
        let dir = dir();
        // The store file, which its segments' makers must be able to write.
        fs::write(dir.path().join("store"), b"").unwrap();
        let base = dir.path().join("store.wal");
        let log = SegmentLog::open(&base, 1, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let planted = log.path(9);
        fs::write(&planted, b"").unwrap();
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        let named = |err: Error| {
            let message = err.to_string();
            assert!(
                message.contains(&planted.display().to_string())
                    && message.contains("belongs to user 65534"),
                "{message}"
            );
        };
        named(log.write_at(MIN_SIZE, b"next one").unwrap_err());
        named(log.skipped(MIN_SIZE, 64).unwrap_err());
        assert_eq!(log.seqs().unwrap(), [0, 9], "nothing made, nothing removed");
    }

    /// Every way a file at a segment's name may fail to be this log's segment, with the path in
    /// the message: when the log is opened, and when the scan meets one made since.
    #[test]
    fn every_header_error() {
        let dir = dir();
        let base = dir.path().join("store.wal");
        let log = SegmentLog::open(&base, 5, 2 * MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let good = fs::read(log.path(0)).unwrap();
        // Segment 1 of another directory, holding `bytes`.
        let open_bytes = |bytes: &[u8], id, size| {
            let other = tempfile::tempdir().unwrap();
            let base = other.path().join("other.wal");
            let path = other.path().join("other.wal.0000000000000001");
            fs::write(&path, bytes).unwrap();
            let err = SegmentLog::open(&base, id, size).unwrap_err();
            assert!(
                err.to_string().contains("other.wal.0000000000000001"),
                "{err}"
            );
            // The same error from a scan, for a segment made after the log was opened.
            fs::remove_file(&path).unwrap();
            let log = SegmentLog::open(&base, id, size).unwrap();
            fs::write(&path, bytes).unwrap();
            let scanned = Error::from(err).status();
            let err = scan(&log, size).unwrap_err();
            assert_eq!(err.status(), scanned, "{err}");
            if scanned != Status::IncompatibleVersion {
                assert!(
                    err.to_string().contains("other.wal.0000000000000001"),
                    "{err}"
                );
            }
            SegmentLog::open(&base, id, size).unwrap_err()
        };
        // `good` is segment 0's: as segment 1, its seq is fixed with its checksum.
        let with = |at: usize, field: &[u8], fix_crc: bool| {
            let mut bytes = good.clone();
            bytes[32..40].copy_from_slice(&1u64.to_le_bytes());
            bytes[at..at + field.len()].copy_from_slice(field);
            if fix_crc {
                let crc = crc::crc32c(&bytes[..FIELDS]);
                bytes[FIELDS..FIELDS + 4].copy_from_slice(&crc.to_le_bytes());
            }
            bytes
        };
        let one = with(0, &[], true);
        let size = 2 * MIN_SIZE;

        let err = open_bytes(b"SQLite format 3\0 and more", 5, size);
        assert!(matches!(err, LogError::NotALog { .. }), "{err}");
        let err = open_bytes(b"", 5, size);
        assert!(matches!(err, LogError::NotALog { .. }), "{err}");
        let err = open_bytes(&one[..20], 5, size);
        assert!(matches!(err, LogError::Short { .. }), "{err}");
        let err = open_bytes(&one[..one.len() - 8], 5, size);
        assert!(
            matches!(err, LogError::Short { needs, .. } if needs == one.len() as u64),
            "{err}"
        );
        let err = open_bytes(&one, 6, size);
        assert!(
            matches!(
                err,
                LogError::OtherStore {
                    expected: 6,
                    found: 5,
                    ..
                }
            ),
            "{err}"
        );
        let err = open_bytes(&one, 5, MIN_SIZE);
        assert!(matches!(err, LogError::OtherSize { .. }), "{err}");
        // Segment 0's file under segment 1's name.
        let err = open_bytes(&good, 5, size);
        assert!(
            matches!(
                err,
                LogError::OtherSeq {
                    expected: 1,
                    found: 0,
                    ..
                }
            ),
            "{err}"
        );
        let err = open_bytes(&with(8, &3u32.to_le_bytes(), true), 5, size);
        assert!(
            matches!(err, LogError::NewerFormat { found: 3, .. }),
            "{err}"
        );
        // A newer format is told apart even when the rest of its header is not ours.
        let err = open_bytes(&with(8, &7u32.to_le_bytes(), false), 5, size);
        assert!(
            matches!(err, LogError::NewerFormat { found: 7, .. }),
            "{err}"
        );
        // Damaged: a flipped bit, a size this code does not make, format 0 and the ring's 1.
        let err = open_bytes(&with(20, &[1], false), 5, size);
        assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");
        let err = open_bytes(&with(24, &12345u64.to_le_bytes(), true), 5, size);
        assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");
        for format in [0u32, 1] {
            let err = open_bytes(&with(8, &format.to_le_bytes(), true), 5, size);
            assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");
        }

        for size in [0, 100, MIN_SIZE + 8, MAX_SIZE * 2] {
            let err = SegmentLog::open(&dir.path().join("missing.wal"), 5, size).unwrap_err();
            assert!(matches!(err, LogError::BadSize { .. }), "{err}");
        }

        // Each maps to the crate's error of its kind, the path in its message.
        let statuses = [
            (open_bytes(b"garbage!", 5, size), Status::NotAStore),
            (open_bytes(&one, 6, size), Status::NotAStore),
            (open_bytes(&one[..40], 5, size), Status::Corrupt),
            (open_bytes(&one, 5, MIN_SIZE), Status::Corrupt),
            (open_bytes(&good, 5, size), Status::Corrupt),
            (
                open_bytes(&with(8, &3u32.to_le_bytes(), true), 5, size),
                Status::IncompatibleVersion,
            ),
        ];
        for (err, status) in statuses {
            let message = err.to_string();
            let err = Error::from(err);
            assert_eq!(err.status(), status, "{err}");
            if status != Status::IncompatibleVersion {
                assert!(err.to_string().contains(".wal.0"), "{message} became {err}");
            }
        }
    }

    /// The scan reads what a writer of the files wrote (the log in memory of `scan`'s tests
    /// beside the files, record by record).
    #[test]
    fn the_scan_reads_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("store.wal");
        let file = SegmentLog::open(&base, 7, MIN_SIZE).unwrap();
        let mut log = Log::new(usize::try_from(MIN_SIZE).unwrap(), 0);
        for i in 0..100 {
            let before = log.end;
            let lsn = log.append(&put(i, 50));
            if lsn != before {
                let filler = Placement::of(file.size(), before, put(i, 50).encoded_len())
                    .unwrap()
                    .filler_record()
                    .unwrap();
                if let Some(filler) = filler {
                    file.write_at(before, &filler).unwrap();
                }
            }
            file.write_at(lsn, &put(i, 50).encode(lsn).unwrap())
                .unwrap();
        }
        file.sync(0, log.end).unwrap();
        assert!(log.segments.len() > 2, "{}", log.segments.len());
        for (seq, bytes) in &log.segments {
            let on_disk = std::fs::read(file.path(*seq)).unwrap();
            assert_eq!(&on_disk[HEADER_BYTES..], bytes.as_slice(), "segment {seq}");
        }
        let reopened = SegmentLog::open(&base, 7, MIN_SIZE).unwrap();
        for from in [0, MIN_SIZE, log.end - log.end % MIN_SIZE] {
            assert_eq!(scan(&reopened, from).unwrap(), log.scan(from));
        }
        assert_eq!(scan(&reopened, 0).unwrap().end, log.end);
    }
}
