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

/// The datagrams a `fencelock serve` child sends to systemd's notification socket, here one
/// this test listens on.
struct NotifySocket {
    socket: std::os::unix::net::UnixDatagram,
}

impl NotifySocket {
    /// The next datagram. Bounded only so that a server that never notifies fails the test.
    fn next(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self
            .socket
            .recv(&mut buf)
            .expect("a notification within the bound");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    fn bound(socket: std::os::unix::net::UnixDatagram) -> NotifySocket {
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        NotifySocket { socket }
    }
}

/// `serve` as a `Type=notify` service: READY=1 once it serves (a store opened then goes
/// through it), WATCHDOG=1 again and again at half `WATCHDOG_USEC`, STOPPING=1 at SIGTERM.
#[test]
fn serve_tells_systemd_ready_pings_its_watchdog_and_says_stopping() {
    let env = Env::new();
    let path = env.path("notify");
    let socket = NotifySocket::bound(std::os::unix::net::UnixDatagram::bind(&path).unwrap());
    let server = env
        .cmd(&["serve"])
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "100000")
        .env_remove("WATCHDOG_PID")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = server.id();
    let ready = socket.next();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let out = env.run(&["info", "--json"]);
    assert!(
        stdout(&out).contains(&format!("\"server_pid\":{pid}")),
        "served once ready: {}",
        stdout(&out)
    );
    for _ in 0..3 {
        assert_eq!(socket.next(), "WATCHDOG=1");
    }
    signal(pid, libc::SIGTERM);
    loop {
        match socket.next().as_str() {
            "WATCHDOG=1" => {}
            other => {
                assert_eq!(other, "STOPPING=1");
                break;
            }
        }
    }
    let out = finish(server);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// An abstract socket name (`@...`) works as a path does; without a watchdog meant for this
/// process (`WATCHDOG_PID` another's) there is no ping between READY=1 and STOPPING=1.
#[test]
fn serve_notifies_an_abstract_socket_and_pings_no_watchdog_of_another_process() {
    use std::os::linux::net::SocketAddrExt;
    let env = Env::new();
    let name = format!(
        "fencelock-test-{}-{}",
        std::process::id(),
        env.dir.path().display()
    );
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = NotifySocket::bound(std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap());
    let server = env
        .cmd(&["serve"])
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .env("WATCHDOG_USEC", "20000")
        .env("WATCHDOG_PID", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = socket.next();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    // Long enough for a few pings at half of 20 ms, were there any.
    std::thread::sleep(std::time::Duration::from_millis(200));
    signal(server.id(), libc::SIGTERM);
    assert_eq!(socket.next(), "STOPPING=1");
    let out = finish(server);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A server that cannot take the file (a process holds it open and does nothing within
/// --wait) never says READY=1: systemd sees the start fail, not a service that came up.
#[test]
fn serve_says_no_ready_when_it_cannot_take_the_file() {
    let env = Env::new();
    // Its keep-alive extends every 200 s: it does not move over within the server's wait.
    let holder = spawn_holder(&env, "keep-open", "600s", "started", "stop");
    let path = env.path("notify");
    let socket = NotifySocket::bound(std::os::unix::net::UnixDatagram::bind(&path).unwrap());
    let out = env
        .cmd(&["serve", "--wait", "300ms"])
        .env("NOTIFY_SOCKET", &path)
        .output()
        .unwrap();
    socket.socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let sent = socket.socket.recv(&mut buf).map(|n| buf[..n].to_vec());
    // The holder stops first, so that a failed assertion leaves no process behind.
    std::fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    assert_eq!(code(&out), DATABASE, "{}", stderr(&out));
    assert!(
        sent.as_ref()
            .is_err_and(|err| err.kind() == std::io::ErrorKind::WouldBlock),
        "{sent:?}"
    );
}

/// The example unit is what the README says: a notify service with a watchdog, hardened
/// without giving the server a /dev/shm of its own.
#[test]
fn the_example_unit_is_a_hardened_notify_service_that_shares_dev_shm() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/systemd/fencelock-serve@.service"
    ))
    .unwrap();
    let settings: Vec<&str> = unit
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    for wanted in [
        "Type=notify",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/dev/shm",
        "StateDirectory=%i",
        "RemoveIPC=no",
    ] {
        assert!(settings.contains(&wanted), "{wanted} in\n{unit}");
    }
    assert!(settings.iter().any(|s| s.starts_with("WatchdogSec=")));
    assert!(settings
        .iter()
        .any(|s| s.starts_with("ExecStart=") && s.contains("fencelock serve")));
    // Each would take the ring away from the clients outside the unit.
    for unwanted in ["DynamicUser=", "RemoveIPC=yes", "TemporaryFileSystem=/dev"] {
        assert!(
            !settings.iter().any(|s| s.starts_with(unwanted)),
            "{unwanted}"
        );
    }
    // A server holds no lease and keeps no journal of them: the unit must not tell its reader
    // that a restart restores any.
    assert!(!unit.contains("journal"), "{unit}");
}

/// Fencing tokens go on by one across clean stops: of the last process that had the store open,
/// of a server that stops when idle, and of a server stopped with SIGTERM. Only a crash may
/// make them jump (by a reserved block); a clean stop seals the reservation, a server's too.
#[test]
fn tokens_go_on_by_one_across_clean_stops_of_the_last_process_and_of_a_server() {
    let env = Env::new();
    let mut tokens = vec![env.grant(), env.grant()];

    let server = spawn_server(&env, &[]);
    tokens.push(env.grant());
    let status = finish(server).status;
    assert!(status.success(), "{status:?}");
    tokens.push(env.grant());

    // With its metrics endpoint, whose store of the server's own process must not keep the
    // server from being the last user.
    let server = spawn_server(&env, &["--metrics-listen", "127.0.0.1:0"]);
    tokens.push(env.grant());
    signal(server.id(), libc::SIGTERM);
    let status = finish(server).status;
    assert!(status.success(), "{status:?}");
    tokens.push(env.grant());

    let first = tokens[0];
    let expected: Vec<u64> = (first..first + 6).collect();
    assert_eq!(tokens, expected);
}
