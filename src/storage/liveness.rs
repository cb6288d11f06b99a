//! Holder liveness through open-file-description locks on the store file itself.
//!
//! Every lease record names a liveness id `L`, and its holder holds a write lock on byte
//! `BASE + L` of the store file. The requesting process draws a fresh random id and locks it
//! before it asks for the grant, so the lock is the holder's own whichever process commits the
//! grant; it keeps the lock when the grant is reported to it and drops it otherwise. The kernel
//! drops the lock when the holder releases it or when the last descriptor of the holding open
//! file closes, which includes the death of the process. Anyone may test the byte: a lease whose
//! byte is free has no live holder, whatever its TTL says. A stopped (`SIGSTOP`) holder keeps its
//! lock, so a paused holder keeps its lease until the TTL runs out. (Records of schema 1 use their
//! token as the id.)
//!
//! The locks are advisory and on the file's inode, so every path to the file (symlinks, hard
//! links) sees the same ones, and no sidecar file can be lost. redb 4 locks bytes below 320 (its
//! header) and from 2^62 up, also with open-file-description locks, and none in between: fencelock
//! uses `[2^61, 2^62)`. Byte `BASE + 0`, never a liveness id, serializes opens.
//!
//! Each store opens the file twice more: locks are taken through `hold`, tested through `probe`.
//! Two open file descriptions conflict even inside one process, so a probe sees the locks of
//! this process's holders too.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The offset of liveness id 0's byte. Bytes of the file beyond its end can be locked, and redb
/// never locks between 320 and 2^62.
const BASE: u64 = 1 << 61;
/// The bytes of the store file that fencelock locks, `[2^61, 2^62)`: the server's backend
/// leaves them out of the whole-file lock of redb's exclusive mode (`local/serve.rs`).
pub(crate) const LOCKED_BYTES: (u64, u64) = (BASE, 1 << 62);
/// The highest liveness id, whose byte lies just below the offsets redb locks.
pub(crate) const MAX_ID: u64 = (1 << 61) - 1;

/// The lowest liveness id drawn at random. Lower ids are the tokens that schema-1 lease
/// records use as their liveness ids, and byte 0 serializes opens.
const FIRST_RANDOM_ID: u64 = 1 << 48;

/// A liveness id drawn at random from `[2^48, MAX_ID]`: 2^61 - 2^48 ids, so that two ids in
/// use at once (or one in use and one in a stale record) coincide with a negligible chance.
/// A splitmix64 sequence from a seed the kernel gives once a process: a grant costs no system
/// call for it, and a child of `fork()` (which reseeds) draws other ids than its parent.
pub(crate) fn fresh_id() -> io::Result<u64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    static SEEDED_BY: AtomicU64 = AtomicU64::new(0);
    let pid = u64::from(std::process::id());
    if SEEDED_BY.load(Ordering::Acquire) != pid {
        STATE.store(crate::base::random_u64()?, Ordering::Release);
        SEEDED_BY.store(pid, Ordering::Release);
    }
    let mut z = STATE
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::AcqRel)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    Ok(FIRST_RANDOM_ID + z % (MAX_ID - FIRST_RANDOM_ID + 1))
}

pub(crate) struct Liveness {
    hold: File,
    probe: File,
}

/// Opens (creating it if needed, readable only by its writers) the store file for its locks.
/// `File` opens with `O_CLOEXEC`, so a child process started with exec does not inherit them.
fn open(path: &Path) -> io::Result<File> {
    crate::storage::mode::open_or_create(path)
}

impl Liveness {
    /// Liveness shared by every process that opens the store file at `path`.
    pub(crate) fn shared(path: &Path) -> io::Result<Liveness> {
        Ok(Liveness {
            hold: open(path)?,
            probe: open(path)?,
        })
    }

    /// Liveness seen but never held, for a read-only store: the file is opened for reading
    /// only, which is enough to test the locks.
    pub(crate) fn observer(path: &Path) -> io::Result<Liveness> {
        Ok(Liveness {
            hold: File::open(path)?,
            probe: File::open(path)?,
        })
    }

    /// Liveness private to this process, for single-process mode, where redb holds a lock over
    /// the whole store file: an anonymous in-memory file, opened twice.
    pub(crate) fn private() -> io::Result<Liveness> {
        let flags = rustix::fs::MemfdFlags::CLOEXEC;
        let hold = File::from(rustix::fs::memfd_create(c"fencelock-liveness", flags)?);
        // Opening the /proc link makes a second open file description of the same file.
        let probe = open(Path::new(&format!("/proc/self/fd/{}", hold.as_raw_fd())))?;
        Ok(Liveness { hold, probe })
    }

    /// Excludes the opens of other stores on the same file until the returned file is dropped:
    /// a lock on id 0's byte through an open file of its own. `Ok(None)` when a single-process
    /// store holds the file. While another open holds the byte, calls `waited` between tries
    /// and gives up with its error: that open may be paused. A read-only open shares the byte
    /// with other read-only opens, through a file opened for reading only (it creates nothing).
    pub(crate) fn lock_for_open(
        path: &Path,
        read_only: bool,
        mut waited: impl FnMut() -> crate::Result<()>,
    ) -> crate::Result<Option<File>> {
        let (file, kind) = if read_only {
            (File::open(path)?, libc::F_RDLCK)
        } else {
            (open(path)?, libc::F_WRLCK)
        };
        loop {
            match fcntl(&file, libc::F_OFD_SETLK, kind, 0) {
                Ok(_) => return Ok(Some(file)),
                Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {}
                Err(err) => return Err(err.into()),
            }
            // Another open locks exactly this byte; redb's single-process writer write-locks
            // ranges that span it. A read lock is a read-only open's, or that of a process
            // that may only read the file, over whatever range: waited for, as for an open.
            let holder = fcntl(&file, libc::F_OFD_GETLK, kind, 0)?;
            if i32::from(holder.l_type) == libc::F_WRLCK
                && (u64::try_from(holder.l_start), holder.l_len) != (Ok(BASE), 1)
            {
                return Ok(None);
            }
            // Another open of a few milliseconds is under way.
            waited()?;
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Takes the liveness lock `id` for this store. Returns `false` if another open file holds
    /// the byte (another lease's id; ids are drawn at random, so the caller draws another).
    /// not undone its lock yet.
    pub(crate) fn lock(&self, id: u64) -> io::Result<bool> {
        match fcntl(&self.hold, libc::F_OFD_SETLK, libc::F_WRLCK, id) {
            Ok(_) => Ok(true),
            Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Locks a liveness id drawn at random for this store, of the store file at `path`. An id
    /// whose byte another open file holds is another lease's or store's: another is drawn.
    pub(crate) fn lock_fresh(&self, path: &Path) -> crate::Result<u64> {
        let mut reader = None;
        for _ in 0..64 {
            let id = fresh_id()?;
            if self.lock(id)? {
                return Ok(id);
            }
            if read_locked(&self.probe, id)? {
                reader = Some(id);
            }
        }
        Err(match reader {
            Some(id) => reader_in_the_way(path, id, "the liveness ids of leases and stores"),
            None => crate::Error::Storage(
                "no free liveness id could be drawn: 64 random ids were all held".into(),
            ),
        })
    }

    /// Ends this store's hold on the liveness lock `id`. Takes effect at once, without an fsync.
    pub(crate) fn unlock(&self, id: u64) -> io::Result<()> {
        fcntl(&self.hold, libc::F_OFD_SETLK, libc::F_UNLCK, id).map(|_| ())
    }

    /// Whether some open file (of any process, this one included) holds the liveness lock `id`.
    /// Holders take write locks; a read lock on the byte is not a holder's but anyone's who
    /// may read the file, and a write lock and a read lock never share a byte, so a read lock
    /// the kernel reports means that nobody holds `id`.
    pub(crate) fn is_held(&self, id: u64) -> io::Result<bool> {
        let lock = fcntl(&self.probe, libc::F_OFD_GETLK, libc::F_WRLCK, id)?;
        Ok(i32::from(lock.l_type) == libc::F_WRLCK)
    }
}

/// The liveness ids whose bytes claim the lease maps in use (`ring/map.rs`), below the ids drawn
/// at random, so never a holder's. The range is cut into regions of [`CLAIM_REGION`] bytes, one
/// per map (`TABLE_IDS.0 + (table_id % regions) * CLAIM_REGION`): each process that uses a map
/// holds a write lock on one byte of its map's region, drawn at random. Write locks, so that
/// only those who may write the store can make a claim: a read lock in the range, which anyone
/// who may read the file can take, is nobody's claim, and the test for claims of other maps asks
/// for a read lock, which only write locks conflict with.
const TABLE_IDS: (u64, u64) = (1 << 40, 1 << 41);
/// The bytes of one map's region: room for as many processes as use one store, drawing their
/// bytes at random.
const CLAIM_REGION: u64 = 1 << 16;

impl Liveness {
    /// Declares, for as long as the returned file stays open, that this process uses the lease
    /// map `table_id` for the store file at `path`; refused when a process uses another map of
    /// this file (it cannot see this one: another /dev/shm, or a map removed while in use),
    /// since two maps would grant one lock twice. The caller holds the open lock
    /// ([`Liveness::lock_for_open`]), so that two new maps are never declared at once.
    pub(crate) fn claim_map(path: &Path, table_id: u64) -> crate::Result<File> {
        let file = open(path)?;
        let regions = (TABLE_IDS.1 - TABLE_IDS.0) / CLAIM_REGION;
        let own = TABLE_IDS.0 + (table_id % regions) * CLAIM_REGION;
        for (start, end) in [(TABLE_IDS.0, own), (own + CLAIM_REGION, TABLE_IDS.1)] {
            if start == end {
                continue;
            }
            let lock = fcntl_range(
                &file,
                libc::F_OFD_GETLK,
                libc::F_RDLCK,
                BASE + start,
                end - start,
            )?;
            if i32::from(lock.l_type) != libc::F_UNLCK {
                return Err(crate::Error::Storage(format!(
                    "{} is in use by processes that share another copy of its shared memory \
                     (another /dev/shm, as in another container or mount namespace, or the \
                     store's ring in /dev/shm was removed while they used it): this process \
                     would keep a lease table of its own and could grant their locks again; it \
                     can open the store once they closed it",
                    path.display()
                )));
            }
        }
        // A byte another process of this map claimed, or that a reader locked, is passed over.
        let mut reader = None;
        for _ in 0..64 {
            let byte = own + fresh_id()? % CLAIM_REGION;
            match fcntl(&file, libc::F_OFD_SETLK, libc::F_WRLCK, byte) {
                Ok(_) => return Ok(file),
                Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {}
                Err(err) => return Err(err.into()),
            }
            if read_locked(&file, byte)? {
                reader = Some(byte);
            }
        }
        Err(match reader {
            Some(byte) => reader_in_the_way(path, byte, "the claims of the lease maps in use"),
            None => crate::Error::Storage(format!(
                "{}: no byte to claim its lease map with could be locked: 64 random bytes of \
                 the map's claims were all held",
                path.display()
            )),
        })
    }
}

impl Liveness {
    /// Whether some process declares that it uses a lease map of this file
    /// ([`Liveness::claim_map`]): the store's leases then live in shared memory, not in the file.
    pub(crate) fn maps_in_use(&self) -> io::Result<bool> {
        // A claim is a write lock: the test for a read lock sees claims only.
        let lock = fcntl_range(
            &self.probe,
            libc::F_OFD_GETLK,
            libc::F_RDLCK,
            BASE + TABLE_IDS.0,
            TABLE_IDS.1 - TABLE_IDS.0,
        )?;
        Ok(i32::from(lock.l_type) != libc::F_UNLCK)
    }
}

/// Whether `fencelock serve` holds the store file at `path`: redb's exclusive lock over the
/// whole file, but for the bytes fencelock locks (`storage/carved.rs`). A single-process store's
/// lock covers those too, and a multi-process store's locks none of the bytes just below them.
pub(crate) fn held_by_a_server(path: &Path) -> io::Result<bool> {
    let file = File::open(path)?;
    let below = range_locked(&file, BASE - 1, 1)?;
    let inside = range_locked(&file, BASE + FIRST_RANDOM_ID - 1, 1)?;
    Ok(below && !inside)
}

/// redb's header lock: the first 320 bytes, held shared by every `begin_read` of a shared file
/// and exclusive by a commit while it writes the header.
const HEADER: (u64, u64) = (0, 320);

impl Liveness {
    /// Whether a commit of another open file holds redb's header lock exclusive now (a process
    /// may be paused there), so that a `begin_read` would block behind it. Only a test: holding
    /// the lock shared ourselves would deadlock with a commit of this process, which waits for
    /// it while holding redb's in-process header mutex that `begin_read` then waits for.
    pub(crate) fn header_busy(&self) -> io::Result<bool> {
        let lock = fcntl_range(
            &self.probe,
            libc::F_OFD_GETLK,
            libc::F_RDLCK,
            HEADER.0,
            HEADER.1,
        )?;
        Ok(i32::from(lock.l_type) != libc::F_UNLCK)
    }
}

/// Whether the byte of liveness id `id` is read-locked by an open file other than `file`: a
/// process that opened the store file for reading only (anyone who may read it can) holds it,
/// since fencelock's own locks on the bytes of ids are write locks (but for the byte of id 0,
/// which read-only opens share). A read lock and a write lock never share a byte, so the lock
/// the kernel reports for the byte is a read lock only when nobody write-locks it.
fn read_locked(file: &File, id: u64) -> io::Result<bool> {
    let lock = fcntl(file, libc::F_OFD_GETLK, libc::F_WRLCK, id)?;
    Ok(i32::from(lock.l_type) == libc::F_RDLCK)
}

/// The refusal of a writable open or a grant that a read lock on the byte of liveness id `id`
/// (one of `bytes`) of the store file at `path` stops: a lock that only a process that may only
/// read the file takes there (see [`read_locked`]).
fn reader_in_the_way(path: &Path, id: u64, bytes: &str) -> crate::Error {
    crate::Error::Storage(format!(
        "a process that may only read {} holds a read lock on byte {} of it, among the bytes \
         of {bytes}, where fencelock's own locks are write locks: no writable open or grant \
         that needs that byte can go on until that process lets go of it",
        path.display(),
        BASE + id
    ))
}

fn fcntl(file: &File, cmd: libc::c_int, kind: libc::c_int, id: u64) -> io::Result<libc::flock> {
    if id > MAX_ID {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "liveness id beyond the offsets fencelock may lock",
        ));
    }
    fcntl_range(file, cmd, kind, BASE + id, 1)
}

/// Whether some open file other than `file` holds a lock on `len` bytes of the file from
/// `start` (any process's, redb's among them).
pub(crate) fn range_locked(file: &File, start: u64, len: u64) -> io::Result<bool> {
    let lock = fcntl_range(file, libc::F_OFD_GETLK, libc::F_WRLCK, start, len)?;
    Ok(i32::from(lock.l_type) != libc::F_UNLCK)
}

fn fcntl_range(
    file: &File,
    cmd: libc::c_int,
    kind: libc::c_int,
    start: u64,
    len: u64,
) -> io::Result<libc::flock> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
    let short =
        |value| libc::c_short::try_from(value).map_err(|_| invalid("a lock kind beyond C's short"));
    let offset =
        |value| libc::off_t::try_from(value).map_err(|_| invalid("a lock range beyond off_t"));
    // SAFETY: an all-zero flock is a valid value of the plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = short(kind)?;
    lock.l_whence = short(libc::SEEK_SET)?;
    lock.l_start = offset(start)?;
    lock.l_len = offset(len)?;
    // l_pid must be 0 for OFD locks.
    // SAFETY: the descriptor is open for the life of `file`; `lock` is a valid flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &raw mut lock) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_seen_by_another_open_file_until_unlocked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let a = Liveness::shared(&path).unwrap();
        let b = Liveness::shared(&path).unwrap();
        assert!(!b.is_held(7).unwrap());
        assert!(a.lock(7).unwrap());
        assert!(a.is_held(7).unwrap(), "own probe sees own hold");
        assert!(b.is_held(7).unwrap());
        assert!(!b.is_held(8).unwrap());
        assert!(
            !b.lock(7).unwrap(),
            "a second holder of one token is refused"
        );
        a.unlock(7).unwrap();
        assert!(!b.is_held(7).unwrap());
    }

    #[test]
    fn private_liveness_sees_its_own_holds() {
        let live = Liveness::private().unwrap();
        assert!(!live.is_held(3).unwrap());
        assert!(live.lock(3).unwrap());
        assert!(live.is_held(3).unwrap());
        live.unlock(3).unwrap();
        assert!(!live.is_held(3).unwrap());
    }

    #[test]
    fn opens_wait_for_each_other_and_tokens_beyond_the_range_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let first = Liveness::lock_for_open(&path, false, || Ok(()))
            .unwrap()
            .unwrap();
        let live = Liveness::shared(&path).unwrap();
        assert!(
            live.is_held(0).unwrap(),
            "an open in progress holds id 0's byte"
        );
        drop(first);
        assert!(!live.is_held(0).unwrap());
        assert!(live.lock(MAX_ID).unwrap());
        assert!(live.lock(MAX_ID + 1).is_err());
    }

    #[test]
    fn a_read_lock_of_a_reader_is_never_taken_for_a_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let live = Liveness::shared(&path).unwrap();
        // A user who may only read the file locks the byte of an id (one a dead holder left
        // in a lease record, or the server's), as anyone with a read-only descriptor can.
        let reader = File::open(&path).unwrap();
        fcntl(&reader, libc::F_OFD_SETLK, libc::F_RDLCK, 9).unwrap();
        assert!(
            !live.is_held(9).unwrap(),
            "a read lock keeps no lease alive"
        );
        assert!(!live.lock(9).unwrap(), "the byte cannot be taken meanwhile");
        drop(reader);
        assert!(live.lock(9).unwrap());
        assert!(live.is_held(9).unwrap());
    }

    #[test]
    fn a_new_store_file_is_readable_only_by_those_who_may_write_it() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        drop(Liveness::shared(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        // Whatever the umask, no class reads the file that may not write it.
        assert_eq!(mode & 0o444 & !((mode & 0o222) << 1), 0, "mode {mode:o}");
        assert_eq!(mode & 0o600, 0o600, "mode {mode:o}");
        assert_eq!(crate::storage::mode::readable_only_by_writers(0o644), 0o600);
        assert_eq!(crate::storage::mode::readable_only_by_writers(0o664), 0o660);
        assert_eq!(crate::storage::mode::readable_only_by_writers(0o666), 0o666);
        assert_eq!(crate::storage::mode::readable_only_by_writers(0o604), 0o600);
        assert_eq!(crate::storage::mode::readable_only_by_writers(0o640), 0o600);
    }

    #[test]
    fn closing_the_holder_frees_its_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let a = Liveness::shared(&path).unwrap();
        let b = Liveness::shared(&path).unwrap();
        assert!(a.lock(1).unwrap());
        assert!(a.lock(2).unwrap());
        drop(a);
        assert!(!b.is_held(1).unwrap());
        assert!(!b.is_held(2).unwrap());
    }
}
