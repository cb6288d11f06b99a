//! `hold`: a lock around a section of a shell script. Each way a hold ends lets the lock go at
//! once (its standard input closing, SIGTERM, its parent's exit, the script killed mid-way), a
//! lease lost while held ends it with status 85, and an input of /dev/null is refused.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use crate::common::*;

/// `fencelock hold --lock NAME ARGS` with its standard input and output piped; returns it once
/// it printed the token, and the token.
fn spawn_hold(env: &Env, name: &str, args: &[&str]) -> (Child, u64) {
    let mut argv = vec!["hold", "--lock", name];
    argv.extend_from_slice(args);
    let mut child = env
        .cmd(&argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let token = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    (child, token)
}

/// The lock is free now: a run that does not wait takes it.
fn assert_free(env: &Env, name: &str) {
    let out = env.run(&["run", "--lock", name, "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// The lock is held: a run that does not wait is refused.
fn assert_held(env: &Env, name: &str) {
    assert_eq!(code(&env.run(&["run", "--lock", name, "true"])), LOCKED);
}

#[test]
fn hold_prints_the_token_holds_and_releases_when_its_stdin_closes() {
    let env = Env::new();
    let (mut hold, token) = spawn_hold(&env, "export", &["--ttl", "60s"]);
    assert_held(&env, "export");
    // The printed token fences writes.
    assert_eq!(code(&env.put("out", b"v1", token)), 0);
    drop(hold.stdin.take());
    let out = finish(hold);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_free(&env, "export");
    assert!(env.grant() > token);
}

#[test]
fn hold_releases_on_sigterm() {
    let env = Env::new();
    let (hold, _) = spawn_hold(&env, "export", &["--ttl", "60s"]);
    assert_held(&env, "export");
    signal(hold.id(), libc::SIGTERM);
    let out = finish(hold);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_free(&env, "export");
}

#[test]
fn hold_releases_when_its_parent_exits() {
    let env = Env::new();
    // A background job of a script (its input is /dev/null, hence --no-stdin); the script
    // exits once the token is printed.
    let out = env.run(&[
        "run",
        "--lock",
        "unrelated",
        "--",
        "sh",
        "-c",
        "\"$FL\" hold --lock export --ttl 60s --no-stdin > \"$D/token\" &
         while [ ! -s \"$D/token\" ]; do sleep 0.02; done",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Released within moments of the parent's exit, not when the 60 s TTL runs out: the wait
    // is bounded only so that a broken hold fails the test instead of hanging it.
    let out = env.run(&["run", "--lock", "export", "-w", "30", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn a_script_killed_in_its_section_leaves_no_lock_held() {
    let env = Env::new();
    let script = "coproc HOLD { \"$FL\" hold --lock export --ttl 60s; }
        read -r token <&\"${HOLD[0]}\"
        echo \"$token\" > \"$D/token\"
        while :; do sleep 0.05; done";
    let mut bash = std::process::Command::new("bash")
        .args(["-c", script])
        .env("FENCELOCK_DB", &env.db)
        .env("FL", BIN)
        .env("D", env.dir.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&env.path("token"));
    while std::fs::read_to_string(env.path("token"))
        .unwrap()
        .trim()
        .is_empty()
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_held(&env, "export");
    bash.kill().unwrap();
    bash.wait().unwrap();
    let out = env.run(&["run", "--lock", "export", "-w", "30", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn a_lease_lost_while_held_ends_the_hold_with_85() {
    let env = Env::new();
    let (hold, token) = spawn_hold(&env, "export", &["--ttl", "300ms"]);
    signal(hold.id(), libc::SIGSTOP);
    // Past the TTL another process takes the lock and writes.
    let out = env.run(&[
        "run",
        "--lock",
        "export",
        "-w",
        "30",
        "--",
        "sh",
        "-c",
        "echo new | \"$FL\" put out",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    signal(hold.id(), libc::SIGCONT);
    let out = finish(hold);
    assert_eq!(code(&out), LOCK_LOST, "{}", stderr(&out));
    assert!(stderr(&out).contains("lost the lease"), "{}", stderr(&out));
    // The section's late write with its token is refused.
    assert_eq!(code(&env.put("out", b"stale", token)), STALE_TOKEN);
}

#[test]
fn hold_refuses_an_input_of_dev_null() {
    let env = Env::new();
    let out = env.run(&["hold", "--lock", "export"]);
    assert_eq!(code(&out), USAGE);
    assert!(stderr(&out).contains("--no-stdin"), "{}", stderr(&out));
    assert_free(&env, "export");
}
