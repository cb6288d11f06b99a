//! The ring file: its name in `/dev/shm`, who may set it up and open it (the store's writers
//! only), setting it up, mapping it, and removing it (by its last user, or by the sweep of rings
//! nobody uses).
//!
//! No model: set-up and removal are serialized by `flock`, not by atomics.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use rustix::fs::FlockOperation as Flock;

use crate::base::owner;

use super::layout::{MAGIC, RING_SIZE, SLOTS};
use super::sync::Ordering;
use super::{guard, view, Ring, Stamp};

impl Drop for Ring {
    fn drop(&mut self) {
        // Forgotten first: once unmapped (when `view` is dropped, after this), the addresses
        // may be another mapping's.
        guard::unregister(&self.guarded);
        // The last user removes the ring, so that rings do not pile up in /dev/shm. One that
        // opens it meanwhile finds the path gone once it holds its lock, and opens again.
        if std::process::id() == self.opener
            && flock(&self.file, Flock::NonBlockingLockExclusive).is_ok()
            && names(&self.path, &self.file).unwrap_or(false)
        {
            remove_ring(&self.path);
        }
    }
}

/// Removes the ring at `path` and the bulk files left beside it (by processes that died).
fn remove_ring(path: &Path) {
    let _ = std::fs::remove_file(path);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let mut prefix = name.to_owned();
    prefix.push(".");
    let prefix = prefix.to_string_lossy().into_owned();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Removes the rings in `dir` (other than `keep`) that nobody uses: those of stores whose last
/// user was killed, which could not remove its ring. Runs when a ring is set up, which is rare.
fn sweep(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path == keep || !name.starts_with("fencelock-") || !name.ends_with(".ring") {
            continue;
        }
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        else {
            continue;
        };
        if flock(&file, Flock::NonBlockingLockExclusive).is_ok()
            && names(&path, &file).unwrap_or(false)
        {
            remove_ring(&path);
        }
    }
}

/// The refusal of a ring file of `len` bytes: mapping beyond its end would fault.
fn wrong_size(len: u64) -> io::Error {
    io::Error::other(format!(
        "the ring is {len} bytes long, not {RING_SIZE}: another version's, or cut short while in \
         use"
    ))
}

/// Whether `path` names the open file `file`.
fn names(path: &Path, file: &File) -> io::Result<bool> {
    let (named, open) = match (std::fs::symlink_metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => (named, open),
        (Err(err), _) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        (Err(err), _) | (_, Err(err)) => return Err(err),
    };
    Ok(named.dev() == open.dev() && named.ino() == open.ino())
}

pub(super) fn flock(file: &File, op: rustix::fs::FlockOperation) -> io::Result<()> {
    Ok(rustix::fs::flock(file, op)?)
}

/// Allocates every page of the ring file, so that touching the mapping never faults for want
/// of memory (tmpfs gives pages on first touch, and a full one answers with SIGBUS).
fn allocate(file: &File) -> io::Result<()> {
    match rustix::fs::fallocate(
        file,
        rustix::fs::FallocateFlags::empty(),
        0,
        RING_SIZE as u64,
    ) {
        Ok(()) => Ok(()),
        // A file system without fallocate: its pages are allocated by writing them (as
        // posix_fallocate does).
        Err(rustix::io::Errno::OPNOTSUPP) => {
            use std::os::unix::fs::FileExt;
            let page = [0u8; 4096];
            (0..RING_SIZE)
                .step_by(page.len())
                .try_for_each(|at| file.write_all_at(&page, at as u64))
        }
        Err(err) => Err(err.into()),
    }
}

fn refused(why: &str) -> io::Error {
    io::Error::other(why.to_owned())
}

/// Whether this process may set up the ring of the store `store`: it may write the store, and
/// the ring it sets up passes [`owner::made_by_a_writer`] (it is root, the store's owner, a member
/// of a group that may write it, or any user of a store that every user may write).
fn may_set_up(store: &std::fs::Metadata) -> io::Result<bool> {
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 || uid == store.uid() || store.mode() & 0o002 != 0 {
        return Ok(true);
    }
    let group = rustix::process::Gid::from_raw(store.gid());
    let member =
        rustix::process::getegid() == group || rustix::process::getgroups()?.contains(&group);
    Ok(member && store.mode() & 0o020 != 0)
}

/// Sets up the ring file at `path` for this process, which may write the store `store`: made
/// without a name, given the store's owner and group (root can; a member of the store's group
/// gives it the group) and `mode` (the group's bits dropped when it could not be given the
/// group), then linked at `path`, so that it never has another owner or mode under its name.
/// `None` when another process linked one there first.
fn create(path: &Path, store: &std::fs::Metadata, mode: u32) -> io::Result<Option<File>> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let unnamed = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(mode)
        .custom_flags(libc::O_TMPFILE)
        .open(dir);
    let (file, named) = match unnamed {
        Ok(file) => (file, false),
        // A file system without unnamed files (EISDIR from kernels that do not know the flag):
        // made at its name, where it has this process's owner and group for a moment.
        Err(err) if matches!(err.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
            {
                Ok(file) => (file, true),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
                Err(err) => return Err(err),
            }
        }
        Err(err) => return Err(err),
    };
    owner::take_the_stores(&file, store, mode)?;
    if named {
        return Ok(Some(file));
    }
    let at = format!("/proc/self/fd/{}", file.as_raw_fd());
    let cwd = rustix::fs::CWD;
    match rustix::fs::linkat(cwd, at, cwd, path, rustix::fs::AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::EXIST) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Why the ring file at `path` could not be opened (`err`): a symbolic link (refused with
/// `ELOOP`, or `EACCES` where the kernel protects symbolic links in sticky directories) or a
/// file that a user who may not write the store put there are named with their owner.
fn not_opened(path: &Path, store: &std::fs::Metadata, err: &io::Error) -> io::Error {
    match std::fs::symlink_metadata(path) {
        Ok(found) if found.file_type().is_symlink() || !owner::made_by_a_writer(&found, store) => {
            owner::planted(path, &found, store)
        }
        _ => io::Error::new(err.kind(), format!("{}: {err}", path.display())),
    }
}

impl Ring {
    /// Opens (creating it if needed, when this process may write the store) the ring of the
    /// store file with metadata `store`, in `dir` (`/dev/shm`). Refused when the ring was set up
    /// by a user who may not write the store, is a symbolic link, or lets users open it who
    /// cannot write the store: whoever writes the ring has its requests committed into the
    /// store, and whoever can open it can lock it (`flock`) and read the liveness ids of holders
    /// and of the server.
    ///
    /// The ring's name holds the store file's device and inode and, where its file system keeps
    /// extended attributes, the store's `nonce` (`storage::file::ring_nonce`), which only those
    /// who may read the store can learn: so that nobody else can create a file at the name
    /// before a writer of the store does, and keep the store from opening.
    pub(crate) fn open(
        dir: &Path,
        store: &std::fs::Metadata,
        nonce: Option<u64>,
        stamp: Stamp,
    ) -> io::Result<Ring> {
        let name = match nonce {
            Some(nonce) => format!(
                "fencelock-{:x}-{:x}-{nonce:016x}.ring",
                store.dev(),
                store.ino()
            ),
            None => format!("fencelock-{:x}-{:x}.ring", store.dev(), store.ino()),
        };
        let path = dir.join(name);
        // A ring unlinked by its last user between this open and this lock is not the one
        // the path names any more: open again.
        for _ in 0..3 {
            let ring = Ring::open_at(&path, store, stamp)?;
            if names(&path, ring.file())? {
                return Ok(ring);
            }
        }
        Err(refused(
            "the ring was removed again and again while it was opened",
        ))
    }

    fn open_at(path: &Path, store: &std::fs::Metadata, stamp: Stamp) -> io::Result<Ring> {
        let mode = crate::storage::mode::readable_only_by_writers(store.mode() & 0o666);
        let mut file = None;
        // A ring removed by its last user between a failed open and a creation that found it
        // made is looked for again.
        for _ in 0..3 {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
            {
                Ok(opened) => file = Some(opened),
                Err(err) if err.kind() == io::ErrorKind::NotFound && may_set_up(store)? => {
                    file = create(path, store, mode)?;
                }
                Err(err) => return Err(not_opened(path, store, &err)),
            }
            if file.is_some() {
                break;
            }
        }
        let Some(file) = file else {
            return Err(refused(
                "the ring was removed again and again while it was set up",
            ));
        };
        let meta = file.metadata()?;
        if !owner::made_by_a_writer(&meta, store) {
            // Anyone may create files in /dev/shm, and only its owner or root may remove one.
            return Err(owner::planted(path, &meta, store));
        }
        // The group's permissions are for the store's group: a new ring has it, if its maker
        // could give it.
        let mut mode = mode;
        // The ring's owner may change its group and mode, as no other user but root may. An
        // owner outside the store's group cannot give it the group: the ring is its alone.
        let mine = rustix::process::geteuid().as_raw() == meta.uid();
        if mine
            && meta.gid() != store.gid()
            && mode & 0o070 != 0
            && std::os::unix::fs::fchown(&file, None, Some(store.gid())).is_err()
        {
            mode &= !0o070;
        }
        let same_group = file.metadata()?.gid() == store.gid();
        if mine && meta.mode() & 0o666 != mode {
            // The store's mode changed since the ring was set up.
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        } else if meta.mode() & 0o066 & !mode != 0 || (!same_group && meta.mode() & 0o060 != 0) {
            return Err(refused(
                "the ring can be opened by users who cannot write the store",
            ));
        }
        // Others may use it; wait briefly for one that is setting it up, or that is its last
        // user closing it (`take_alone`).
        let mut short = None;
        for _ in 0..5000 {
            if flock(&file, Flock::NonBlockingLockExclusive).is_ok() {
                return Ring::set_up(file, path, stamp);
            }
            if flock(&file, Flock::NonBlockingLockShared).is_ok() {
                let len = file.metadata()?.len();
                if len == RING_SIZE as u64 {
                    let ring = Ring::map(file, path)?;
                    return if ring.valid(stamp) {
                        Ok(ring)
                    } else {
                        Err(refused("the ring is of another version or damaged"))
                    };
                }
                // Not set up yet, or cut short while in use. Not set up: its maker linked it
                // at its name and has not locked it yet, and another process held its lock for
                // a moment meanwhile (a `sweep` of another store's set-up, which then removed
                // it as unused); this process sets it up if nobody else holds it (a removed one
                // is then opened again, `Ring::open`). A conversion that fails gives the
                // shared lock up: the others are looked at again, and a ring that stays short
                // under its users is refused below. (Mapped at once, a ring not set up yet
                // failed as "0 bytes long": the C test of threads opening one store saw it,
                // beside other tests' set-ups.)
                if flock(&file, Flock::NonBlockingLockExclusive).is_ok() {
                    return Ring::set_up(file, path, stamp);
                }
                short = Some(len);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(len) = short {
            return Err(wrong_size(len));
        }
        Err(refused("the ring stayed locked by a process setting it up"))
    }

    /// Sets up the ring `file`, which this process locked alone: nobody else uses it, so
    /// whatever it holds is of processes that are gone: a new ring, one its last user left
    /// behind (it died, or exited before its store was dropped), one of another boot or
    /// version, or one of a store file deleted since whose inode this file reuses. Its lease map
    /// is set up anew from the store file (`local/lease_map.rs`), never trusted: a map its last
    /// user sealed would otherwise hand out tokens the file does not know of. Its pages are
    /// allocated before anything touches them, so that a full /dev/shm is an error here rather
    /// than a SIGBUS later.
    fn set_up(file: File, path: &Path, stamp: Stamp) -> io::Result<Ring> {
        file.set_len(0)?;
        file.set_len(RING_SIZE as u64)?;
        allocate(&file)?;
        let ring = Ring::map(file, path)?;
        ring.initialize(stamp);
        if let Some(dir) = path.parent() {
            sweep(dir, path);
        }
        flock(ring.file(), Flock::LockShared)?;
        if ring.valid(stamp) {
            Ok(ring)
        } else {
            Err(refused("the ring could not be set up"))
        }
    }

    fn map(file: File, path: &Path) -> io::Result<Ring> {
        // A ring of another size is another version's (or was cut short): mapping beyond its
        // end would fault.
        let len = file.metadata()?.len();
        if len != RING_SIZE as u64 {
            return Err(wrong_size(len));
        }
        let view = view::View::map(&file)?;
        let (start, len) = view.span();
        // A view dropped on failure unmaps itself.
        let guarded = guard::register(start, len)?;
        Ok(Ring {
            view,
            guarded,
            file,
            path: path.to_path_buf(),
            opener: std::process::id(),
        })
    }

    pub(super) fn file(&self) -> &File {
        &self.file
    }

    /// Fails once the ring file was found cut short under this mapping (`guard.rs`): the
    /// mapping then holds zeros, and nothing read from it since may be acted on. Asked after
    /// every read whose result is used, and in every loop that waits for the ring to change.
    pub(crate) fn intact(&self) -> crate::base::error::Result<()> {
        if self.guarded.cut() {
            return Err(crate::base::error::Error::Storage(format!(
                "the store's shared memory ({}) was cut short while in use: its leases are \
                 lost to this process; reopen the store",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Whether this process is the ring's last user, taking it alone if so: until the ring
    /// is dropped (and removed), nobody can take it up again; an open of it meanwhile waits.
    /// Otherwise it keeps using it as before.
    pub(crate) fn take_alone(&self) -> bool {
        if std::process::id() != self.opener {
            return false;
        }
        if flock(&self.file, Flock::NonBlockingLockExclusive).is_ok() {
            return true;
        }
        // A conversion that failed gave up the shared lock: taken again.
        let _ = flock(&self.file, Flock::LockShared);
        false
    }

    fn boot_words(boot_id: [u8; 16]) -> [u64; 2] {
        [
            u64::from_le_bytes(boot_id[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(boot_id[8..].try_into().expect("8 bytes")),
        ]
    }

    pub(super) fn valid(&self, stamp: Stamp) -> bool {
        let header = self.header();
        let boot = Ring::boot_words(stamp.boot_id);
        header.magic.load(Ordering::Acquire) == MAGIC
            && header.version.load(Ordering::Relaxed) == stamp.version
            && header.slots.load(Ordering::Relaxed) as usize == SLOTS
            && header.boot_id[0].load(Ordering::Relaxed) == boot[0]
            && header.boot_id[1].load(Ordering::Relaxed) == boot[1]
    }

    fn initialize(&self, stamp: Stamp) {
        let header = self.header();
        let boot = Ring::boot_words(stamp.boot_id);
        header.version.store(stamp.version, Ordering::Relaxed);
        #[allow(clippy::cast_possible_truncation)] // SLOTS is 64 (2 in the models).
        header.slots.store(SLOTS as u32, Ordering::Relaxed);
        header.boot_id[0].store(boot[0], Ordering::Relaxed);
        header.boot_id[1].store(boot[1], Ordering::Relaxed);
        self.activity().start();
        // A random id of this map (the ids of liveness locks are random too).
        let table = crate::storage::liveness::fresh_id().unwrap_or(1);
        self.map_header().table_id.store(table, Ordering::Relaxed);
        header.magic.store(MAGIC, Ordering::Release);
    }
}
