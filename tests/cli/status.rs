//! `status` (`locks`): the locks the store records, in a table or JSON.

use std::fs;
use std::process::{Command, Stdio};

use crate::common::*;

#[test]
fn status_shows_the_holder_while_a_run_holds_the_lock() {
    let env = Env::new();
    let holder = spawn_holder(&env, "nightly", "30s", "started", "stop");

    let out = env.run(&["status"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("NAME"), "{text}");
    for column in ["STATE", "TOKEN", "PID", "GRANTED", "EXPIRES"] {
        assert!(header.contains(column), "{text}");
    }
    let row = lines
        .find(|l| l.starts_with("nightly"))
        .expect("a row for the lock");
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields[1], "held");
    assert_eq!(fields[3], holder.id().to_string());
    assert!(
        fields[5].ends_with("ago") || fields[6].ends_with("ago"),
        "{row}"
    );
    // Columns line up: every value starts where its header does.
    let state_at = header.find("STATE").unwrap();
    assert_eq!(&row[state_at..state_at + 4], "held", "{text}");
    // Not a terminal: no colour codes.
    assert!(!text.contains('\x1b'), "{text:?}");

    let json = env.json(&["locks", "--lock", "nightly", "--json"]);
    let lock = &json[0];
    assert_eq!(lock["name"], "nightly");
    assert_eq!(lock["state"], "held");
    assert_eq!(lock["pid"], holder.id());
    assert!(lock["remaining_ms"].as_u64().unwrap() > 0);
    assert!(lock["expires_at_ms"].as_i64() > lock["granted_at_ms"].as_i64());
    let token = lock["token"].as_u64().unwrap();

    let out = env.run(&["status", "--lock", "no-such-lock"]);
    assert_eq!(code(&out), NOT_FOUND);
    assert!(
        stderr(&out).contains("no record of lock \"no-such-lock\""),
        "{}",
        stderr(&out)
    );

    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    // Every process closed the store: no lease is recorded any more (the leases lived in its
    // shared memory), and the grant is in the lock's history.
    let out = env.run(&["status", "--lock", "nightly"]);
    assert_eq!(code(&out), NOT_FOUND, "{}", stderr(&out));
    let json = env.json(&["history", "nightly", "--json"]);
    assert_eq!(json[0]["token"], token);
    assert_eq!(json[0]["ending"], "released");
}

/// Colour only on a terminal, and never with `NO_COLOR`. `script` (util-linux, essential on
/// Debian) gives the tool a pseudo-terminal.
#[test]
fn status_is_coloured_on_a_terminal_unless_no_color_is_set() {
    let env = Env::new();
    let holder = spawn_holder(&env, "grant", "30s", "started", "stop");
    let status = format!("{BIN} status");
    let on_terminal = |no_color: Option<&str>| {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &status, "/dev/null"])
            .env("FENCELOCK_DB", &env.db)
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(value) = no_color {
            cmd.env("NO_COLOR", value);
        }
        let out = cmd.output().expect("run script(1)");
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let coloured = on_terminal(None);
    assert!(coloured.contains("grant"), "{coloured:?}");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = on_terminal(Some("1"));
    assert!(plain.contains("grant"), "{plain:?}");
    assert!(
        !plain.contains('\x1b'),
        "colour despite NO_COLOR: {plain:?}"
    );
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
}

/// A lock name's control characters (a terminal's escape sequences among them) are escaped in
/// the table, in C style within double quotes as git quotes paths, and given as they are in
/// `--json`.
#[test]
fn status_escapes_control_characters_in_names_but_json_keeps_them() {
    let env = Env::new();
    let names = [
        "title\x1b]0;pwned\x07\x1b[2J",
        "line\nbreak\ttab\r",
        "csi\u{9b}31m",
        "back\\slash \"quoted\"",
        "plain-name",
    ];
    // Held while the listing runs: the leases live in the store's shared memory as long as a
    // process has the store open.
    let script = "touch \"$D/started\"; while [ ! -e \"$D/stop\" ]; do sleep 0.02; done";
    let mut args = vec!["run"];
    for name in &names {
        args.extend(["--lock", name]);
    }
    args.extend(["--", "sh", "-c", script]);
    let holder = env
        .cmd(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    wait_for_file(&env.path("started"));

    let out = env.run(&["status"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for raw in ['\x1b', '\x07', '\r', '\t', '\u{9b}'] {
        assert!(!text.contains(raw), "{raw:?} printed raw: {text:?}");
    }
    for shown in [
        r#""title\033]0;pwned\a\033[2J""#,
        r#""line\nbreak\ttab\r""#,
        r#""csi\302\23331m""#,
        r#""back\\slash \"quoted\"""#,
    ] {
        assert!(text.contains(shown), "{shown} not in {text}");
    }
    // One header and one row a lock: no name broke a line.
    assert_eq!(text.lines().count(), 1 + names.len(), "{text}");
    assert!(
        text.lines().any(|line| line.starts_with("plain-name ")),
        "{text}"
    );
    let out = env.run(&["status", "--lock", names[0]]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stdout(&out).contains('\x1b'), "{:?}", stdout(&out));

    let json = env.json(&["status", "--json"]);
    let mut listed: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut expected = names.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected);
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
}

/// Waiters show as rows of state "waiting" after the lock's holder, oldest first, with their
/// pid, command and how long they have waited; the holder's row carries its command too. In
/// JSON as well, where a waiter's row has `state: "waiting"` (as `pg_locks` has `granted =
/// false`).
#[test]
fn status_lists_a_locks_holder_and_its_waiters_oldest_first_with_their_commands() {
    let env = Env::new();
    let holder = spawn_holder(&env, "export", "30s", "started", "stop");
    let spawn_waiter = |tag: &str| {
        env.cmd(&["run", "--lock", "export", "-w", "60", "--", "echo", tag])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let waiters_now = || -> Vec<serde_json::Value> {
        let json = env.json(&["status", "--json"]);
        json.as_array()
            .unwrap()
            .iter()
            .filter(|row| row["state"] == "waiting")
            .cloned()
            .collect()
    };
    let until_waiters = |n: usize| {
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while waiters_now().len() < n {
            assert!(std::time::Instant::now() < give_up, "never {n} waiters");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let first = spawn_waiter("first-waiter");
    until_waiters(1);
    let second = spawn_waiter("second-waiter");
    until_waiters(2);

    let waiters = waiters_now();
    assert_eq!(waiters[0]["pid"], first.id(), "{waiters:?}");
    assert_eq!(waiters[1]["pid"], second.id(), "{waiters:?}");
    assert!(waiters[0]["ticket"].as_u64() < waiters[1]["ticket"].as_u64());
    assert!(waiters[0]["waited_ms"].as_u64() >= waiters[1]["waited_ms"].as_u64());
    assert!(
        waiters[0]["command"]
            .as_str()
            .unwrap()
            .ends_with("echo first-waiter"),
        "{waiters:?}"
    );
    assert_eq!(waiters[0]["name"], "export");
    let json = env.json(&["status", "--lock", "export", "--json"]);
    assert!(
        json[0]["command"]
            .as_str()
            .unwrap()
            .contains("run --lock export"),
        "{json}"
    );

    let out = env.run(&["status"]);
    let text = stdout(&out);
    let header = text.lines().next().unwrap();
    for column in ["WAITED", "COMMAND"] {
        assert!(header.contains(column), "{text}");
    }
    let states: Vec<(&str, &str)> = text
        .lines()
        .skip(1)
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[1], fields[3])
        })
        .collect();
    let (holder_pid, first_pid, second_pid) = (
        holder.id().to_string(),
        first.id().to_string(),
        second.id().to_string(),
    );
    assert_eq!(
        states,
        [
            ("held", holder_pid.as_str()),
            ("waiting", first_pid.as_str()),
            ("waiting", second_pid.as_str())
        ],
        "{text}"
    );
    let command_at = header.find("COMMAND").unwrap();
    let first_row = text.lines().nth(2).unwrap();
    assert_eq!(
        &first_row[command_at..],
        "fencelock run --lock export -w 60 -- echo first-waiter",
        "{text}"
    );

    // Once the holder ends, the waiters are served in their order and leave the queue.
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    assert_eq!(stdout(&finish(first)), "first-waiter\n");
    assert_eq!(stdout(&finish(second)), "second-waiter\n");
}
