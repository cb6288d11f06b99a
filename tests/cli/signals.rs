//! `run` and signals: forwarded to the command, ending a wait, the command's death with the
//! tool's.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn sigterm_to_the_tool_reaches_the_command_and_frees_the_lock() {
    let env = Env::new();
    let script = "trap 'echo got TERM > \"$D/term\"; exit 9' TERM; touch \"$D/started\"; \
                  while :; do sleep 0.02; done";
    let tool = env
        .cmd(&["run", "--lock", "t", "--", "sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&env.path("started"));
    signal(tool.id(), libc::SIGTERM);
    let out = finish(tool);
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(env.path("term")).unwrap(), "got TERM\n");
    assert_eq!(code(&env.run(&["run", "--lock", "t", "--", "true"])), 0);

    // A command that does not catch it dies of it, and the tool reports 128 + SIGTERM. No
    // shell here: a shell resets its signal mask, `sleep` would keep one it inherited.
    let tool = env
        .cmd(&["run", "--lock", "t", "--", "sleep", "600"])
        .spawn()
        .unwrap();
    let command = command_of(tool.id(), "sleep");
    signal(tool.id(), libc::SIGTERM);
    let give_up = Instant::now() + Duration::from_secs(60);
    while !ended(command) && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(10));
    }
    if !ended(command) {
        signal(command, libc::SIGKILL);
        panic!("the command did not get the forwarded SIGTERM");
    }
    assert_eq!(finish(tool).status.code(), Some(128 + libc::SIGTERM));
}

#[test]
fn sigint_while_waiting_aborts_without_running_the_command() {
    let env = Env::new();
    let holder = spawn_holder(&env, "w", "30s", "started", "stop");
    let marker = env.path("ran");
    let waiter = env
        .cmd(&[
            "run",
            "--lock",
            "w",
            "-w",
            "forever",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let it start waiting; if the signal came earlier it would still abort the same way.
    thread::sleep(Duration::from_millis(300));
    signal(waiter.id(), libc::SIGINT);
    let out = finish(waiter);
    assert_eq!(code(&out), 128 + libc::SIGINT, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interrupted by SIGINT"),
        "{}",
        stderr(&out)
    );
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    assert!(!marker.exists());
}

#[test]
fn a_killed_tool_takes_its_command_down_and_frees_the_lock() {
    let env = Env::new();
    let script = "trap 'touch \"$D/child-got-term\"; exit 0' TERM; touch \"$D/started\"; \
                  while :; do sleep 0.02; done";
    let mut tool = env
        .cmd(&["run", "--lock", "k", "--", "sh", "-c", script])
        .process_group(0)
        .spawn()
        .unwrap();
    wait_for_file(&env.path("started"));
    signal(tool.id(), libc::SIGKILL);
    tool.wait().unwrap();
    let waited = std::panic::catch_unwind(|| wait_for_file(&env.path("child-got-term")));
    // The command is orphaned if the tool failed to arrange its death: clean it up either way.
    // SAFETY: killpg takes plain integers; the group is the tool's own, which it made.
    let _ = unsafe { libc::killpg(libc::pid_t::try_from(tool.id()).unwrap(), libc::SIGKILL) };
    waited.expect("the command got --lost-signal when the tool died");
    assert_eq!(code(&env.run(&["run", "--lock", "k", "--", "true"])), 0);
}

/// The command must not inherit the signals the tool blocks for itself: a plain program (no
/// shell to reset the mask) dies of --lost-signal when the tool is killed.
#[test]
fn a_killed_tool_takes_a_plain_command_down() {
    let env = Env::new();
    let mut tool = env
        .cmd(&["run", "--lock", "k", "--", "sleep", "600"])
        .spawn()
        .unwrap();
    let command = command_of(tool.id(), "sleep");
    signal(tool.id(), libc::SIGKILL);
    tool.wait().unwrap();
    let give_up = Instant::now() + Duration::from_secs(60);
    while !ended(command) && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(10));
    }
    if !ended(command) {
        signal(command, libc::SIGKILL);
        panic!("the command outlived the tool");
    }
}
