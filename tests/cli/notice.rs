//! What a wait says on a terminal (`run -w`, `serve --wait`, `elect`): one line once it has waited a
//! second, naming what it waits for and who holds it; nothing with `-q` or when standard error
//! is not a terminal. The terminal is a pty from script(1) (util-linux).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::*;

/// `fencelock ARGS` under a pty of script(1), its standard output and error both on the pty,
/// which script copies to its standard output (piped here).
fn under_pty(env: &Env, args: &[&str]) -> Command {
    let line = std::iter::once("\"$FL\"")
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("FENCELOCK_DB", &env.db)
        .env("FL", BIN)
        .env_remove("FENCELOCK_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_wait_on_a_terminal_says_what_it_waits_for_and_who_holds_it_then_goes_on_waiting() {
    let env = Env::new();
    let holder = spawn_holder(&env, "export", "30s", "started", "stop");
    let holder_pid = holder.id();
    let mut waiter = under_pty(
        &env,
        &["run", "--lock", "export", "-w", "60", "echo", "taken"],
    )
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(waiter.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    assert!(
        line.contains("waiting for lock \"export\": held by pid"),
        "{line}"
    );
    assert!(line.contains(&format!("pid {holder_pid} (")), "{line}");
    assert!(line.contains("with token 1 for"), "{line}");
    assert!(line.contains("more"), "{line}");
    // The wait goes on after the notice, and ends with the lock.
    std::fs::write(env.path("stop"), b"").unwrap();
    let rest: Vec<String> = lines
        .map(|line| line.unwrap().trim_end().to_owned())
        .collect();
    assert_eq!(
        rest,
        vec!["taken".to_owned()],
        "one notice, then the command"
    );
    assert!(waiter.wait().unwrap().success());
    assert!(finish(holder).status.success());
}

#[test]
fn a_wait_says_nothing_with_q_nor_when_stderr_is_not_a_terminal() {
    let env = Env::new();
    let holder = spawn_holder(&env, "export", "30s", "started", "stop");
    // Both waits run out (status 83), which -w without --verbose leaves silent: anything
    // printed would be the notice.
    let quiet = under_pty(&env, &["run", "--lock", "export", "-q", "-w", "2", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&quiet), TIMEOUT);
    assert_eq!(stdout(&quiet), "");
    let piped = env.run(&["run", "--lock", "export", "-w", "2", "true"]);
    assert_eq!(code(&piped), TIMEOUT);
    assert_eq!(stderr(&piped), "");
    std::fs::write(env.path("stop"), b"").unwrap();
    assert!(finish(holder).status.success());
}

#[test]
fn serve_on_a_terminal_names_the_processes_it_waits_for() {
    let env = Env::new();
    // A run with a TTL of a minute has the store open and looks at it again only in 20 s.
    let holder = spawn_holder(&env, "export", "60s", "started", "stop");
    let out = under_pty(&env, &["serve", "--wait", "2s", "--idle-exit", "1s"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("for the processes that have")
            && text.contains(&format!("open to move over: pid {} (", holder.id())),
        "{text}"
    );
    assert_eq!(code(&out), DATABASE, "{text}");
    std::fs::write(env.path("stop"), b"").unwrap();
    assert!(finish(holder).status.success());
}

#[test]
fn a_waiting_elect_on_a_terminal_says_which_election_it_waits_for_and_who_leads() {
    let env = Env::new();
    let script = "touch \"$D/leading\"; while [ ! -e \"$D/stop\" ]; do sleep 0.02; done";
    let leader = env
        .cmd(&["elect", "--lock", "jobs", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the leader");
    wait_for_file(&env.path("leading"));
    // The wait runs out (status 83), which -w without --verbose leaves silent: what is
    // printed is the notice.
    let out = under_pty(&env, &["elect", "--lock", "jobs", "-w", "3", "--", "true"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(code(&out), TIMEOUT, "{text}");
    assert!(
        text.contains("waiting for leadership of election \"jobs\": held by pid")
            && text.contains(&format!("pid {} (", leader.id())),
        "{text}"
    );
    let quiet = under_pty(
        &env,
        &["elect", "--lock", "jobs", "-q", "-w", "2", "--", "true"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&quiet), TIMEOUT);
    assert_eq!(stdout(&quiet), "");
    std::fs::write(env.path("stop"), b"").unwrap();
    assert!(finish(leader).status.success());
}
