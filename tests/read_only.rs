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

fn refused<T: std::fmt::Debug>(result: fencelock::Result<T>) -> bool {
    matches!(&result, Err(Error::InvalidArgument(message)) if message.contains("read-only"))
}

#[test]
fn a_read_only_store_reads_and_refuses_every_write() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    store.fence("printer", holder.token()).unwrap();
    let reader = Store::open_with(&path, &read_only()).unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(reader.keys(b"").unwrap(), vec![b"k".to_vec()]);
    assert_eq!(reader.fence_token("printer").unwrap(), Some(holder.token()));
    assert_eq!(reader.lock("job").unwrap().unwrap().state, LockState::Held);
    reader.verify().unwrap();
    let before = reader.info().unwrap();

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
        reader.lock("job").unwrap().unwrap().state,
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
