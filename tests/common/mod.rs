//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use fencelock::Store;

/// A store in a fresh temporary directory; the directory lives as long as the returned guard.
pub fn temp_store() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).expect("open store");
    (dir, path, store)
}

/// Joins the shared holders of `name` (letting each join go at once) until a join is refused:
/// then a waiting exclusive acquire of it is queued, and later shared ones stand behind it.
pub fn join_shared_until_refused(store: &Store, name: &str) {
    loop {
        match store.acquire_kind(
            name,
            fencelock::Kind::Shared,
            std::time::Duration::from_secs(60),
        ) {
            Ok(joined) => drop(joined),
            Err(fencelock::Error::Locked { .. }) => return,
            Err(other) => panic!("{other}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Takes an open-file-description write lock on `len` bytes of `file` from `start`, as another
/// process's redb or fencelock would; it lasts until `file` is closed.
pub fn lock_bytes(file: &std::fs::File, start: i64, len: i64) {
    set_lock(file, libc::F_WRLCK, start, len);
}

/// Takes an open-file-description read lock on `len` bytes of `file` from `start`, as anyone
/// who may read the file can (through a descriptor opened for reading only); it lasts until
/// `file` is closed.
pub fn read_lock_bytes(file: &std::fs::File, start: u64, len: u64) {
    set_lock(
        file,
        libc::F_RDLCK,
        i64::try_from(start).unwrap(),
        i64::try_from(len).unwrap(),
    );
}

fn set_lock(file: &std::fs::File, kind: libc::c_int, start: i64, len: i64) {
    // SAFETY: an all-zero flock is valid; fcntl gets a valid descriptor and struct.
    let rc = unsafe {
        let mut lock: libc::flock = std::mem::zeroed();
        lock.l_type = libc::c_short::try_from(kind).unwrap();
        lock.l_whence = libc::c_short::try_from(libc::SEEK_SET).unwrap();
        lock.l_start = start;
        lock.l_len = len;
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(file),
            libc::F_OFD_SETLK,
            &raw mut lock,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// Children are the test binary run again with `ROLE` set (and the store's path in `DB`); its
/// `child` test then plays the role and reports on stdout in lines marked with `@@ `.
pub const ROLE: &str = "FENCELOCK_TEST_ROLE";
pub const DB: &str = "FENCELOCK_TEST_DB";

/// This test binary run as a child (set `ROLE` and `DB`), in a mount namespace of its own with
/// a /dev/shm of its own (an empty tmpfs): as a process of another container that bind-mounts
/// the store file. Needs root and `unshare(1)`.
#[allow(dead_code)] // Not every test binary that includes this module uses it.
pub fn in_private_shm() -> Command {
    let script = format!(
        "mount -t tmpfs tmpfs /dev/shm && exec {} --exact child --nocapture --test-threads=1",
        std::env::current_exe().unwrap().display()
    );
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    command
}

/// A child process playing a role.
pub struct Kid {
    pub child: Child,
    pub stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Kid {
    pub fn spawn(role: &str, db: &std::path::Path) -> Kid {
        Kid::spawn_with(role, db, &[])
    }

    /// As `spawn`, with `env` set in the child's environment too (an `LD_PRELOAD` shim, say).
    pub fn spawn_with(role: &str, db: &std::path::Path, env: &[(&str, &std::ffi::OsStr)]) -> Kid {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .envs(env.iter().copied());
        Kid::start(command, role, db)
    }

    /// As `spawn`, in a mount namespace of its own with a /dev/shm of its own
    /// ([`in_private_shm`]).
    #[allow(dead_code)] // Not every test binary that includes this module uses it.
    pub fn spawn_in_private_shm(role: &str, db: &std::path::Path) -> Kid {
        Kid::start(in_private_shm(), role, db)
    }

    fn start(mut command: Command, role: &str, db: &std::path::Path) -> Kid {
        let mut child = command
            .env(ROLE, role)
            .env(DB, db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Kid {
            child,
            stdin,
            stdout,
        }
    }

    /// The next report line, without its `@@ ` prefix; `None` at the end of output.
    pub fn report(&mut self) -> Option<String> {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                return None;
            }
            // The harness may print "test child ... " on the same line first.
            if let Some((_, report)) = line.trim_end().split_once("@@ ") {
                return Some(report.to_owned());
            }
        }
    }

    pub fn token(&mut self) -> u64 {
        let line = self.report().expect("child reported its token");
        line.strip_prefix("token ").unwrap().parse().unwrap()
    }

    /// Stops the child with SIGSTOP and waits until it is stopped: the signal takes effect when
    /// the kernel next schedules it, which may be after it ran on a little (into a commit, say).
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        self.stopped();
    }

    /// Waits until the child is stopped (by a signal of its own, an `LD_PRELOAD` shim's say).
    pub fn stopped(&self) {
        let stat = format!("/proc/{}/stat", self.child.id());
        loop {
            let text = std::fs::read_to_string(&stat).unwrap();
            let state = text[text.rfind(')').unwrap() + 1..]
                .trim_start()
                .chars()
                .next();
            if state == Some('T') {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }
}

impl Drop for Kid {
    /// A test that fails midway must not leave a stopped child holding its output open.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `f` in a thread and returns its result. The bound is generous: it catches a call that
/// never ends (the defect: a wait with no end, behind a paused process or a file that never
/// answers), not a slow one.
pub fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(f()).unwrap());
    result
        .recv_timeout(std::time::Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{what} never ended"))
}

/// The ring of the store file at `path` in /dev/shm, which a store open on it has set up: its
/// name holds the file's device and inode, then (where the file system keeps extended
/// attributes) the store's nonce.
pub fn ring_of(path: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    let prefix = format!("fencelock-{:x}-{:x}", meta.dev(), meta.ino());
    let rings: Vec<PathBuf> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".ring"))
                .is_some_and(|rest| rest.is_empty() || rest.len() == 17 && rest.starts_with('-'))
        })
        .map(|entry| entry.path())
        .collect();
    assert_eq!(rings.len(), 1, "the rings of {}: {rings:?}", path.display());
    rings.into_iter().next().unwrap()
}

/// Bytes of each record the redo-log tests (`group_sync.rs`, `log_eio.rs`) write.
pub const LOG_RECORD: usize = 64;

/// Record `seq` of writer `writer` for the redo-log tests: a header naming both, then a pattern
/// of them, so that a record read back at its place says whose it is.
pub fn log_record(writer: u64, seq: u64) -> [u8; LOG_RECORD] {
    let mut bytes = [0u8; LOG_RECORD];
    bytes[..8].copy_from_slice(b"RECORD!!");
    bytes[8..16].copy_from_slice(&writer.to_le_bytes());
    bytes[16..24].copy_from_slice(&seq.to_le_bytes());
    for (at, byte) in bytes[24..].iter_mut().enumerate() {
        *byte =
            writer.to_le_bytes()[0].wrapping_mul(31) ^ seq.to_le_bytes()[0] ^ at.to_le_bytes()[0];
    }
    bytes
}

/// A child process's report to its parent: one line marked `@@ `, flushed at once (the
/// [`Kid`] that runs it reads these lines and skips the test harness's own).
pub fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    println!("@@ {line}");
    std::io::stdout().flush().unwrap();
}

/// The EIO shim (`tests/eio/shim.c`), built once per test binary into its own library.
pub fn eio_shim() -> &'static std::path::Path {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let building = dir.join(format!("eio-shim-{}.so", std::process::id()));
        let out = dir.join("eio-shim.so");
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eio/shim.c");
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
            .arg(&building)
            .arg(&source)
            .arg("-ldl")
            .status()
            .expect("run cc to build the EIO shim");
        assert!(status.success(), "cc failed on {}", source.display());
        std::fs::rename(&building, &out).unwrap();
        out
    })
}

/// How a child reports a call's error: a storage error's text, or anything else's.
pub fn outcome(err: &fencelock::Error) -> String {
    match err {
        fencelock::Error::Storage(text) => format!("storage {text}"),
        other => format!("other {other:?}"),
    }
}

/// Sends `command` to `kid` and returns its report.
pub fn ask(kid: &mut Kid, command: &str) -> String {
    use std::io::Write;
    writeln!(kid.stdin, "{command}").unwrap();
    kid.report().expect("the child ended")
}

/// Asserts `report` (a child's [`outcome`]) is the failed redo log's storage error, naming
/// `cause` when given (the failing call's own error).
pub fn assert_log_failed(report: &str, cause: Option<&str>, what: &str) {
    let text = report
        .strip_prefix("storage ")
        .unwrap_or_else(|| panic!("{what}: not a storage error: {report}"));
    assert!(
        text.contains("redo log failed") && text.ends_with("reopen the store"),
        "{what}: {text}"
    );
    if let Some(cause) = cause {
        assert!(text.contains(cause), "{what} does not name {cause}: {text}");
    }
}

/// A file system mounted for a test (as root), unmounted when dropped: a tmpfs at a directory
/// of its own, or a bind mount of one file over another.
pub struct Mounted {
    at: PathBuf,
    /// The tmpfs's directory, removed after the unmount.
    _dir: Option<tempfile::TempDir>,
}

impl Mounted {
    /// Whether this runs as root, who alone may mount; says the test is skipped if not.
    fn may_mount() -> bool {
        // SAFETY: libc::getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        if !root {
            eprintln!("skipped: needs root, to mount a file system");
        }
        root
    }

    /// A tmpfs of 64 MiB at a new directory; `None` (the test skipped) unless this is root.
    pub fn tmpfs() -> Option<Mounted> {
        if !Mounted::may_mount() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        mount(&["-t", "tmpfs", "-o", "size=64m", "tmpfs"], dir.path());
        Some(Mounted {
            at: dir.path().to_owned(),
            _dir: Some(dir),
        })
    }

    /// The file `from` mounted over the file `at` (which must exist), so that `at` names the
    /// file `from` names; `None` (the test skipped) unless this is root.
    pub fn bind(from: &std::path::Path, at: &std::path::Path) -> Option<Mounted> {
        if !Mounted::may_mount() {
            return None;
        }
        let status = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(at)
            .status()
            .unwrap();
        assert!(status.success(), "mount --bind: {status}");
        Some(Mounted {
            at: at.to_owned(),
            _dir: None,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &std::path::Path {
        &self.at
    }

    /// Mounted again read-only (`"ro"`) or writable (`"rw"`).
    pub fn remount(&self, how: &str) {
        mount(&["-o", &format!("remount,{how}")], &self.at);
    }
}

fn mount(args: &[&str], at: &std::path::Path) {
    let status = Command::new("mount").args(args).arg(at).status().unwrap();
    assert!(status.success(), "mount {args:?}: {status}");
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}
