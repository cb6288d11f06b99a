//! Files made beside a store for the processes that use it (its ring in `/dev/shm`, its redo
//! log's segments): they hold what the store holds, so they get the store's owner, group and
//! mode, as far as their maker may give them.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

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

/// Whether a file with metadata `found`, beside the store `store` (its ring, a segment of its
/// log), was made by a user who may write the store, so that only such users can open or
/// change it: its owner is the store's owner, root, or (where the store lets its group write)
/// any user, if the file has the store's group, which only a member of the group (or root) can
/// give a file in `/dev/shm`; or the store lets every user write. A user who may only read the
/// store, or not even that, cannot make one.
pub(crate) fn made_by_a_writer(found: &Metadata, store: &Metadata) -> bool {
    made_by_owner(found, store) || made_by_member(found, store)
}

/// [`made_by_a_writer`] for a file in the directory `dir`: where the directory gives its files
/// its group (set-group-id) and anyone may make files in it, a file's group says nothing of its
/// maker, and only its owner counts.
pub(crate) fn made_by_a_writer_in(found: &Metadata, store: &Metadata, dir: &Metadata) -> bool {
    let group_given = dir.mode() & 0o2000 != 0 && dir.mode() & 0o002 != 0;
    made_by_owner(found, store) || (!group_given && made_by_member(found, store))
}

/// Its owner may write the store: the store's owner, root, or anyone where every user may.
fn made_by_owner(found: &Metadata, store: &Metadata) -> bool {
    found.uid() == store.uid() || found.uid() == 0 || store.mode() & 0o002 != 0
}

/// It has the store's group, which may write the store.
fn made_by_member(found: &Metadata, store: &Metadata) -> bool {
    found.gid() == store.gid() && store.mode() & 0o020 != 0
}

/// The refusal of a file at `path` (metadata `found`) beside the store `store` that a user who
/// may not write the store put there: it is never used, and stays until its owner or root
/// removes it.
pub(crate) fn planted(path: &Path, found: &Metadata, store: &Metadata) -> io::Error {
    let what = if found.file_type().is_symlink() {
        format!("is a symbolic link of user {}", found.uid())
    } else if !found.file_type().is_file() {
        format!("is not a regular file (user {}'s)", found.uid())
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
    io::Error::other(format!(
        "{} {what}: another user put it there, and it is never used; remove it as root",
        path.display()
    ))
}
