//! `run` whose lease is lost while the command runs (the tool paused past its TTL).

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Child, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// The seed's scenario from a shell. Run A takes the lock with a short TTL and writes; then its
/// whole process group (the tool and its command) is stopped past the TTL. Run B takes the lock
/// over and writes with its newer token. When A resumes, the tool finds its lease lost and
/// signals its command; the command's late write is refused as stale and B's value stays.
#[test]
fn a_paused_run_loses_its_lease_and_its_late_write_is_refused() {
    let env = Env::new();
    let script_a = "\
        trap 'touch \"$D/a-lost\"' TERM
        printf first | \"$FL\" put k || exit 50
        echo \"$FENCELOCK_TOKEN\" > \"$D/a-token.tmp\" && mv \"$D/a-token.tmp\" \"$D/a-token\"
        i=0; while [ ! -e \"$D/go\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
        i=0; while [ ! -e \"$D/a-lost\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
        printf late | \"$FL\" put k --token \"$FENCELOCK_TOKEN\"
        echo $? > \"$D/a-put.tmp\" && mv \"$D/a-put.tmp\" \"$D/a-put\"";
    let a = env
        .cmd(&[
            "run", "--lock", "export", "--ttl", "500ms", "--", "sh", "-c", script_a,
        ])
        .process_group(0)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let group = a.id();
    wait_for_file(&env.path("a-token"));
    let token_a: u64 = fs::read_to_string(env.path("a-token"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(env.get("k"), b"first");

    signal_group(group, libc::SIGSTOP);
    // B waits until A's lease runs out; A's tool is stopped and cannot renew it.
    let script_b =
        "printf second | \"$FL\" put k --token \"$FENCELOCK_TOKEN\" && echo $FENCELOCK_TOKEN";
    let b = env
        .cmd(&[
            "run", "--lock", "export", "--ttl", "30s", "--wait", "10m", "--", "sh", "-c", script_b,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out_b, _) = finish_while_stopped(b, group);
    assert_eq!(code(&out_b), 0, "{}", stderr(&out_b));
    let token_b: u64 = stdout(&out_b).trim().parse().unwrap();
    assert!(token_b > token_a);
    assert_eq!(env.get("k"), b"second");

    fs::write(env.path("go"), "").unwrap();
    signal_group(group, libc::SIGCONT);
    let out_a = finish(a);
    assert_eq!(code(&out_a), LOCK_LOST, "{}", stderr(&out_a));
    assert!(
        stderr(&out_a).contains("lost the lease of lock \"export\""),
        "{}",
        stderr(&out_a)
    );
    assert!(
        env.path("a-lost").exists(),
        "the command was not signalled of the loss"
    );
    let put_status = fs::read_to_string(env.path("a-put")).unwrap();
    assert_eq!(
        put_status.trim(),
        STALE_TOKEN.to_string(),
        "A's late write was not refused"
    );

    let json = env.json(&["get", "k", "--json"]);
    assert_eq!(json["value"], "second");
    assert_eq!(json["token"], token_b);
}

/// Starts `fencelock run --lock job --ttl 500ms ARGS -- sh -c SCRIPT` as run A in a process
/// group of its own; once SCRIPT created `$D/started`, stops the group past its TTL while run
/// B takes the lock over, then resumes A and returns it, its lease lost.
fn run_taken_over(env: &Env, args: &[&str], script: &str) -> Child {
    let mut argv = vec!["run", "--lock", "job", "--ttl", "500ms"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--", "sh", "-c", script]);
    let a = env
        .cmd(&argv)
        .process_group(0)
        .stderr(Stdio::piped())
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
    a
}

/// Waits for run A, bounded only so that a tool that never ends its command fails the test
/// instead of hanging it (its group is killed then).
fn finish_bounded(mut a: Child) -> Output {
    let give_up = Instant::now() + Duration::from_secs(60);
    while a.try_wait().unwrap().is_none() {
        if Instant::now() > give_up {
            signal_group(a.id(), libc::SIGKILL);
            panic!("run A never ended: its command still runs: {:?}", finish(a));
        }
        thread::sleep(Duration::from_millis(20));
    }
    finish(a)
}

/// A command that ignores the lost-lease signal would run on unfenced beside the new holder:
/// SIGKILL follows `--kill-after` later (a bare number is seconds), by default 5 s later.
#[test]
fn a_command_that_ignores_the_lost_signal_is_killed_kill_after_later() {
    for (args, after) in [(&["--kill-after", "1"][..], "1.0s"), (&[][..], "5.0s")] {
        let env = Env::new();
        let script = "trap '' TERM; touch \"$D/started\"; while :; do sleep 0.05; done";
        let out = finish_bounded(run_taken_over(&env, args, script));
        let err = stderr(&out);
        assert_eq!(code(&out), LOCK_LOST, "{args:?}: {err}");
        assert!(
            err.contains("lost the lease of lock \"job\""),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("sending SIGTERM to the command"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!(
                "still runs {after} after SIGTERM; sending SIGKILL"
            )),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("the command was killed by SIGKILL after the lease was lost"),
            "{args:?}: {err}"
        );
        // The lock is B's, now released: free.
        assert_eq!(code(&env.run(&["run", "--lock", "job", "-n", "true"])), 0);
    }
}

/// `--kill-after 0`, as timeout(1)'s `-k 0`, sends no SIGKILL: a command that goes on after
/// the lost-lease signal ends when it will, and run still exits 85.
#[test]
fn kill_after_0_sends_no_sigkill() {
    let env = Env::new();
    let script = "trap 'touch \"$D/a-lost\"' TERM; touch \"$D/started\"
        while [ ! -e \"$D/go\" ]; do sleep 0.05; done; exit 3";
    let a = run_taken_over(&env, &["--kill-after", "0"], script);
    wait_for_file(&env.path("a-lost"));
    // Past the default grace period, so that a SIGKILL would have come by now; a correct
    // tool passes whatever the timing.
    thread::sleep(Duration::from_secs(7));
    fs::write(env.path("go"), "").unwrap();
    let out = finish_bounded(a);
    let err = stderr(&out);
    assert_eq!(code(&out), LOCK_LOST, "{err}");
    assert!(!err.contains("SIGKILL"), "{err}");
    assert!(
        err.contains("the command exited with status 3 after the lease was lost"),
        "{err}"
    );
}
