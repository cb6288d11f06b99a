//! The `fencelock` command-line tool, run as a user runs it: every subcommand and exit status,
//! signal forwarding, and a paused `run` whose late write is refused.
//!
//! Sleeps here only let leases run out or wait for a file a script writes; no test asserts how
//! long anything took.

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fencelock");

// The exit statuses documented in `fencelock --help`.
const NOT_FOUND: i32 = 1;
const USAGE: i32 = 80;
const DATABASE: i32 = 81;
const LOCKED: i32 = 82;
const TIMEOUT: i32 = 83;
const STALE_TOKEN: i32 = 84;
const LOCK_LOST: i32 = 85;
const IO: i32 = 86;
const CANNOT_EXECUTE: i32 = 126;
const COMMAND_NOT_FOUND: i32 = 127;

/// A temporary directory with a store path in it; every command runs against that store.
struct Env {
    dir: tempfile::TempDir,
    db: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("locks.db");
        Env { dir, db }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `fencelock ARGS` with this store in `FENCELOCK_DB`, the tool as `$FL` and the directory
    /// as `$D` for scripts, and no inherited token or colour setting.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("FENCELOCK_DB", &self.db)
            .env("FL", BIN)
            .env("D", self.dir.path())
            .env_remove("FENCELOCK_TOKEN")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run fencelock")
    }

    fn run_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fencelock");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
        child.wait_with_output().expect("wait fencelock")
    }

    /// A token granted by the store: the one a `run` hands its command.
    fn grant(&self) -> u64 {
        let out = self.run(&[
            "run",
            "--lock",
            "grant",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().parse().expect("token")
    }

    fn put(&self, key: &str, value: &[u8], token: u64) -> Output {
        self.run_with_input(&["put", key, "--token", &token.to_string()], value)
    }

    fn get(&self, key: &str) -> Vec<u8> {
        let out = self.run(&["get", key]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        out.stdout
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("JSON output")
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits until a script created `path`. Bounded only so that a broken tool fails the test
/// instead of hanging it.
fn wait_for_file(path: &Path) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < give_up,
            "{} never appeared",
            path.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a spawned tool and collects its output.
fn finish(child: Child) -> Output {
    child.wait_with_output().expect("wait fencelock")
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on a child this test spawned and has not reaped.
    let rc = unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap(), sig) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

fn signal_group(pgid: u32, sig: libc::c_int) {
    // SAFETY: plain killpg(2) on the process group of a child this test spawned.
    let rc = unsafe { libc::killpg(libc::pid_t::try_from(pgid).unwrap(), sig) };
    assert_eq!(rc, 0, "killpg: {}", std::io::Error::last_os_error());
}

/// The pid of the command `fencelock run` (pid `tool`) started, once it has exec'd `program`.
fn command_of(tool: u32, program: &str) -> u32 {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let children =
            fs::read_to_string(format!("/proc/{tool}/task/{tool}/children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.split(|&b| b == 0).next() == Some(program.as_bytes()) {
                return pid.parse().unwrap();
            }
        }
        assert!(Instant::now() < give_up, "{tool} never started {program}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` ended (gone, or a zombie not yet reaped by its parent).
fn ended(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Spawns `fencelock run` holding `lock` with a command that signals readiness by creating
/// `started` and then runs until `stop` exists.
fn spawn_holder(env: &Env, lock: &str, ttl: &str, started: &str, stop: &str) -> Child {
    let script =
        format!("touch \"$D/{started}\"; while [ ! -e \"$D/{stop}\" ]; do sleep 0.02; done");
    let child = env
        .cmd(&[
            "run", "--lock", lock, "--ttl", ttl, "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    wait_for_file(&env.path(started));
    child
}

#[test]
fn help_documents_exit_codes_database_and_examples() {
    let env = Env::new();
    let out = env.run(&["--help"]);
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for needle in [
        "Exit status",
        "80",
        "81",
        "82",
        "83",
        "84",
        "85",
        "86",
        "126",
        "127",
        "128+N",
        "FENCELOCK_DB",
        "XDG_STATE_HOME",
        ".local/state/fencelock/locks.db",
    ] {
        assert!(
            help.contains(needle),
            "top-level help lacks {needle:?}:\n{help}"
        );
    }
    for sub in [
        "run", "put", "get", "delete", "fence", "status", "locks", "keys", "info", "history",
        "metrics",
    ] {
        let out = env.run(&[sub, "--help"]);
        assert_eq!(code(&out), 0, "{sub} --help");
        let help = stdout(&out);
        assert!(
            help.contains("Example"),
            "{sub} --help lacks an example:\n{help}"
        );
        assert!(
            help.contains("Exit status"),
            "{sub} --help lacks exit status:\n{help}"
        );
    }
    let out = env.run(&["--version"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(env!("CARGO_PKG_VERSION")));
}

/// The rows of the table under the `Exit status` line of `text` (`--help`): (code, meaning)
/// pairs.
fn help_exit_rows(text: &str) -> Vec<(String, String)> {
    let heading = text.find("Exit status").expect("an exit status table");
    let start = heading + text[heading..].find('\n').expect("a table under it") + 1;
    text[start..]
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let line = line.trim_start();
            let (code, meaning) = line.split_once("  ")?;
            let numeric = code.chars().all(|c| c.is_ascii_digit() || "+N".contains(c));
            numeric.then(|| (code.to_owned(), meaning.trim().to_owned()))
        })
        .collect()
}

/// The rows of the README's exit status table, between its two markers.
fn readme_exit_rows(readme: &str) -> Vec<(String, String)> {
    let begin = readme
        .find("<!-- exit-status:begin")
        .expect("README marks its exit status table");
    let end = readme[begin..]
        .find("<!-- exit-status:end -->")
        .expect("README ends its exit status table")
        + begin;
    readme[begin..end]
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| status"))
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            match cells.as_slice() {
                [code, meaning] => Some((code.trim().to_owned(), meaning.trim().to_owned())),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn the_readme_exit_table_is_the_one_help_prints() {
    let env = Env::new();
    let help = stdout(&env.run(&["--help"]));
    let from_help = help_exit_rows(&help);
    assert!(from_help.len() >= 12, "{help}");
    let readme = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut table = String::from("| status | meaning |\n|-----:|---------|\n");
    for (code, meaning) in &from_help {
        table.push_str(&format!("| {code} | {meaning} |\n"));
    }
    assert_eq!(
        readme_exit_rows(&readme),
        from_help,
        "the README's exit status table differs from `fencelock --help` \
         (src/bin/fencelock/exit.rs); paste this between its markers:\n{table}"
    );
    // `run --help` gives the rows `run` can exit with, word for word.
    let run_help = stdout(&env.run(&["run", "--help"]));
    let from_run = help_exit_rows(&run_help);
    assert!(from_run.iter().any(|(code, _)| code == "82"), "{run_help}");
    assert!(
        from_run.iter().any(|(code, _)| code == "128+N"),
        "{run_help}"
    );
    for row in &from_run {
        assert!(from_help.contains(row), "{row:?} is not in --help's table");
    }
    // The documented codes are the ones the tool exits with (the tests below check each).
    for expected in [
        0,
        NOT_FOUND,
        USAGE,
        DATABASE,
        LOCKED,
        TIMEOUT,
        STALE_TOKEN,
        LOCK_LOST,
        IO,
        CANNOT_EXECUTE,
        COMMAND_NOT_FOUND,
    ] {
        let code = expected.to_string();
        assert!(
            from_help.iter().any(|(c, _)| *c == code),
            "status {code} is not in --help"
        );
    }
}

#[test]
fn the_fence_example_checks_and_writes_in_one_step() {
    let env = Env::new();
    let help = stdout(&env.run(&["fence", "--help"]));
    // The check-then-act example, `fencelock fence ... && <write elsewhere>`, is gone ...
    let example = &help[help.find("Example").expect("an example")..];
    assert!(
        !example.contains("fencelock fence"),
        "the example checks, then writes:\n{help}"
    );
    // ... for a fenced put as the commit point, and the help says why.
    assert!(example.contains("fencelock put"), "{help}");
    assert!(help.contains("not safe"), "{help}");
    assert!(help.contains("one step"), "{help}");
}

#[test]
fn usage_errors_exit_80_with_a_message() {
    let env = Env::new();
    let cases: &[(&[&str], &str)] = &[
        (&["frobnicate"], "unrecognized subcommand"),
        (&["run", "--lock", "a"], "COMMAND"),
        (&["run", "--", "true"], "--lock"),
        (
            &["run", "--lock", "a", "--ttl", "abc", "--", "true"],
            "expected a number and a unit",
        ),
        (
            &["run", "--lock", "a", "--ttl", "30", "--", "true"],
            "expected a number and a unit",
        ),
        (
            &["run", "--lock", "a", "--ttl", "0s", "--", "true"],
            "greater than zero",
        ),
        (
            &["run", "--lock", "a", "--ttl", "-5s", "--", "true"],
            "negative",
        ),
        (
            &["run", "--lock", "a", "-w", "soon", "true"],
            "bare number of seconds",
        ),
        (&["run", "--lock", "a", "--wait", "-1", "true"], "negative"),
        (
            &["run", "--lock", "a", "-n", "-w", "1", "true"],
            "cannot be used with",
        ),
        (
            &["run", "--lock", "a", "-c", "true", "echo"],
            "cannot be used with",
        ),
        (
            &["run", "--lock", "a", "-E", "256", "true"],
            "invalid value",
        ),
        (
            &["run", "--lock", "a", "--lost-signal", "NOPE", "--", "true"],
            "unknown signal",
        ),
        (&["run", "--lock", "", "--", "true"], "lock name is empty"),
        (&["put", "k", "--token", "abc"], "invalid value"),
        (&["put", "k"], "no token"),
        (&["put", "k", "--token", "0"], "token 0"),
        (&["delete", "k"], "no token"),
        (&["fence", "r"], "no token"),
        (&["get"], "KEY"),
        (&["get", "k", "--busy-timeout", "0s"], "greater than zero"),
    ];
    for (args, message) in cases {
        let out = env.run(args);
        assert_eq!(code(&out), USAGE, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    // A TTL the keep-alive cannot renew is refused with the arguments: no store, no token.
    let fresh = Env::new();
    let out = fresh.run(&["run", "--lock", "a", "--ttl", "1ms", "--", "true"]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    assert!(stderr(&out).contains("outside 3ms"), "{}", stderr(&out));
    assert!(!fresh.db.exists(), "a refused run created the store");
    // A token the store never granted is refused, and nothing is written.
    let granted = env.grant();
    let out = env.put("k", b"v", granted + 1);
    assert_eq!(code(&out), USAGE);
    assert!(stderr(&out).contains("never granted"), "{}", stderr(&out));
    assert_eq!(code(&env.run(&["get", "k"])), NOT_FOUND);
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

#[test]
fn put_get_delete_and_json_round_trip() {
    let env = Env::new();
    let token = env.grant();
    let out = env.put("greeting", b"hello\n", token);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.get("greeting"), b"hello\n");

    let json = env.json(&["get", "greeting", "--json"]);
    assert_eq!(json["key"], "greeting");
    assert_eq!(json["value"], "hello\n");
    assert_eq!(json["token"], token);

    // Bytes that are not UTF-8, from a file: stored exactly, and base64 in JSON.
    let file = env.path("blob");
    fs::write(&file, [0xff, 0xfe, 0x00]).unwrap();
    let out = env.run(&[
        "put",
        "blob",
        "--token",
        &token.to_string(),
        "--file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.get("blob"), [0xff, 0xfe, 0x00]);
    let json = env.json(&["get", "blob", "--json"]);
    assert_eq!(json["value_base64"], "//4A");
    assert!(json.get("value").is_none());

    let out = env.run(&[
        "put",
        "x",
        "--token",
        &token.to_string(),
        "--file",
        "/nonexistent/file",
    ]);
    assert_eq!(code(&out), IO);
    assert!(
        stderr(&out).contains("cannot read /nonexistent/file"),
        "{}",
        stderr(&out)
    );

    let out = env.run(&["delete", "greeting", "--token", &token.to_string()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = env.run(&["get", "greeting"]);
    assert_eq!(code(&out), NOT_FOUND);
    assert!(
        stderr(&out).contains("no value under key greeting"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_token_defaults_to_fencelock_token() {
    let env = Env::new();
    let token = env.grant();
    let mut child = env
        .cmd(&["put", "k"])
        .env("FENCELOCK_TOKEN", token.to_string())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from env").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(env.json(&["get", "k", "--json"])["token"], token);

    let out = env
        .cmd(&["delete", "k"])
        .env("FENCELOCK_TOKEN", "seven")
        .output()
        .unwrap();
    assert_eq!(code(&out), USAGE);
    assert!(stderr(&out).contains("FENCELOCK_TOKEN"), "{}", stderr(&out));
}

#[test]
fn stale_tokens_are_refused_with_84_and_change_nothing() {
    let env = Env::new();
    let old = env.grant();
    let new = env.grant();
    assert!(new > old);
    assert_eq!(code(&env.put("k", b"new", new)), 0);

    let out = env.put("k", b"old", old);
    assert_eq!(code(&out), STALE_TOKEN);
    assert!(stderr(&out).contains("stale token"), "{}", stderr(&out));
    let out = env.run(&["delete", "k", "--token", &old.to_string()]);
    assert_eq!(code(&out), STALE_TOKEN);
    assert_eq!(env.get("k"), b"new");
    assert_eq!(env.json(&["get", "k", "--json"])["token"], new);

    // A delete keeps its token: an older write after it is still refused.
    assert_eq!(
        code(&env.run(&["delete", "k", "--token", &new.to_string()])),
        0
    );
    assert_eq!(code(&env.put("k", b"old", old)), STALE_TOKEN);
    assert_eq!(code(&env.run(&["get", "k"])), NOT_FOUND);

    // External fences: equal or higher passes, lower is refused.
    let fence = |token: u64| code(&env.run(&["fence", "bucket", "--token", &token.to_string()]));
    assert_eq!(fence(new), 0);
    assert_eq!(fence(new), 0);
    assert_eq!(fence(old), STALE_TOKEN);
}

#[test]
fn keys_and_info_show_the_store() {
    let env = Env::new();
    let token = env.grant();
    for key in ["reports/a", "reports/b", "other"] {
        assert_eq!(code(&env.put(key, b"v", token)), 0);
    }
    let out = env.run(&["keys", "reports/"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "reports/a\nreports/b\n");
    let out = env.run(&["keys"]);
    assert_eq!(stdout(&out), "other\nreports/a\nreports/b\n");
    let json = env.json(&["keys", "--json"]);
    assert_eq!(
        json,
        serde_json::json!([{"key": "other"}, {"key": "reports/a"}, {"key": "reports/b"}])
    );
    assert_eq!(
        code(&env.run(&["fence", "bucket", "--token", &token.to_string()])),
        0
    );

    let json = env.json(&["info", "--json"]);
    assert_eq!(json["file"], env.db.to_str().unwrap());
    assert_eq!(json["last_token"], token);
    assert_eq!(json["keys"], 3);
    assert_eq!(json["fences"], 1);
    assert_eq!(json["schema_version"], fencelock::SCHEMA_VERSION);
    assert!(json["size_bytes"].as_u64().unwrap() > 0);
    assert!(json["lock_records"].as_u64().is_some());

    let out = env.run(&["info"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("last token      {token}\n")),
        "{text}"
    );
    assert!(text.contains("keys            3\n"), "{text}");
    assert!(text.contains(env.db.to_str().unwrap()), "{text}");
}

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
    let json = env.json(&["status", "--lock", "nightly", "--json"]);
    assert_eq!(json[0]["token"], token);
    assert_ne!(json[0]["state"], "held");
}

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
        let mut args = vec!["run", "--lock", "busy"];
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
    let out = env.run(&["run", "--lock", "busy", "true"]);
    assert!(stderr(&out).contains("-w SECONDS"), "{}", stderr(&out));
    let out = env.run(&["run", "--lock", "busy", "-w", "0", "true"]);
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
fn an_endless_value_stops_at_the_limit_with_a_usage_error() {
    let env = Env::new();
    let token = env.grant();
    for args in [
        vec!["put", "k", "--token"],
        vec!["put", "k", "--file", "/dev/zero", "--token"],
    ] {
        let token = token.to_string();
        let mut args = args.clone();
        args.push(&token);
        let zero = fs::File::open("/dev/zero").unwrap();
        let out = env
            .cmd(&args)
            .stdin(zero)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(code(&out), USAGE, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("over the limit"), "{}", stderr(&out));
    }
    assert_eq!(code(&env.run(&["get", "k"])), NOT_FOUND);
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
    let _ = unsafe { libc::killpg(libc::pid_t::try_from(tool.id()).unwrap(), libc::SIGKILL) };
    waited.expect("the command got --lost-signal when the tool died");
    assert_eq!(code(&env.run(&["run", "--lock", "k", "--", "true"])), 0);
}

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
    let mut b = env
        .cmd(&[
            "run", "--lock", "export", "--ttl", "30s", "--wait", "10m", "--", "sh", "-c", script_b,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // If A was stopped inside a commit, it holds the store's write lock and B cannot commit
    // until A runs again. Then let A finish that commit: its lease has run out by now, so the
    // scenario is unchanged. This guards against a hang; it asserts nothing about time.
    let stuck_after = Instant::now() + Duration::from_secs(20);
    let mut resumed_early = false;
    while b.try_wait().unwrap().is_none() {
        if !resumed_early && Instant::now() > stuck_after {
            eprintln!("B is still waiting; A was stopped inside a commit: resuming A");
            signal_group(group, libc::SIGCONT);
            resumed_early = true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out_b = finish(b);
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

/// Colour only on a terminal, and never with `NO_COLOR`. `script` (util-linux, essential on
/// Debian) gives the tool a pseudo-terminal.
#[test]
fn status_is_coloured_on_a_terminal_unless_no_color_is_set() {
    let env = Env::new();
    env.grant();
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

#[test]
fn serve_serves_every_command_says_so_in_info_and_stops_when_idle() {
    let env = Env::new();
    let mut server = spawn_server(&env, &[]);
    let pid = server.id().to_string();

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
    let token = stdout(&out).trim().to_owned();
    let mut put = env
        .cmd(&["put", "k", "--token", &token])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    put.stdin.take().unwrap().write_all(b"value").unwrap();
    assert_eq!(code(&finish(put)), 0);
    let out = env.run(&["get", "k"]);
    assert_eq!(stdout(&out), "value");
    let out = env.run(&["info", "--json"]);
    assert!(
        stdout(&out).contains(&format!("\"server_pid\":{pid}")),
        "{}",
        stdout(&out)
    );

    // A second server is refused, naming the first.
    let out = env.run(&["serve", "--wait", "200ms"]);
    assert_eq!(code(&out), DATABASE);
    assert!(
        stderr(&out).contains(&format!("pid {pid}")),
        "{}",
        stderr(&out)
    );

    // With nothing to do it stops by itself, and the store is used directly again.
    let status = server.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let out = env.run(&["info", "--json"]);
    assert!(
        stdout(&out).contains("\"server_pid\":null"),
        "{}",
        stdout(&out)
    );
    assert_eq!(stdout(&env.run(&["get", "k"])), "value");
}

/// Starts `fencelock serve --idle-exit 2s FLAGS` and waits until it says it serves.
fn spawn_server(env: &Env, flags: &[&str]) -> Child {
    let mut argv = vec!["serve", "--idle-exit", "2s"];
    argv.extend_from_slice(flags);
    let mut server = env.cmd(&argv).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("serving"), "{line}");
    server
}

/// `serve --no-history`: the grants the server commits record no history, while another
/// server's record both runs' releases (the second's as it closed the store).
#[test]
fn serve_no_history_records_no_history() {
    for (flags, recorded) in [(&["--no-history"][..], 0), (&[][..], 2)] {
        let env = Env::new();
        let mut server = spawn_server(&env, flags);
        for _ in 0..2 {
            let out = env.run(&["run", "--lock", "job", "--", "true"]);
            assert_eq!(code(&out), 0, "{}", stderr(&out));
        }
        let out = env.run(&["history", "job", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let entries = json.as_array().unwrap();
        let on_record = entries
            .iter()
            .filter(|e| !e["recorded_at_ms"].is_null())
            .count();
        assert_eq!(on_record, recorded, "{flags:?}: {json}");
        assert!(server.wait().unwrap().success());
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
    let out = env.run(&["run", "--lock", "pool", "--permits", "2", "-n", "true"]);
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
    let out = env.run(&["run", "--lock", "config", "-s", "true"]);
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
    let mut b = env
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
    // As in a_paused_run_loses_its_lease_and_its_late_write_is_refused: A stopped inside a
    // commit holds up B's until A runs again (its lease has run out by then all the same).
    let stuck_after = Instant::now() + Duration::from_secs(20);
    let mut resumed_early = false;
    while b.try_wait().unwrap().is_none() {
        if !resumed_early && Instant::now() > stuck_after {
            eprintln!("B is still waiting; A was stopped inside a commit: resuming A");
            signal_group(group, libc::SIGCONT);
            resumed_early = true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out_b = finish(b);
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

/// The `fencelock_grants_total` value of `metrics` output.
fn grants_total(text: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("fencelock_grants_total{"))
        .unwrap_or_else(|| panic!("no fencelock_grants_total series:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().expect("a count")
}

#[test]
fn metrics_prints_prometheus_text_whose_grants_grow_with_the_runs() {
    let env = Env::new();
    // A holder keeps the store open, so that its shared counters last between the commands.
    let holder = spawn_holder(&env, "keep-open", "30s", "started", "stop");
    let out = env.run(&["metrics"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let before = grants_total(&text);
    assert!(before >= 1, "the holder's grant: {text}");
    let db = env.db.to_str().unwrap();
    assert!(
        text.contains(&format!(
            "fencelock_grants_total{{store=\"{db}\",scope=\"store\"}} {before}\n"
        )),
        "{text}"
    );
    for _ in 0..3 {
        assert_eq!(
            code(&env.run(&["run", "--lock", "counted", "--", "true"])),
            0
        );
    }
    // A refusal counts too, as no grant.
    assert_eq!(
        code(&env.run(&["run", "--lock", "keep-open", "-n", "true"])),
        LOCKED
    );
    let out = env.run(&["metrics"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(grants_total(&text), before + 3, "{text}");
    assert!(
        text.contains("# TYPE fencelock_wait_seconds histogram\n"),
        "{text}"
    );
    assert!(text.contains("le=\"+Inf\"}"), "{text}");
    assert!(text.contains("reason=\"locked\"} "), "{text}");

    let json = env.json(&["metrics", "--json"]);
    assert_eq!(json["store"], db);
    assert_eq!(json["scope"], "store");
    assert_eq!(json["grants"], before + 3);
    assert!(json["refused_locked"].as_u64().unwrap() >= 1, "{json}");
    assert!(json["releases"].as_u64().unwrap() >= 3, "{json}");
    assert!(json["since_at_ms"].as_i64().unwrap() > 0, "{json}");
    let buckets = json["wait_buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), fencelock::WAIT_BUCKET_BOUNDS.len() + 1);
    assert_eq!(buckets[0]["up_to_ms"], 1);
    assert!(buckets.last().unwrap()["up_to_ms"].is_null());
    for field in [
        "refused_timeout",
        "refused_cancelled",
        "refused_other",
        "stale_writes",
        "lock_lost",
        "waits",
        "wait_ns",
        "ended_released",
        "ended_expired",
        "ended_taken_over",
        "ended_holder_died",
        "leases_lost",
        "commits",
        "committed_ops",
    ] {
        assert!(json[field].as_u64().is_some(), "{field}: {json}");
    }

    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
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
