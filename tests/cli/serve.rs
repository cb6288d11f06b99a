//! `serve`: a server of the store that every command uses while it runs.

use std::io::Write;
use std::process::{Child, Stdio};

use crate::common::*;

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
