//! The store itself: which file, one that cannot be opened or is damaged, one another process
//! holds inside a commit.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::common::*;

#[test]
fn database_errors_exit_81() {
    let env = Env::new();
    // A read command does not create a store at a mistyped path.
    let out = env.run(&["get", "k"]);
    assert_eq!(code(&out), DATABASE);
    assert!(stderr(&out).contains("no database at"), "{}", stderr(&out));
    assert!(!env.db.exists());
    for args in [
        &["status"][..],
        &["keys"],
        &["info"],
        &["history", "job"],
        &["metrics"],
    ] {
        assert_eq!(code(&env.run(args)), DATABASE, "{args:?}");
    }

    let foreign = env.path("notes.txt");
    fs::write(&foreign, "not a database, just some text\n").unwrap();
    let foreign = foreign.to_str().unwrap();
    for args in [
        &["--db", foreign, "get", "k"][..],
        &["--db", foreign, "put", "k", "--token", "1"],
        &["--db", foreign, "run", "--lock", "l", "--", "true"],
        &["--db", env.dir.path().to_str().unwrap(), "info"],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), DATABASE, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot open database"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(
        fs::read_to_string(env.path("notes.txt")).unwrap(),
        "not a database, just some text\n"
    );

    let out = env.run(&[
        "--db",
        "/nonexistent-dir/locks.db",
        "run",
        "--lock",
        "l",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), DATABASE, "{}", stderr(&out));
}

#[test]
fn a_damaged_store_gives_81_and_never_prints_a_panic() {
    let env = Env::new();
    let token = env.grant();
    for i in 0..5 {
        assert_eq!(code(&env.put(&format!("k{i}"), b"value", token)), 0);
    }
    let pristine = fs::read(&env.db).unwrap();
    let mut outcomes = std::collections::BTreeMap::new();
    // Every 4 KiB page but the header's, zeroed in turn.
    for page in 1..pristine.len() / 4096 {
        let mut bytes = pristine.clone();
        bytes[page * 4096..(page + 1) * 4096].fill(0);
        let damaged = env.path(&format!("page{page}.db"));
        fs::write(&damaged, &bytes).unwrap();
        for args in [&["info", "--json"][..], &["get", "k3"][..], &["status"][..]] {
            let out = env
                .cmd(args)
                .env("FENCELOCK_DB", &damaged)
                .output()
                .unwrap();
            let err = stderr(&out);
            assert!(
                !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
                "page {page}, {args:?}: {err}"
            );
            assert!(
                matches!(code(&out), 0 | DATABASE),
                "page {page}, {args:?}: status {}: {err}",
                code(&out)
            );
            *outcomes.entry(code(&out)).or_insert(0) += 1;
        }
    }
    // The damage is met: some pages make commands fail, as they must.
    assert!(outcomes.contains_key(&DATABASE), "{outcomes:?}");
}

#[test]
fn the_default_database_follows_xdg_state_home_then_home() {
    let env = Env::new();
    let home = env.path("home");
    fs::create_dir(&home).unwrap();
    let state = env.path("state");
    let plain = |cmd: &mut Command| {
        cmd.env_remove("FENCELOCK_DB")
            .env_remove("XDG_STATE_HOME")
            .env("HOME", &home);
    };

    let mut cmd = env.cmd(&["run", "--lock", "l", "--", "sh", "-c", "echo $FENCELOCK_DB"]);
    plain(&mut cmd);
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let expected = home.join(".local/state/fencelock/locks.db");
    assert_eq!(stdout(&out).trim(), expected.to_str().unwrap());
    assert!(expected.exists());

    let mut cmd = env.cmd(&["run", "--lock", "l", "--", "sh", "-c", "echo $FENCELOCK_DB"]);
    plain(&mut cmd);
    let out = cmd.env("XDG_STATE_HOME", &state).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        state.join("fencelock/locks.db").to_str().unwrap()
    );

    // --db beats FENCELOCK_DB.
    let other = env.path("other.db");
    let out = env
        .cmd(&[
            "--db",
            other.to_str().unwrap(),
            "run",
            "--lock",
            "l",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_DB",
        ])
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), other.to_str().unwrap());
    assert!(!env.db.exists());

    let mut cmd = env.cmd(&["info"]);
    cmd.env_remove("FENCELOCK_DB")
        .env_remove("XDG_STATE_HOME")
        .env_remove("HOME");
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), USAGE);
    assert!(
        stderr(&out).contains("pass --db or set FENCELOCK_DB"),
        "{}",
        stderr(&out)
    );
}

/// Holds the store's write lock from this process, as a process paused inside a commit does,
/// until dropped.
fn hold_write_lock(db: &Path) -> (redb::Database, redb::WriteTransaction) {
    let database = redb::Builder::new()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .open(db)
        .unwrap();
    let txn = database.begin_write().unwrap();
    (database, txn)
}

#[test]
fn a_process_paused_inside_a_commit_makes_commands_time_out_not_hang() {
    let env = Env::new();
    let token = env.grant();
    assert_eq!(code(&env.put("k", b"v", token)), 0);
    let (database, txn) = hold_write_lock(&env.db);

    // run --wait counts the open against its wait.
    let out = env.run(&["run", "--lock", "a", "--wait", "300ms", "--", "true"]);
    assert_eq!(code(&out), TIMEOUT, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another process holds it"),
        "{}",
        stderr(&out)
    );
    // Write commands give up at --busy-timeout; read commands open the store read-only and
    // go on.
    for args in [
        &[
            "--busy-timeout",
            "200ms",
            "fence",
            "printer",
            "--token",
            "1",
        ][..],
        &["put", "k", "--token", "1", "--busy-timeout", "200ms"][..],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), TIMEOUT, "{args:?}: {}", stderr(&out));
    }
    assert_eq!(env.get("k"), b"v");
    for args in [&["info"][..], &["status"][..], &["keys"][..]] {
        let out = env.run(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    }
    // A signal ends a run that waits at its open at once.
    let waiter = env
        .cmd(&["run", "--lock", "a", "--wait", "10m", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    signal(waiter.id(), libc::SIGTERM);
    let out = finish(waiter);
    assert_eq!(code(&out), 128 + libc::SIGTERM, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interrupted by SIGTERM"),
        "{}",
        stderr(&out)
    );

    drop(txn);
    drop(database);
    assert_eq!(env.get("k"), b"v");
    let info = env.json(&["info", "--json"]);
    assert_eq!(info["last_token"], token, "{info}");
    assert_eq!(info["fences"], 0, "{info}");
}
