//! `elect` and `leader`: a command run while leading, with the term as its token; candidates
//! that take turns; a paused leader deposed, signalled, and its late write refused; `leader`
//! and `leader --watch`.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use crate::common::*;

/// `elect --lock sched ... -- sh -c SCRIPT`, its stderr piped.
fn elect(env: &Env, args: &[&str], script: &str) -> std::process::Child {
    let mut argv = vec!["elect", "--lock", "sched"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--", "sh", "-c", script]);
    env.cmd(&argv)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn read_number(env: &Env, file: &str) -> u64 {
    wait_for_file(&env.path(file));
    fs::read_to_string(env.path(file))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Writes `$FENCELOCK_TOKEN` to `$D/NAME` (atomically), then waits for `$D/go-NAME`.
fn lead_until_go(name: &str) -> String {
    format!(
        "echo \"$FENCELOCK_TOKEN\" > \"$D/{name}.tmp\" && mv \"$D/{name}.tmp\" \"$D/{name}\"
         i=0; while [ ! -e \"$D/go-{name}\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"
    )
}

#[test]
fn the_command_runs_with_the_term_and_leader_shows_it() {
    let env = Env::new();
    let a = elect(&env, &["--value", "10.0.0.7:8080"], &lead_until_go("a"));
    let term = read_number(&env, "a");
    let json = env.json(&["leader", "sched", "--json"]);
    assert_eq!(json["term"], term);
    assert_eq!(json["version"], 1);
    assert_eq!(json["value"], "10.0.0.7:8080");
    assert_eq!(json["pid"], a.id());
    let text = stdout(&env.run(&["leader", "sched"]));
    assert!(
        text.starts_with(&format!("term {term} version 1 pid {}", a.id())),
        "{text}"
    );
    assert!(text.contains("10.0.0.7:8080"), "{text}");

    fs::write(env.path("go-a"), "").unwrap();
    let out = finish(a);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The tool resigned as the command ended.
    let out = env.run(&["leader", "sched"]);
    assert_eq!(code(&out), NOT_FOUND, "{}", stderr(&out));
    assert!(stderr(&out).contains("nobody leads election \"sched\""));
}

#[test]
fn a_second_candidate_waits_and_leads_once_the_first_resigns() {
    let env = Env::new();
    let a = elect(&env, &[], &lead_until_go("a"));
    let term_a = read_number(&env, "a");
    // Without a wait limit a candidate waits its turn; with -w 0 it gives up at once.
    let out = env.run(&[
        "elect",
        "--lock",
        "sched",
        "-w",
        "0",
        "--verbose",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), TIMEOUT, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("leads with term {term_a}")),
        "{}",
        stderr(&out)
    );
    let b = elect(&env, &[], &lead_until_go("b"));
    fs::write(env.path("go-a"), "").unwrap();
    assert_eq!(code(&finish(a)), 0);
    let term_b = read_number(&env, "b");
    assert!(term_b > term_a);
    fs::write(env.path("go-b"), "").unwrap();
    let out = finish(b);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// The seed's scenario as an election: leader A is stopped past its lease, B takes over and
/// writes; A resumes, finds its leadership ended, signals its command, whose late fenced write
/// is refused; A exits 85 and B's value stays.
#[test]
fn a_paused_leader_is_deposed_and_its_late_write_refused() {
    let env = Env::new();
    let script_a = "\
        trap 'touch \"$D/a-lost\"' TERM
        printf first | \"$FL\" put k || exit 50
        echo \"$FENCELOCK_TOKEN\" > \"$D/a.tmp\" && mv \"$D/a.tmp\" \"$D/a\"
        i=0; while [ ! -e \"$D/a-lost\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
        printf late | \"$FL\" put k --token \"$FENCELOCK_TOKEN\"
        echo $? > \"$D/a-put.tmp\" && mv \"$D/a-put.tmp\" \"$D/a-put\"";
    let a = elect(&env, &["--ttl", "600ms"], script_a);
    let term_a = read_number(&env, "a");
    signal_group(a.id(), libc::SIGSTOP);
    let b = env
        .cmd(&[
            "elect",
            "--lock",
            "sched",
            "--",
            "sh",
            "-c",
            "printf second | \"$FL\" put k && echo $FENCELOCK_TOKEN",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out_b, _) = finish_while_stopped(b, a.id());
    assert_eq!(code(&out_b), 0, "{}", stderr(&out_b));
    let term_b: u64 = stdout(&out_b).trim().parse().unwrap();
    assert!(term_b > term_a);
    signal_group(a.id(), libc::SIGCONT);
    let out_a = finish(a);
    assert_eq!(code(&out_a), LOCK_LOST, "{}", stderr(&out_a));
    assert!(env.path("a-lost").exists(), "the command was not signalled");
    assert_eq!(
        read_number(&env, "a-put"),
        STALE_TOKEN as u64,
        "A's late write was not refused"
    );
    let json = env.json(&["get", "k", "--json"]);
    assert_eq!(
        (json["value"].as_str(), json["token"].as_u64()),
        (Some("second"), Some(term_b))
    );
}

#[test]
fn leader_watch_prints_each_term_in_order() {
    let env = Env::new();
    // The store exists before the watch starts (a watch does not create one).
    assert_eq!(
        code(&env.run(&["elect", "--lock", "other", "--", "true"])),
        0
    );
    let mut watch = env
        .cmd(&["leader", "sched", "--watch", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut terms = Vec::new();
    for value in ["a", "b", "c"] {
        let script = "echo $FENCELOCK_TOKEN";
        let out = env.run(&[
            "elect", "--lock", "sched", "--value", value, "--", "sh", "-c", script,
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        terms.push(stdout(&out).trim().parse::<u64>().unwrap());
    }
    for (term, value) in terms.iter().zip(["a", "b", "c"]) {
        let line = lines.next().expect("a line a term").unwrap();
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (json["term"].as_u64(), json["value"].as_str()),
            (Some(*term), Some(value))
        );
    }
    signal(watch.id(), libc::SIGTERM);
    let _ = watch.wait();
}

#[test]
fn bad_elections_are_usage_errors() {
    let env = Env::new();
    for args in [
        &["elect", "--", "true"][..],
        &["elect", "--lock", "", "--", "true"],
        &[
            "elect", "--lock", "sched", "--ttl", "10s", "--margin", "6s", "--", "true",
        ],
        &["leader"],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), USAGE, "{args:?}: {}", stderr(&out));
    }
    assert_eq!(code(&env.run(&["leader", ""])), USAGE);
}
