//! The one error type of fencelock and the stable status codes it maps to.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything that can go wrong in fencelock.
///
/// Errors that describe a refusal (`Locked`, `StaleToken`, `LockLost`, `Timeout`,
/// `InvalidArgument`) never change the store. Errors from the storage (`Io`, `Corrupt`,
/// `Storage`) abort the transaction they happened in, so nothing of it is applied either.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::Error;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// match store.acquire("nightly", Duration::from_secs(30)) {
///     Err(Error::Locked { token, pid, .. }) => {
///         assert_eq!((token, pid), (holder.token(), std::process::id()));
///     }
///     other => panic!("expected Locked, got {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by a live, unexpired lease.
    Locked {
        /// The lock's name.
        name: String,
        /// Token of the current lease.
        token: u64,
        /// Process id of the current holder.
        pid: u32,
        /// Time left before the current lease expires.
        remaining: Duration,
    },
    /// A fenced write carried a token lower than the highest one the key or resource accepted.
    StaleToken {
        /// The token the write carried.
        token: u64,
        /// The highest token the key or resource has accepted.
        highest: u64,
    },
    /// The holder's lease expired or another holder took the lock over. Also an
    /// `acquire_and_put` through the redo log stopped past its TTL between its grant and its
    /// write, whose lock was granted to another who wrote the key first: nothing was written.
    LockLost {
        /// The token of the lease that was lost.
        token: u64,
        /// The token of the lease now recorded for the lock, if any.
        current: Option<u64>,
    },
    /// A waiting acquire would wait for a live lease that a holder of this same store, granted
    /// on this same thread, holds: nothing but that lease's end (its release, or its TTL) could
    /// end the wait, so it is refused at once and nothing was changed. Another thread, another
    /// open of the store or another process waits as ever.
    WouldDeadlock {
        /// The lock's name.
        name: String,
        /// The token of this thread's lease the wait would wait for.
        token: u64,
    },
    /// A semaphore acquire asked for another permit count than the one stored with the name
    /// while permits of it are live; nothing was changed. Once no permit is live, the next
    /// acquire sets the count anew.
    PermitsMismatch {
        /// The permit count stored with the name.
        permits: u32,
        /// The permit count the acquire asked for.
        requested: u32,
    },
    /// A wait gave up after its timeout: a waiting acquire, or an open or write behind another
    /// process that holds the store's write lock (it may be paused inside a commit). A write that
    /// gives up after another process took it into its commit (writes of all processes share
    /// commits) may still land when that process resumes, as a write that times out inside any
    /// database's commit may; retrying it is safe. An acquire that gives up never leaves a live
    /// lease: with the redo log, an `acquire_and_put` whose write the key's higher tokens kept
    /// refusing until its wait ran out gives its grant back and writes nothing. The same unknown outcome, as `Timeout`, for a write (a put, a fence, or
    /// `acquire_and_put`, which then gives its grant back) run again because the process that ran
    /// it first (a server, or another process's commit) died before reporting it, when the re-run
    /// is refused for what may have happened after the first run (a higher token, its lease's end)
    /// and the key does not hold it.
    ///
    /// The message names the locks the wait was for and how long it lasted, as filelock's
    /// `Timeout` names its lock file: "timed out after 5.000s waiting for lock \"nightly\"".
    Timeout {
        /// The locks a waiting acquire waited for, in the order asked; empty for a wait that was
        /// not for a lock (an open or a write behind another process's commit).
        locks: Vec<String>,
        /// How long the wait lasted, when it was a wait of the caller's (an acquire's timeout);
        /// `None` for a wait inside the store.
        waited: Option<Duration>,
    },
    /// A wait was ended through its [`crate::Cancel`] handle; nothing was changed.
    Cancelled,
    /// The store's path no longer names the file this handle opened: the file was deleted,
    /// renamed or replaced. Writes and grants through this handle are refused, since another
    /// process opening the path would start a separate store with its own tokens.
    Replaced(String),
    /// An argument was out of range or malformed; the message says which and why.
    InvalidArgument(String),
    /// The file exists but is not a fencelock store (another program's file or database).
    NotAStore(String),
    /// The store was written with a newer schema than this library understands.
    IncompatibleVersion {
        /// Schema version found in the file.
        found: u64,
        /// Highest schema version this library reads.
        supported: u64,
    },
    /// The file is damaged.
    Corrupt(String),
    /// The store is open in single-process mode elsewhere, or in another mode than requested.
    InUse,
    /// The store was used in a child process after `fork()`; open a new store in the child.
    Forked,
    /// An operating-system I/O error; [`Error::raw_os_error`] gives the system's error number,
    /// and [`Error::path`] the file it concerns when fencelock knows it (an open's store file),
    /// which the message names too, as fs-err's and Go's `fs.PathError` do.
    Io(std::io::Error),
    /// Any other error reported by the storage engine.
    Storage(String),
}

/// Stable status codes of the C ABI. A retired code is never reused.
///
/// # Examples
///
/// ```
/// use fencelock::{Error, Status};
/// assert_eq!(Error::Timeout { locks: vec![], waited: None }.status(), Status::Timeout);
/// assert_eq!(Status::Timeout as i32, 4); // FENCELOCK_TIMEOUT in the C header
/// ```
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// The lock is held by a live, unexpired lease.
    Locked = 1,
    /// A fenced write carried a token lower than the highest one accepted.
    StaleToken = 2,
    /// The holder's lease expired or was taken over.
    LockLost = 3,
    /// A waiting acquire timed out.
    Timeout = 4,
    /// An argument was out of range or malformed.
    InvalidArgument = 5,
    /// A required pointer was NULL.
    NullPointer = 6,
    /// An operating-system I/O error.
    Io = 7,
    /// The file is damaged.
    Corrupt = 8,
    /// The file is not a fencelock store.
    NotAStore = 9,
    /// The store was written by a newer version of fencelock.
    IncompatibleVersion = 10,
    /// The store is in use in a way that excludes this open.
    InUse = 11,
    /// The store was used in a child process after `fork()`.
    Forked = 12,
    /// Any other storage error.
    Storage = 13,
    /// The key does not exist.
    NotFound = 14,
    /// A panic was caught at the C boundary; the handle involved may be unusable.
    Panic = 15,
    /// A wait was cancelled through its cancel handle.
    Cancelled = 16,
    /// The store file was deleted, renamed or replaced since it was opened.
    Replaced = 17,
    /// A semaphore acquire asked for another permit count than the live permits of the name.
    PermitsMismatch = 18,
    /// A waiting acquire would wait for a lease this same thread holds through this store.
    WouldDeadlock = 19,
}

impl Status {
    /// A static, human-readable description of the status.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::Status;
    /// assert_eq!(Status::Locked.description(), "the lock is held by another live lease");
    /// ```
    #[must_use]
    pub fn description(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Locked => "the lock is held by another live lease",
            Status::StaleToken => "the token is lower than the highest token already accepted",
            Status::LockLost => "the lease expired or was taken over",
            Status::Timeout => "timed out waiting",
            Status::InvalidArgument => "invalid argument",
            Status::NullPointer => "a required pointer was NULL",
            Status::Io => "I/O error",
            Status::Corrupt => "the store file is damaged",
            Status::NotAStore => "the file is not a fencelock store",
            Status::IncompatibleVersion => "the store was written by a newer fencelock",
            Status::InUse => "the store is in use in a way that excludes this open",
            Status::Forked => "the store was opened before fork(); open a new store in the child",
            Status::Storage => "storage engine error",
            Status::NotFound => "not found",
            Status::Panic => "internal panic caught at the C boundary",
            Status::Cancelled => "the wait was cancelled",
            Status::Replaced => {
                "the store file was deleted, renamed or replaced since it was opened"
            }
            Status::PermitsMismatch => {
                "the semaphore holds live permits granted with another permit count"
            }
            Status::WouldDeadlock => {
                "the wait would wait for a lease this thread holds through this store"
            }
        }
    }
}

impl Error {
    /// The status code this error maps to.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Status;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let err = store.acquire("nightly", Duration::from_secs(30)).unwrap_err();
    /// assert_eq!(err.status(), Status::Locked);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn status(&self) -> Status {
        match self {
            Error::Locked { .. } => Status::Locked,
            Error::StaleToken { .. } => Status::StaleToken,
            Error::LockLost { .. } => Status::LockLost,
            Error::PermitsMismatch { .. } => Status::PermitsMismatch,
            Error::WouldDeadlock { .. } => Status::WouldDeadlock,
            Error::Timeout { .. } => Status::Timeout,
            Error::Cancelled => Status::Cancelled,
            Error::Replaced(_) => Status::Replaced,
            Error::InvalidArgument(_) => Status::InvalidArgument,
            Error::NotAStore(_) => Status::NotAStore,
            Error::IncompatibleVersion { .. } => Status::IncompatibleVersion,
            Error::Corrupt(_) => Status::Corrupt,
            Error::InUse => Status::InUse,
            Error::Forked => Status::Forked,
            Error::Io(_) => Status::Io,
            Error::Storage(_) => Status::Storage,
        }
    }

    /// Whether this error is a refusal decided by fencelock's rules, as opposed to a failure of
    /// the storage. A refusal writes nothing, so other operations of the same transaction stand.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::Locked { .. }
                | Error::StaleToken { .. }
                | Error::LockLost { .. }
                | Error::PermitsMismatch { .. }
                | Error::WouldDeadlock { .. }
                | Error::Timeout { .. }
                | Error::Cancelled
                | Error::InvalidArgument(_)
        )
    }

    /// A copy of this error, for handing one failure to every operation of a batch.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Locked {
                name,
                token,
                pid,
                remaining,
            } => Error::Locked {
                name: name.clone(),
                token: *token,
                pid: *pid,
                remaining: *remaining,
            },
            Error::StaleToken { token, highest } => Error::StaleToken {
                token: *token,
                highest: *highest,
            },
            Error::LockLost { token, current } => Error::LockLost {
                token: *token,
                current: *current,
            },
            Error::PermitsMismatch { permits, requested } => Error::PermitsMismatch {
                permits: *permits,
                requested: *requested,
            },
            Error::WouldDeadlock { name, token } => Error::WouldDeadlock {
                name: name.clone(),
                token: *token,
            },
            Error::Timeout { locks, waited } => Error::Timeout {
                locks: locks.clone(),
                waited: *waited,
            },
            Error::Cancelled => Error::Cancelled,
            Error::Replaced(message) => Error::Replaced(message.clone()),
            Error::InvalidArgument(message) => Error::InvalidArgument(message.clone()),
            Error::NotAStore(message) => Error::NotAStore(message.clone()),
            Error::IncompatibleVersion { found, supported } => Error::IncompatibleVersion {
                found: *found,
                supported: *supported,
            },
            Error::Corrupt(message) => Error::Corrupt(message.clone()),
            Error::InUse => Error::InUse,
            Error::Forked => Error::Forked,
            Error::Io(err) => Error::Io(match path_error(err) {
                Some(with_path) => io::Error::new(
                    err.kind(),
                    PathError {
                        op: with_path.op,
                        path: with_path.path.clone(),
                        source: io_error(
                            with_path.source.kind(),
                            with_path.source.to_string(),
                            os_code(&with_path.source),
                        ),
                    },
                ),
                None => io_error(err.kind(), err.to_string(), os_code(err)),
            }),
            Error::Storage(message) => Error::Storage(message.clone()),
        }
    }

    /// The file an [`Error::Io`] concerns, when fencelock knows it: the store file of a failed
    /// open (a missing directory, a file without permission). `None` for every other error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use fencelock::Store;
    /// let err = Store::open("/no/such/dir/locks.db").unwrap_err();
    /// assert_eq!(err.path(), Some(Path::new("/no/such/dir/locks.db")));
    /// assert!(err.to_string().contains("\"/no/such/dir/locks.db\""), "{err}");
    /// assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    /// assert_eq!(fencelock::Error::Timeout { locks: vec![], waited: None }.path(), None);
    /// ```
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Io(err) => path_error(err).map(|with_path| with_path.path.as_path()),
            _ => None,
        }
    }

    /// This error with the file it concerns: an [`Error::Io`] that does not name a file yet
    /// names `path`, as the failure of `op` ("open"); every other error is returned as it is.
    pub(crate) fn at_path(self, op: &'static str, path: &Path) -> Error {
        match self {
            Error::Io(err) if path_error(&err).is_none() => Error::Io(io::Error::new(
                err.kind(),
                PathError {
                    op,
                    path: path.to_owned(),
                    source: err,
                },
            )),
            other => other,
        }
    }

    /// The operating system's error number (`errno`) behind this error, if it has one: that of
    /// an [`Error::Io`] the system reported, as [`io::Error::raw_os_error`] gives it, kept
    /// when fencelock adds context to the message or hands the error to another operation or
    /// process. `None` for every other error.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Error, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let missing = dir.path().join("missing.db");
    /// let read_only = Options { read_only: true, ..Options::default() };
    /// let err = Store::open_with(&missing, &read_only).unwrap_err();
    /// assert!(matches!(err, Error::Io(_)));
    /// assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    /// assert_eq!(Error::Timeout { locks: vec![], waited: None }.raw_os_error(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io(err) => os_code(err),
            _ => None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument(message.into())
    }

    /// A wait inside the store that ran out: not (yet) said for which locks nor how long.
    pub(crate) fn timed_out() -> Error {
        Error::Timeout {
            locks: Vec::new(),
            waited: None,
        }
    }

    /// This error, if it is a [`Error::Timeout`] that does not say which locks it waited for,
    /// saying it: `locks` and the wait's length `waited`. Every other error as it is.
    pub(crate) fn waited_for<S: AsRef<str>>(self, locks: &[S], waited: Duration) -> Error {
        match self {
            Error::Timeout { locks: none, .. } if none.is_empty() => Error::Timeout {
                locks: locks.iter().map(|name| name.as_ref().to_owned()).collect(),
                waited: Some(waited),
            },
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Locked {
                name,
                token,
                pid,
                remaining,
            } => write!(
                f,
                "lock {name:?} is held by pid {pid} with token {token} for {:.3}s more",
                remaining.as_secs_f64()
            ),
            Error::StaleToken { token, highest } => write!(
                f,
                "stale token {token}: a write with token {highest} was already accepted"
            ),
            Error::LockLost { token, current } => match current {
                Some(current) => write!(
                    f,
                    "lease with token {token} was lost: the lock is now at token {current}"
                ),
                None => write!(
                    f,
                    "lease with token {token} was lost: it expired or was released"
                ),
            },
            Error::PermitsMismatch { permits, requested } => write!(
                f,
                "the semaphore has live permits of a count of {permits}; this acquire asked for {requested}"
            ),
            Error::WouldDeadlock { name, token } => write!(
                f,
                "lock {name:?} is held by this thread's own lease (token {token}) through this \
                 store: the wait would last until that lease ends"
            ),
            Error::Timeout { locks, waited } => {
                write!(f, "timed out")?;
                if let Some(waited) = waited {
                    write!(f, " after {:.3}s", waited.as_secs_f64())?;
                }
                match locks.as_slice() {
                    [] => write!(f, " waiting"),
                    [name] => write!(f, " waiting for lock {name:?}"),
                    names => write!(f, " waiting for locks {names:?}"),
                }
            }
            Error::Cancelled => write!(f, "the wait was cancelled"),
            Error::Replaced(message) => write!(f, "store file replaced: {message}"),
            Error::InvalidArgument(message) => write!(f, "invalid argument: {message}"),
            Error::NotAStore(message) => write!(f, "not a fencelock store: {message}"),
            Error::IncompatibleVersion { found, supported } => write!(
                f,
                "store schema version {found} is newer than the supported version {supported}"
            ),
            Error::Corrupt(message) => write!(f, "store is damaged: {message}"),
            Error::InUse => write!(
                f,
                "store is open in another process in single-process mode, or in another mode"
            ),
            Error::Forked => write!(
                f,
                "store was opened before fork(); open a new store in the child process"
            ),
            Error::Io(err) => write!(f, "I/O error: {err}"),
            Error::Storage(message) => write!(f, "storage error: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(err) => Some(err),
            _ => None,
        }
    }
}

/// The message of an I/O error that fencelock wrote itself, and the system's error number it
/// keeps: an `io::Error` keeps a number only when it was made from one.
#[derive(Debug)]
struct WithOsCode {
    message: String,
    code: i32,
}

impl fmt::Display for WithOsCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WithOsCode {}

/// An I/O error of `kind` that says `message` and keeps the system's error number `code`, for
/// [`Error::raw_os_error`]. The system's own error when `message` is how it reads, as a copy
/// of one does.
pub(crate) fn io_error(kind: io::ErrorKind, message: String, code: Option<i32>) -> io::Error {
    let Some(code) = code else {
        return io::Error::new(kind, message);
    };
    let system = io::Error::from_raw_os_error(code);
    if system.to_string() == message {
        system
    } else {
        io::Error::new(kind, WithOsCode { message, code })
    }
}

/// An I/O error about a file: the operation, the file's path and the system's error, as
/// fs-err's errors and Go's `fs.PathError` carry them. Its message is `open "PATH": ERROR`.
#[derive(Debug)]
struct PathError {
    op: &'static str,
    path: PathBuf,
    source: io::Error,
}

impl fmt::Display for PathError {
    // The path quoted and escaped (Debug), as the message has always shown it.
    #[allow(clippy::unnecessary_debug_formatting)]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}: {}", self.op, self.path, self.source)
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The [`PathError`] inside `err`, if it is one.
fn path_error(err: &io::Error) -> Option<&PathError> {
    err.get_ref()?.downcast_ref::<PathError>()
}

/// The system's error number of `err`, also of one [`io_error`] or [`Error::at_path`] made.
fn os_code(err: &io::Error) -> Option<i32> {
    if let Some(with_path) = path_error(err) {
        return os_code(&with_path.source);
    }
    err.raw_os_error()
        .or_else(|| Some(err.get_ref()?.downcast_ref::<WithOsCode>()?.code))
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        Error::Io(err)
    }
}

impl From<redb::Error> for Error {
    fn from(err: redb::Error) -> Self {
        match err {
            redb::Error::Corrupted(message) => Error::Corrupt(message),
            redb::Error::Io(err) => Error::Io(err),
            redb::Error::PreviousIo => Error::Io(std::io::Error::other(
                "an earlier I/O error stopped the database handle; it is reopened",
            )),
            redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => Error::InUse,
            redb::Error::UpgradeRequired(version) => Error::NotAStore(format!(
                "redb file format {version} is older than this library reads"
            )),
            other => Error::Storage(other.to_string()),
        }
    }
}

macro_rules! from_redb {
    ($($ty:ty),*) => {$(
        impl From<$ty> for Error {
            fn from(err: $ty) -> Self {
                Error::from(redb::Error::from(err))
            }
        }
    )*};
}

from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// The result type of fencelock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// fn export(store: &fencelock::Store) -> fencelock::Result<u64> {
///     let holder = store.acquire("nightly", Duration::from_secs(30))?;
///     holder.put(b"nightly/report", b"done")?;
///     Ok(holder.token())
/// }
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// assert_eq!(export(&store)?, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_error_number_survives_copies_and_context() {
        let system = Error::Io(io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(system.raw_os_error(), Some(libc::ENOSPC));
        let copy = system.duplicate();
        assert_eq!(copy.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(copy.to_string(), system.to_string());
        // A copy of the system's own error is the system's error again, for Rust callers that
        // ask the io::Error itself.
        let Error::Io(inner) = &copy else {
            panic!("{copy:?} is not Io")
        };
        assert_eq!(inner.raw_os_error(), Some(libc::ENOSPC));

        let message = format!("reopening: {system}");
        let with_context = Error::Io(io_error(
            io::ErrorKind::Other,
            message.clone(),
            system.raw_os_error(),
        ));
        assert_eq!(with_context.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(with_context.to_string(), format!("I/O error: {message}"));
        assert_eq!(with_context.duplicate().raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn errors_without_a_system_cause_have_no_error_number() {
        assert_eq!(
            Error::Io(io::Error::other("no number")).raw_os_error(),
            None
        );
        assert_eq!(
            Error::Io(io_error(io::ErrorKind::Other, "text".into(), None)).raw_os_error(),
            None
        );
        assert_eq!(Error::timed_out().raw_os_error(), None);
        assert_eq!(Error::Storage("disk".into()).raw_os_error(), None);
    }
}
