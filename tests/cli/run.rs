//! `run`: the command, its token and status; a held lock and flock(1)'s options; lock kinds.

use std::fs;
use std::process::{Child, Stdio};

use crate::common::*;

#[test]
fn run_hands_the_command_its_token_and_passes_its_status_through() {
    let env = Env::new();
    let out = env.run(&[
        "run",
        "--lock",
        "job",
        "--",
        "sh",
        "-c",
        "echo \"$FENCELOCK_TOKEN $FENCELOCK_LOCK $FENCELOCK_DB\"; exit 3",
    ]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let text = stdout(&out);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert!(fields[0].parse::<u64>().unwrap() > 0);
    assert_eq!(fields[1], "job");
    assert_eq!(fields[2], env.db.to_str().unwrap());

    // The lock was released: the next run takes it at once, with a higher token.
    let out = env.run(&[
        "run",
        "--lock",
        "job",
        "--",
        "sh",
        "-c",
        "echo $FENCELOCK_TOKEN",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).trim().parse::<u64>().unwrap() > fields[0].parse().unwrap());

    // A command killed by a signal: 128 + the signal.
    let out = env.run(&["run", "--lock", "job", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(code(&out), 128 + libc::SIGKILL);
}

#[test]
fn run_reports_commands_that_cannot_start() {
    let env = Env::new();
    let out = env.run(&["run", "--lock", "j", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), COMMAND_NOT_FOUND);
    assert!(
        stderr(&out).contains("command not found: /nonexistent/command"),
        "{}",
        stderr(&out)
    );

    let script = env.path("not-executable.sh");
    fs::write(&script, "#!/bin/sh\n").unwrap();
    let out = env.run(&["run", "--lock", "j", "--", script.to_str().unwrap()]);
    assert_eq!(code(&out), CANNOT_EXECUTE);
    assert!(stderr(&out).contains("cannot execute"), "{}", stderr(&out));

    // The lock was released after the failed start.
    assert_eq!(code(&env.run(&["run", "--lock", "j", "--", "true"])), 0);
}

#[test]
fn a_held_lock_gives_82_at_once_or_83_after_the_wait() {
    let env = Env::new();
    let holder = spawn_holder(&env, "busy", "30s", "started", "stop");

    let out = env.run(&[
        "run",
        "--lock",
        "busy",
        "--verbose",
        "--",
        "touch",
        env.path("ran").to_str().unwrap(),
    ]);
    assert_eq!(code(&out), LOCKED);
    assert!(
        stderr(&out).contains(&format!("held by pid {}", holder.id())),
        "{}",
        stderr(&out)
    );

    let out = env.run(&[
        "run",
        "--lock",
        "busy",
        "--wait",
        "300ms",
        "--verbose",
        "--",
        "touch",
        env.path("ran").to_str().unwrap(),
    ]);
    assert_eq!(code(&out), TIMEOUT);
    assert!(
        stderr(&out).contains("timed out after 300ms"),
        "{}",
        stderr(&out)
    );
    assert!(
        !env.path("ran").exists(),
        "the command ran without the lock"
    );

    // A waiting run gets the lock once the holder ends.
    let waiter = env
        .cmd(&[
            "run",
            "--lock",
            "busy",
            "--wait",
            "5m",
            "--",
            "sh",
            "-c",
            "echo got it",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    let out = finish(waiter);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "got it\n");
}

#[test]
fn flock_options_nonblock_timeout_conflict_code_and_command_string() {
    let env = Env::new();
    let holder = spawn_holder(&env, "busy", "30s", "started", "stop");
    let ran = env.path("ran");
    let touch = ["touch", ran.to_str().unwrap()];
    let conflicts: &[(&[&str], i32, &str)] = &[
        (&["-n"], LOCKED, "held by pid"),
        (&["--nonblock"], LOCKED, "held by pid"),
        (&["-w", "0"], LOCKED, "held by pid"),
        (&["-w", "0.3"], TIMEOUT, "timed out after 300ms"),
        (&["--timeout", "1"], TIMEOUT, "timed out after 1.0s"),
        (&["-n", "-E", "7"], 7, "held by pid"),
        (&["-E", "9", "-w", ".2"], 9, "timed out after 200ms"),
        (&["--conflict-exit-code", "0"], 0, "held by pid"),
    ];
    for (options, status, message) in conflicts {
        let mut args = vec!["run", "--lock", "busy", "--verbose"];
        args.extend_from_slice(options);
        args.extend_from_slice(&touch);
        let out = env.run(&args);
        assert_eq!(code(&out), *status, "{options:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(message),
            "{options:?}: {}",
            stderr(&out)
        );
    }
    assert!(!ran.exists(), "a command ran without the lock");
    // Only a run not told to wait is told how to.
    let out = env.run(&["run", "--lock", "busy", "--verbose", "true"]);
    assert!(stderr(&out).contains("-w SECONDS"), "{}", stderr(&out));
    let out = env.run(&["run", "--lock", "busy", "--verbose", "-w", "0", "true"]);
    assert!(!stderr(&out).contains("-w SECONDS"), "{}", stderr(&out));

    // -w forever waits until the holder ends, then runs the -c string with `sh -c`.
    let waiter = env
        .cmd(&[
            "run",
            "--lock",
            "busy",
            "-w",
            "forever",
            "-c",
            "echo \"got $FENCELOCK_LOCK\"; exit 4",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    let out = finish(waiter);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert_eq!(stdout(&out), "got busy\n");

    // The command without `--`: options after it are its own.
    let out = env.run(&[
        "run",
        "--lock",
        "free",
        "-w",
        "10",
        "sh",
        "-c",
        "echo \"$0\" -n",
        "x",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "x -n\n");
    // -E changes the status of a conflict only.
    let out = env.run(&["run", "--lock", "free", "-E", "0", "-c", "exit 82"]);
    assert_eq!(code(&out), LOCKED, "{}", stderr(&out));
}

#[test]
fn durations_in_every_unit_are_accepted() {
    let env = Env::new();
    for ttl in ["500ms", "30s", "2m", "1h", "1d", "1m30s", "1.5s"] {
        let out = env.run(&[
            "run", "--lock", "d", "--ttl", ttl, "--wait", "1m", "--", "true",
        ]);
        assert_eq!(code(&out), 0, "--ttl {ttl}: {}", stderr(&out));
    }
}

/// Spawns `fencelock run ARGS -- sh -c SCRIPT` whose command creates `started` and then runs
/// until `stop` exists.
fn spawn_run(env: &Env, args: &[&str], started: &str, stop: &str) -> Child {
    let script =
        format!("touch \"$D/{started}\"; while [ ! -e \"$D/{stop}\" ]; do sleep 0.02; done");
    let mut argv = vec!["run"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--", "sh", "-c", &script]);
    let child = env
        .cmd(&argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn run");
    wait_for_file(&env.path(started));
    child
}

#[test]
fn run_permits_lets_n_commands_hold_a_semaphore_and_refuses_another_count() {
    let env = Env::new();
    let a = spawn_run(&env, &["--lock", "pool", "--permits", "2"], "a", "stop");
    let b = spawn_run(&env, &["--lock", "pool", "--permits", "2"], "b", "stop");
    let out = env.run(&[
        "run",
        "--lock",
        "pool",
        "--permits",
        "2",
        "-n",
        "--verbose",
        "true",
    ]);
    assert_eq!(code(&out), LOCKED, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("semaphore \"pool\" (2 permits)"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["run", "--lock", "pool", "--permits", "3", "true"]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    assert!(stderr(&out).contains("count of 2"), "{}", stderr(&out));
    let out = env.run(&["run", "--lock", "pool", "--permits", "0", "true"]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    // Both permits show, each with its own token.
    let json = env.json(&["status", "--lock", "pool", "--json"]);
    let held: Vec<_> = json
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["state"] == "held")
        .collect();
    assert_eq!(held.len(), 2, "{json}");
    assert!(held
        .iter()
        .all(|l| l["kind"] == "semaphore" && l["permits"] == 2));
    assert_ne!(held[0]["token"], held[1]["token"]);
    let table = stdout(&env.run(&["locks"]));
    assert!(
        table.contains("KIND") && table.contains("semaphore(2)"),
        "{table}"
    );
    fs::write(env.path("stop"), b"").unwrap();
    assert_eq!(code(&finish(a)), 0);
    assert_eq!(code(&finish(b)), 0);
    let out = env.run(&["run", "--lock", "pool", "--permits", "3", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn run_shared_holders_share_and_exclude_an_exclusive_run() {
    let env = Env::new();
    let a = spawn_run(&env, &["--lock", "config", "-s"], "a", "stop");
    let b = spawn_run(&env, &["--lock", "config", "--shared"], "b", "stop");
    for exclusive in [&["-n"][..], &["-x"][..], &["-e", "-w", "0"][..]] {
        let mut args = vec!["run", "--lock", "config"];
        args.extend_from_slice(exclusive);
        args.push("true");
        let out = env.run(&args);
        assert_eq!(code(&out), LOCKED, "{exclusive:?}: {}", stderr(&out));
    }
    let out = env.run(&["run", "--lock", "config", "-s", "--permits", "2", "true"]);
    assert_eq!(code(&out), USAGE);
    fs::write(env.path("stop"), b"").unwrap();
    assert_eq!(code(&finish(a)), 0);
    assert_eq!(code(&finish(b)), 0);
    let writer = spawn_run(&env, &["--lock", "config"], "w", "stop2");
    let out = env.run(&["run", "--lock", "config", "-s", "--verbose", "true"]);
    assert_eq!(code(&out), LOCKED, "{}", stderr(&out));
    assert!(stderr(&out).contains("shared"), "{}", stderr(&out));
    fs::write(env.path("stop2"), b"").unwrap();
    assert_eq!(code(&finish(writer)), 0);
}

#[test]
fn run_with_several_locks_takes_all_or_none() {
    let env = Env::new();
    let b = spawn_run(&env, &["--lock", "b"], "b", "stop");
    let out = env.run(&["run", "--lock", "a", "--lock", "b", "-n", "true"]);
    assert_eq!(code(&out), LOCKED, "{}", stderr(&out));
    let out = env.run(&["status", "--lock", "a"]);
    assert_eq!(code(&out), NOT_FOUND, "all or none: a was not granted");
    let out = env.run(&["run", "--lock", "a", "--lock", "b", "-w", "0.05", "true"]);
    assert_eq!(code(&out), TIMEOUT, "{}", stderr(&out));
    fs::write(env.path("stop"), b"").unwrap();
    assert_eq!(code(&finish(b)), 0);
    let out = env.run(&[
        "run",
        "--lock",
        "a",
        "--lock",
        "b",
        "--",
        "sh",
        "-c",
        "echo \"$FENCELOCK_LOCK $FENCELOCK_TOKEN $FENCELOCK_TOKENS\"",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[0], "a,b");
    let last: u64 = fields[1].parse().unwrap();
    assert_eq!(fields[2], format!("a={},b={last}", last - 1));
    for args in [
        &["run", "--lock", "a", "--lock", "a", "true"][..],
        &["run", "--lock", "a", "--lock", "b", "-s", "true"][..],
        &[
            "run",
            "--lock",
            "a",
            "--lock",
            "b",
            "--permits",
            "2",
            "true",
        ][..],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), USAGE, "{args:?}: {}", stderr(&out));
    }
}

/// flock(1) says nothing of a conflict unless `--verbose`: a cron job every minute that skips
/// its run while the lock is held (or a `-w` wait ran out) must not mail every skip, with `-E 0`
/// or without. Every other error still prints.
#[test]
fn a_conflict_is_silent_unless_verbose_as_in_flock() {
    let env = Env::new();
    let holder = spawn_holder(&env, "cron", "30s", "started", "stop");
    let pool = spawn_run(&env, &["--lock", "pool", "--permits", "1"], "p", "stop");
    let ran = env.path("ran");
    let touch = ["touch", ran.to_str().unwrap()];
    let conflicts: &[(&[&str], i32, &str)] = &[
        (&["--lock", "cron"], LOCKED, "held by pid"),
        (&["--lock", "cron", "-n"], LOCKED, "held by pid"),
        (&["--lock", "cron", "-w", "0"], LOCKED, "held by pid"),
        (&["--lock", "cron", "-n", "-E", "0"], 0, "held by pid"),
        (&["--lock", "cron", "-E", "75"], 75, "held by pid"),
        (&["--lock", "cron", "-w", "0.2"], TIMEOUT, "timed out"),
        (&["--lock", "cron", "-w", "0.2", "-E", "0"], 0, "timed out"),
        (&["--lock", "pool", "--permits", "1"], LOCKED, "semaphore"),
        (&["--lock", "free", "--lock", "cron"], LOCKED, "held by pid"),
    ];
    for (options, status, message) in conflicts {
        for verbose in [false, true] {
            let mut args = vec!["run"];
            args.extend_from_slice(options);
            if verbose {
                args.push("--verbose");
            }
            args.extend_from_slice(&touch);
            let out = env.run(&args);
            assert_eq!(code(&out), *status, "{args:?}: {}", stderr(&out));
            assert_eq!(stdout(&out), "", "{args:?}");
            if verbose {
                assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
            } else {
                assert_eq!(stderr(&out), "", "{args:?}: a conflict printed");
            }
        }
    }
    assert!(!ran.exists(), "a command ran without the lock");
    // Not conflicts: another permit count, a command that is not there.
    let out = env.run(&["run", "--lock", "pool", "--permits", "2", "true"]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    assert!(stderr(&out).contains("count of 1"), "{}", stderr(&out));
    let out = env.run(&["run", "--lock", "free", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), COMMAND_NOT_FOUND, "{}", stderr(&out));
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
    // --verbose tells a grant too, as flock's does; without it a grant is silent as well.
    let out = env.run(&["run", "--lock", "free", "--verbose", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("took lock \"free\" with token"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["run", "--lock", "free", "true"]);
    assert_eq!(stderr(&out), "");

    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    assert!(finish(pool).status.success());
}

/// `FENCELOCK_TOKENS` stays unambiguous for names holding its separators: `%`, `,` and `=` in
/// a name are percent-escaped, so splitting at `,` and then at the last `=` and decoding gives
/// back every name and its token.
#[test]
fn several_locks_tokens_escape_the_separators_in_names() {
    let env = Env::new();
    let names = ["a,b=1", "100%", "plain", "%2C", "x=y,z"];
    let mut args = vec!["run"];
    for name in &names {
        args.extend(["--lock", name]);
    }
    args.extend(["--", "sh", "-c", "printf '%s\\n' \"$FENCELOCK_TOKENS\""]);
    let out = env.run(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let tokens = stdout(&out).trim_end().to_owned();
    let pairs: Vec<(String, u64)> = tokens
        .split(',')
        .map(|pair| {
            let (name, token) = pair.rsplit_once('=').expect("NAME=TOKEN");
            (percent_decode(name), token.parse().expect("a token"))
        })
        .collect();
    assert_eq!(
        tokens,
        format!(
            "a%2Cb%3D1={},100%25={},plain={},%252C={},x%3Dy%2Cz={}",
            pairs[0].1, pairs[1].1, pairs[2].1, pairs[3].1, pairs[4].1
        )
    );
    let decoded: Vec<&str> = pairs.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(decoded, names);
    for (pair, next) in pairs.iter().zip(&pairs[1..]) {
        assert_eq!(next.1, pair.1 + 1, "{tokens}");
    }
    let help = stdout(&env.run(&["run", "--help"]));
    assert!(help.contains("%25, %2C and %3D"), "{help}");
}

/// `%XX` to the byte it escapes, the rest as it is.
fn percent_decode(text: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(byte) = bytes.next() {
        if byte == b'%' {
            let hex: Vec<u8> = bytes.by_ref().take(2).collect();
            let hex = std::str::from_utf8(&hex).expect("two hex digits");
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
        } else {
            out.push(byte);
        }
    }
    String::from_utf8(out).expect("UTF-8")
}
