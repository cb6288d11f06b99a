//! The shared request ring: a small memory-mapped area in `/dev/shm` through which the processes
//! that open one store file post their write operations, so that whichever of them holds the
//! write lock commits everyone's in one transaction.
//!
//! The ring is named after the store file's device and inode, so every path to the file finds
//! it. It is never fsynced and holds nothing that must survive: correctness never depends on it.
//! A process that cannot use it (another user's ring, a damaged header, another version) commits
//! directly, only more slowly.
//!
//! Each slot moves through phases, kept with a generation in one 32-bit word that is also the
//! futex the requester sleeps on:
//!
//! ```text
//! FREE --claim--> CLAIMED --post--> POSTED --take--> TAKEN --publish--> DONE --read--> FREE
//!                                   |  ^               |
//!                          withdraw |  | combiner died |--abandon--> ABANDONED --publish--> FREEING --> FREE
//!                                   v  +---------------+
//!                                  FREE
//!
//! any phase of a dead requester (ABANDONED: of a dead combiner) --reclaim--> FREEING --> FREE
//! ```
//!
//! Whoever moves a slot to CLAIMED, TAKEN, DONE or FREEING owns it for the next step; only the
//! owner writes its payload. Every such move is a compare-and-swap that changes the word, so that
//! exactly one process wins it: CLAIMED is the requester's alone (it posts or withdraws), and a
//! slot freed for someone else (a dead requester's, one given up on) goes through FREEING, which
//! nobody else touches. A slot returns to FREE with its owner field cleared, and with its
//! generation bumped, so a combiner that took a slot can never publish into its next use. Every
//! requester and combiner is named by a liveness id whose lock it holds on the store file (see
//! `storage/liveness.rs`): a POSTED slot of a dead requester is dropped instead of run, and a TAKEN
//! slot of a dead combiner is posted again.
//!
//! Layer 3: the ring owns the mapping and its bytes (the slots, the waiting queue, the server
//! words, the activity page, the lease map) and the futexes; what the bytes mean it leaves to
//! its users. Imports the base, the rules (the activity page) and the storage (liveness).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rustix::fs::FlockOperation as Flock;

use crate::storage::liveness::Liveness;

mod guard;
pub(crate) mod map;
mod view;

/// Slots in a ring: more than the processes that commit at once on a host of this size.
const SLOTS: usize = 64;
/// Bytes per slot, its header included.
const SLOT_SIZE: usize = 4096;
const HEADER_SIZE: usize = 4096;
/// The store's activity page (`rules/metrics.rs`), after the slots.
const ACTIVITY_OFFSET: usize = HEADER_SIZE + SLOTS * SLOT_SIZE;
/// The lease map (map.rs), after the activity page.
const MAP_OFFSET: usize = ACTIVITY_OFFSET + crate::rules::metrics::ACTIVITY_SIZE;
const RING_SIZE: usize = MAP_OFFSET + map::MAP_SIZE;
/// Bytes of a slot that carry a request or a reply.
const SLOT_HEAD: usize = 32;
pub(crate) const PAYLOAD: usize = SLOT_SIZE - SLOT_HEAD;
const MAGIC: u64 = u64::from_le_bytes(*b"fl-ring\x01");

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const POSTED: u32 = 2;
const TAKEN: u32 = 3;
const DONE: u32 = 4;
const ABANDONED: u32 = 5;
/// Being freed by whoever moved it here: the slot of a dead requester, or one given up on.
const FREEING: u32 = 6;
const PHASE_BITS: u32 = 3;

fn phase(word: u32) -> u32 {
    word & ((1 << PHASE_BITS) - 1)
}

fn generation(word: u32) -> u32 {
    word >> PHASE_BITS
}

fn word(generation: u32, phase: u32) -> u32 {
    (generation << PHASE_BITS) | phase
}

/// The ring's header, at the start of the mapping.
#[repr(C)]
struct Header {
    /// Written last when the ring is set up: a ring without it is not used.
    magic: AtomicU64,
    /// The wire format's version, and the number of slots.
    version: AtomicU32,
    slots: AtomicU32,
    boot_id: [AtomicU64; 2],
    /// The last ticket handed to a waiter of the queue.
    tickets: AtomicU64,
    /// How many requests the last combined batch carried.
    last_batch: AtomicU64,
    /// The liveness id of the server that executes every request (`local/serve.rs`), 0 for none; it
    /// serves while it holds that liveness lock.
    server: AtomicU64,
    /// The liveness id of a server waiting for the stores open on the file to move over to it.
    wanted: AtomicU64,
    /// The server's process id.
    server_pid: AtomicU32,
    /// Bumped at every post: the server sleeps on it.
    doorbell: AtomicU32,
    /// 1 while the server sleeps on the doorbell (so that a post wakes it only then).
    server_sleeps: AtomicU32,
    /// Bumped at a release while waiters without a place in the queue (a full queue) sleep on
    /// it, and how many do.
    overflow: AtomicU32,
    overflow_sleepers: AtomicU32,
}

/// Where the waiting queue starts in the header page, and how many waiters it holds.
const QUEUE_OFFSET: usize = 128;
const _: () = assert!(std::mem::size_of::<Header>() <= QUEUE_OFFSET);
const WAITERS: usize = (HEADER_SIZE - QUEUE_OFFSET) / std::mem::size_of::<WaiterEntry>();
/// A waiter that has not shown it is still waiting for this long (it may be paused) is passed
/// over, so that a paused waiter cannot hold a lock up.
const WAITER_STALE_NS: u64 = 50_000_000;

const ENTRY_FREE: u32 = 0;
const ENTRY_CLAIMED: u32 = 1;
const ENTRY_WAITING: u32 = 2;

/// One waiting acquire in the queue.
#[repr(C)]
struct WaiterEntry {
    state: AtomicU32,
    /// Bumped to wake the waiter (a futex word).
    wake: AtomicU32,
    /// Which lock (see `lock_hash`).
    lock: AtomicU64,
    ticket: AtomicU64,
    /// The waiting store's liveness id.
    owner: AtomicU64,
    /// When the waiter last showed it still waits (`CLOCK_BOOTTIME` ns).
    seen_ns: AtomicU64,
    _reserved: [u64; 3],
}

/// What a ring must have been set up with to be used: this boot (a ring of an earlier one is
/// set up again) and the version of the format of what travels through it (a ring of another
/// version is not used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub boot_id: [u8; 16],
    pub version: u32,
}

/// A waiting acquire's place in the queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    index: usize,
    pub(crate) ticket: u64,
}

/// The queue's name of a lock: a 64-bit FNV-1a hash of its name. Two locks that share a hash
/// only share their queue's order, never a lease.
pub(crate) fn lock_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A slot's header, at the start of each slot.
#[repr(C)]
struct SlotHead {
    state: AtomicU32,
    /// Length of the request or reply in the slot's payload.
    len: AtomicU32,
    /// The requester's liveness id; 0 while nobody owns the slot.
    owner: AtomicU64,
    /// The combiner's liveness id while the slot is TAKEN.
    combiner: AtomicU64,
}

/// What a requester finds its slot doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for a combiner; the word to sleep on.
    Posted(u32),
    /// In a combiner's transaction: that combiner's liveness id, and the word to sleep on.
    Taken(u64, u32),
    /// The reply is there.
    Done,
    /// The slot is no longer this request's (it cannot happen while the requester lives).
    Lost,
}

/// A request posted by this process.
#[derive(Debug)]
pub(crate) struct Posted {
    index: usize,
    generation: u32,
    /// Whether the request is in a bulk file (too large for the slot).
    bulk: bool,
}

/// The `len` of a slot whose request or reply is in a bulk file instead (see `bulk_path`).
const BULK: u32 = u32::MAX;

/// A request a combiner took: its slot and its bytes.
pub(crate) struct Taken {
    /// Run before, by a combiner that died before it published the reply.
    pub(crate) rerun: bool,
    index: usize,
    generation: u32,
    pub(crate) request: Vec<u8>,
}

pub(crate) struct Ring {
    /// The mapping, unmapped when the ring is dropped (after `Drop for Ring` unregistered it).
    view: view::View,
    /// The mapping's record with the SIGBUS guard, which marks it cut if its file is cut short.
    guarded: guard::Guarded,
    /// Held with a shared `flock` while the ring is mapped, so that a process sets it up, or
    /// removes it, only when nobody else uses it.
    file: File,
    path: PathBuf,
    /// The process that opened it. A child of fork() shares its open file, and with it the
    /// lock: it must neither convert the lock nor remove the ring.
    opener: u32,
}

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

/// Whether `path` names the open file `file`.
fn names(path: &Path, file: &File) -> io::Result<bool> {
    let (named, open) = match (std::fs::symlink_metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => (named, open),
        (Err(err), _) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        (Err(err), _) | (_, Err(err)) => return Err(err),
    };
    Ok(named.dev() == open.dev() && named.ino() == open.ino())
}

fn flock(file: &File, op: rustix::fs::FlockOperation) -> io::Result<()> {
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

/// Whether a ring file with metadata `ring` was set up by a user who may write the store
/// (`store`), so that only such users can open or change it: its owner is the store's owner,
/// root, or (where the store lets its group write) any user, if the ring has the store's group,
/// which only a member of the group (or root) can give a file in `/dev/shm`; or the store lets
/// every user write. A user who may only read the store, or not even that, cannot make one.
fn set_up_by_a_writer(ring: &std::fs::Metadata, store: &std::fs::Metadata) -> bool {
    ring.uid() == store.uid()
        || ring.uid() == 0
        || store.mode() & 0o002 != 0
        || (ring.gid() == store.gid() && store.mode() & 0o020 != 0)
}

/// Whether this process may set up the ring of the store `store`: it may write the store, and
/// the ring it sets up passes [`set_up_by_a_writer`] (it is root, the store's owner, a member
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
    let mut mode = mode;
    let group = Some(store.gid());
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::fchown(&file, Some(store.uid()), group)?;
    } else if file.metadata()?.gid() != store.gid()
        && std::os::unix::fs::fchown(&file, None, group).is_err()
    {
        mode &= !0o070;
    }
    // The umask narrowed the mode it was made with.
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    if named {
        return Ok(Some(file));
    }
    use std::os::fd::AsRawFd;
    let at = format!("/proc/self/fd/{}", file.as_raw_fd());
    let cwd = rustix::fs::CWD;
    match rustix::fs::linkat(cwd, at, cwd, path, rustix::fs::AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::EXIST) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// The refusal of a ring file at `path` (metadata `found`) that a user who may not write the
/// store put there: it is never used, and stays until its owner or root removes it.
fn planted(path: &Path, found: &std::fs::Metadata, store: &std::fs::Metadata) -> io::Error {
    let what = if found.file_type().is_symlink() {
        format!("is a symbolic link of user {}", found.uid())
    } else {
        format!(
            "belongs to user {} and group {}, who may not write the store (its owner {}, \
             group {}, mode {:o})",
            found.uid(),
            found.gid(),
            store.uid(),
            store.gid(),
            store.mode() & 0o7777
        )
    };
    refused(&format!(
        "{} {what}: another user put it there while the store was closed, and it is never \
         used; remove it as root",
        path.display()
    ))
}

/// Why the ring file at `path` could not be opened (`err`): a symbolic link (refused with
/// `ELOOP`, or `EACCES` where the kernel protects symbolic links in sticky directories) or a
/// file that a user who may not write the store put there are named with their owner.
fn not_opened(path: &Path, store: &std::fs::Metadata, err: io::Error) -> io::Error {
    match std::fs::symlink_metadata(path) {
        Ok(found) if found.file_type().is_symlink() || !set_up_by_a_writer(&found, store) => {
            planted(path, &found, store)
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
                Err(err) => return Err(not_opened(path, store, err)),
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
        if !set_up_by_a_writer(&meta, store) {
            // Anyone may create files in /dev/shm, and only its owner or root may remove one.
            return Err(planted(path, &meta, store));
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
        if flock(&file, Flock::NonBlockingLockExclusive).is_ok() {
            // Nobody else uses it, so whatever it holds is of processes that are gone: a new
            // ring, one its last user left behind (it died, or exited before its store was
            // dropped), one of another boot or version, or one of a store file deleted since
            // whose inode this file reuses. Its lease map is set up anew from the store file
            // (`local/leases.rs`), never trusted: a map its last user sealed would otherwise
            // hand out tokens the file does not know of. Its pages are allocated before
            // anything touches them, so that a full /dev/shm is an error here rather than a
            // SIGBUS later.
            file.set_len(0)?;
            file.set_len(RING_SIZE as u64)?;
            allocate(&file)?;
            let ring = Ring::map(file, path)?;
            ring.initialize(stamp);
            if let Some(dir) = path.parent() {
                sweep(dir, path);
            }
            flock(ring.file(), Flock::LockShared)?;
            return if ring.valid(stamp) {
                Ok(ring)
            } else {
                Err(refused("the ring could not be set up"))
            };
        }
        // Others use it; wait briefly for one that is setting it up, or that is its last user
        // closing it (`take_alone`).
        for _ in 0..5000 {
            if flock(&file, Flock::NonBlockingLockShared).is_ok() {
                let ring = Ring::map(file, path)?;
                return if ring.valid(stamp) {
                    Ok(ring)
                } else {
                    Err(refused("the ring is of another version or damaged"))
                };
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Err(refused("the ring stayed locked by a process setting it up"))
    }

    fn map(file: File, path: &Path) -> io::Result<Ring> {
        // A ring of another size is another version's (or was cut short): mapping beyond its
        // end would fault.
        let len = file.metadata()?.len();
        if len != RING_SIZE as u64 {
            return Err(io::Error::other(format!(
                "the ring is {len} bytes long, not {RING_SIZE}: another version's, or cut short \
                 while in use"
            )));
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

    fn file(&self) -> &File {
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

    fn header(&self) -> &Header {
        self.view.header()
    }

    fn head(&self, index: usize) -> &SlotHead {
        &self.view.slot(index).head
    }

    fn boot_words(boot_id: [u8; 16]) -> [u64; 2] {
        [
            u64::from_le_bytes(boot_id[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(boot_id[8..].try_into().expect("8 bytes")),
        ]
    }

    fn valid(&self, stamp: Stamp) -> bool {
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
        header.slots.store(SLOTS as u32, Ordering::Relaxed);
        header.boot_id[0].store(boot[0], Ordering::Relaxed);
        header.boot_id[1].store(boot[1], Ordering::Relaxed);
        self.activity().start();
        // A random id of this map (the ids of liveness locks are random too).
        let table = crate::storage::liveness::fresh_id().unwrap_or(1);
        self.map_header().table_id.store(table, Ordering::Relaxed);
        header.magic.store(MAGIC, Ordering::Release);
    }

    /// The store's activity page: its counters and recent releases.
    pub(crate) fn activity(&self) -> &crate::rules::metrics::Activity {
        self.view.activity()
    }

    /// Frees a slot this process owns (its phase is CLAIMED or DONE as its requester's, or
    /// FREEING as the one that moved it there): clears its owner, then bumps its generation.
    fn free(&self, index: usize, generation: u32) {
        let head = self.head(index);
        head.owner.store(0, Ordering::Relaxed);
        head.state.store(
            word(generation.wrapping_add(1) & (u32::MAX >> PHASE_BITS), FREE),
            Ordering::Release,
        );
    }

    /// Moves a slot from `from` to CLAIMED (owned by the caller, its requester), if it is still
    /// in `from`.
    fn own(&self, index: usize, from: u32) -> bool {
        self.move_to(index, from, CLAIMED)
    }

    /// Moves a slot from `from` to FREEING (to be freed by the caller), if it is still in
    /// `from`. `from` is never FREEING: one that another process frees is left to it.
    fn seize(&self, index: usize, from: u32) -> bool {
        phase(from) != FREEING && self.move_to(index, from, FREEING)
    }

    fn move_to(&self, index: usize, from: u32, to: u32) -> bool {
        debug_assert_ne!(
            phase(from),
            to,
            "a move that leaves the word as it was owns nothing"
        );
        self.head(index)
            .state
            .compare_exchange(
                from,
                word(generation(from), to),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// As [`Ring::try_post`], with a bulk file that cannot be written taken as no slot.
    #[cfg(test)]
    pub(crate) fn post(&self, owner: u64, request: &[u8], live: &Liveness) -> Option<Posted> {
        self.try_post(owner, request, live).ok().flatten()
    }

    /// Posts `request` for the requester with liveness id `owner`. `None` when every slot is in
    /// use (the caller commits directly, or waits for a slot); the error of a request too large
    /// for a slot whose bulk file cannot be written (no descriptor left, a full /dev/shm), so
    /// that the caller says so at once, nothing having been posted.
    pub(crate) fn try_post(
        &self,
        owner: u64,
        request: &[u8],
        live: &Liveness,
    ) -> io::Result<Option<Posted>> {
        for pass in 0..2 {
            for index in 0..SLOTS {
                let head = self.head(index);
                let current = head.state.load(Ordering::Acquire);
                if phase(current) != FREE || !self.own(index, current) {
                    continue;
                }
                let generation = generation(current);
                let bulk = request.len() > PAYLOAD;
                if bulk {
                    if let Err(err) = self.write_bulk(index, generation, "req", request) {
                        self.free(index, generation);
                        return Err(err);
                    }
                    head.len.store(BULK, Ordering::Relaxed);
                } else {
                    // The slot is this process's (CLAIMED); the request fits its payload.
                    view::copy_in(&self.view.slot(index).payload, request);
                    head.len.store(request.len() as u32, Ordering::Relaxed);
                }
                head.owner.store(owner, Ordering::Relaxed);
                // No combiner yet: one that takes it finds it a first run.
                head.combiner.store(0, Ordering::Relaxed);
                head.state.store(word(generation, POSTED), Ordering::SeqCst);
                self.ring_doorbell();
                return Ok(Some(Posted {
                    index,
                    generation,
                    bulk,
                }));
            }
            if pass == 0 {
                self.reclaim(live);
            }
        }
        Ok(None)
    }

    /// Frees the slots of requesters that died, unless a live combiner has them.
    fn reclaim(&self, live: &Liveness) {
        for index in 0..SLOTS {
            let head = self.head(index);
            let current = head.state.load(Ordering::Acquire);
            let owner = head.owner.load(Ordering::Relaxed);
            let combiner_lives = || {
                live.is_held(head.combiner.load(Ordering::Relaxed))
                    .unwrap_or(true)
            };
            match phase(current) {
                // Free, or being freed by another process.
                FREE | FREEING => continue,
                // Given up on by its requester (dead or alive): its combiner frees it when it
                // publishes (until then it may still write the reply into the payload); nobody
                // will if the combiner died.
                ABANDONED => {
                    if combiner_lives() {
                        continue;
                    }
                }
                // A CLAIMED slot with no owner is being claimed right now; one with a dead
                // owner is of a requester that died inside its post or its withdraw.
                phase => {
                    if owner == 0
                        || live.is_held(owner).unwrap_or(true)
                        || (phase == TAKEN && combiner_lives())
                    {
                        continue;
                    }
                }
            }
            if self.seize(index, current) {
                self.free_dead(index, generation(current));
            }
        }
    }

    /// What the request `posted` is doing.
    pub(crate) fn phase(&self, posted: &Posted) -> Phase {
        let head = self.head(posted.index);
        let current = head.state.load(Ordering::Acquire);
        if generation(current) != posted.generation {
            return Phase::Lost;
        }
        match phase(current) {
            POSTED => Phase::Posted(current),
            TAKEN => Phase::Taken(head.combiner.load(Ordering::Relaxed), current),
            DONE => Phase::Done,
            _ => Phase::Lost,
        }
    }

    /// Takes the request back before any combiner took it. Returns whether it did.
    pub(crate) fn withdraw(&self, posted: &Posted) -> bool {
        if self.own(posted.index, word(posted.generation, POSTED)) {
            self.done_with(posted);
            self.free(posted.index, posted.generation);
            true
        } else {
            false
        }
    }

    /// Posts again a request whose combiner died before publishing its reply.
    pub(crate) fn repost(&self, posted: &Posted) -> bool {
        self.transition(posted, TAKEN, POSTED)
    }

    /// Gives up waiting for a taken request: its combiner frees the slot when it publishes.
    /// Returns `false` if the reply came meanwhile (then read it with [`Ring::reply`]).
    pub(crate) fn abandon(&self, posted: &Posted) -> bool {
        self.transition(posted, TAKEN, ABANDONED)
    }

    /// Moves the slot of `posted` from phase `from` to `to`, if it is still there.
    fn transition(&self, posted: &Posted, from: u32, to: u32) -> bool {
        self.head(posted.index)
            .state
            .compare_exchange(
                word(posted.generation, from),
                word(posted.generation, to),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The reply to `posted`, once its phase is DONE; frees the slot.
    pub(crate) fn reply(&self, posted: Posted) -> Vec<u8> {
        let reply = self.read_slot(posted.index, posted.generation, "rep");
        // A reply read from a bulk file has no further use for it.
        if self.head(posted.index).len.load(Ordering::Relaxed) == BULK {
            let _ = std::fs::remove_file(self.bulk_path(posted.index, posted.generation, "rep"));
        }
        self.done_with(&posted);
        self.free(posted.index, posted.generation);
        reply
    }

    /// Removes the bulk file of the request `posted`, once nobody will read it again.
    pub(crate) fn done_with(&self, posted: &Posted) {
        if posted.bulk {
            let _ = std::fs::remove_file(self.bulk_path(posted.index, posted.generation, "req"));
        }
    }

    /// The request or reply in slot `index`: from its payload, or from its bulk file (empty if
    /// that cannot be read: it then fails to decode, as a damaged slot does).
    fn read_slot(&self, index: usize, generation: u32, kind: &str) -> Vec<u8> {
        let len = self.head(index).len.load(Ordering::Relaxed);
        if len == BULK {
            return std::fs::read(self.bulk_path(index, generation, kind)).unwrap_or_default();
        }
        let len = (len as usize).min(PAYLOAD);
        // The caller owns the slot (DONE for its requester, TAKEN for its combiner).
        let mut bytes = Vec::new();
        view::copy_out(&self.view.slot(index).payload, len, &mut bytes);
        bytes
    }

    /// The bulk file of slot `index` at `generation`: `req` for its request, `rep` for its
    /// reply. Beside the ring, named after it; the last user of the ring removes what is left.
    fn bulk_path(&self, index: usize, generation: u32, kind: &str) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{index}.{generation}.{kind}"));
        PathBuf::from(name)
    }

    /// Writes a bulk file, readable and writable only by those who may use the ring.
    fn write_bulk(
        &self,
        index: usize,
        generation: u32,
        kind: &str,
        bytes: &[u8],
    ) -> io::Result<()> {
        use std::io::Write;
        let path = self.bulk_path(index, generation, kind);
        let ring = self.file.metadata()?;
        let mode = ring.mode() & 0o666;
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
        };
        // One left by a process that died is stale: the slot has been reused since.
        let mut file = match create() {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&path)?;
                create()?
            }
            other => other?,
        };
        // The umask may have narrowed the mode, and the file has this user's group rather
        // than the ring's: the other side, of the store's group, must read it.
        if file.metadata()?.gid() != ring.gid() {
            std::os::unix::fs::fchown(&file, None, Some(ring.gid()))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)
    }

    /// Frees a slot of a requester or combiner that died, with any bulk files it left.
    fn free_dead(&self, index: usize, generation: u32) {
        for kind in ["req", "rep"] {
            let _ = std::fs::remove_file(self.bulk_path(index, generation, kind));
        }
        self.free(index, generation);
    }

    /// Sleeps until the slot's word is no longer `seen`, or `timeout` passes.
    pub(crate) fn wait(&self, posted: &Posted, seen: u32, timeout: Duration) {
        futex_wait(&self.head(posted.index).state, seen, timeout);
    }

    /// Takes every posted request of a live requester, for the combiner with liveness id
    /// `combiner`, which holds the store's write lock. Requests of dead requesters are dropped.
    pub(crate) fn take_posted(&self, combiner: u64, live: &Liveness) -> Vec<Taken> {
        let mut taken = Vec::new();
        for index in 0..SLOTS {
            let head = self.head(index);
            let current = head.state.load(Ordering::Acquire);
            if phase(current) != POSTED {
                continue;
            }
            let owner = head.owner.load(Ordering::Relaxed);
            if !live.is_held(owner).unwrap_or(true) {
                // Its requester died: nobody waits for it, and its grant would be dead.
                if self.seize(index, current) {
                    self.free_dead(index, generation(current));
                }
                continue;
            }
            // A combiner before this one took it, and died before publishing (its requester
            // posted it again).
            let rerun = head.combiner.load(Ordering::Relaxed) != 0;
            head.combiner.store(combiner, Ordering::Relaxed);
            if head
                .state
                .compare_exchange(
                    current,
                    word(generation(current), TAKEN),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            let request = self.read_slot(index, generation(current), "req");
            taken.push(Taken {
                rerun,
                index,
                generation: generation(current),
                request,
            });
        }
        taken
    }

    /// Publishes the reply to a taken request and wakes its requester; frees the slot of a
    /// request given up on. A reply larger than a slot whose bulk file cannot be written is
    /// not published: the error says why, and the caller publishes a reply that fits instead.
    pub(crate) fn publish(&self, taken: &Taken, reply: &[u8]) -> io::Result<()> {
        let head = self.head(taken.index);
        let bulk = reply.len() > PAYLOAD;
        if bulk {
            self.write_bulk(taken.index, taken.generation, "rep", reply)?;
            head.len.store(BULK, Ordering::Relaxed);
        } else {
            // The slot is this combiner's while TAKEN or ABANDONED at its generation.
            view::copy_in(&self.view.slot(taken.index).payload, reply);
            head.len.store(reply.len() as u32, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        match head.state.compare_exchange(
            word(taken.generation, TAKEN),
            word(taken.generation, DONE),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => futex_wake(&head.state),
            Err(now) => {
                if bulk {
                    let _ =
                        std::fs::remove_file(self.bulk_path(taken.index, taken.generation, "rep"));
                }
                // Given up on: nobody reads the reply. Otherwise posted again because this
                // combiner was taken for dead; the next combiner runs it again (the rules make
                // a re-run give the same result).
                if now == word(taken.generation, ABANDONED) && self.seize(taken.index, now) {
                    self.free(taken.index, taken.generation);
                }
            }
        }
        Ok(())
    }

    fn waiter(&self, index: usize) -> &WaiterEntry {
        self.view.waiter(index)
    }

    /// Queues a waiting acquire of `lock` by the store with liveness id `owner`, with the next
    /// ticket. `None` when the queue is full even after dropping dead and long-gone waiters;
    /// the acquire then waits without a place.
    pub(crate) fn enqueue(
        &self,
        lock: u64,
        owner: u64,
        now: u64,
        live: &Liveness,
    ) -> Option<Waiter> {
        self.enqueue_in(lock, owner, now, Some(live))
    }

    /// As [`Ring::enqueue`], into a free entry only (dead waiters are not looked for, which
    /// tests a liveness lock per entry): what a waiter without a place tries at each release.
    pub(crate) fn enqueue_if_free(&self, lock: u64, owner: u64, now: u64) -> Option<Waiter> {
        self.enqueue_in(lock, owner, now, None)
    }

    fn enqueue_in(
        &self,
        lock: u64,
        owner: u64,
        now: u64,
        sweep: Option<&Liveness>,
    ) -> Option<Waiter> {
        for pass in 0..2 {
            for index in 0..WAITERS {
                let entry = self.waiter(index);
                if entry
                    .state
                    .compare_exchange(
                        ENTRY_FREE,
                        ENTRY_CLAIMED,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_err()
                {
                    continue;
                }
                let ticket = self.header().tickets.fetch_add(1, Ordering::AcqRel) + 1;
                entry.lock.store(lock, Ordering::Relaxed);
                entry.ticket.store(ticket, Ordering::Relaxed);
                entry.owner.store(owner, Ordering::Relaxed);
                entry.seen_ns.store(now, Ordering::Relaxed);
                entry.state.store(ENTRY_WAITING, Ordering::Release);
                return Some(Waiter { index, ticket });
            }
            let live = sweep?;
            if pass == 0 {
                for index in 0..WAITERS {
                    let entry = self.waiter(index);
                    let owner = entry.owner.load(Ordering::Relaxed);
                    let gone = now.saturating_sub(entry.seen_ns.load(Ordering::Relaxed))
                        > 200 * WAITER_STALE_NS;
                    if entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                        && (gone || !live.is_held(owner).unwrap_or(true))
                    {
                        let _ = entry.state.compare_exchange(
                            ENTRY_WAITING,
                            ENTRY_FREE,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                    }
                }
            }
        }
        None
    }

    /// Shows that `waiter` still waits; returns the word to sleep on.
    pub(crate) fn still_waiting(&self, waiter: &Waiter, now: u64) -> u32 {
        let entry = self.waiter(waiter.index);
        entry.seen_ns.store(now, Ordering::Relaxed);
        entry.wake.load(Ordering::Acquire)
    }

    /// Leaves the queue.
    pub(crate) fn dequeue(&self, waiter: Waiter) {
        self.waiter(waiter.index)
            .state
            .store(ENTRY_FREE, Ordering::Release);
    }

    /// Whether a live waiter of `lock` that still shows it waits holds an earlier ticket than
    /// `ticket` (than any, with `None`).
    pub(crate) fn waits_before(
        &self,
        lock: u64,
        ticket: Option<u64>,
        now: u64,
        live: &Liveness,
    ) -> bool {
        self.oldest(lock, now, live)
            .is_some_and(|(_, oldest)| ticket.is_none_or(|ticket| oldest < ticket))
    }

    /// The index and ticket of the oldest live, current waiter of `lock`.
    fn oldest(&self, lock: u64, now: u64, live: &Liveness) -> Option<(usize, u64)> {
        let mut oldest: Option<(usize, u64)> = None;
        for index in 0..WAITERS {
            let entry = self.waiter(index);
            if entry.state.load(Ordering::Acquire) != ENTRY_WAITING
                || entry.lock.load(Ordering::Relaxed) != lock
                || now.saturating_sub(entry.seen_ns.load(Ordering::Relaxed)) > WAITER_STALE_NS
            {
                continue;
            }
            let ticket = entry.ticket.load(Ordering::Relaxed);
            if oldest.is_some_and(|(_, t)| t < ticket) {
                continue;
            }
            if live
                .is_held(entry.owner.load(Ordering::Relaxed))
                .unwrap_or(true)
            {
                oldest = Some((index, ticket));
            }
        }
        oldest
    }

    /// How many waiting acquires are queued, of any lock, by stores that are still open (a
    /// paused waiter counts; the entry of a dead one, not swept yet, does not).
    pub(crate) fn queued_waiters(&self, live: &Liveness) -> usize {
        (0..WAITERS)
            .filter(|&i| {
                let entry = self.waiter(i);
                entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                    && live
                        .is_held(entry.owner.load(Ordering::Relaxed))
                        .unwrap_or(true)
            })
            .count()
    }

    /// How many waiters of `lock` are queued, current or not.
    #[cfg(test)]
    pub(crate) fn queued(&self, lock: u64) -> usize {
        (0..WAITERS)
            .filter(|&i| {
                let entry = self.waiter(i);
                entry.state.load(Ordering::Acquire) == ENTRY_WAITING
                    && entry.lock.load(Ordering::Relaxed) == lock
            })
            .count()
    }

    /// Wakes the oldest waiter of `lock`, if there is one: its lock was released.
    pub(crate) fn wake_oldest(&self, lock: u64, now: u64, live: &Liveness) {
        let header = self.header();
        if header.overflow_sleepers.load(Ordering::SeqCst) != 0 {
            // One sleeper: a release frees at most one place in the queue (its holder's, if
            // it was granted from the queue), and waking every sleeper at every release would
            // cost each of them a look at the queue for nothing. The others look again within
            // their poll.
            header.overflow.fetch_add(1, Ordering::SeqCst);
            futex_wake_some(&header.overflow, 1);
        }
        if let Some((index, _)) = self.oldest(lock, now, live) {
            let entry = self.waiter(index);
            entry.wake.fetch_add(1, Ordering::AcqRel);
            futex_wake(&entry.wake);
        }
    }

    /// Sleeps until `waiter` is woken (its word is no longer `seen`) or `timeout` passes.
    pub(crate) fn wait_turn(&self, waiter: &Waiter, seen: u32, timeout: Duration) {
        futex_wait(&self.waiter(waiter.index).wake, seen, timeout);
    }

    /// Sleeps, as a waiter without a place in the queue, until a release of any lock or
    /// `timeout`, unless `blocked` (asked once this waiter counts as sleeping, so that a
    /// release meanwhile wakes it) says it is not blocked any more. Returns whether a release
    /// woke it.
    pub(crate) fn wait_overflow(&self, timeout: Duration, blocked: impl FnOnce() -> bool) -> bool {
        let header = self.header();
        header.overflow_sleepers.fetch_add(1, Ordering::SeqCst);
        let seen = header.overflow.load(Ordering::SeqCst);
        if blocked() {
            futex_wait(&header.overflow, seen, timeout);
        }
        header.overflow_sleepers.fetch_sub(1, Ordering::SeqCst);
        header.overflow.load(Ordering::SeqCst) != seen
    }

    /// How many requests the last combined batch carried (of any combiner).
    pub(crate) fn last_batch(&self) -> u64 {
        self.header().last_batch.load(Ordering::Relaxed)
    }

    pub(crate) fn set_last_batch(&self, requests: usize) {
        self.header()
            .last_batch
            .store(requests as u64, Ordering::Relaxed);
    }

    /// Tells a sleeping server that a request was posted.
    fn ring_doorbell(&self) {
        let header = self.header();
        header.doorbell.fetch_add(1, Ordering::SeqCst);
        if header.server_sleeps.load(Ordering::SeqCst) != 0 {
            futex_wake(&header.doorbell);
        }
    }

    /// Whether any request is posted.
    pub(crate) fn any_posted(&self) -> bool {
        (0..SLOTS).any(|index| phase(self.head(index).state.load(Ordering::SeqCst)) == POSTED)
    }

    /// For the server: sleeps until a request is posted, or `timeout` passes.
    pub(crate) fn await_posted(&self, timeout: Duration) {
        let header = self.header();
        let seen = header.doorbell.load(Ordering::SeqCst);
        header.server_sleeps.store(1, Ordering::SeqCst);
        // A post after this test changes the doorbell, so the wait returns at once; a post
        // before it is seen here.
        if !self.any_posted() {
            futex_wait(&header.doorbell, seen, timeout);
        }
        header.server_sleeps.store(0, Ordering::SeqCst);
    }

    /// The server's liveness id and process id, if one is recorded (it serves while its
    /// liveness lock is held).
    pub(crate) fn server(&self) -> Option<(u64, u32)> {
        let header = self.header();
        match header.server.load(Ordering::SeqCst) {
            0 => None,
            id => Some((id, header.server_pid.load(Ordering::SeqCst))),
        }
    }

    /// Records the server `id` (process `pid`) in place of `previous` (0, or a server that
    /// died). Returns whether it did.
    pub(crate) fn set_server(&self, previous: u64, id: u64, pid: u32) -> bool {
        let header = self.header();
        let set = header
            .server
            .compare_exchange(previous, id, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if set {
            header.server_pid.store(pid, Ordering::SeqCst);
        }
        set
    }

    /// Removes the record of the server `id`, if it is still the recorded one.
    pub(crate) fn clear_server(&self, id: u64) {
        let _ = self
            .header()
            .server
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The liveness id of a server waiting for the stores open on the file to move over to
    /// it; 0 for none.
    pub(crate) fn wanted(&self) -> u64 {
        self.header().wanted.load(Ordering::SeqCst)
    }

    pub(crate) fn set_wanted(&self, id: u64) {
        self.header().wanted.store(id, Ordering::SeqCst);
    }

    pub(crate) fn clear_wanted(&self, id: u64) {
        let _ = self
            .header()
            .wanted
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Wakes the requesters of posted requests, so that one of them takes the write lock next.
    pub(crate) fn wake_posted(&self) {
        for index in 0..SLOTS {
            let head = self.head(index);
            if phase(head.state.load(Ordering::Relaxed)) == POSTED {
                futex_wake(&head.state);
            }
        }
    }
}

/// Sleeps while `word` holds `seen`, for at most `timeout`. Shared futexes (the word is in a
/// mapping other processes share). Interruptions, timeouts and a changed word all just return;
/// the caller looks again.
fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    use rustix::thread::futex;
    let timeout = rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    let _ = futex::wait(word, futex::Flags::empty(), seen, Some(&timeout));
}

fn futex_wake(word: &AtomicU32) {
    futex_wake_some(word, i32::MAX as u32);
}

/// Wakes at most `count` sleepers on `word`.
fn futex_wake_some(word: &AtomicU32, count: u32) {
    use rustix::thread::futex;
    let _ = futex::wake(word, futex::Flags::empty(), count);
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: Stamp = Stamp {
        boot_id: [7; 16],
        version: 1,
    };
    const NEXT_BOOT: Stamp = Stamp {
        boot_id: [8; 16],
        version: 1,
    };

    fn store(dir: &Path) -> (std::path::PathBuf, std::fs::Metadata) {
        let path = dir.join("store");
        std::fs::write(&path, b"").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        (path, meta)
    }

    fn ring_path(dir: &Path, meta: &std::fs::Metadata) -> std::path::PathBuf {
        dir.join(format!("fencelock-{:x}-{:x}.ring", meta.dev(), meta.ino()))
    }

    #[test]
    fn processes_racing_to_create_the_ring_share_one() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let rings: Vec<Ring> = std::thread::scope(|scope| {
            let opening: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| Ring::open(dir.path(), &meta, None, BOOT).unwrap()))
                .collect();
            opening.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let inode = rings[0].file().metadata().unwrap().ino();
        assert!(rings
            .iter()
            .all(|r| r.file().metadata().unwrap().ino() == inode));
        // What one posts, another takes.
        let posted = rings[3].post(1 << 50, b"request", &live).unwrap();
        let taken = rings[5].take_posted(1 << 51, &live);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].request, b"request");
        rings[6].publish(&taken[0], b"reply").unwrap();
        assert_eq!(rings[3].phase(&posted), Phase::Done);
        assert_eq!(rings[3].reply(posted), b"reply");
        // The last user removes it.
        let ring_file = ring_path(dir.path(), &meta);
        assert!(ring_file.exists());
        drop(rings);
        assert!(!ring_file.exists());
    }

    #[test]
    fn a_ring_of_an_earlier_boot_is_set_up_again_and_a_foreign_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_, meta) = store(dir.path());
        let ring_file = ring_path(dir.path(), &meta);
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let old = std::fs::read(&ring_file).unwrap();
        // Used by a process of this boot, it cannot be taken for another boot's.
        assert!(Ring::open(dir.path(), &meta, None, NEXT_BOOT).is_err());
        drop(ring);
        std::fs::write(&ring_file, &old).unwrap();
        let ring = Ring::open(dir.path(), &meta, None, NEXT_BOOT).unwrap();
        assert!(ring.valid(NEXT_BOOT));
        drop(ring);
        // Another program's file of that name is set up again too (nobody uses it).
        std::fs::write(&ring_file, b"something else").unwrap();
        assert!(Ring::open(dir.path(), &meta, None, BOOT)
            .unwrap()
            .valid(BOOT));
    }

    #[test]
    fn setting_up_a_ring_removes_the_rings_nobody_uses() {
        let dir = tempfile::tempdir().unwrap();
        let (_, meta) = store(dir.path());
        let left = dir.path().join("fencelock-1-2.ring");
        std::fs::write(&left, b"left by a killed process").unwrap();
        let used = dir.path().join("fencelock-3-4.ring");
        let user = File::create(&used).unwrap();
        flock(&user, Flock::LockShared).unwrap();
        let other = dir.path().join("unrelated");
        std::fs::write(&other, b"").unwrap();
        let _ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        assert!(!left.exists());
        assert!(used.exists(), "a ring in use stays");
        assert!(other.exists());
    }

    #[test]
    fn the_queue_orders_waiters_and_passes_over_dead_and_paused_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let other = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(other.lock(1 << 51).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let lock = lock_hash("hot");
        let now = 1_000_000_000_000;
        let first = ring.enqueue(lock, 1 << 50, now, &live).unwrap();
        let second = ring.enqueue(lock, 1 << 51, now, &live).unwrap();
        assert!(first.ticket < second.ticket);
        assert!(ring.waits_before(lock, Some(second.ticket), now, &live));
        assert!(!ring.waits_before(lock, Some(first.ticket), now, &live));
        assert!(
            ring.waits_before(lock, None, now, &live),
            "a newcomer waits its turn"
        );
        assert!(!ring.waits_before(lock_hash("cold"), None, now, &live));
        // A waiter that stopped showing it waits (paused) is passed over...
        let later = now + WAITER_STALE_NS + 1;
        ring.still_waiting(&second, later);
        assert!(!ring.waits_before(lock, Some(second.ticket), later, &live));
        // ...and so is one whose process died.
        ring.still_waiting(&first, later);
        drop(other);
        assert!(!ring.waits_before(lock, Some(first.ticket), later, &live));
        ring.dequeue(first);
        ring.dequeue(second);
        assert_eq!(ring.queued(lock), 0);
    }

    #[test]
    fn a_taken_request_given_up_on_is_freed_when_its_reply_comes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let posted = ring.post(1 << 50, b"request", &live).unwrap();
        let taken = ring.take_posted(1 << 51, &live);
        assert!(matches!(ring.phase(&posted), Phase::Taken(id, _) if id == 1 << 51));
        assert!(
            !ring.withdraw(&posted),
            "a taken request cannot be withdrawn"
        );
        assert!(ring.abandon(&posted));
        ring.publish(&taken[0], b"late").unwrap();
        assert_eq!(
            ring.phase(&posted),
            Phase::Lost,
            "freed for the next request"
        );
        assert!(ring.post(1 << 50, b"next", &live).is_some());
    }

    #[test]
    fn requests_and_replies_of_any_length_up_to_a_slot_come_back_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let bytes = |len: usize, seed: u8| -> Vec<u8> {
            (0..len)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
                .collect()
        };
        // Longest first, then shorter ones in the same slots: a short request or reply never
        // carries bytes of the longer one before it.
        let lengths = [
            PAYLOAD,
            PAYLOAD - 1,
            4000,
            17,
            16,
            15,
            9,
            8,
            7,
            1,
            0,
            12,
            PAYLOAD,
        ];
        for (round, &len) in lengths.iter().enumerate() {
            let request = bytes(len, round as u8);
            let posted = ring.post(1 << 50, &request, &live).unwrap();
            let taken = ring.take_posted(1 << 51, &live);
            assert_eq!(taken.len(), 1);
            assert_eq!(taken[0].request, request, "request of {len} bytes");
            let reply = bytes(len, round as u8 ^ 0x80);
            ring.publish(&taken[0], &reply).unwrap();
            assert_eq!(ring.phase(&posted), Phase::Done);
            assert_eq!(ring.reply(posted), reply, "reply of {len} bytes");
        }
    }

    /// A paused freer: what `take_posted` or `reclaim` does with the slot of a dead requester,
    /// stopped between taking the slot and freeing it.
    fn begin_freeing(ring: &Ring, index: usize) -> u32 {
        let current = ring.head(index).state.load(Ordering::Acquire);
        assert!(ring.seize(index, current));
        generation(current)
    }

    #[test]
    fn a_dead_requesters_slot_is_freed_once_however_many_reclaim_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let dead = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(dead.lock(1 << 52).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let posted = ring
            .post(1 << 52, b"of a requester that dies", &live)
            .unwrap();
        drop(dead);
        // A combiner finds its requester dead and takes the slot to free it, and is paused
        // (SIGSTOP, or preempted) before it frees it...
        let generation = begin_freeing(&ring, posted.index);
        // ...while another process, its post finding the ring full, reclaims the slots of
        // dead requesters; a live requester then posts into the slot that freed...
        ring.reclaim(&live);
        let next = ring.post(1 << 50, b"of a live requester", &live).unwrap();
        // ...and the paused combiner resumes and frees what it took.
        ring.free_dead(posted.index, generation);
        assert!(
            matches!(ring.phase(&next), Phase::Posted(_)),
            "the live requester's request keeps its slot: {:?}",
            ring.phase(&next)
        );
    }

    #[test]
    fn a_request_given_up_on_stays_its_combiners_until_it_publishes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let opener = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(live.lock(1 << 51).unwrap());
        assert!(opener.lock(1 << 52).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        // A short-lived process posts, a combiner takes it and is paused inside its commit; the
        // requester times out, gives up and exits.
        let posted = ring.post(1 << 52, b"of an opener", &live).unwrap();
        let taken = ring.take_posted(1 << 51, &live);
        assert!(ring.abandon(&posted));
        drop(opener);
        // The ring runs full: dead requesters' slots are reclaimed. A live requester posts.
        ring.reclaim(&live);
        let next = ring.post(1 << 50, b"of a live requester", &live).unwrap();
        // The combiner resumes and publishes its late reply.
        ring.publish(&taken[0], b"late reply to the opener")
            .unwrap();
        assert!(matches!(ring.phase(&next), Phase::Posted(_)));
        let again = ring.take_posted(1 << 51, &live);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].request, b"of a live requester");
    }

    #[test]
    fn the_slot_of_a_requester_that_died_inside_its_post_is_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let dead = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(dead.lock(1 << 52).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        // Claimed, its owner written, killed before it showed the request POSTED.
        let current = ring.head(0).state.load(Ordering::Acquire);
        assert!(ring.own(0, current));
        ring.head(0).owner.store(1 << 52, Ordering::Relaxed);
        drop(dead);
        ring.reclaim(&live);
        assert_eq!(phase(ring.head(0).state.load(Ordering::Acquire)), FREE);
        assert_eq!(
            generation(ring.head(0).state.load(Ordering::Acquire)),
            generation(current) + 1
        );
    }

    #[test]
    fn live_requests_keep_their_slots_while_processes_reclaim_dead_ones_at_once() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let stop = AtomicBool::new(false);
        let lost = AtomicUsize::new(0);
        let posts = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            // Requesters that die at once (ids nobody holds) keep the ring full, so that every
            // post reclaims.
            for _ in 0..2 {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = ring.post(1 << 55, b"of a dead requester", &live);
                    }
                });
            }
            for thread in 0..4u64 {
                let (live, ring, stop, lost, posts) = (&live, &ring, &stop, &lost, &posts);
                scope.spawn(move || {
                    let id = (1 << 50) + thread;
                    assert!(live.lock(id).unwrap());
                    while !stop.load(Ordering::Relaxed) {
                        let Some(posted) = ring.post(id, b"of a live requester", live) else {
                            continue;
                        };
                        posts.fetch_add(1, Ordering::Relaxed);
                        for _ in 0..20 {
                            std::thread::yield_now();
                        }
                        // Nobody takes requests here: only a lost slot cannot be withdrawn.
                        if !ring.withdraw(&posted) {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_secs(3));
            stop.store(true, Ordering::Relaxed);
        });
        assert!(
            posts.load(Ordering::Relaxed) > 10,
            "the live requesters posted"
        );
        assert_eq!(
            lost.load(Ordering::Relaxed),
            0,
            "of {} live posts",
            posts.load(Ordering::Relaxed)
        );
    }
}
