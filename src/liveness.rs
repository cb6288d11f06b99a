//! Holder liveness through open-file-description locks on a sidecar file.
//!
//! The holder of the lease with token `T` holds a write lock on byte `T` of the sidecar file
//! (`<store>-live`), taken inside the granting transaction before it commits. The kernel drops
//! the lock when the holder releases it or when the last descriptor of the holding open file
//! closes, which includes the death of the process. Anyone may test the byte: a lease whose
//! byte is free has no live holder, whatever its TTL says. A SIGSTOPped holder keeps its lock,
//! so a paused holder keeps its lease until the TTL runs out.
//!
//! Each store opens the sidecar twice: locks are taken through `hold`, tested through `probe`.
//! Two open file descriptions conflict even inside one process, so a probe sees the locks of
//! this process's holders too.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

pub(crate) struct Liveness {
    hold: File,
    probe: File,
}

impl Liveness {
    /// Opens (creating it if needed) the sidecar file. `File` opens with `O_CLOEXEC`, so a child
    /// process started with exec does not inherit the locks.
    pub(crate) fn open(path: &Path) -> io::Result<Liveness> {
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
        };
        Ok(Liveness {
            hold: open()?,
            probe: open()?,
        })
    }

    /// Excludes the opens of other stores on the same file until the guard drops. A `flock(2)`
    /// lock, which on Linux is independent of the byte-range locks of leases.
    pub(crate) fn lock_for_open(&self) -> io::Result<OpenGuard<'_>> {
        // SAFETY: the descriptor is open for the life of `self.hold`.
        if unsafe { libc::flock(self.hold.as_raw_fd(), libc::LOCK_EX) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(OpenGuard(&self.hold))
    }

    /// Marks the lease with `token` as held by this store. Returns `false` if another open file
    /// holds the byte, which happens only when a grant of the same token is in flight elsewhere.
    pub(crate) fn lock(&self, token: u64) -> io::Result<bool> {
        match fcntl(&self.hold, libc::F_OFD_SETLK, libc::F_WRLCK, token) {
            Ok(_) => Ok(true),
            Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Ends this store's hold on the lease with `token`. Takes effect at once, without an fsync.
    pub(crate) fn unlock(&self, token: u64) -> io::Result<()> {
        fcntl(&self.hold, libc::F_OFD_SETLK, libc::F_UNLCK, token).map(|_| ())
    }

    /// Whether some open file (of any process, this one included) holds the lease with `token`.
    pub(crate) fn is_held(&self, token: u64) -> io::Result<bool> {
        let lock = fcntl(&self.probe, libc::F_OFD_GETLK, libc::F_WRLCK, token)?;
        Ok(i32::from(lock.l_type) != libc::F_UNLCK)
    }
}

pub(crate) struct OpenGuard<'a>(&'a File);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `lock_for_open`. Unlocking an owned flock cannot fail.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn fcntl(file: &File, cmd: libc::c_int, kind: libc::c_int, token: u64) -> io::Result<libc::flock> {
    let start = libc::off_t::try_from(token)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "token beyond file offsets"))?;
    // SAFETY: an all-zero flock is a valid value of the plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = 1;
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
        let path = dir.path().join("live");
        let a = Liveness::open(&path).unwrap();
        let b = Liveness::open(&path).unwrap();
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
    fn closing_the_holder_frees_its_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live");
        let a = Liveness::open(&path).unwrap();
        let b = Liveness::open(&path).unwrap();
        assert!(a.lock(1).unwrap());
        assert!(a.lock(2).unwrap());
        drop(a);
        assert!(!b.is_held(1).unwrap());
        assert!(!b.is_held(2).unwrap());
    }
}
