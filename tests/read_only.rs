//! A store opened read-only: it reads what writers commit, tells lock states, and refuses
//! every grant and write with a typed error, changing nothing.

mod common;

use std::time::Duration;

use fencelock::{Error, LockState, Options, Store};

fn read_only() -> Options {
    Options {
        read_only: true,
        ..Options::default()
    }
}

#[allow(clippy::needless_pass_by_value)] // So that a call reads `refused(store.put(..))`.
fn refused<T: std::fmt::Debug>(result: fencelock::Result<T>) -> bool {
    matches!(&result, Err(Error::InvalidArgument(message)) if message.contains("read-only"))
}

#[test]
fn a_read_only_store_reads_and_refuses_every_write() {
    reads_and_refuses_every_write(&Options::default());
}

#[test]
fn a_read_only_store_reads_and_refuses_every_write_of_a_store_that_writes_through_the_log() {
    reads_and_refuses_every_write(&log_options());
}

/// A writer of `options` beside a read-only store of the same file.
fn reads_and_refuses_every_write(options: &Options) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = Store::open_with(&path, options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    store.fence("printer", holder.token()).unwrap();
    let reader = Store::open_with(&path, &read_only()).unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(reader.keys(b"").unwrap(), vec![b"k".to_vec()]);
    assert_eq!(reader.fence_token("printer").unwrap(), Some(holder.token()));
    // A fence the token already passed needs no write, and passes, before any checkpoint.
    reader.fence("printer", holder.token()).unwrap();
    assert_eq!(
        reader.lock_info("job").unwrap().unwrap().state,
        LockState::Held
    );
    reader.verify().unwrap();
    reader.info().unwrap();
    // (The writer's `info`, since a reader's reads the store file, which holds the log's
    // writes only once a checkpoint moved them there.)
    let before = store.info().unwrap();

    let token = holder.token();
    assert!(refused(reader.acquire("other", Duration::from_secs(1))));
    assert!(refused(reader.acquire_wait(
        "other",
        Duration::from_secs(1),
        Duration::from_millis(10)
    )));
    assert!(refused(reader.acquire_and_put(
        "other",
        Duration::from_secs(1),
        b"k",
        b"w"
    )));
    assert!(refused(reader.put(b"k", b"w", token)));
    assert!(refused(reader.delete(b"k", token)));
    assert!(refused(reader.fence("scanner", token)));
    // A fence the token already passed needs no write, and passes.
    reader.fence("printer", token).unwrap();
    assert_eq!(store.info().unwrap(), before);

    // Commits of the writer are seen by the reader.
    holder.put(b"k", b"newer").unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"newer");
    holder.release().unwrap();
    assert_eq!(
        reader.lock_info("job").unwrap().unwrap().state,
        LockState::Released
    );
}

#[test]
fn a_read_only_open_of_a_missing_store_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.db");
    assert!(matches!(
        Store::open_with(&path, &read_only()),
        Err(Error::Io(err)) if err.kind() == std::io::ErrorKind::NotFound
    ));
    assert!(!path.exists());
}

#[test]
fn a_read_only_store_leaves_the_file_byte_for_byte_unchanged() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    holder.release().unwrap();
    drop((holder, store));
    let before = std::fs::read(&path).unwrap();
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    {
        let reader = Store::open_with(&path, &read_only()).unwrap();
        assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
        reader.locks().unwrap();
        reader.info().unwrap();
        reader.verify().unwrap();
        assert!(refused(reader.put(b"k", b"w", 1)));
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a read-only store wrote the file"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        modified
    );
}

/// The child's half of the next test: opens the store read-only as a user who may not write.
#[test]
fn read_only_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_READ_ONLY") else {
        return;
    };
    let reader = Store::open_with(&path, &read_only()).unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    reader.locks().unwrap();
    // And a writable open is refused by the file system, not by fencelock.
    assert!(matches!(Store::open(&path), Err(Error::Io(_))));
}

#[test]
fn a_read_only_open_needs_no_write_permission() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    {
        let store = Store::open(&path).unwrap();
        let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
        holder.put(b"k", b"v").unwrap();
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", "read_only_child", "--nocapture"])
        .env("FENCELOCK_TEST_READ_ONLY", &path);
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        // Root may write anything: the child drops to nobody, for whom the modes hold.
        // SAFETY: setgid and setuid are async-signal-safe, as pre_exec requires.
        unsafe {
            child.pre_exec(|| {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = child.output().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs this test binary's `test` as the user nobody when this one is root (for whom file
/// modes do not hold), with `env` set.
fn as_reader(test: &str, env: &[(&str, &std::path::Path)]) -> std::process::Output {
    as_nobody(test, env).output().unwrap()
}

/// This test binary's `test`, with `env` set, to run as the user nobody (group nogroup, no
/// other groups) when this one is root.
fn as_nobody(test: &str, env: &[(&str, &std::path::Path)]) -> std::process::Command {
    as_nobody_in(test, env, &[])
}

/// [`as_nobody`], with the other groups `groups`.
fn as_nobody_in(
    test: &str,
    env: &[(&str, &std::path::Path)],
    groups: &'static [libc::gid_t],
) -> std::process::Command {
    as_user_in(65534, test, env, groups)
}

/// This test binary's `test`, with `env` set, to run as the user `uid` (group nogroup, and the
/// other groups `groups`) when this one is root.
fn as_user_in(
    uid: libc::uid_t,
    test: &str,
    env: &[(&str, &std::path::Path)],
    groups: &'static [libc::gid_t],
) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.args(["--exact", test, "--nocapture"]);
    for (name, value) in env {
        child.env(name, value);
    }
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        // SAFETY: setgroups, setgid and setuid are async-signal-safe, as pre_exec requires.
        unsafe {
            child.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    child
}

fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `result` is the refusal of a user who may read the store but not use its shared
/// memory, saying `what`.
fn cannot<T: std::fmt::Debug>(result: &fencelock::Result<T>, what: &str) -> bool {
    matches!(result, Err(Error::Io(err))
        if err.kind() == std::io::ErrorKind::PermissionDenied && err.to_string().contains(what))
}

/// The child's half of the next test: a user who may read the store but not write it, while
/// a writer holds the lock `job`.
#[test]
fn reader_of_a_store_in_use_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_READER") else {
        return;
    };
    let reader = Store::open_with(&path, &read_only()).unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    // The lease lives in shared memory this user may not use: it is never told the lock is
    // free, nor that no lock is recorded.
    let locks = reader.locks();
    assert!(cannot(&locks, "cannot see them"), "{locks:?}");
    let job = reader.lock_info("job");
    assert!(cannot(&job, "cannot see them"), "{job:?}");
}

#[test]
fn a_reader_who_may_not_write_is_told_it_cannot_see_the_leases_of_a_store_in_use() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    // Its owner lets others read it, knowing what that lets them do (README).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_success(&as_reader(
        "reader_of_a_store_in_use_child",
        &[("FENCELOCK_TEST_READER", &path)],
    ));
    holder.release().unwrap();
}

/// The child's half of the next test: a user who may read the store while a server serves it.
#[test]
fn reader_of_a_served_store_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_READER_SERVED") else {
        return;
    };
    let opened = Store::open_with(&path, &read_only());
    assert!(
        cannot(&opened, "is served by `fencelock serve`"),
        "{opened:?}"
    );
}

#[test]
fn a_reader_who_may_not_write_a_served_store_is_told_so() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    drop(Store::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let options = fencelock::ServeOptions {
        idle_exit: Some(Duration::from_secs(1)),
        ..fencelock::ServeOptions::default()
    };
    let server = fencelock::Server::start(&path, &options).unwrap();
    let out = as_reader(
        "reader_of_a_served_store_child",
        &[("FENCELOCK_TEST_READER_SERVED", &path)],
    );
    server.run(&options).unwrap();
    assert_success(&out);
}

#[test]
fn a_new_store_and_its_shared_memory_are_readable_only_by_those_who_may_write_them() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    let ring = common::ring_of(&path);
    let ring_mode = std::fs::metadata(&ring).unwrap().mode() & 0o777;
    let mode = meta.mode() & 0o777;
    // Whatever the umask: no class of users may read what it may not write.
    for mode in [mode, ring_mode] {
        assert_eq!(mode & 0o600, 0o600, "{mode:o}");
        assert_eq!(mode & 0o044 & !((mode & 0o022) << 1), 0, "{mode:o}");
    }
    assert_eq!(ring_mode, mode);
    drop(store);
}

/// The child's half of the next test: a user of the store's group, which may write it.
#[test]
fn writer_of_the_stores_group_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_GROUP_WRITER") else {
        return;
    };
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"from the group").unwrap();
    holder.release().unwrap();
}

/// A closed store, made by root, that its group (nogroup, the group of the children run as
/// nobody) may write: mode 0660. `None` (the test skipped) unless this runs as root, who alone
/// can give the store to a group the child is in.
fn store_of_nogroup() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    store_of_group_in(0o755, Some(65534))
}

#[test]
fn a_user_of_the_stores_group_shares_its_shared_memory_with_the_owner() {
    use std::os::unix::fs::MetadataExt;
    let Some((_dir, path)) = store_of_nogroup() else {
        return;
    };
    // The owner (root) is in no such group, and keeps the store open, so that the ring is
    // the owner's.
    let store = Store::open(&path).unwrap();
    let ring = common::ring_of(&path);
    assert_eq!(std::fs::metadata(&ring).unwrap().gid(), 65534);
    assert_success(&as_reader(
        "writer_of_the_stores_group_child",
        &[("FENCELOCK_TEST_GROUP_WRITER", &path)],
    ));
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"from the group");
}

/// The child's half of the next test: another user, who may not read the store, plants files
/// in /dev/shm where its ring could be named, while the store is closed.
#[test]
fn planter_child() {
    use std::os::unix::fs::MetadataExt;
    let Some(path) = std::env::var_os("FENCELOCK_TEST_PLANTER") else {
        return;
    };
    // What anyone may learn of the store: its device and inode (stat needs no permission on
    // the file). Its nonce is in an attribute that only its readers may read.
    let meta = std::fs::metadata(&path).unwrap();
    let name = format!("/dev/shm/fencelock-{:x}-{:x}", meta.dev(), meta.ino());
    for planted in [
        format!("{name}.ring"),
        format!("{name}-0000000000000000.ring"),
    ] {
        std::fs::write(&planted, b"").unwrap();
    }
    assert!(
        std::fs::read(&path).is_err(),
        "this user may not read the store"
    );
}

#[test]
fn a_file_planted_in_dev_shm_by_another_user_never_keeps_a_closed_store_from_opening() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: needs root, to be another user than the planter");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("locks.db");
    drop(
        Store::open(&path)
            .unwrap()
            .acquire("job", Duration::from_secs(1))
            .unwrap(),
    );
    assert_success(&as_reader(
        "planter_child",
        &[("FENCELOCK_TEST_PLANTER", &path)],
    ));
    let meta = std::fs::metadata(&path).unwrap();
    let name = format!("/dev/shm/fencelock-{:x}-{:x}", meta.dev(), meta.ino());
    let opened = Store::open(&path);
    for planted in [
        format!("{name}.ring"),
        format!("{name}-0000000000000000.ring"),
    ] {
        let _ = std::fs::remove_file(planted);
    }
    let store = opened.unwrap();
    drop(store.acquire("job", Duration::from_secs(1)).unwrap());
}

#[test]
fn a_symbolic_link_planted_at_the_rings_name_is_refused_naming_it_and_its_owner() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).unwrap();
    let ring = common::ring_of(&path);
    drop(store);
    assert!(
        std::fs::symlink_metadata(&ring).is_err(),
        "the last user removes the ring"
    );
    // Planted while the store is closed, by a user who knows the ring's name (one who may
    // read the store); as root, another user's link.
    std::os::unix::fs::symlink("/dev/shm/fencelock-elsewhere", &ring).unwrap();
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        std::os::unix::fs::lchown(&ring, Some(65534), Some(65534)).unwrap();
    }
    let owner = std::fs::symlink_metadata(&ring).unwrap().uid();
    let opened = Store::open(&path);
    std::fs::remove_file(&ring).unwrap();
    let message = opened.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(
        message.contains(&ring.display().to_string()) && message.contains(&format!("user {owner}")),
        "{message}"
    );
    drop(Store::open(&path).unwrap());
}

/// The child's half of the next test: a user of the store's group, which may write it, opens
/// it while nobody has it open, and holds the lock `job` until its stdin closes.
#[test]
fn first_writer_of_the_stores_group_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_FIRST_GROUP_WRITER") else {
        return;
    };
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"from the group").unwrap();
    println!("@@ held");
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
    holder.release().unwrap();
}

#[test]
fn a_writer_of_the_stores_group_sets_up_the_shared_memory_of_a_closed_store() {
    use std::io::BufRead;
    use std::os::unix::fs::MetadataExt;
    use std::process::Stdio;
    // Its owner (root) has it closed.
    let Some((_dir, path)) = store_of_nogroup() else {
        return;
    };
    let mut child = as_nobody(
        "first_writer_of_the_stores_group_child",
        &[("FENCELOCK_TEST_FIRST_GROUP_WRITER", &path)],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Read to its end, so that the child can write to it to the end.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let held = stdout
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("@@ held"));
    if !held {
        let out = child.wait_with_output().unwrap();
        panic!(
            "the group's writer could not open the store: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The ring is the group's writer's, with the store's group and mode.
    let ring = std::fs::metadata(common::ring_of(&path)).unwrap();
    assert_eq!(
        (ring.uid(), ring.gid(), ring.mode() & 0o777),
        (65534, 65534, 0o660)
    );
    // The store's owner uses the same shared memory: it finds the lock held.
    let store = Store::open(&path).unwrap();
    let taken = store.acquire("job", Duration::from_secs(60));
    assert!(matches!(taken, Err(Error::Locked { .. })), "{taken:?}");
    drop(child.stdin.take());
    let rest: Vec<String> = stdout.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{rest:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"from the group");
}

/// The child's half of the next test: the store's owner, while root, which is not, has it
/// open and holds the lock `job`.
#[test]
fn owner_beside_root_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_OWNER_BESIDE_ROOT") else {
        return;
    };
    let store = Store::open(&path).unwrap();
    let taken = store.acquire("job", Duration::from_secs(60));
    assert!(matches!(taken, Err(Error::Locked { .. })), "{taken:?}");
}

#[test]
fn root_sets_up_the_shared_memory_of_a_closed_store_it_does_not_own() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("locks.db");
    drop(Store::open(&path).unwrap());
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    // Root gave the ring to the store's owner and group, with the store's mode.
    let ring = std::fs::metadata(common::ring_of(&path)).unwrap();
    assert_eq!(
        (ring.uid(), ring.gid(), ring.mode() & 0o777),
        (65534, 65534, 0o600)
    );
    assert_success(&as_reader(
        "owner_beside_root_child",
        &[("FENCELOCK_TEST_OWNER_BESIDE_ROOT", &path)],
    ));
    holder.release().unwrap();
}

/// The bytes of the store file that fencelock locks (`storage/liveness.rs`): the byte that
/// serializes opens, the bytes through which processes claim the lease map they use, and the
/// bytes of the liveness ids drawn at random.
const OPEN_BYTE: u64 = 1 << 61;
const MAP_CLAIMS: (u64, u64) = (OPEN_BYTE + (1 << 40), OPEN_BYTE + (1 << 41));
const RANDOM_IDS: (u64, u64) = (OPEN_BYTE + (1 << 48), 1 << 62);

/// The store file at `path` opened for reading only, as a user who may only read it opens it,
/// holding a read lock on every byte from `start` to `end` that no other open file holds a
/// write lock on: as much of the range as such a user can lock.
fn read_locked(path: &std::path::Path, start: u64, end: u64) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let mut from = start;
    while from < end {
        // SAFETY: an all-zero flock is valid; fcntl gets a valid descriptor and struct.
        let held = unsafe {
            let mut lock: libc::flock = std::mem::zeroed();
            lock.l_type = libc::c_short::try_from(libc::F_RDLCK).unwrap();
            lock.l_whence = libc::c_short::try_from(libc::SEEK_SET).unwrap();
            lock.l_start = i64::try_from(from).unwrap();
            lock.l_len = i64::try_from(end - from).unwrap();
            assert_eq!(
                libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &raw mut lock),
                0
            );
            lock
        };
        if i32::from(held.l_type) == libc::F_UNLCK {
            common::read_lock_bytes(&file, from, end - from);
            break;
        }
        let held_start = u64::try_from(held.l_start).unwrap();
        let held_end = u64::try_from(held.l_start + held.l_len).unwrap();
        if held_start > from {
            common::read_lock_bytes(&file, from, held_start - from);
        }
        from = held_end;
    }
    file
}

/// Whether `result` is a refusal that says what refused it: a lock of a user who may only read.
fn blames_a_reader<T: std::fmt::Debug>(result: &fencelock::Result<T>) -> bool {
    matches!(result, Err(err) if err.to_string().contains("may only read"))
}

#[test]
fn a_readers_lock_on_a_byte_of_the_map_claims_refuses_no_writable_open() {
    let (_dir, path, store) = common::temp_store();
    drop(store);
    let _reader = read_locked(&path, MAP_CLAIMS.0 + 12_345, MAP_CLAIMS.0 + 12_346);
    let store = Store::open(&path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    // A second open claims the same lease map: it sees the lease.
    let other = Store::open(&path).unwrap();
    assert!(matches!(
        other.acquire("job", Duration::from_secs(60)),
        Err(Error::Locked { .. })
    ));
    holder.release().unwrap();
}

#[test]
fn a_readers_lock_over_the_byte_that_serializes_opens_makes_writable_opens_wait() {
    let (_dir, path, store) = common::temp_store();
    drop(store);
    let options = Options {
        busy_timeout: Duration::from_millis(200),
        ..Options::default()
    };
    for (start, len) in [(OPEN_BYTE, 1), (OPEN_BYTE - 1, 2), (OPEN_BYTE, 2)] {
        let reader = read_locked(&path, start, start + len);
        let opened = Store::open_with(&path, &options);
        assert!(
            matches!(opened, Err(Error::Timeout { .. })),
            "a read lock on {len} bytes from {start}: {opened:?}"
        );
        drop(reader);
        drop(Store::open_with(&path, &options).unwrap());
    }
}

#[test]
fn a_readers_locks_over_the_map_claims_or_the_liveness_ids_fail_writable_opens_saying_so() {
    let (_dir, path, store) = common::temp_store();
    drop(store);
    for (start, end) in [MAP_CLAIMS, RANDOM_IDS] {
        let reader = read_locked(&path, start, end);
        let opened = Store::open(&path);
        assert!(
            blames_a_reader(&opened),
            "read locks from {start} to {end}: {opened:?}"
        );
        drop(reader);
        drop(Store::open(&path).unwrap());
    }
    // And a grant of a store open already, which draws a liveness id for its lease.
    let store = Store::open(&path).unwrap();
    let reader = read_locked(&path, RANDOM_IDS.0, RANDOM_IDS.1);
    let granted = store.acquire("job", Duration::from_secs(60));
    assert!(blames_a_reader(&granted), "{granted:?}");
    drop(reader);
    drop(store.acquire("job", Duration::from_secs(60)).unwrap());
}

#[test]
fn the_readme_tells_readers_that_they_cannot_read_a_served_store() {
    // What a reader of a served store is told (`a_reader_who_may_not_write_a_served_store_is_
    // told_so`) is what the README promises readers.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .unwrap()
        .replace('\n', " ");
    let readers = readme
        .split("- **Readers**")
        .nth(1)
        .and_then(|rest| rest.split("- **").next())
        .unwrap();
    assert!(
        readers.contains("served by `fencelock serve`"),
        "the README's promise to readers: {readers}"
    );
}

/// The writer of the next tests: opens the store (through the redo log when
/// `FENCELOCK_TEST_WRITE_LOG` is set), writes `k` with a holder's token, and is killed
/// (SIGKILL) with the store open.
#[test]
fn killed_writer_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_KILLED_WRITER") else {
        return;
    };
    let options = Options {
        write_log: std::env::var_os("FENCELOCK_TEST_WRITE_LOG").is_some(),
        ..Options::default()
    };
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"acknowledged").unwrap();
    // SAFETY: getpid and kill have no preconditions.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("killed");
}

/// Runs [`killed_writer_child`] on the store at `path` (through the log with `write_log`):
/// it writes `k`, and is killed with the store open.
fn kill_a_writer(path: &std::path::Path, write_log: bool) {
    use std::os::unix::process::ExitStatusExt;
    let mut writer = std::process::Command::new(std::env::current_exe().unwrap());
    writer
        .args(["--exact", "killed_writer_child", "--nocapture"])
        .env("FENCELOCK_TEST_KILLED_WRITER", path);
    if write_log {
        writer.env("FENCELOCK_TEST_WRITE_LOG", "1");
    }
    let status = writer.status().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the writer: {status}");
}

/// The reader of the next tests, a user who may read the store but not write it: told what it
/// waits for while the file needs the repair a writer's death left, and reads the write once
/// a writer opened the store (`FENCELOCK_TEST_REPAIRED` set).
#[test]
fn reader_after_a_crash_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_READER_AFTER_A_CRASH") else {
        return;
    };
    let opened = Store::open_with(&path, &read_only());
    if std::env::var_os("FENCELOCK_TEST_REPAIRED").is_some() {
        let value = opened
            .unwrap()
            .get(b"k")
            .unwrap()
            .map(|fenced| fenced.value);
        assert_eq!(value.as_deref(), Some(&b"acknowledged"[..]));
    } else {
        assert!(
            cannot(
                &opened,
                "needs the repair that follows the death of a process that had it open to write"
            ),
            "{opened:?}"
        );
    }
}

/// A writer killed with the store open (not inside a write) leaves the file needing redb's
/// repair, which only an open that may write makes: a reader who may not write is refused,
/// with a typed error that says so, changing nothing, until a writer opens the store; then it
/// reads the acknowledged write (which, through the log, that open recovered into the file).
fn a_reader_who_may_not_write_is_told_to_wait_for_a_writer_after_a_crash(write_log: bool) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    drop(Store::open(&path).unwrap());
    // Its owner lets others read it (README); the log's segments take its mode.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    kill_a_writer(&path, write_log);
    assert_eq!(
        !log_segments(dir.path()).is_empty(),
        write_log,
        "the log's segments beside the store"
    );
    let before = std::fs::read(&path).unwrap();
    let reader = [("FENCELOCK_TEST_READER_AFTER_A_CRASH", path.as_path())];
    assert_success(&as_reader("reader_after_a_crash_child", &reader));
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the refused reader changed the store file"
    );
    drop(Store::open(&path).unwrap());
    let repaired = [
        reader[0],
        ("FENCELOCK_TEST_REPAIRED", std::path::Path::new("1")),
    ];
    assert_success(&as_reader("reader_after_a_crash_child", &repaired));
}

#[test]
fn a_reader_who_may_not_write_is_told_to_wait_for_a_writer_after_a_writers_crash() {
    a_reader_who_may_not_write_is_told_to_wait_for_a_writer_after_a_crash(false);
}

#[test]
fn a_reader_who_may_not_write_is_told_to_wait_for_a_writer_after_a_log_writers_crash() {
    a_reader_who_may_not_write_is_told_to_wait_for_a_writer_after_a_crash(true);
}

/// After a writer's death, the store file needs redb's repair, which a read-only file system
/// does not allow: a read-only open there is refused, with the file system's error kind and a
/// message that says what to do, and reads every acknowledged write once that was done.
#[test]
fn a_read_only_open_on_a_read_only_file_system_after_a_crash_says_what_it_needs() {
    let Some(mounted) = common::Mounted::tmpfs() else {
        return;
    };
    let path = mounted.path().join("locks.db");
    for write_log in [false, true] {
        let _ = std::fs::remove_file(&path);
        for (name, _) in log_segments(mounted.path()) {
            std::fs::remove_file(mounted.path().join(name)).unwrap();
        }
        kill_a_writer(&path, write_log);
        mounted.remount("ro");
        let opened = Store::open_with(&path, &read_only());
        let refused = matches!(&opened, Err(Error::Io(err))
            if err.kind() == std::io::ErrorKind::ReadOnlyFilesystem
                && err.to_string().contains("its file system is read-only: open it once where \
                    it may be written"));
        mounted.remount("rw");
        assert!(refused, "log {write_log}: {opened:?}");
        // Where it may be written, a read-only open repairs it, and reads the write.
        let reader = Store::open_with(&path, &read_only()).unwrap();
        assert_eq!(
            reader
                .get(b"k")
                .unwrap()
                .map(|fenced| fenced.value)
                .as_deref(),
            Some(&b"acknowledged"[..]),
            "log {write_log}"
        );
        drop(reader);
        // Repaired, it reads on the read-only file system too.
        mounted.remount("ro");
        let read = Store::open_with(&path, &read_only())
            .and_then(|reader| reader.get(b"k"))
            .map(|got| got.map(|fenced| fenced.value));
        mounted.remount("rw");
        assert_eq!(
            read.unwrap().as_deref(),
            Some(&b"acknowledged"[..]),
            "log {write_log}"
        );
    }
}

/// The child's half of the next tests: a user writes through the redo log of a closed store,
/// making its segments.
#[test]
fn log_writer_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_LOG_WRITER") else {
        return;
    };
    let options = log_options();
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"through the log").unwrap();
    holder.release().unwrap();
}

/// Runs [`log_writer_child`] on the store at `path` as nobody, a member of `GROUP`.
fn write_as_a_member(path: &std::path::Path) {
    let out = as_nobody_in(
        "log_writer_child",
        &[("FENCELOCK_TEST_LOG_WRITER", path)],
        &[GROUP],
    )
    .output()
    .unwrap();
    assert_success(&out);
}

/// The redo log's segments hold the store's values: one that a member of the store's group
/// makes gets the store's group and mode, as its ring does, not its maker's own group (whose
/// members may not read the store).
#[test]
fn the_log_segments_a_member_of_the_stores_group_makes_get_the_stores_group() {
    use std::os::unix::fs::MetadataExt;
    // The store's group may make files beside it, as the log does.
    let Some((dir, path)) = store_of_group_in(0o770, Some(GROUP)) else {
        return;
    };
    write_as_a_member(&path);
    let segments = log_segments(dir.path());
    assert!(!segments.is_empty(), "the child wrote through no log");
    for (name, meta) in &segments {
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (65534, GROUP, 0o660),
            "segment {name}: its maker's, with the store's group and mode"
        );
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"through the log");
}

/// The newest segment stays beside a closed store, with the mode and group it was made with: a
/// `chgrp` and `chmod` that share the store with its group share that segment too, once the
/// segment's owner (here root) opens the store again, so that a member may then write.
#[test]
fn a_segment_kept_beside_a_closed_store_follows_a_chgrp_and_chmod_at_its_owners_next_open() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some((dir, path)) = store_of_group_in(0o770, Some(GROUP)) else {
        return;
    };
    // Root's store, not shared yet (root's group, mode 0600): root writes through the log and
    // closes it.
    std::os::unix::fs::chown(&path, None, Some(0)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    put_through_the_log(&path, b"from root");
    let kept = log_segments(dir.path());
    assert!(!kept.is_empty(), "no segment kept");
    for (name, meta) in &kept {
        assert_eq!((meta.gid(), meta.mode() & 0o777), (0, 0o600), "{name}");
    }
    // Shared with the group.
    std::os::unix::fs::chown(&path, None, Some(GROUP)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    drop(Store::open_with(&path, &log_options()).unwrap());
    for (name, meta) in &log_segments(dir.path()) {
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (0, GROUP, 0o660),
            "segment {name}: the store's owner, group and mode now"
        );
    }
    write_as_a_member(&path);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"through the log");
}

/// A group that is no user's own: a store's, and one of a child's other groups.
const GROUP: libc::gid_t = 4242;

/// The names of the redo log's files beside the store `locks.db` in `dir` (segments, and
/// segments being made), in order, with their metadata.
fn log_segments(dir: &std::path::Path) -> Vec<(String, std::fs::Metadata)> {
    let mut found: Vec<(String, std::fs::Metadata)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("locks.db.wal.")
        })
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, entry.metadata().unwrap())
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// A directory shared as `/tmp` is (anyone may make files in it, and remove only their own),
/// and the path of a store in it. `None` (the test skipped) unless this runs as root, who alone
/// can make files as another user.
fn shared_dir_as_root() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: needs root, to plant a file as another user");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let path = dir.path().join("locks.db");
    Some((dir, path))
}

/// A closed store of `group` (root's own when `None`), mode 0660, in a directory of mode
/// `dir_mode` and `group`. `None` (the test skipped) unless this runs as root, who alone can
/// give files to other users and groups.
fn store_of_group_in(
    dir_mode: u32,
    group: Option<libc::gid_t>,
) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: libc::getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: needs root, to give files to other users and groups");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), None, group).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(dir_mode)).unwrap();
    let path = dir.path().join("locks.db");
    drop(Store::open(&path).unwrap());
    std::os::unix::fs::chown(&path, None, group).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    Some((dir, path))
}

/// Writes `k` = `value` through the redo log of the store at `path`, and closes it (its newest
/// segment stays).
fn put_through_the_log(path: &std::path::Path, value: &[u8]) {
    let store = Store::open_with(path, &log_options()).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", value).unwrap();
}

fn log_options() -> Options {
    Options {
        write_log: true,
        ..Options::default()
    }
}

/// A file at the name of a segment of the redo log that a user who may not write the store put
/// there (anyone may make files in a shared directory such as `/tmp`, and a user who may read
/// the store may copy a segment's bytes, header and all) is never written nor read: the open or
/// write that reaches it fails, naming it and its owner, and it stays as it was.
#[test]
fn a_log_segment_planted_by_a_user_who_may_not_write_the_store_is_refused_naming_it() {
    // Shared, as /tmp is: anyone may make files in it, and remove only their own.
    a_log_segment_planted_by_another_user_is_refused(0o1777, None);
}

/// As above, in a directory whose files take its group (set-group-id), the store's, and where
/// anyone may make files: the planted file has the store's group although its maker is not a
/// member, so its group says nothing of its maker.
#[test]
fn a_log_segment_planted_in_a_directory_that_gives_it_the_stores_group_is_refused_naming_it() {
    a_log_segment_planted_by_another_user_is_refused(0o3777, Some(4242));
}

/// A store of `group` (root's own when `None`), with mode 0660, and a segment of its log
/// copied byte for byte by the user nobody, in a directory of mode `dir_mode` and `group`.
fn a_log_segment_planted_by_another_user_is_refused(dir_mode: u32, group: Option<libc::gid_t>) {
    use std::os::unix::fs::PermissionsExt;
    let Some((dir, path)) = store_of_group_in(dir_mode, group) else {
        return;
    };
    let options = log_options();
    put_through_the_log(&path, b"v1");
    // The segment the closed store kept, made again by the user nobody with its bytes (its
    // group is the directory's when the directory gives it).
    let segment = dir.path().join("locks.db.wal.0000000000000000");
    let bytes = std::fs::read(&segment).unwrap();
    std::fs::remove_file(&segment).unwrap();
    std::fs::write(&segment, &bytes).unwrap();
    let planted_group = if group.is_some() { None } else { Some(65534) };
    std::os::unix::fs::chown(&segment, Some(65534), planted_group).unwrap();
    std::fs::set_permissions(&segment, std::fs::Permissions::from_mode(0o666)).unwrap();
    let written = Store::open_with(&path, &options).and_then(|store| {
        let holder = store.acquire("job", Duration::from_secs(60))?;
        holder.put(b"k", b"v2")
    });
    let message = written.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(
        message.contains(&segment.display().to_string())
            && message.contains("belongs to user 65534"),
        "{message}"
    );
    let read = Store::open_with(&path, &read_only()).and_then(|store| store.get(b"k"));
    let message = read.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(message.contains("belongs to user 65534"), "{message}");
    assert!(
        std::fs::read(&segment).unwrap() == bytes,
        "the planted segment was written"
    );
}

/// A file at the temporary name of a segment's creation that a process of another user left
/// (killed while it made a segment) or planted, in a shared directory such as `/tmp` where
/// this user may not remove it, or a directory at such a name, never keeps the store from
/// opening: the process that sets the log up removes the leftovers it can remove, and no
/// segment is ever made under such a name.
#[test]
fn a_leftover_of_another_user_that_cannot_be_removed_never_keeps_the_store_from_opening() {
    let Some((dir, path)) = shared_dir_as_root() else {
        return;
    };
    let leftover = dir
        .path()
        .join("locks.db.wal.0000000000000000.creating-1-0");
    std::fs::write(&leftover, b"").unwrap();
    assert_success(&as_reader(
        "log_writer_child",
        &[("FENCELOCK_TEST_LOG_WRITER", &path)],
    ));
    assert_success(&as_reader(
        "log_writer_child",
        &[("FENCELOCK_TEST_LOG_WRITER", &path)],
    ));
    assert!(leftover.exists(), "nobody removed root's file");
    // A directory at such a name, which no one may remove as a file: root's open goes on too.
    let planted = dir
        .path()
        .join("locks.db.wal.0000000000000000.creating-2-0");
    std::fs::create_dir(&planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let options = log_options();
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"root's").unwrap();
    assert!(planted.is_dir());
}

/// A file that another user made at a later segment's name of the redo log (anyone may make
/// files in a shared directory such as `/tmp`, and a segment's name is the store's, `.wal.` and
/// a number) is never taken for a segment: the open that finds it fails, naming it and its
/// owner, rather than taking the segments between for lost; once root removed it, every
/// acknowledged write is there.
#[test]
fn a_later_log_segment_name_planted_by_another_user_is_refused_naming_it() {
    let Some((dir, path)) = shared_dir_as_root() else {
        return;
    };
    let options = log_options();
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v1").unwrap();
    let planted = dir.path().join("locks.db.wal.00000000000000ff");
    std::fs::write(&planted, b"").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    holder.put(b"k", b"v2").unwrap();
    drop(holder);
    drop(store);
    let reopened = Store::open_with(&path, &options);
    let message = reopened
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
    assert!(
        message.contains(&planted.display().to_string())
            && message.contains("belongs to user 65534"),
        "{message}"
    );
    std::fs::remove_file(&planted).unwrap();
    let store = Store::open_with(&path, &options).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v2");
}

/// A FIFO that another user made at a segment's name of a closed store with a log is refused
/// like any planted file, by a read-only open as by a writer's: neither waits on it (an open of
/// a FIFO for reading waits for a writer of it, and every `fencelock get` hung).
#[test]
fn a_fifo_planted_at_a_log_segments_name_is_refused_without_waiting_on_it() {
    let Some((dir, path)) = shared_dir_as_root() else {
        return;
    };
    let options = log_options();
    put_through_the_log(&path, b"v1");
    let planted = dir.path().join("locks.db.wal.00000000000000ff");
    let name = std::ffi::CString::new(planted.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o666) }, 0);
    std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
    let refused = |message: String| {
        assert!(
            message.contains(&planted.display().to_string())
                && message.contains("is not a regular file (user 65534's)"),
            "{message}"
        );
    };
    let (at, read_only) = (path.clone(), read_only());
    let read = common::bounded("a read-only get beside a FIFO", move || {
        Store::open_with(&at, &read_only)
            .and_then(|store| store.get(b"k"))
            .map_err(|err| err.to_string())
    });
    refused(read.err().unwrap_or_default());
    let at = path.clone();
    let opened = common::bounded("a writer's open beside a FIFO", move || {
        Store::open_with(&at, &options).map_err(|err| err.to_string())
    });
    refused(opened.err().unwrap_or_default());
}

/// The child's half of the next test, in segments of 64 KiB: a writer through the log, and a
/// file another user makes at a segment's name three segments ahead while it writes.
#[test]
fn writer_beside_a_later_planted_name_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_PLANTED_AHEAD") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let options = log_options();
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(3600)).unwrap();
    let value = vec![b'x'; 6000];
    holder.put(b"k0", &value).unwrap();
    let planted = path.with_file_name("locks.db.wal.0000000000000003");
    std::fs::write(&planted, b"junk").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let mut acked = vec!["k0".to_owned()];
    let refused = (1..40).find_map(|n| {
        let key = format!("k{n}");
        match holder.put(key.as_bytes(), &value) {
            Ok(()) => {
                acked.push(key);
                None
            }
            Err(err) => Some(err.to_string()),
        }
    });
    let message = refused.expect("the writer reached the planted name");
    assert!(
        message.contains(&planted.display().to_string())
            && message.contains("belongs to user 65534"),
        "{message}"
    );
    for key in &acked {
        let value = store.get(key.as_bytes()).unwrap();
        assert!(value.is_some(), "{key} was acknowledged");
    }
}

/// A writer whose log reaches a later segment's name that another user made is refused, naming
/// it, and keeps what it acknowledged: it once took the name for a sign that the segments
/// before it were retired, and spun forever in the group sync.
#[test]
fn a_writer_that_reaches_a_later_planted_segment_name_is_refused_naming_it() {
    let Some((_dir, path)) = shared_dir_as_root() else {
        return;
    };
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "writer_beside_a_later_planted_name_child",
            "--nocapture",
        ])
        .env("FENCELOCK_TEST_PLANTED_AHEAD", &path)
        .env("FENCELOCK_LOG_SEGMENT", "65536");
    let out = common::bounded("a writer that reaches a planted name", move || {
        child.output().unwrap()
    });
    assert_success(&out);
}

/// The child's half of the next test: a writer through the log, in segments of 64 KiB, that
/// makes `FENCELOCK_TEST_FILL` puts of 6000 bytes and closes the store.
#[test]
fn segment_filler_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_FILLER") else {
        return;
    };
    let puts: usize = std::env::var("FENCELOCK_TEST_FILL")
        .unwrap()
        .parse()
        .unwrap();
    let options = log_options();
    let store = Store::open_with(&path, &options).unwrap();
    let holder = store.acquire("job", Duration::from_secs(3600)).unwrap();
    for n in 0..puts {
        holder
            .put(format!("k{n}").as_bytes(), &[b'x'; 6000])
            .unwrap();
    }
}

/// Writers of the store's group in a sticky directory, where each may remove only the
/// segments it made: a checkpoint retires every segment it may remove, not none of them once
/// one is another user's (the log grew without end, since the first segment was always the
/// first one tried).
#[test]
fn a_writer_in_a_sticky_directory_retires_the_segments_it_may_remove() {
    use std::os::unix::fs::MetadataExt;
    let Some((dir, path)) = store_of_group_in(0o1777, Some(GROUP)) else {
        return;
    };
    let fill = |uid, puts: &str| {
        let puts = std::path::PathBuf::from(puts);
        let size = std::path::Path::new("65536");
        let env = [
            ("FENCELOCK_TEST_FILLER", path.as_path()),
            ("FENCELOCK_TEST_FILL", puts.as_path()),
            ("FENCELOCK_LOG_SEGMENT", size),
        ];
        assert_success(
            &as_user_in(uid, "segment_filler_child", &env, &[GROUP])
                .output()
                .unwrap(),
        );
    };
    let segments = || -> Vec<(String, u32)> {
        log_segments(dir.path())
            .into_iter()
            .map(|(name, meta)| (name, meta.uid()))
            .collect()
    };
    // The first segment is nobody's; the next ones another member's.
    fill(65534, "1");
    assert_eq!(segments().len(), 1);
    fill(1001, "40");
    let left = segments();
    assert!(left.len() >= 2, "{left:?}");
    let (newest, older) = left.split_last().unwrap();
    assert!(
        older.iter().all(|(_, uid)| *uid == 65534),
        "the later writer retired none of its own older segments: {left:?}"
    );
    assert_eq!(newest.1, 1001, "{left:?}");
}

/// The child's half of the next test: a member of the store's group, in a directory where
/// anyone's files get the store's group, is refused the log's first segment.
#[test]
fn refused_log_writer_child() {
    let Some(path) = std::env::var_os("FENCELOCK_TEST_REFUSED_LOG_WRITER") else {
        return;
    };
    let written = Store::open_with(&path, &log_options()).and_then(|store| {
        let holder = store.acquire("job", Duration::from_secs(60))?;
        holder.put(b"k", b"from the group")
    });
    let message = written.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(
        message.contains("only segments of the store's owner or root are used"),
        "{message}"
    );
}

/// In a directory that gives its files its group (the store's) and where anyone may make
/// files, a member's segment cannot be told from anyone's: such a member is refused with an
/// error that says so, and makes no segment, which every process would then refuse, stopping
/// the store until root removed it. The store's owner writes through the log there.
#[test]
fn a_member_is_not_let_make_a_segment_that_every_process_would_refuse() {
    let Some((dir, path)) = store_of_group_in(0o3777, Some(GROUP)) else {
        return;
    };
    let out = as_nobody_in(
        "refused_log_writer_child",
        &[("FENCELOCK_TEST_REFUSED_LOG_WRITER", &path)],
        &[GROUP],
    )
    .output()
    .unwrap();
    assert_success(&out);
    let segments = log_segments(dir.path());
    assert!(segments.is_empty(), "the refused member made a segment");
    put_through_the_log(&path, b"the owner's");
    let store = Store::open_with(&path, &read_only()).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"the owner's");
}
