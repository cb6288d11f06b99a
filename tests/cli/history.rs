//! `history`: who held a lock, from when to when, and how each lease ended.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use crate::common::*;

/// The rows of a `history` table: each row's cells, cut where the header's columns start.
fn history_rows(text: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines();
    let header = lines.next().expect("a header");
    let columns = [
        "TOKEN", "KIND", "PID", "GRANTED", "ENDED", "HELD FOR", "HOW",
    ];
    let starts: Vec<usize> = columns
        .iter()
        .map(|c| header.find(c).unwrap_or_else(|| panic!("no {c}: {text}")))
        .collect();
    lines
        .map(|line| {
            (0..starts.len())
                .map(|i| {
                    let end = starts.get(i + 1).copied().unwrap_or(line.len());
                    line[starts[i]..end].trim().to_owned()
                })
                .collect()
        })
        .collect()
}

/// The walkthrough from a shell: run A holds payment-export with a short TTL and its whole
/// process group is stopped past it; run B waits, takes the lock over and finishes; run C holds
/// it next. `fencelock history` tells A as taken over, B as released and C as held, then
/// released once C finished.
#[test]
fn history_shows_a_paused_run_taken_over_then_the_next_ones_released() {
    let env = Env::new();
    let script_a = "\
        echo \"$FENCELOCK_TOKEN\" > \"$D/a-token.tmp\" && mv \"$D/a-token.tmp\" \"$D/a-token\"
        i=0; while [ ! -e \"$D/go\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done";
    let a = env
        .cmd(&[
            "run",
            "--lock",
            "payment-export",
            "--ttl",
            "300ms",
            "--",
            "sh",
            "-c",
            script_a,
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
    signal_group(group, libc::SIGSTOP);
    let b = env
        .cmd(&[
            "run",
            "--lock",
            "payment-export",
            "--wait",
            "10m",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out_b, resumed_early) = finish_while_stopped(b, group);
    assert_eq!(code(&out_b), 0, "{}", stderr(&out_b));
    let token_b: u64 = stdout(&out_b).trim().parse().unwrap();
    assert!(token_b > token_a);

    // C holds the lock now.
    let c = spawn_holder(&env, "payment-export", "30s", "c-started", "c-stop");
    let out = env.run(&["history", "payment-export"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let rows = history_rows(&text);
    assert_eq!(rows.len(), 3, "{text}");
    let (token, kind, pid, granted, ended, held_for, how) = (0, 1, 2, 3, 4, 5, 6);
    assert_eq!(rows[0][token], token_a.to_string(), "{text}");
    assert_eq!(rows[0][how], "taken-over", "{text}");
    assert_eq!(rows[0][pid], a.id().to_string(), "{text}");
    assert_eq!(rows[1][token], token_b.to_string(), "{text}");
    assert_eq!(rows[1][how], "released", "{text}");
    assert_eq!(rows[2][how], "held", "{text}");
    assert_eq!(rows[2][pid], c.id().to_string(), "{text}");
    assert_eq!(rows[2][ended], "-", "a held lease has not ended: {text}");
    for row in &rows {
        assert_eq!(row[kind], "exclusive", "{text}");
        // A local date and time, to the second: YYYY-MM-DD HH:MM:SS.
        let date = row[granted].as_bytes();
        assert_eq!(date.len(), 19, "{text}");
        assert_eq!((date[4], date[10], date[13]), (b'-', b' ', b':'), "{text}");
        assert!(row[held_for].ends_with('s'), "{text}");
    }
    assert_eq!(
        rows[0][ended].len(),
        19,
        "a take-over's time is known: {text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");

    fs::write(env.path("c-stop"), "").unwrap();
    assert!(finish(c).status.success());
    fs::write(env.path("go"), "").unwrap();
    if !resumed_early {
        signal_group(group, libc::SIGCONT);
    }
    let out_a = finish(a);
    assert_eq!(code(&out_a), LOCK_LOST, "{}", stderr(&out_a));

    let json = env.json(&["history", "payment-export", "--json"]);
    let entries = json.as_array().expect("a list");
    let tokens: Vec<u64> = entries
        .iter()
        .map(|e| e["token"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens.len(), 3, "{json}");
    assert_eq!(&tokens[..2], [token_a, token_b], "{json}");
    assert!(tokens[2] > token_b, "{json}");
    let endings: Vec<&str> = entries
        .iter()
        .map(|e| e["ending"].as_str().unwrap())
        .collect();
    assert_eq!(endings, ["taken-over", "released", "released"], "{json}");
    for entry in entries {
        assert_eq!(entry["name"], "payment-export");
        assert_eq!(entry["kind"], "exclusive");
        assert_eq!(entry["permits"], 0);
        assert!(entry["pid"].as_u64().unwrap() > 0);
        let granted = entry["granted_at_ms"].as_i64().expect("granted_at_ms");
        assert!(
            entry["expires_at_ms"].as_i64().unwrap() >= granted,
            "{entry}"
        );
        assert!(entry["ended_at_ms"].as_i64().unwrap() >= granted, "{entry}");
        assert!(entry["recorded_at_ms"].as_i64().is_some(), "{entry}");
    }
    assert_eq!(entries[0]["pid"], group);
    assert!(
        entries[0]["ended_at_ms"].as_i64() >= entries[0]["expires_at_ms"].as_i64(),
        "taken over after its expiry: {json}"
    );
    let text = stdout(&env.run(&["history", "payment-export"]));
    let rows = history_rows(&text);
    assert_eq!(rows[2][6], "released", "{text}");
    assert_ne!(rows[2][4], "-", "{text}");

    // A lock the store knows nothing of.
    let out = env.run(&["history", "payment-import"]);
    assert_eq!(code(&out), NOT_FOUND, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no grant of lock \"payment-import\" on record"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn history_of_a_bad_name_exits_80_and_changes_nothing() {
    // No store yet: the name is refused before the store is opened, and none is created.
    let env = Env::new();
    let out = env.run(&["history", ""]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lock name is empty"),
        "{}",
        stderr(&out)
    );
    assert!(!env.db.exists(), "a refused history created the store");

    assert_eq!(code(&env.run(&["run", "--lock", "job", "--", "true"])), 0);
    let before = env.json(&["history", "job", "--json"]);
    let file = fs::read(&env.db).unwrap();
    let long = "x".repeat(fencelock::MAX_NAME_LEN + 1);
    for (name, message) in [("", "lock name is empty"), (long.as_str(), "the limit is")] {
        for json in [false, true] {
            let mut args = vec!["history", name];
            if json {
                args.push("--json");
            }
            let out = env.run(&args);
            assert_eq!(code(&out), USAGE, "{}", stderr(&out));
            assert!(stderr(&out).contains(message), "{}", stderr(&out));
            assert_eq!(stdout(&out), "");
        }
    }
    assert_eq!(fs::read(&env.db).unwrap(), file, "the store changed");
    assert_eq!(env.json(&["history", "job", "--json"]), before);
    // `history` takes one name.
    assert_eq!(code(&env.run(&["history"])), USAGE);
}
