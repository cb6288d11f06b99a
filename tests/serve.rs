//! A server (`fencelock::Server`, `fencelock serve`) with real processes: killed, paused and
//! replaced while clients work, and clients that die. Children are this test binary run again
//! (see `common::Kid`).

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bounded, Kid, DB, ROLE};
use fencelock::{Cancel, Error, Heartbeat, Options, ServeOptions, Server, Store};

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let path = std::env::var(DB).unwrap();
    let say = |line: &str| {
        println!("@@ {line}");
        std::io::stdout().flush().unwrap();
    };
    match role.as_str() {
        "serve" => {
            let options = ServeOptions {
                wait: Duration::from_secs(60),
                ..ServeOptions::default()
            };
            let server = Server::start(&path, &options).unwrap();
            say("serving");
            server.run(&options).unwrap();
        }
        "acquire" => {
            // Blocks behind a paused server, and is killed there.
            let store = Store::open(&path).unwrap();
            say("posting");
            let _ = store.acquire("orphan", Duration::from_secs(600));
            say("granted");
        }
        // Through the server with no file descriptor left: a value too large for a ring slot
        // needs a file beside the ring, which cannot be opened.
        "put-without-descriptors" => {
            let options = Options {
                busy_timeout: Duration::from_secs(5),
                ..Options::default()
            };
            let store = Store::open_with(&path, &options).unwrap();
            until_served(&store);
            let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
            let highest = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u64>().ok())
                .max()
                .unwrap();
            // SAFETY: getrlimit and setrlimit write and read only the struct given.
            unsafe {
                let mut limit: libc::rlimit = std::mem::zeroed();
                assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit), 0);
                limit.rlim_cur = highest + 1;
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit), 0);
            }
            // And the numbers below the highest that are free are taken.
            let mut filler = Vec::new();
            while let Ok(file) = std::fs::File::open("/dev/null") {
                filler.push(file);
            }
            let result = holder.put(b"big", &vec![1u8; 200_000]);
            say(&match result {
                Err(Error::Io(err)) => format!("io {err}"),
                other => format!("other {other:?}"),
            });
        }
        other => panic!("unknown role {other}"),
    }
}

/// Waits until `store` goes through a server, making operations so that it moves over.
fn until_served(store: &Store) -> u32 {
    for _ in 0..20_000 {
        let _ = store.lock_info("probe");
        if let Some(pid) = store.server() {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the store never went through the server");
}

/// Grants and acknowledged writes of one client thread.
fn work(store: &Store, name: &str, stop: &AtomicBool) -> (Vec<u64>, Vec<(Vec<u8>, u64)>) {
    let (mut tokens, mut writes) = (Vec::new(), Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let holder = store.acquire(name, Duration::from_secs(60)).unwrap();
        tokens.push(holder.token());
        let key = format!("{name}/{}", holder.token()).into_bytes();
        holder.put(&key, &holder.token().to_le_bytes()).unwrap();
        writes.push((key, holder.token()));
        holder.release().unwrap();
    }
    (tokens, writes)
}

#[test]
fn a_server_killed_mid_batch_loses_nothing_acknowledged_and_grants_none_twice() {
    let (_dir, path, store) = common::temp_store();
    let seed = store.acquire("seed", Duration::from_secs(600)).unwrap();
    let stop = AtomicBool::new(false);
    let served = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let (store, stop) = (&store, &stop);
                scope.spawn(move || work(store, &format!("lock-{i}"), stop))
            })
            .collect();
        // Servers started, and killed at random points of their batches, again and again;
        // between them the clients use the file themselves.
        let (mut kills, mut served) = (0u32, 0u32);
        while kills < 10 {
            let mut kid = Kid::spawn("serve", &path);
            assert_eq!(kid.report().as_deref(), Some("serving"));
            served += u32::from(store.server().is_some());
            std::thread::sleep(Duration::from_millis(15 + u64::from(kills % 7) * 9));
            kid.signal(libc::SIGKILL);
            let _ = kid.child.wait();
            kills += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let mut tokens = Vec::new();
        for thread in threads {
            let (grants, writes) = thread.join().unwrap();
            tokens.extend(grants);
            // Every acknowledged write is there, with its token.
            for (key, token) in writes {
                let found = store
                    .get(&key)
                    .unwrap()
                    .expect("an acknowledged write is kept");
                assert_eq!(found.token, token);
            }
        }
        let mut sorted = tokens.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), tokens.len(), "a token was granted twice");
        // Tokens are reserved in blocks through a server (its grants commit without an
        // fsync), so the counter has gaps; it never falls behind a token handed out.
        assert!(store.info().unwrap().last_token >= *sorted.last().unwrap());
        served
    });
    assert!(served >= 1, "the clients never went through a server");
    // The lease taken before any server is still live through all of them.
    assert!(seed.is_held().unwrap());
    store.verify().unwrap();
}

#[test]
fn behind_a_paused_server_deadlines_hold_and_releases_need_no_server() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("serve", &path);
    let pid = until_served(&store);
    assert_eq!(kid.report().as_deref(), Some("serving"));
    assert_eq!(pid, kid.child.id());
    let holder = store.acquire("held", Duration::from_secs(600)).unwrap();
    // Larger than a ring slot: the bulk path, both ways.
    let big = vec![0xa5u8; 200_000];
    holder.put(b"big", &big).unwrap();
    assert_eq!(store.get(b"big").unwrap().unwrap().value, big);

    kid.stop();
    let options = Options {
        busy_timeout: Duration::from_millis(200),
        ..Options::default()
    };
    let client = Store::open_with(&path, &options).unwrap();
    let at = client.clone();
    let grant = bounded("an acquire", move || {
        at.acquire("other", Duration::from_secs(60))
            .map(|h| h.token())
    });
    // A grant needs no server: the leases are in the store's shared memory.
    assert!(grant.is_ok(), "{grant:?}");
    let at = client.clone();
    let put = bounded("a put", move || at.put(b"k", b"v", 1));
    assert!(matches!(put, Err(Error::Timeout { .. })), "{put:?}");
    let at = client.clone();
    let read = bounded("a read", move || at.get(b"big").map(drop));
    assert!(matches!(read, Err(Error::Timeout { .. })), "{read:?}");
    // A release is the holder's own lock: it needs nobody.
    holder.release().unwrap();
    kid.signal(libc::SIGCONT);

    // The grant that timed out left no live lease, and the released lock is free.
    let other = store
        .acquire_wait("other", Duration::from_secs(60), Duration::from_secs(30))
        .unwrap();
    let held = store.acquire("held", Duration::from_secs(60)).unwrap();
    assert!(held.token() > other.token());
    assert_eq!(store.server(), Some(pid));
}

#[test]
fn behind_a_paused_server_a_write_ends_at_its_cancel_handles_deadline_or_when_it_fires() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("serve", &path);
    until_served(&store);
    assert_eq!(kid.report().as_deref(), Some("serving"));
    // A busy timeout far beyond the deadline below: a write that waited it out would hang.
    let options = Options {
        busy_timeout: Duration::from_secs(600),
        ..Options::default()
    };
    let client = Store::open_with(&path, &options).unwrap();
    until_served(&client);
    let holder = client.acquire("held", Duration::from_secs(600)).unwrap();
    let token = holder.token();
    kid.stop();

    let at = client.clone();
    let put = bounded("a put with a deadline", move || {
        let cancel = Cancel::new();
        cancel.set_timeout(Duration::from_millis(100));
        at.put_cancellable(b"k", b"late", token, &cancel)
    });
    assert!(matches!(put, Err(Error::Timeout { .. })), "{put:?}");
    let cancel = Cancel::new();
    let fire = cancel.clone();
    let put = bounded("a holder's put cancelled", move || {
        let firer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            fire.cancel();
        });
        let put = holder.put_cancellable(b"h", b"late", &cancel);
        firer.join().unwrap();
        put
    });
    assert!(matches!(put, Err(Error::Cancelled)), "{put:?}");

    // Neither was left posted for the server to run once it resumes.
    kid.signal(libc::SIGCONT);
    store.put(b"probe", b"after", token).unwrap();
    assert_eq!(store.get(b"k").unwrap(), None);
    assert_eq!(store.get(b"h").unwrap(), None);
}

#[test]
fn a_client_killed_after_posting_gets_no_live_grant() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("serve", &path);
    until_served(&store);
    assert_eq!(kid.report().as_deref(), Some("serving"));
    kid.stop();
    let mut client = Kid::spawn("acquire", &path);
    assert_eq!(client.report().as_deref(), Some("posting"));
    // Long enough for the acquire to be posted behind the paused server.
    std::thread::sleep(Duration::from_millis(300));
    client.signal(libc::SIGKILL);
    let _ = client.child.wait();
    kid.signal(libc::SIGCONT);
    // Whether the server ran the dead client's request or dropped it, the lock is free.
    let holder = store
        .acquire("orphan", Duration::from_secs(60))
        .expect("a grant to a dead client is dead on arrival");
    assert!(holder.is_held().unwrap());
}

#[test]
fn a_second_server_is_refused_while_one_serves() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("serve", &path);
    let pid = until_served(&store);
    assert_eq!(kid.report().as_deref(), Some("serving"));
    let options = ServeOptions {
        wait: Duration::from_millis(200),
        ..ServeOptions::default()
    };
    assert!(matches!(Server::start(&path, &options), Err(Error::InUse)));
    // The refused one changed nothing: the first still serves.
    let _after = store.acquire("after", Duration::from_secs(60)).unwrap();
    assert_eq!(store.server(), Some(pid));
}

#[test]
fn leases_a_server_committed_without_an_fsync_survive_its_death() {
    let (_dir, path, store) = common::temp_store();
    for successor in [
        "the stores themselves",
        "the next server",
        "a store that shares no commits",
    ] {
        let mut kid = Kid::spawn("serve", &path);
        until_served(&store);
        assert_eq!(kid.report().as_deref(), Some("serving"));
        // Granted and extended through the server: commits without an fsync.
        let holders: Vec<_> = (0..20)
            .map(|i| {
                store
                    .acquire(&format!("survivor-{i}"), Duration::from_secs(600))
                    .unwrap()
            })
            .collect();
        holders[0].extend(Duration::from_secs(900)).unwrap();
        let last = holders.last().unwrap().token();
        kid.signal(libc::SIGKILL);
        let _ = kid.child.wait();
        let next = (successor == "the next server").then(|| {
            let mut next = Kid::spawn("serve", &path);
            assert_eq!(next.report().as_deref(), Some("serving"));
            next
        });
        // Whoever opens the file next restored them: every lock is still held, and the counter
        // did not go back.
        let options = Options {
            share_commits: successor != "a store that shares no commits",
            ..Options::default()
        };
        // (Checked before any operation of the holders' own store, which restores them too.)
        let other = Store::open_with(&path, &options).unwrap();
        for (i, holder) in holders.iter().enumerate() {
            match other.acquire(&format!("survivor-{i}"), Duration::from_secs(60)) {
                Err(Error::Locked { token, .. }) => {
                    assert_eq!(token, holder.token(), "{successor}");
                }
                other => panic!("survivor-{i} after the server's death, {successor}: {other:?}"),
            }
        }
        for holder in &holders {
            assert!(holder.is_held().unwrap());
        }
        let info = other.lock_info("survivor-0").unwrap().unwrap();
        assert!(
            info.remaining > Duration::from_secs(600),
            "the extend survived too"
        );
        let fresh = other.acquire("fresh", Duration::from_secs(60)).unwrap();
        assert!(fresh.token() > last);
        drop(next);
        for holder in holders {
            holder.release().unwrap();
        }
    }
}

#[test]
fn while_a_server_waits_for_an_idle_store_the_others_keep_working() {
    let (_dir, path, idle) = common::temp_store();
    let held = idle.acquire("idle's", Duration::from_secs(600)).unwrap();
    // The server cannot take the file while `idle` has it open, and waits for it to move over.
    let mut kid = Kid::spawn("serve", &path);
    std::thread::sleep(Duration::from_millis(300));
    let options = Options {
        busy_timeout: Duration::from_secs(2),
        ..Options::default()
    };
    let busy = Store::open_with(&path, &options).unwrap();
    for round in 0..20 {
        let holder = busy.acquire("busy's", Duration::from_secs(60)).unwrap();
        holder.put(b"k", format!("{round}").as_bytes()).unwrap();
        assert_eq!(busy.get(b"k").unwrap().unwrap().token, holder.token());
        holder.release().unwrap();
    }
    assert_eq!(busy.server(), None);
    // Its next operation moves `idle` over: the server starts, and serves both.
    assert!(held.is_held().unwrap());
    assert_eq!(kid.report().as_deref(), Some("serving"));
    until_served(&busy);
    assert!(held.is_held().unwrap());
}

#[test]
fn through_a_server_the_history_and_the_metrics_are_the_stores() {
    let (_dir, path, store) = common::temp_store();
    let mut server = Kid::spawn("serve", &path);
    until_served(&store);
    assert_eq!(server.report().as_deref(), Some("serving"));
    let before = store.metrics().unwrap();
    let a = store
        .acquire("payment-export", Duration::from_millis(150))
        .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let b = store
        .acquire("payment-export", Duration::from_secs(60))
        .unwrap();
    b.put(b"report", b"fresh").unwrap();
    b.release().unwrap();
    let c = store
        .acquire("payment-export", Duration::from_secs(60))
        .unwrap();
    // The grants judged the ends (in the store's shared memory, where the leases are), and the
    // history tells them.
    let history: Vec<_> = store
        .history("payment-export")
        .unwrap()
        .iter()
        .map(|e| (e.token, e.ending))
        .collect();
    assert_eq!(
        history,
        [
            (a.token(), fencelock::Ending::TakenOver),
            (b.token(), fencelock::Ending::Released),
            (c.token(), fencelock::Ending::Held)
        ]
    );
    // The server counts the commits (of the write), this process the grants: into the same
    // page.
    let after = store.metrics().unwrap();
    assert_eq!(after.scope, fencelock::Scope::Store);
    assert_eq!(after.grants - before.grants, 3);
    assert_eq!(after.ended_taken_over - before.ended_taken_over, 1);
    assert!(after.commits > before.commits);
    assert!(after.committed_ops - before.committed_ops >= 1);
    assert_eq!(store.server(), Some(server.child.id()));
    drop((a, c));
}

#[test]
fn the_heartbeat_beats_from_the_serving_loop_while_it_works_and_while_it_idles() {
    let (_dir, path, store) = common::temp_store();
    let beats = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&beats);
    let stop = Cancel::new();
    let options = ServeOptions {
        cancel: Some(stop.clone()),
        heartbeat: Some(Heartbeat {
            every: Duration::from_millis(20),
            beat: Arc::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            }),
        }),
        ..ServeOptions::default()
    };
    let serving = std::thread::spawn(move || {
        let server = Server::start(&path, &options).unwrap();
        server.run(&options).unwrap();
    });
    until_served(&store);
    // Bounded only to catch a heartbeat that never comes.
    let give_up = Instant::now() + Duration::from_secs(120);
    // While a client keeps it busy...
    let target = beats.load(Ordering::SeqCst) + 5;
    let mut round = 0u64;
    while beats.load(Ordering::SeqCst) < target {
        assert!(Instant::now() < give_up, "no heartbeat while serving");
        let holder = store.acquire("busy", Duration::from_secs(60)).unwrap();
        holder.put(b"k", &round.to_le_bytes()).unwrap();
        holder.release().unwrap();
        round += 1;
    }
    // ... and while nothing comes.
    let target = beats.load(Ordering::SeqCst) + 5;
    while beats.load(Ordering::SeqCst) < target {
        assert!(Instant::now() < give_up, "no heartbeat while idle");
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.cancel();
    serving.join().unwrap();
}

#[test]
fn a_request_that_cannot_travel_to_the_server_fails_at_once_with_the_io_error() {
    let (_dir, path, store) = common::temp_store();
    let mut server = Kid::spawn("serve", &path);
    until_served(&store);
    assert_eq!(server.report().as_deref(), Some("serving"));
    let mut client = Kid::spawn("put-without-descriptors", &path);
    let report = client.report().expect("the client reported its put");
    // Nothing was posted: not a Timeout after the busy timeout, whose outcome is unknown.
    assert!(report.starts_with("io "), "{report}");
    assert_eq!(store.get(b"big").unwrap(), None);
}
