//! Files made beside a store for the processes that use it (its ring in `/dev/shm`, its redo
//! log's segments): they hold what the store holds, so they get the store's owner, group and
//! mode, as far as their maker may give them.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Gives `file`, just made by this process, the store's owner and group (root may give both; a
/// member of the store's group gives it the group) and `mode`, less the group's bits when the
/// file keeps a group that is not the store's: the members of its maker's group are not the
/// users the store trusts.
pub(crate) fn take_the_stores(file: &File, store: &Metadata, mode: u32) -> io::Result<()> {
    let mut mode = mode;
    let group = Some(store.gid());
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::fchown(file, Some(store.uid()), group)?;
    } else if file.metadata()?.gid() != store.gid()
        && std::os::unix::fs::fchown(file, None, group).is_err()
    {
        mode &= !0o070;
    }
    // The umask narrowed the mode it was made with.
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}
