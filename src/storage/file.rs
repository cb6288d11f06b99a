//! What is at the store's path before redb opens it: nothing, a redb database, the remnant of a
//! creation that was cut short, or another program's file.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::base::error::{Error, Result};

const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
/// The size of redb's header, which it writes at the start of the file; it locks the same bytes.
const REDB_HEADER_LEN: u64 = 320;
/// Larger than redb's first size of a new file (about 80 KiB with 4 KiB pages).
const MAX_CREATION_REMNANT: u64 = 1 << 20;

/// The extended attribute of a store file that holds its ring's nonce.
const RING_NONCE: &std::ffi::CStr = c"user.fencelock.ring";

/// The nonce in the name of the ring of the store file at `path` (`ring::Ring::open`): 8 random
/// bytes in the file's extended attribute `user.fencelock.ring`, set by the first process that
/// asks (`XATTR_CREATE`: of two at once, one sets it and the other reads it). Reading it needs
/// read permission on the file, so only the store's writers and readers can name its ring.
/// `None` where the file system keeps no user extended attributes: the ring's name is then
/// the file's device and inode alone, as before there was a nonce.
pub(crate) fn ring_nonce(path: &Path) -> io::Result<Option<u64>> {
    let unsupported = |err: &io::Error| err.raw_os_error() == Some(libc::EOPNOTSUPP);
    for _ in 0..2 {
        let mut bytes = [0u8; 8];
        let err = match rustix::fs::getxattr(path, RING_NONCE, &mut bytes) {
            Ok(8) => return Ok(Some(u64::from_le_bytes(bytes))),
            Ok(_) | Err(rustix::io::Errno::RANGE) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: its extended attribute user.fencelock.ring is not fencelock's (8 \
                         bytes)",
                        path.display()
                    ),
                ))
            }
            Err(err) => io::Error::from(err),
        };
        if unsupported(&err) {
            return Ok(None);
        }
        if err.raw_os_error() != Some(libc::ENODATA) {
            return Err(err);
        }
        let nonce = crate::base::random_u64()?.to_le_bytes();
        let create = rustix::fs::XattrFlags::CREATE;
        let Err(err) = rustix::fs::setxattr(path, RING_NONCE, &nonce, create) else {
            return Ok(Some(u64::from_le_bytes(nonce)));
        };
        let err = io::Error::from(err);
        match err.raw_os_error() {
            // Another process set it first: read again.
            Some(libc::EEXIST) => {}
            _ if unsupported(&err) => return Ok(None),
            // In a sticky directory (/tmp) only the file's owner may set it.
            Some(libc::EPERM) => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} has no ring nonce yet (a store made by an earlier version), and \
                         only its owner may set it here: open it once as its owner",
                        path.display()
                    ),
                ))
            }
            _ => return Err(err),
        }
    }
    Err(io::Error::other("the ring nonce changed while it was read"))
}

/// Whether `path` holds a redb database (`false` for a missing or empty file, which becomes a
/// new store). Refuses, without modifying it, a file that is neither. With `may_restart`, the
/// remnant of a cut-short creation is emptied (see below); without, it is refused.
///
/// redb creates a file in three steps: it sizes the file, writes its header without the magic
/// number and syncs, then writes the magic number and syncs. A creation cut short by a kill or
/// a power loss leaves a file of at most that first size, zero everywhere but in the header,
/// with no magic number. When no process has such a file open, it holds nothing, and it is
/// emptied so that the creation starts again; any other file without the magic is refused.
pub(crate) fn is_existing_database(path: &Path, may_restart: bool) -> Result<bool> {
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(err.into()),
    };
    if metadata.len() == 0 {
        return Ok(false);
    }
    let mut file = File::open(path)?;
    let mut head = [0u8; REDB_MAGIC.len()];
    let read = read_full(&mut file, &mut head)?;
    if read == head.len() && head == REDB_MAGIC {
        return Ok(true);
    }
    let not_redb = || {
        Error::NotAStore(format!(
            "{} is not a redb database (it has no redb magic number)",
            path.display()
        ))
    };
    if head.iter().any(|&byte| byte != 0) || metadata.len() > MAX_CREATION_REMNANT {
        return Err(not_redb());
    }
    let mut rest = Vec::new();
    file.read_to_end(&mut rest)?;
    let past_header = usize::try_from(REDB_HEADER_LEN).unwrap_or(usize::MAX) - read;
    if rest.iter().skip(past_header).any(|&byte| byte != 0) || header_locked(&file)? {
        return Err(not_redb());
    }
    if !may_restart {
        return Err(Error::NotAStore(format!(
            "{} holds a store creation that was cut short; a writable open creates it again",
            path.display()
        )));
    }
    // Checked again through the file that is emptied, in case it was replaced meanwhile.
    let writable = fs::OpenOptions::new().write(true).open(path)?;
    if writable.metadata()?.len() == metadata.len() && !header_locked(&writable)? {
        writable.set_len(0)?;
        writable.sync_all()?;
    }
    Ok(false)
}

fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut read = 0;
    while read < buf.len() {
        match file.read(&mut buf[read..])? {
            0 => break,
            n => read += n,
        }
    }
    Ok(read)
}

/// Whether some process holds a lock on redb's header bytes: a redb handle (a creator still at
/// work among them) has the file open.
fn header_locked(file: &File) -> io::Result<bool> {
    crate::storage::liveness::range_locked(file, 0, REDB_HEADER_LEN)
}

/// Which file a path named when the store opened it: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    /// The file `path` names now (through any symlinks).
    pub(crate) fn of(path: &Path) -> io::Result<Identity> {
        let metadata = fs::metadata(path)?;
        Ok(Identity {
            dev: metadata.dev(),
            ino: metadata.ino(),
        })
    }

    /// [`Error::Replaced`] when `path` no longer names this file: it was deleted, renamed, or
    /// another file (a restored backup, a new store) took its place. Grants and writes in the
    /// old file would then be invisible to every process that opens the path, and its tokens
    /// would start again from 1 in the new file.
    pub(crate) fn check(&self, path: &Path) -> Result<()> {
        let now = match Identity::of(path) {
            Ok(now) => now,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(Error::Replaced(format!(
                    "{} was deleted or renamed after this store opened it; open it again",
                    path.display()
                )))
            }
            Err(err) => return Err(err.into()),
        };
        if now != *self {
            return Err(Error::Replaced(format!(
                "{} names another file than the one this store opened (it was replaced or \
                 restored over); open it again",
                path.display()
            )));
        }
        Ok(())
    }
}
