//! Real processes sharing one store file: contention, death, pauses.
//!
//! Children are this test binary run again with `FENCELOCK_TEST_ROLE` set; the `child` test
//! then plays the role and reports on stdout in lines marked with `@@ `.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use fencelock::{
    boottime_ns, Cancel, Error, Kind, LockState, Options, ServeOptions, Server, Store,
};

use common::{bounded, say, Kid, DB, ROLE};

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    if role == "write-lock" {
        // Holds the store's write lock, as a process paused inside a transaction does.
        let db = redb::Builder::new()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .open(std::env::var(DB).unwrap())
            .unwrap();
        let txn = db.begin_write().unwrap();
        println!("@@ locked");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        drop(txn);
        return;
    }
    if role == "open-lock" {
        // Holds the byte that serializes opens, as a process paused inside Store::open does.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(std::env::var(DB).unwrap())
            .unwrap();
        common::lock_bytes(&file, 1 << 61, 1);
        println!("@@ opening");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        drop(file);
        return;
    }
    if role == "single-process" {
        let options = fencelock::Options {
            mode: fencelock::Mode::SingleProcess,
            ..fencelock::Options::default()
        };
        let store = Store::open_with(std::env::var(DB).unwrap(), &options).unwrap();
        let mut last = 0;
        for round in 0..50 {
            let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
            if round == 10 {
                holder.put(b"acknowledged", b"yes").unwrap();
            }
            last = holder.token();
        }
        let _still_held = store.acquire("job", Duration::from_secs(60)).unwrap();
        println!("@@ token {last}");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        return;
    }
    if role == "serve" {
        let options = ServeOptions {
            wait: Duration::from_secs(60),
            ..ServeOptions::default()
        };
        let server = Server::start(std::env::var(DB).unwrap(), &options).unwrap();
        println!("@@ serving");
        std::io::stdout().flush().unwrap();
        server.run(&options).unwrap();
        return;
    }
    let store = Store::open(std::env::var(DB).unwrap()).unwrap();
    let wait_for_parent = || {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    };
    match role.as_str() {
        // Holds a long lease until killed.
        "hold" => {
            let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
            say(format!("token {}", holder.token()));
            wait_for_parent();
        }
        // Holds a short lease, is paused by the parent, then writes late.
        "pause" => {
            let holder = store.acquire("job", Duration::from_millis(500)).unwrap();
            say(format!("token {}", holder.token()));
            wait_for_parent();
            let fenced = store.put(b"data", b"stale", holder.token());
            say(format!("fenced {}", outcome(&fenced)));
            let checked = holder.put(b"data", b"stale");
            say(format!("checked {}", outcome(&checked)));
            say(format!("held {}", holder.is_held().unwrap()));
        }
        // Takes the hot lock many times, logging each holding interval.
        "contend" => {
            for _ in 0..15 {
                let holder = store
                    .acquire_wait("hot", Duration::from_secs(60), Duration::from_secs(300))
                    .unwrap();
                let start = boottime_ns();
                holder.put(b"hot-data", b"x").unwrap();
                let end = boottime_ns();
                holder.release().unwrap();
                say(format!("held {} {start} {end}", holder.token()));
            }
        }
        // Tries once for the lock its parent holds.
        "try-acquire" => match store.acquire("job", Duration::from_secs(60)) {
            Ok(holder) => say(format!("acquired {}", holder.token())),
            Err(Error::Locked { remaining, .. }) => {
                say(format!("locked {}", remaining.as_secs()));
            }
            Err(err) => say(format!("error {err}")),
        },
        // Writes with token 1 in a loop until killed, combining other processes' requests
        // whenever it holds the write lock.
        "put-loop" => {
            store.put(b"child", &[1; 100], 1).unwrap();
            say("writing");
            loop {
                match store.put(b"child", &[1; 100], 1) {
                    Ok(()) | Err(Error::Timeout { .. }) => {}
                    Err(err) => panic!("put-loop: {err}"),
                }
            }
        }
        // Opened on a fresh path at the same time as its siblings.
        "race" => {
            let holder = store
                .acquire_wait("x", Duration::from_secs(60), Duration::from_secs(60))
                .unwrap();
            say(format!("token {}", holder.token()));
        }
        // Hold a lock of another kind, or several locks, until killed.
        "permit" | "shared" | "exclusive-wait" | "all" => {
            let long = Duration::from_secs(600);
            let holders = match role.as_str() {
                "permit" => store
                    .acquire_kind("pool", Kind::Semaphore(2), long)
                    .map(|h| vec![h]),
                "shared" => store
                    .acquire_kind("config", Kind::Shared, long)
                    .map(|h| vec![h]),
                "exclusive-wait" => store
                    .acquire_wait("config", long, Duration::from_secs(60))
                    .map(|h| vec![h]),
                _ => store.acquire_all(&["a", "b"], long),
            }
            .unwrap();
            say(format!("token {}", holders[0].token()));
            wait_for_parent();
        }
        other => panic!("unknown role {other}"),
    }
}

fn outcome(result: &fencelock::Result<()>) -> &'static str {
    match result {
        Ok(()) => "accepted",
        Err(Error::StaleToken { .. }) => "stale-token",
        Err(Error::LockLost { .. }) => "lock-lost",
        Err(_) => "other-error",
    }
}

#[test]
fn a_killed_holder_frees_its_lock_at_once() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("hold", &path);
    let token = kid.token();
    assert!(matches!(
        store.acquire("job", Duration::from_secs(5)),
        Err(Error::Locked { token: t, pid, .. }) if t == token && pid == kid.child.id()
    ));
    kid.signal(libc::SIGKILL);
    kid.child.wait().unwrap();
    // The dead holder's 600 s lease no longer excludes anyone: a single try succeeds.
    let next = store.acquire("job", Duration::from_secs(5)).unwrap();
    assert!(next.token() > token);
}

#[test]
fn a_paused_holder_keeps_its_lease_until_the_ttl_then_is_fenced_out() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("pause", &path);
    let token = kid.token();
    kid.stop();
    let paused_at = boottime_ns();
    let lease = store.lock_info("job").unwrap().unwrap();
    assert_eq!(lease.token, token);
    let expires = paused_at + u64::try_from(lease.remaining.as_nanos()).unwrap();

    let successor = store
        .acquire_wait("job", Duration::from_secs(60), Duration::from_secs(60))
        .unwrap();
    assert!(
        boottime_ns() >= expires,
        "the paused holder's lease was taken before it expired"
    );
    assert_eq!(successor.token(), token + 1);
    successor.put(b"data", b"fresh").unwrap();

    kid.signal(libc::SIGCONT);
    writeln!(kid.stdin, "go").unwrap();
    assert_eq!(kid.report().as_deref(), Some("fenced stale-token"));
    assert_eq!(kid.report().as_deref(), Some("checked lock-lost"));
    assert_eq!(kid.report().as_deref(), Some("held false"));
    assert!(kid.child.wait().unwrap().success());
    let data = store.get(b"data").unwrap().unwrap();
    assert_eq!(
        (data.value.as_slice(), data.token),
        (&b"fresh"[..], successor.token())
    );
}

#[test]
fn processes_contending_hold_the_lock_one_at_a_time_in_token_order() {
    let (_dir, path, store) = common::temp_store();
    let mut kids: Vec<Kid> = (0..4).map(|_| Kid::spawn("contend", &path)).collect();
    let mut holds: Vec<(u64, u64, u64)> = Vec::new();
    for kid in &mut kids {
        while let Some(line) = kid.report() {
            let fields: Vec<u64> = line
                .strip_prefix("held ")
                .unwrap()
                .split(' ')
                .map(|f| f.parse().unwrap())
                .collect();
            holds.push((fields[0], fields[1], fields[2]));
        }
        assert!(kid.child.wait().unwrap().success());
    }
    assert_eq!(holds.len(), 60);
    holds.sort_unstable();
    for pair in holds.windows(2) {
        let ((t1, _, end1), (t2, start2, _)) = (pair[0], pair[1]);
        assert!(t1 < t2, "token {t1} granted twice");
        assert!(
            end1 < start2,
            "holder of token {t1} was still inside when token {t2} entered"
        );
    }
    let last = holds.last().unwrap().0;
    assert_eq!(store.get(b"hot-data").unwrap().unwrap().token, last);
}

#[test]
fn processes_racing_to_create_a_store_all_open_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    let mut kids: Vec<Kid> = (0..6).map(|_| Kid::spawn("race", &path)).collect();
    let mut tokens: Vec<u64> = kids.iter_mut().map(Kid::token).collect();
    for kid in &mut kids {
        assert!(kid.child.wait().unwrap().success());
    }
    // Distinct, whichever opened first. (Where a process's store closes before the next
    // opens, the shared memory is set up anew and tokens jump past the file's reservation.)
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 6);
    Store::open(&path).unwrap().verify().unwrap();
}

#[test]
fn a_process_stuck_inside_a_write_transaction_cannot_make_waits_overrun() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("held", Duration::from_secs(60)).unwrap();
    store.put(b"k", b"v", holder.token()).unwrap();
    let mut kid = Kid::spawn("write-lock", &path);
    assert_eq!(kid.report().as_deref(), Some("locked"));

    let (done, finished) = std::sync::mpsc::channel();
    let waiter = store.clone();
    std::thread::spawn(move || {
        let wait =
            waiter.acquire_wait("other", Duration::from_secs(60), Duration::from_millis(100));
        done.send(wait.map(|h| h.token())).unwrap();
    });
    // Generous: this guards against a wait that never ends, not against a slow one.
    let wait = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("acquire_wait overran its timeout while another process held the write lock");
    // A grant needs no write lock: the leases are in the store's shared memory.
    assert!(wait.is_ok(), "{wait:?}");
    // Reads, refusals and releases need no write lock.
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
    assert!(matches!(
        store.acquire("held", Duration::from_secs(1)),
        Err(Error::Locked { .. })
    ));
    holder.release().unwrap();
    assert!(!holder.is_held().unwrap());

    writeln!(kid.stdin, "go").unwrap();
    assert!(kid.child.wait().unwrap().success());
    let _other = store.acquire("other", Duration::from_secs(60)).unwrap();
}

fn short_busy_timeout() -> Options {
    Options {
        busy_timeout: Duration::from_millis(200),
        ..Options::default()
    }
}

#[test]
fn a_process_paused_inside_a_commit_cannot_freeze_opens_or_writes() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("held", Duration::from_secs(60)).unwrap();
    store.put(b"k", b"v", holder.token()).unwrap();
    let opened_before = Store::open_with(&path, &short_busy_timeout()).unwrap();
    let last_token = store.info().unwrap().last_token;
    let mut kid = Kid::spawn("write-lock", &path);
    assert_eq!(kid.report().as_deref(), Some("locked"));
    kid.stop();

    // A new open gives up at its busy timeout with a typed error...
    let at = path.clone();
    let open = bounded("an open", move || {
        Store::open_with(&at, &short_busy_timeout()).map(drop)
    });
    assert!(matches!(open, Err(Error::Timeout { .. })), "{open:?}");
    // ...or when its cancel handle fires.
    let cancel = Cancel::new();
    let (at, handle) = (path.clone(), cancel.clone());
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        handle.cancel();
    });
    let open = bounded("a cancelled open", move || {
        let options = Options {
            busy_timeout: Duration::from_secs(3600),
            cancel: Some(cancel),
            ..Options::default()
        };
        Store::open_with(&at, &options).map(drop)
    });
    assert!(matches!(open, Err(Error::Cancelled)), "{open:?}");

    // Writes of a store opened before give up at the busy timeout and change nothing.
    let token = holder.token();
    let (put, fence, grant) = bounded("a write", move || {
        (
            opened_before.put(b"k", b"late", token),
            opened_before.fence("printer", token),
            opened_before
                .acquire("free", Duration::from_secs(60))
                .map(|h| h.token()),
        )
    });
    assert!(matches!(put, Err(Error::Timeout { .. })), "{put:?}");
    assert!(matches!(fence, Err(Error::Timeout { .. })), "{fence:?}");
    // A grant needs no write lock: the leases are in the store's shared memory.
    assert!(grant.is_ok(), "{grant:?}");
    let grant = grant.map_err(|err| err.to_string());
    // Reads go on, and so does a read-only open, which never needs the write lock.
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
    let at = path.clone();
    let reader = bounded("a read-only open", move || {
        let options = Options {
            read_only: true,
            ..short_busy_timeout()
        };
        Store::open_with(&at, &options)
    })
    .unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(
        reader.lock_info("held").unwrap().unwrap().state,
        fencelock::LockState::Held
    );

    kid.signal(libc::SIGCONT);
    writeln!(kid.stdin, "go").unwrap();
    assert!(kid.child.wait().unwrap().success());
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(store.fence_token("printer").unwrap(), None);
    // The one grant made meanwhile.
    assert_eq!(grant.unwrap(), last_token + 1);
    assert_eq!(store.info().unwrap().last_token, last_token + 1);
    // Once the paused process has moved on, opens work again.
    let reopened = Store::open_with(&path, &short_busy_timeout()).unwrap();
    let next = reopened.acquire("free", Duration::from_secs(60)).unwrap();
    assert_eq!(next.token(), last_token + 2);
}

#[test]
fn a_process_paused_inside_its_open_cannot_freeze_other_opens() {
    let (_dir, path, store) = common::temp_store();
    drop(store);
    let mut kid = Kid::spawn("open-lock", &path);
    assert_eq!(kid.report().as_deref(), Some("opening"));
    kid.stop();
    let at = path.clone();
    let open = bounded("an open", move || {
        Store::open_with(&at, &short_busy_timeout()).map(drop)
    });
    assert!(matches!(open, Err(Error::Timeout { .. })), "{open:?}");
    kid.signal(libc::SIGCONT);
    writeln!(kid.stdin, "go").unwrap();
    assert!(kid.child.wait().unwrap().success());
    Store::open_with(&path, &short_busy_timeout()).unwrap();
}

#[test]
fn processes_in_another_time_namespace_agree_on_when_a_lease_ends() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    // A boot-time clock 100,000 s ahead (and one behind) of the host's, as `unshare --time`
    // gives a container. Needs CAP_SYS_ADMIN, which the project's test machines (root) have.
    for offset in ["100000", "-100"] {
        let out = Command::new("unshare")
            .args(["--time", "--boottime", offset])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(ROLE, "try-acquire")
            .env(DB, &path)
            .stdin(Stdio::null())
            .output()
            .expect("run unshare");
        assert!(
            out.status.success(),
            "unshare --time failed (root and Linux 5.6+ are needed): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let report = text
            .lines()
            .find_map(|line| line.split_once("@@ ").map(|(_, r)| r.to_owned()))
            .expect("the child reported");
        let seconds_left: u64 = report
            .strip_prefix("locked ")
            .unwrap_or_else(|| panic!("offset {offset}: the child got {report:?}"))
            .parse()
            .unwrap();
        assert!(seconds_left <= 60, "offset {offset}: {seconds_left} s left");
    }
    assert!(holder.is_held().unwrap());
}

#[test]
fn a_read_only_open_repairs_a_store_left_by_a_killed_writer() {
    let (_dir, path, store) = common::temp_store();
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    holder.put(b"k", b"v").unwrap();
    drop((holder, store));
    let mut kid = Kid::spawn("write-lock", &path);
    assert_eq!(kid.report().as_deref(), Some("locked"));
    kid.signal(libc::SIGKILL);
    kid.child.wait().unwrap();
    let options = Options {
        read_only: true,
        ..Options::default()
    };
    let reader = Store::open_with(&path, &options).unwrap();
    assert_eq!(reader.get(b"k").unwrap().unwrap().value, b"v");
    reader.verify().unwrap();
}

#[test]
fn single_process_mode_never_reuses_a_token_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("single.db");
    let mut kid = Kid::spawn("single-process", &path);
    let last = kid.token();
    kid.signal(libc::SIGKILL);
    kid.child.wait().unwrap();
    let options = fencelock::Options {
        mode: fencelock::Mode::SingleProcess,
        ..fencelock::Options::default()
    };
    let store = Store::open_with(&path, &options).unwrap();
    // The dead process's lease is gone with it, and no token it was given comes back.
    let next = store.acquire("job", Duration::from_secs(60)).unwrap();
    assert!(
        next.token() > last + 1,
        "token {} after {last}",
        next.token()
    );
    let acknowledged = store.get(b"acknowledged").unwrap().unwrap();
    assert_eq!(acknowledged.value, b"yes");
    store.verify().unwrap();
}

/// Acquires and releases `name` in a loop until `stop`, returning the tokens it was granted.
fn grant_loop(store: &Store, name: &str, stop: &std::sync::atomic::AtomicBool) -> Vec<u64> {
    let mut tokens = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let holder = store.acquire(name, Duration::from_secs(60)).unwrap();
        tokens.push(holder.token());
        holder.release().unwrap();
    }
    tokens
}

#[test]
fn combiners_killed_mid_batch_lose_no_request_and_grant_none_twice() {
    let (_dir, path, store) = common::temp_store();
    let seed = store.acquire("seed", Duration::from_secs(600)).unwrap();
    assert_eq!(seed.token(), 1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let (store, stop) = (&store, &stop);
                scope.spawn(move || grant_loop(store, &format!("lock-{i}"), stop))
            })
            .collect();
        // A writer process combines the requests of this one whenever it holds the write
        // lock; it is killed again and again, at random points of its batches.
        let mut kills = 0u32;
        while kills < 8 {
            let mut kid = Kid::spawn("put-loop", &path);
            assert_eq!(kid.report().as_deref(), Some("writing"));
            std::thread::sleep(Duration::from_millis(20 + u64::from(kills % 7) * 11));
            kid.signal(libc::SIGKILL);
            let _ = kid.child.wait();
            kills += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let tokens: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        // Every grant happened exactly once: the counter moved once per grant reported, and
        // no token was reported twice.
        let mut sorted = tokens.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), tokens.len(), "a token was granted twice");
        assert_eq!(
            store.info().unwrap().last_token,
            1 + tokens.len() as u64,
            "a grant was made that nobody got"
        );
    });
    store.verify().unwrap();
    drop(seed);
}

#[test]
fn behind_a_combiner_paused_mid_batch_every_deadline_holds() {
    let (_dir, path, store) = common::temp_store();
    let seed = store.acquire("seed", Duration::from_secs(600)).unwrap();
    let mut kid = Kid::spawn("put-loop", &path);
    assert_eq!(kid.report().as_deref(), Some("writing"));
    let requester = Store::open_with(&path, &short_busy_timeout()).unwrap();
    let mut timed_out = 0;
    for round in 0..15 {
        // Stopped at a random point: often inside a commit, holding requests it took.
        std::thread::sleep(Duration::from_millis(3 + round % 5));
        kid.stop();
        let name = format!("lock-{round}");
        let at = requester.clone();
        let grant = bounded("an acquire behind a paused combiner", move || {
            at.acquire(&name, Duration::from_secs(60))
                .map(|h| h.token())
        });
        let at = requester.clone();
        let put = bounded("a put behind a paused combiner", move || {
            at.put(b"parent", b"x", 1)
        });
        match (&grant, &put) {
            (Ok(_) | Err(Error::Timeout { .. }), Ok(()) | Err(Error::Timeout { .. })) => {}
            other => panic!("unexpected outcome behind a paused combiner: {other:?}"),
        }
        timed_out += usize::from(grant.is_err());
        kid.signal(libc::SIGCONT);
        // A grant that timed out left no live lease: the lock is free for the next one.
        let name = format!("lock-{round}");
        let next = store
            .acquire_wait(&name, Duration::from_secs(60), Duration::from_secs(30))
            .unwrap();
        assert!(next.token() > 1);
    }
    println!("{timed_out} of 15 acquires timed out behind the paused combiner");
    kid.signal(libc::SIGKILL);
    let _ = kid.child.wait();
    store.verify().unwrap();
    drop(seed);
}

// ---- lock kinds across processes ----------------------------------------------------------

const TTL: Duration = Duration::from_secs(60);

/// Kills `kid` and reaps it.
fn kill(kid: &mut Kid) {
    kid.signal(libc::SIGKILL);
    kid.child.wait().unwrap();
}

#[test]
fn permits_of_processes_count_together_and_a_killed_holder_frees_its_permit() {
    let (_dir, path, store) = common::temp_store();
    let mut first = Kid::spawn("permit", &path);
    let t1 = first.token();
    let mut second = Kid::spawn("permit", &path);
    let t2 = second.token();
    assert!(t2 > t1);
    assert!(matches!(
        store.acquire_kind("pool", Kind::Semaphore(2), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(matches!(
        store.acquire_kind("pool", Kind::Semaphore(5), TTL),
        Err(Error::PermitsMismatch {
            permits: 2,
            requested: 5
        })
    ));
    kill(&mut first);
    // The dead holder's 600 s permit frees its place at once; the other stays.
    let mine = store.acquire_kind("pool", Kind::Semaphore(2), TTL).unwrap();
    assert!(mine.token() > t2);
    assert!(matches!(
        store.acquire_kind("pool", Kind::Semaphore(2), TTL),
        Err(Error::Locked { .. })
    ));
    kill(&mut second);
    let states: Vec<_> = store
        .lock_holders("pool")
        .unwrap()
        .into_iter()
        .map(|info| (info.token, info.state))
        .collect();
    assert!(states.contains(&(mine.token(), LockState::Held)));
    assert!(states.contains(&(t2, LockState::HolderDead)));
}

#[test]
fn a_waiting_exclusive_process_goes_before_later_shared_acquires() {
    let (_dir, path, store) = common::temp_store();
    let mut reader = Kid::spawn("shared", &path);
    let r = reader.token();
    let mut writer = Kid::spawn("exclusive-wait", &path);
    // Shared acquires join the reader until the writer's process is queued.
    common::join_shared_until_refused(&store, "config");
    kill(&mut reader);
    let w = writer.token();
    assert!(w > r);
    assert!(matches!(
        store.acquire_kind("config", Kind::Shared, TTL),
        Err(Error::Locked { token, .. }) if token == w
    ));
    kill(&mut writer);
    let _reader = store.acquire_kind("config", Kind::Shared, TTL).unwrap();
}

#[test]
fn a_multi_lock_of_another_process_excludes_each_name_and_dies_with_it() {
    let (_dir, path, store) = common::temp_store();
    let mut kid = Kid::spawn("all", &path);
    let a = kid.token();
    assert!(matches!(store.acquire("a", TTL), Err(Error::Locked { token, .. }) if token == a));
    assert!(matches!(store.acquire("b", TTL), Err(Error::Locked { token, .. }) if token == a + 1));
    kill(&mut kid);
    let both = store.acquire_all(&["b", "a"], TTL).unwrap();
    assert!(both[0].token() > a + 1);
}

/// Waits until `store` goes through a server, making operations so that it moves over.
fn until_served(store: &Store) {
    for _ in 0..20_000 {
        let _ = store.lock_info("probe");
        if store.server().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the store never went through the server");
}

#[test]
fn every_kind_works_through_a_server_and_its_grants_survive_the_servers_death() {
    let (_dir, path, store) = common::temp_store();
    let mut server = Kid::spawn("serve", &path);
    until_served(&store);
    assert_eq!(server.report().as_deref(), Some("serving"));
    let long = Duration::from_secs(600);
    let a = store
        .acquire_kind("pool", Kind::Semaphore(2), long)
        .unwrap();
    let b = store
        .acquire_kind("pool", Kind::Semaphore(2), long)
        .unwrap();
    assert!(matches!(
        store.acquire_kind("pool", Kind::Semaphore(2), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(matches!(
        store.acquire_kind("pool", Kind::Semaphore(3), TTL),
        Err(Error::PermitsMismatch {
            permits: 2,
            requested: 3
        })
    ));
    a.extend(Duration::from_secs(900)).unwrap();
    let reader = store.acquire_kind("config", Kind::Shared, long).unwrap();
    let both = store.acquire_all(&["x", "y"], long).unwrap();
    assert_eq!(both[1].token(), both[0].token() + 1);
    assert_eq!(store.lock_holders("pool").unwrap().len(), 2);
    assert!(store
        .locks()
        .unwrap()
        .iter()
        .any(|l| l.kind == Kind::Shared));
    // Granted and extended without an fsync; the next store to open the file restores them.
    kill(&mut server);
    let other = Store::open(&path).unwrap();
    assert!(matches!(
        other.acquire_kind("pool", Kind::Semaphore(2), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(matches!(
        other.acquire("config", TTL),
        Err(Error::Locked { token, .. }) if token == reader.token()
    ));
    for holder in &both {
        assert!(matches!(
            other.acquire(holder.name(), TTL),
            Err(Error::Locked { .. })
        ));
    }
    let extended = other
        .lock_holders("pool")
        .unwrap()
        .into_iter()
        .find(|info| info.token == a.token())
        .unwrap();
    assert!(
        extended.remaining > long,
        "the permit's extend survived too"
    );
    assert!(a.is_held().unwrap() && b.is_held().unwrap());
    drop(b);
    let c = other.acquire_kind("pool", Kind::Semaphore(2), TTL).unwrap();
    assert!(c.token() > both[1].token());
}
