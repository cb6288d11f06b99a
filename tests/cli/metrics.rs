//! `metrics`: the store's counters in Prometheus' text format.
// The samples compared are whole numbers, which an f64 holds exactly.
#![allow(clippy::float_cmp)]

use std::fs;

use crate::common::*;

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
        "live_shared",
        "live_permits",
        "queued_waiters",
    ] {
        assert!(json[field].as_u64().is_some(), "{field}: {json}");
    }
    // The gauges: the holder's lease is live, and the file has its size.
    assert_eq!(json["live_exclusive"], 1, "{json}");
    assert_eq!(json["file_bytes"], fs::metadata(&env.db).unwrap().len());
    assert!(
        text.contains(&format!(
            "fencelock_live_leases{{store=\"{db}\",scope=\"store\",kind=\"exclusive\"}} 1\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fencelock_build_info{{store=\"{db}\",scope=\"store\",version=\"{}\"}} 1\n",
            fencelock::VERSION
        )),
        "{text}"
    );

    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
}

/// `GET PATH` (or another method) of `addr` over a real TCP connection: the status line, the
/// headers and the body.
fn http(addr: &str, method: &str, path: &str) -> (String, String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap();
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

/// Spawns `fencelock ARGS` and returns it with the `HOST:PORT` its `metrics on http://...`
/// line names (the other lines of its standard error are read past).
fn spawn_listening(env: &Env, args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = env
        .cmd(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("a metrics line").unwrap();
        if let Some(url) = line.strip_prefix("fencelock: metrics on http://") {
            break url.strip_suffix("/metrics").unwrap().to_owned();
        }
    };
    (child, addr)
}

/// The value of the one sample of `text` whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> f64 {
    let line = text
        .lines()
        .find(|line| line.starts_with(series))
        .unwrap_or_else(|| panic!("no {series}:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn serve_answers_scrapes_whose_counters_last_across_its_clients_closes() {
    let env = Env::new();
    let (server, addr) = spawn_listening(
        &env,
        &[
            "serve",
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-locks",
            "2",
        ],
    );
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    // Each run is the store's only client, and closes it.
    for _ in 0..3 {
        assert_eq!(code(&env.run(&["run", "--lock", "job", "true"])), 0);
    }
    let (status, headers, body) = http(&addr, "GET", "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{headers}"
    );
    let db = env.db.to_str().unwrap();
    assert_eq!(
        sample(
            &body,
            &format!("fencelock_grants_total{{store=\"{db}\",scope=\"store\"}}")
        ),
        3.0
    );

    // Per-lock series for the two locks held longest only, with their waiters.
    let oldest = spawn_holder(&env, "oldest", "30s", "s1", "stop");
    let middle = spawn_holder(&env, "middle", "30s", "s2", "stop");
    let newest = spawn_holder(&env, "newest", "30s", "s3", "stop");
    let waiter = env
        .cmd(&["run", "--lock", "oldest", "-w", "60", "true"])
        .spawn()
        .unwrap();
    let labels = |lock: &str| format!("{{store=\"{db}\",scope=\"store\",lock=\"{lock}\"}}");
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let body = loop {
        let (_, _, body) = http(&addr, "GET", "/metrics?x=1");
        if body.contains(&format!("fencelock_lock_waiters{} 1", labels("oldest"))) {
            break body;
        }
        assert!(std::time::Instant::now() < give_up, "no waiter:\n{body}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        sample(
            &body,
            &format!("fencelock_lock_held_seconds{}", labels("oldest"))
        ) >= 0.0
    );
    assert_eq!(
        sample(
            &body,
            &format!("fencelock_lock_waiters{}", labels("middle"))
        ),
        0.0
    );
    assert!(!body.contains("lock=\"newest\""), "{body}");
    assert_eq!(
        body.matches("fencelock_lock_held_seconds{").count(),
        2,
        "{body}"
    );

    // Only /metrics, only GET and HEAD.
    let (status, _, body) = http(&addr, "HEAD", "/metrics");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));
    assert_eq!(http(&addr, "GET", "/other").0, "HTTP/1.1 404 Not Found");
    let (status, headers, _) = http(&addr, "POST", "/metrics");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(headers.contains("Allow: GET, HEAD"), "{headers}");

    fs::write(env.path("stop"), "").unwrap();
    for child in [oldest, middle, newest, waiter] {
        assert!(finish(child).status.success());
    }
    signal(server.id(), libc::SIGTERM);
    assert!(finish(server).status.success());
}

/// Without a server, `metrics --listen` opens the store at each scrape: it counts what the
/// processes that have the store open count, and holds nothing between scrapes, so a server
/// can still start.
#[test]
fn metrics_listen_answers_scrapes_and_lets_a_server_start() {
    let env = Env::new();
    assert_eq!(code(&env.run(&["run", "--lock", "job", "true"])), 0);
    let holder = spawn_holder(&env, "keep-open", "30s", "started", "stop");
    let (listener, addr) = spawn_listening(&env, &["metrics", "--listen", "0"]);
    assert!(
        addr.starts_with("127.0.0.1:"),
        "loopback by default: {addr}"
    );
    assert_eq!(code(&env.run(&["run", "--lock", "job", "true"])), 0);
    let (status, _, body) = http(&addr, "GET", "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let db = env.db.to_str().unwrap();
    // The holder's grant and the run's, while the holder keeps the counters.
    assert_eq!(
        sample(
            &body,
            &format!("fencelock_grants_total{{store=\"{db}\",scope=\"store\"}}")
        ),
        2.0
    );
    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
    let out = env.run(&["serve", "--wait", "5s", "--idle-exit", "100ms"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    signal(listener.id(), libc::SIGTERM);
    assert!(finish(listener).status.success());
}
