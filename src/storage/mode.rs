//! The mode a new store file is created with: readable only by those who may write it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The store file at `path`, opened for reading and writing, created if it is missing. A new
/// file gets the mode the umask gives, less the read permission of every class of users (group,
/// others) the mode does not let write (0600 under umask 022, 0660 under 002): anyone who can
/// open a file can lock bytes of it, and redb's commits and fencelock's liveness use such
/// locks, so a user who may only read the store could stall or mislead its writers. A store
/// that should be readable by others is made so by its owner (`chmod`), knowing what that lets
/// them do (README, "Who may read, who may write").
pub(crate) fn open_or_create(path: &Path) -> io::Result<File> {
    let created = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(path);
    match created {
        Ok(file) => {
            let mode = file.metadata()?.mode() & 0o777;
            let narrowed = readable_only_by_writers(mode);
            if narrowed != mode {
                file.set_permissions(fs::Permissions::from_mode(narrowed))?;
            }
            Ok(file)
        }
        // An existing file, or a symbolic link (a dangling one names the file to create, with
        // the umask's mode: the link's owner chose where it points).
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path),
        Err(err) => Err(err),
    }
}

/// `mode` without the read permission of each class of users that has no write permission.
pub(crate) fn readable_only_by_writers(mode: u32) -> u32 {
    let writers_read = (mode & 0o222) << 1;
    mode & !(0o444 & !writers_read)
}
