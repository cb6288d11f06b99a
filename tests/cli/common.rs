//! What the tests of every command share: a store in a temporary directory to run the tool
//! against, the documented exit statuses, and helpers to start, signal and wait for processes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_fencelock");

// The exit statuses documented in `fencelock --help`.
pub const NOT_FOUND: i32 = 1;
pub const USAGE: i32 = 80;
pub const DATABASE: i32 = 81;
pub const LOCKED: i32 = 82;
pub const TIMEOUT: i32 = 83;
pub const STALE_TOKEN: i32 = 84;
pub const LOCK_LOST: i32 = 85;
pub const IO: i32 = 86;
pub const CANNOT_EXECUTE: i32 = 126;
pub const COMMAND_NOT_FOUND: i32 = 127;

/// A temporary directory with a store path in it; every command runs against that store.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("locks.db");
        Env { dir, db }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `fencelock ARGS` with this store in `FENCELOCK_DB`, the tool as `$FL` and the directory
    /// as `$D` for scripts, and no inherited token or colour setting.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("FENCELOCK_DB", &self.db)
            .env("FL", BIN)
            .env("D", self.dir.path())
            .env_remove("FENCELOCK_TOKEN")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run fencelock")
    }

    pub fn run_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fencelock");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
        child.wait_with_output().expect("wait fencelock")
    }

    /// A token granted by the store: the one a `run` hands its command.
    pub fn grant(&self) -> u64 {
        let out = self.run(&[
            "run",
            "--lock",
            "grant",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().parse().expect("token")
    }

    pub fn put(&self, key: &str, value: &[u8], token: u64) -> Output {
        self.run_with_input(&["put", key, "--token", &token.to_string()], value)
    }

    pub fn get(&self, key: &str) -> Vec<u8> {
        let out = self.run(&["get", key]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        out.stdout
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("JSON output")
    }
}

pub fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits until a script created `path`. Bounded only so that a broken tool fails the test
/// instead of hanging it.
pub fn wait_for_file(path: &Path) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < give_up,
            "{} never appeared",
            path.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a spawned tool and collects its output.
pub fn finish(child: Child) -> Output {
    child.wait_with_output().expect("wait fencelock")
}

pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on a child this test spawned and has not reaped.
    let rc = unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap(), sig) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

pub fn signal_group(pgid: u32, sig: libc::c_int) {
    // SAFETY: plain killpg(2) on the process group of a child this test spawned.
    let rc = unsafe { libc::killpg(libc::pid_t::try_from(pgid).unwrap(), sig) };
    assert_eq!(rc, 0, "killpg: {}", std::io::Error::last_os_error());
}

/// The pid of the command `fencelock run` (pid `tool`) started, once it has exec'd `program`.
pub fn command_of(tool: u32, program: &str) -> u32 {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let children =
            fs::read_to_string(format!("/proc/{tool}/task/{tool}/children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.split(|&b| b == 0).next() == Some(program.as_bytes()) {
                return pid.parse().unwrap();
            }
        }
        assert!(Instant::now() < give_up, "{tool} never started {program}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` ended (gone, or a zombie not yet reaped by its parent).
pub fn ended(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Spawns `fencelock run` holding `lock` with a command that signals readiness by creating
/// `started` and then runs until `stop` exists.
pub fn spawn_holder(env: &Env, lock: &str, ttl: &str, started: &str, stop: &str) -> Child {
    let script =
        format!("touch \"$D/{started}\"; while [ ! -e \"$D/{stop}\" ]; do sleep 0.02; done");
    let child = env
        .cmd(&[
            "run", "--lock", lock, "--ttl", ttl, "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    wait_for_file(&env.path(started));
    child
}

/// Waits for `waiter`, a run waiting for a lock whose holder, the process group `group` (a
/// run and its command), is stopped past its TTL. If the group was stopped inside a commit, it
/// holds the store's write lock and the waiter cannot commit until it runs again: then the
/// group is resumed to finish that commit (its lease has run out by then, so the scenario is
/// unchanged). This guards against a hang; it asserts nothing about time. Returns the waiter's
/// output and whether the group was resumed.
pub fn finish_while_stopped(mut waiter: Child, group: u32) -> (Output, bool) {
    let stuck_after = Instant::now() + Duration::from_secs(20);
    let mut resumed_early = false;
    while waiter.try_wait().unwrap().is_none() {
        if !resumed_early && Instant::now() > stuck_after {
            eprintln!(
                "the waiter is still waiting; its holder was stopped in a commit: resuming it"
            );
            signal_group(group, libc::SIGCONT);
            resumed_early = true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    (finish(waiter), resumed_early)
}
