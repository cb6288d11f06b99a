//! `run` whose lease is lost while the command runs (the tool paused past its TTL).

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

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
