//! The command-line tool on an etcd store: `--db` and `FENCELOCK_DB` take the etcd string.

#[path = "etcd/cluster.rs"]
mod cluster;

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_fencelock");

fn fencelock(db: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .env("FENCELOCK_DB", db)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fencelock");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn token(output: &Output) -> u64 {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("a token")
}

#[test]
fn run_put_get_and_status_work_on_etcd() {
    let etcd = cluster::Cluster::single();
    let url = etcd.url("cli");
    let run = [
        "run",
        "--lock",
        "payment-export",
        "--ttl",
        "2s",
        "sh",
        "-c",
        "echo $FENCELOCK_TOKEN",
    ];
    let first = token(&fencelock(&url, &run, b""));
    let second = token(&fencelock("", &[&["--db", &url][..], &run].concat(), b""));
    assert!(second > first);

    let (first, second) = (first.to_string(), second.to_string());
    let put = |token: &str, value: &[u8]| fencelock(&url, &["put", "--token", token, "k"], value);
    assert!(put(&second, b"fresh").status.success());
    let stale = put(&first, b"stale");
    assert_eq!(stale.status.code(), Some(84), "{stale:?}"); // the stale-token status
    let got = fencelock(&url, &["get", "k"], b"");
    assert!(got.status.success(), "{got:?}");
    assert_eq!(got.stdout, b"fresh");

    // Below etcd's shortest lease: refused as a usage error, nothing granted.
    let short = fencelock(&url, &["run", "--lock", "x", "--ttl", "500ms", "true"], b"");
    assert!(!short.status.success(), "{short:?}");
    assert!(
        String::from_utf8_lossy(&short.stderr).contains("ttl"),
        "{short:?}"
    );
    let status = fencelock(&url, &["status"], b"");
    assert!(status.status.success(), "{status:?}");
    assert!(
        !String::from_utf8_lossy(&status.stdout).contains(" x "),
        "{status:?}"
    );
}

/// `run --db etcd://...` hands its command the store string it was given, so that the
/// command's `fencelock put` writes into the etcd store, not into a stray local file.
#[test]
fn run_hands_its_command_the_etcd_string_and_its_put_writes_there() {
    let etcd = cluster::Cluster::single();
    let url = etcd.url("cli");
    let dir = tempfile::tempdir().unwrap();
    let script = "printf '%s\\n' \"$FENCELOCK_DB\" && \
                  printf 'from run' | \"$FL\" put k --token \"$FENCELOCK_TOKEN\" && \
                  echo \"$FENCELOCK_TOKEN\"";
    let out = Command::new(BIN)
        .args([
            "--db", &url, "run", "--lock", "job", "--ttl", "2s", "-c", script,
        ])
        .env_remove("FENCELOCK_DB")
        .env_remove("FENCELOCK_TOKEN")
        .env("FL", BIN)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], url, "FENCELOCK_DB");
    let token: u64 = lines[1].parse().expect("a token");

    let got = fencelock(&url, &["get", "k", "--json"], b"");
    assert!(got.status.success(), "{got:?}");
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(got["value"], "from run");
    assert_eq!(got["token"], token);
    let stray: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(stray.is_empty(), "files beside the command: {stray:?}");
}
