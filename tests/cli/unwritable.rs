//! A tool whose stderr or stdout cannot be written (a log on a full disk, a closed pipe) still
//! exits with its documented status, never Rust's 101 of a panic, and does the rest of its
//! work: a cron job's status must say what happened to the lock, not to its log.

use std::fs::{self, OpenOptions};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::common::*;

/// `/dev/full`: every write fails with ENOSPC.
fn full() -> Stdio {
    OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full")
        .into()
}

/// The status of `cmd` with stderr on `/dev/full`, and stdout too when `stdout_full`.
fn status(mut cmd: Command, stdout_full: bool) -> i32 {
    cmd.stderr(full())
        .stdout(if stdout_full { full() } else { Stdio::null() });
    cmd.status()
        .expect("run fencelock")
        .code()
        .expect("exited, not killed")
}

#[test]
fn failures_exit_with_their_status_when_stderr_is_full() {
    let env = Env::new();
    let missing = env.path("missing/x.db");
    let cases: &[(&[&str], i32)] = &[
        (&["--db", missing.to_str().unwrap(), "status"], DATABASE),
        (&["get", "no-such-key"], DATABASE),
        (&["put", "k", "--token", "1"], USAGE),
        (&["--no-such-option"], USAGE),
        (&["run", "--lock", "j"], USAGE),
    ];
    for (args, code) in cases {
        assert_eq!(status(env.cmd(args), false), *code, "{args:?}");
    }
    let token = env.grant();
    assert_eq!(code(&env.put("k", b"v", token)), 0);
    assert_eq!(status(env.cmd(&["get", "nothing"]), false), NOT_FOUND);
    // Stdout full as well: the value cannot be written (86), nor can the message saying so.
    assert_eq!(status(env.cmd(&["get", "k"]), true), IO);
    assert_eq!(status(env.cmd(&["keys"]), true), IO);
    // Help and version that cannot be written are an output error, not a success.
    assert_eq!(status(env.cmd(&["--help"]), true), IO);
    assert_eq!(status(env.cmd(&["--version"]), true), IO);
    assert_eq!(status(env.cmd(&["--help"]), false), 0);
}

/// The write end of a pipe whose reader is gone: every write fails with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors, each then owned once.
    let (read, write) = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(read);
    write.into()
}

/// `fencelock keys | head`: the reader stopped reading, which the status says (86) and stderr
/// does not (a cron job would mail it); a full disk is still told.
#[test]
fn a_closed_pipe_on_stdout_gives_86_quietly() {
    let env = Env::new();
    let token = env.grant();
    assert_eq!(code(&env.put("k", b"v", token)), 0);
    for args in [&["keys"][..], &["get", "k"], &["--help"]] {
        let out = env.cmd(args).stdout(closed_pipe()).output().unwrap();
        assert_eq!(code(&out), IO, "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    let out = env.cmd(&["keys"]).stdout(full()).output().unwrap();
    assert_eq!(code(&out), IO);
    assert!(
        stderr(&out).contains("cannot write standard output"),
        "{}",
        stderr(&out)
    );
}

/// `--verbose` writes to stderr on a grant and on a conflict; neither changes the status.
#[test]
fn verbose_run_exits_with_its_status_when_stderr_is_full() {
    let env = Env::new();
    let ran = env.path("ran");
    let touch = ["touch", ran.to_str().unwrap()];
    let mut args = vec!["run", "--lock", "free", "--verbose"];
    args.extend_from_slice(&touch);
    assert_eq!(status(env.cmd(&args), false), 0);
    assert!(ran.exists(), "the command did not run");
    fs::remove_file(&ran).unwrap();

    let holder = spawn_holder(&env, "busy", "30s", "started", "stop");
    for (options, code) in [(&[][..], LOCKED), (&["-w", "0.2"][..], TIMEOUT)] {
        let mut args = vec!["run", "--lock", "busy", "--verbose"];
        args.extend_from_slice(options);
        args.extend_from_slice(&touch);
        assert_eq!(status(env.cmd(&args), false), code, "{args:?}");
    }
    assert!(!ran.exists(), "a command ran without the lock");
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
}

/// The lost lease is told on stderr from the watcher thread, just before it signals the
/// command: a full stderr must not keep the signal from the command.
#[test]
fn a_lost_lease_is_signalled_and_gives_85_when_stderr_is_full() {
    let env = Env::new();
    let script = "trap 'touch \"$D/lost\"; exit 0' TERM; touch \"$D/started\"
        i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";
    let a = env
        .cmd(&[
            "run", "--lock", "job", "--ttl", "500ms", "--", "sh", "-c", script,
        ])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(full())
        .spawn()
        .unwrap();
    wait_for_file(&env.path("started"));
    signal_group(a.id(), libc::SIGSTOP);
    let b = env
        .cmd(&["run", "--lock", "job", "--wait", "10m", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out_b, _) = finish_while_stopped(b, a.id());
    assert_eq!(code(&out_b), 0, "{}", stderr(&out_b));
    signal_group(a.id(), libc::SIGCONT);
    let out_a = finish(a);
    assert!(
        env.path("lost").exists(),
        "the command was not signalled of the loss"
    );
    assert_eq!(code(&out_a), LOCK_LOST);
}

/// `serve` says on stderr that it serves; a full stderr does not stop it serving.
#[test]
fn serve_runs_and_stops_when_stderr_is_full() {
    let env = Env::new();
    assert_eq!(status(env.cmd(&["serve", "--idle-exit", "1s"]), false), 0);
}
