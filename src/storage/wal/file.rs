//! The log file: a header block, then a ring of `size` bytes that is written once with zeros
//! when the file is created and afterwards only overwritten in place, so that its size and its
//! blocks never change and `fdatasync` is a data-only sync.
//!
//! Header (the first [`HEADER_BLOCK`] bytes, written once, at creation; zeros after the fields):
//!
//! ```text
//! [magic 8: "fencelog"][format u32][header length u32][store id u64][ring size u64][crc32c u32]
//! ```
//!
//! The checksum covers the 32 bytes before it. Position (LSN) `lsn` lives at
//! `HEADER_BLOCK + lsn % size`.
//!
//! Creation writes the whole file under a temporary name beside it, syncs it, links it to its
//! name (refused when the name exists: two creators cannot replace each other's log) and syncs
//! the directory: the log is at its path whole, or not at all.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::base::error::{Error, Result};
use crate::storage::wal::crc;
use crate::storage::wal::record::ALIGN;
use crate::storage::wal::scan::Ring;

/// The header block's length: the ring starts after it.
pub(crate) const HEADER_BLOCK: u64 = 4096;
/// The ring's size unless the caller asks for another.
pub(crate) const DEFAULT_SIZE: u64 = 64 << 20;
/// The smallest ring (tests use small ones); sizes are multiples of it.
pub(crate) const MIN_SIZE: u64 = 4096;
/// The largest ring.
pub(crate) const MAX_SIZE: u64 = 1 << 40;
/// The format this code writes, and the newest it reads.
pub(crate) const FORMAT: u32 = 1;
const MAGIC: [u8; 8] = *b"fencelog";
/// The header's fields, before their checksum.
const FIELDS: usize = 32;

/// Why a log file could not be opened or created.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum LogError {
    /// The file does not start with the log's magic: another program's file.
    NotALog { path: PathBuf },
    /// The magic is there but the header's checksum does not match.
    DamagedHeader { path: PathBuf },
    /// The log of another store (the id the caller gave is not the header's).
    OtherStore {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    /// The header states another ring size than the caller asked for.
    OtherSize {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    /// Written by a newer version of fencelock, in a format this one does not read.
    NewerFormat { path: PathBuf, found: u32 },
    /// The file is shorter than its header and the ring it states.
    Short { path: PathBuf, len: u64, needs: u64 },
    /// A ring size this code does not make.
    BadSize { path: PathBuf, size: u64 },
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
                "{}: the log's header is damaged (its checksum does not match)",
                path.display()
            ),
            LogError::OtherStore {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: the log of another store (id {found:#018x}, this store's is {expected:#018x})",
                path.display()
            ),
            LogError::OtherSize {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: the log's ring is {found} bytes, not the {expected} asked for",
                path.display()
            ),
            LogError::NewerFormat { path, found } => write!(
                f,
                "{}: the log is of format {found}, newer than this version reads ({FORMAT})",
                path.display()
            ),
            LogError::Short { path, len, needs } => write!(
                f,
                "{}: the log is cut short: {len} bytes, its header and ring need {needs}",
                path.display()
            ),
            LogError::BadSize { path, size } => write!(
                f,
                "{}: a log ring of {size} bytes is not a multiple of {MIN_SIZE} from {MIN_SIZE} \
                 to {MAX_SIZE}",
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
            LogError::Io { path, op, source } => Error::Io(source).at_path(op, &path),
            LogError::DamagedHeader { .. }
            | LogError::Short { .. }
            | LogError::OtherSize { .. } => Error::Corrupt(err.to_string()),
        }
    }
}

/// What the log needs of its file: positional reads and writes and a data-only sync.
/// `std::fs::File` in the store; a recorder in the crash tests, which builds from what it saw
/// every image a power loss may leave.
pub(crate) trait LogIo {
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    fn read_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()>;
    fn sync_data(&self) -> io::Result<()>;
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
}

/// An open log file.
#[derive(Debug)]
pub(crate) struct LogFile<F: LogIo = File> {
    io: F,
    path: PathBuf,
    id: u64,
    size: u64,
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

fn header(id: u64, size: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_BLOCK as usize);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&FORMAT.to_le_bytes());
    header.extend_from_slice(&(HEADER_BLOCK as u32).to_le_bytes());
    header.extend_from_slice(&id.to_le_bytes());
    header.extend_from_slice(&size.to_le_bytes());
    let crc = crc::crc32c(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    header.resize(HEADER_BLOCK as usize, 0);
    header
}

impl LogFile<File> {
    /// Creates the log at `path` for the store `id`, with a ring of `size` bytes
    /// ([`DEFAULT_SIZE`] in the store): written whole under a temporary name, synced, linked to
    /// `path` and the directory synced. Refused when `path` exists.
    pub(crate) fn create(path: &Path, id: u64, size: u64) -> std::result::Result<Self, LogError> {
        check_size(path, size)?;
        let io_err = |op, source| LogError::Io {
            path: path.to_owned(),
            op,
            source,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(format!(".creating-{}", std::process::id()));
        let temporary = PathBuf::from(temporary);
        let made = (|| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&temporary)
                .map_err(|e| io_err("create", e))?;
            let log = LogFile::format(file, path, id, size)?;
            fs::hard_link(&temporary, path).map_err(|e| io_err("create", e))?;
            Ok(log)
        })();
        // The temporary name goes in every case; the file stays under `path` once linked.
        let _ = fs::remove_file(&temporary);
        let log = made?;
        File::open(dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| io_err("sync the directory of", e))?;
        Ok(log)
    }

    /// Opens the log at `path` and checks its header: the magic, the format, the store's `id`
    /// and, when given, the ring's `size`; and that the file holds the whole ring.
    pub(crate) fn open(
        path: &Path,
        id: u64,
        size: Option<u64>,
    ) -> std::result::Result<Self, LogError> {
        let path_buf = path.to_owned();
        let io_err = |op, source| LogError::Io {
            path: path_buf.clone(),
            op,
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err("open", e))?;
        let len = file.metadata().map_err(|e| io_err("open", e))?.len();
        let mut head = vec![0u8; usize::try_from(len.min(HEADER_BLOCK)).expect("4096")];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| io_err("read", e))?;
        let found_size = check_header(path, &head, id, size, len)?;
        Ok(LogFile {
            io: file,
            path: path.to_owned(),
            id,
            size: found_size,
        })
    }
}

/// Checks a log's header, `head` (the file's first bytes, up to [`HEADER_BLOCK`]), of a file of
/// `len` bytes; the ring's size.
fn check_header(
    path: &Path,
    head: &[u8],
    id: u64,
    size: Option<u64>,
    len: u64,
) -> std::result::Result<u64, LogError> {
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
        || format == 0
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
    if let Some(expected) = size {
        if expected != found_size {
            return Err(LogError::OtherSize {
                path: path(),
                expected,
                found: found_size,
            });
        }
    }
    if len < HEADER_BLOCK + found_size {
        return Err(LogError::Short {
            path: path(),
            len,
            needs: HEADER_BLOCK + found_size,
        });
    }
    Ok(found_size)
}

impl<F: LogIo> LogFile<F> {
    /// Writes the whole log on `io` (a new, empty file): the header and a ring of zeros, then
    /// syncs it. `path` names it in errors.
    pub(crate) fn format(
        io: F,
        path: &Path,
        id: u64,
        size: u64,
    ) -> std::result::Result<Self, LogError> {
        check_size(path, size)?;
        let io_err = |op, source| LogError::Io {
            path: path.to_owned(),
            op,
            source,
        };
        // Real zeros, not a hole or fallocate's unwritten extents: the first write to either
        // changes the file's block map, and its sync would then be a metadata sync.
        let chunk = vec![0u8; (1 << 20).min(size) as usize];
        let mut at = 0;
        while at < size {
            let len = (size - at).min(chunk.len() as u64) as usize;
            io.write_at(&chunk[..len], HEADER_BLOCK + at)
                .map_err(|e| io_err("write", e))?;
            at += len as u64;
        }
        io.write_at(&header(id, size), 0)
            .map_err(|e| io_err("write", e))?;
        io.sync_data().map_err(|e| io_err("sync", e))?;
        Ok(LogFile {
            io,
            path: path.to_owned(),
            id,
            size,
        })
    }

    /// The ring's size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The store's id in the header.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The I/O the log runs on (the crash tests' recorder).
    #[cfg(test)]
    pub(crate) fn io(&self) -> &F {
        &self.io
    }

    /// Where position `lsn` is in the file, when `len` bytes from there stay within one lap.
    fn offset(&self, lsn: u64, len: usize) -> Result<u64> {
        let at = lsn % self.size;
        if lsn % ALIGN != 0 || len as u64 > self.size - at {
            return Err(Error::invalid(format!(
                "{}: {len} bytes at log position {lsn} are not aligned to {ALIGN} or run past \
                 the end of the ring ({} bytes)",
                self.path.display(),
                self.size
            )));
        }
        Ok(HEADER_BLOCK + at)
    }

    /// Writes `bytes` (records) at position `lsn`, in place: `pwrite` at
    /// `HEADER_BLOCK + lsn % size`. Refused with [`Error::InvalidArgument`] when they would run
    /// past the ring's end (see [`crate::storage::wal::Placement`]).
    pub(crate) fn write_at(&self, lsn: u64, bytes: &[u8]) -> Result<()> {
        let offset = self.offset(lsn, bytes.len())?;
        self.io
            .write_at(bytes, offset)
            .map_err(|e| Error::Io(e).at_path("write", &self.path))
    }

    /// Makes every write before it durable: `fdatasync`, a data-only sync, as the file's size
    /// never changes.
    pub(crate) fn sync(&self) -> Result<()> {
        self.io
            .sync_data()
            .map_err(|e| Error::Io(e).at_path("sync", &self.path))
    }
}

impl<F: LogIo> Ring for LogFile<F> {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()> {
        let offset = self.offset(lsn, bytes.len())?;
        self.io
            .read_at(bytes, offset)
            .map_err(|e| Error::Io(e).at_path("read", &self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Status;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn create_writes_the_header_and_zeros_and_open_checks_them() {
        let dir = dir();
        let path = dir.path().join("store.wal");
        let log = LogFile::create(&path, 0xfeed, 3 * MIN_SIZE).unwrap();
        assert_eq!((log.size(), log.id()), (3 * MIN_SIZE, 0xfeed));
        assert_eq!(log.path(), path);
        // The store's size is one this code makes.
        check_size(&path, DEFAULT_SIZE).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, HEADER_BLOCK + 3 * MIN_SIZE);
        assert_eq!(&bytes[..8], b"fencelog");
        assert!(bytes[HEADER_BLOCK as usize..].iter().all(|&b| b == 0));
        // Nothing is left under a temporary name.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        for size in [None, Some(3 * MIN_SIZE)] {
            let log = LogFile::open(&path, 0xfeed, size).unwrap();
            assert_eq!(log.size(), 3 * MIN_SIZE);
        }
        // An existing log is never replaced.
        let err = LogFile::create(&path, 0xbeef, MIN_SIZE).unwrap_err();
        assert!(
            matches!(&err, LogError::Io { source, .. }
            if source.kind() == io::ErrorKind::AlreadyExists),
            "{err}"
        );
        LogFile::open(&path, 0xfeed, Some(3 * MIN_SIZE)).unwrap();
    }

    #[test]
    fn writes_land_in_place_and_read_back() {
        let dir = dir();
        let path = dir.path().join("store.wal");
        let log = LogFile::create(&path, 1, MIN_SIZE).unwrap();
        log.write_at(8, b"12345678").unwrap();
        // The second lap's position 16 is the file's same bytes as the first's.
        log.write_at(MIN_SIZE + 16, b"abcdefgh").unwrap();
        log.sync().unwrap();
        let bytes = fs::read(&path).unwrap();
        let ring = &bytes[HEADER_BLOCK as usize..];
        assert_eq!(&ring[8..24], b"12345678abcdefgh");
        let mut back = [0u8; 8];
        log.read(2 * MIN_SIZE + 8, &mut back).unwrap();
        assert_eq!(&back, b"12345678");
        // A record never spans the ring's end; positions are aligned.
        for (lsn, len) in [
            (MIN_SIZE - 8, 16),
            (MIN_SIZE + 4, 8),
            (0, MIN_SIZE as usize + 8),
        ] {
            let err = log.write_at(lsn, &vec![1; len]).unwrap_err();
            assert_eq!(err.status(), Status::InvalidArgument, "{err}");
            assert!(err.to_string().contains("store.wal"), "{err}");
        }
        log.write_at(MIN_SIZE - 8, &[2; 8]).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), HEADER_BLOCK + MIN_SIZE);
    }

    /// Every way a file at the log's path may fail to be this store's log, with the path in
    /// the message.
    #[test]
    fn every_header_error() {
        let dir = dir();
        let path = dir.path().join("store.wal");
        LogFile::create(&path, 5, 2 * MIN_SIZE).unwrap();
        let good = fs::read(&path).unwrap();
        let open_bytes = |bytes: &[u8], id, size| {
            let path = dir.path().join("other.wal");
            fs::write(&path, bytes).unwrap();
            let err = LogFile::open(&path, id, size).unwrap_err();
            assert!(err.to_string().contains("other.wal"), "{err}");
            err
        };
        let with = |at: usize, field: &[u8], fix_crc: bool| {
            let mut bytes = good.clone();
            bytes[at..at + field.len()].copy_from_slice(field);
            if fix_crc {
                let crc = crc::crc32c(&bytes[..FIELDS]);
                bytes[FIELDS..FIELDS + 4].copy_from_slice(&crc.to_le_bytes());
            }
            bytes
        };

        let err = open_bytes(b"SQLite format 3\0 and more", 5, None);
        assert!(matches!(err, LogError::NotALog { .. }), "{err}");
        let err = open_bytes(b"", 5, None);
        assert!(matches!(err, LogError::NotALog { .. }), "{err}");
        let err = open_bytes(&good[..20], 5, None);
        assert!(matches!(err, LogError::Short { .. }), "{err}");
        let err = open_bytes(&good[..good.len() - 8], 5, None);
        assert!(
            matches!(err, LogError::Short { needs, .. } if needs == good.len() as u64),
            "{err}"
        );
        let err = open_bytes(&good, 6, None);
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
        let err = open_bytes(&good, 5, Some(MIN_SIZE));
        assert!(matches!(err, LogError::OtherSize { .. }), "{err}");
        let err = open_bytes(&with(8, &2u32.to_le_bytes(), true), 5, None);
        assert!(
            matches!(err, LogError::NewerFormat { found: 2, .. }),
            "{err}"
        );
        // A newer format is told apart even when the rest of its header is not ours.
        let err = open_bytes(&with(8, &7u32.to_le_bytes(), false), 5, None);
        assert!(
            matches!(err, LogError::NewerFormat { found: 7, .. }),
            "{err}"
        );
        let err = open_bytes(&with(20, &[1], false), 5, None);
        assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");
        let err = open_bytes(&with(24, &12345u64.to_le_bytes(), true), 5, None);
        assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");
        let err = open_bytes(&with(8, &0u32.to_le_bytes(), true), 5, None);
        assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");

        let missing = dir.path().join("missing.wal");
        let err = LogFile::open(&missing, 5, None).unwrap_err();
        assert!(
            matches!(&err, LogError::Io { source, .. }
            if source.kind() == io::ErrorKind::NotFound),
            "{err}"
        );
        for size in [0, 100, MIN_SIZE + 8, MAX_SIZE * 2] {
            let err = LogFile::create(&missing, 5, size).unwrap_err();
            assert!(matches!(err, LogError::BadSize { .. }), "{err}");
        }
        assert!(!missing.exists());

        // Each maps to the crate's error of its kind, the path in its message.
        let statuses = [
            (open_bytes(b"garbage!", 5, None), Status::NotAStore),
            (open_bytes(&good, 6, None), Status::NotAStore),
            (open_bytes(&good[..40], 5, None), Status::Corrupt),
            (open_bytes(&good, 5, Some(MIN_SIZE)), Status::Corrupt),
            (
                open_bytes(&with(8, &2u32.to_le_bytes(), true), 5, None),
                Status::IncompatibleVersion,
            ),
            (LogFile::open(&missing, 5, None).unwrap_err(), Status::Io),
        ];
        for (err, status) in statuses {
            let message = err.to_string();
            let err = Error::from(err);
            assert_eq!(err.status(), status, "{err}");
            if status != Status::IncompatibleVersion {
                assert!(err.to_string().contains(".wal"), "{message} became {err}");
            }
        }
    }
}
