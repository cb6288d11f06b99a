//! Semaphores, shared locks and atomic multi-lock acquires: their rules in one process, and
//! across real processes (children are this test binary run again with `FENCELOCK_TEST_ROLE`
//! set, reporting on stdout in lines marked `@@ `).

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Kid, DB, ROLE};
use fencelock::{
    Cancel, Error, Kind, LockState, Mode, Options, ServeOptions, Server, Store, MAX_HOLDERS,
};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(60);

fn sem(n: u32) -> Kind {
    Kind::Semaphore(n)
}

// ---- semaphores ----------------------------------------------------------------------------

#[test]
fn a_semaphore_grants_n_permits_each_with_its_own_higher_token_and_refuses_the_next() {
    let (_dir, _path, store) = common::temp_store();
    let before = store.acquire("other", TTL).unwrap().token();
    let permits: Vec<_> = (0..3)
        .map(|_| store.acquire_kind("pool", sem(3), TTL).unwrap())
        .collect();
    let tokens: Vec<u64> = permits.iter().map(fencelock::Holder::token).collect();
    assert_eq!(tokens, vec![before + 1, before + 2, before + 3]);
    assert!(permits.iter().all(|p| p.kind() == sem(3)));
    match store.acquire_kind("pool", sem(3), TTL) {
        Err(Error::Locked { token, .. }) => assert!(tokens.contains(&token)),
        other => panic!("a fourth permit of three: {other:?}"),
    }
    // Releasing one permit frees exactly one place.
    permits[1].release().unwrap();
    let again = store.acquire_kind("pool", sem(3), TTL).unwrap();
    assert!(again.token() > tokens[2]);
    assert!(matches!(
        store.acquire_kind("pool", sem(3), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(permits[0].is_held().unwrap());
    assert!(!permits[1].is_held().unwrap());
    assert!(again.is_held().unwrap());
}

#[test]
fn another_permit_count_while_permits_are_live_is_refused_and_changes_nothing() {
    let (_dir, _path, store) = common::temp_store();
    let a = store.acquire_kind("pool", sem(2), TTL).unwrap();
    let info = store.info().unwrap();
    let grants = |store: &Store| -> Vec<_> {
        let infos = store.lock_holders("pool").unwrap();
        infos
            .into_iter()
            .map(|i| (i.token, i.state, i.kind))
            .collect()
    };
    let holders = grants(&store);
    for requested in [1, 3] {
        match store.acquire_kind("pool", sem(requested), TTL) {
            Err(err @ Error::PermitsMismatch { permits: 2, .. }) => {
                assert_eq!(err.status(), fencelock::Status::PermitsMismatch);
                assert_eq!(err.status() as i32, 18);
                assert!(err.to_string().contains("count of 2"), "{err}");
            }
            other => panic!("a count of {requested} against 2: {other:?}"),
        }
        assert!(matches!(
            store.acquire_kind_wait("pool", sem(requested), TTL, LONG),
            Err(Error::PermitsMismatch { permits: 2, .. })
        ));
    }
    assert_eq!(store.info().unwrap().last_token, info.last_token);
    assert_eq!(grants(&store), holders);
    // Once no permit is live, the next acquire sets the count anew.
    drop(a);
    let b = store.acquire_kind("pool", sem(1), TTL).unwrap();
    assert_eq!(b.kind(), sem(1));
    assert!(matches!(
        store.acquire_kind("pool", sem(1), TTL),
        Err(Error::Locked { .. })
    ));
}

#[test]
fn bad_permit_counts_are_refused_before_anything_is_written() {
    let (_dir, _path, store) = common::temp_store();
    for permits in [0, MAX_HOLDERS + 1, u32::MAX] {
        assert!(matches!(
            store.acquire_kind("pool", sem(permits), TTL),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(store.info().unwrap().last_token, 0);
    assert!(store.locks().unwrap().is_empty());
    let _largest = store.acquire_kind("pool", sem(MAX_HOLDERS), TTL).unwrap();
}

#[test]
fn each_permit_expires_extends_and_writes_on_its_own() {
    let (_dir, _path, store) = common::temp_store();
    let short = store
        .acquire_kind("pool", sem(2), Duration::from_millis(50))
        .unwrap();
    let long = store.acquire_kind("pool", sem(2), TTL).unwrap();
    long.put(b"k", b"long").unwrap();
    assert!(short.wait_lost(LONG));
    // The expired permit's place is free; the live one is untouched.
    let third = store.acquire_kind("pool", sem(2), TTL).unwrap();
    assert!(long.is_held().unwrap());
    assert!(matches!(short.extend(TTL), Err(Error::LockLost { .. })));
    assert!(matches!(
        short.put(b"other", b"v"),
        Err(Error::LockLost { .. })
    ));
    long.extend(TTL).unwrap();
    third.extend(TTL).unwrap();
    // Holder-checked writes of permits are fenced by their tokens as ever.
    third.put(b"k", b"third").unwrap();
    assert!(matches!(
        long.put(b"k", b"stale"),
        Err(Error::StaleToken { .. })
    ));
    assert!(matches!(
        store.put(b"k", b"stale", long.token()),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"third");
    let states: Vec<_> = store
        .lock_holders("pool")
        .unwrap()
        .into_iter()
        .map(|info| (info.token, info.state, info.kind))
        .collect();
    assert!(states.contains(&(third.token(), LockState::Held, sem(2))));
    assert!(states.contains(&(long.token(), LockState::Held, sem(2))));
}

#[test]
fn a_waiting_permit_acquire_gets_the_first_permit_let_go() {
    let (_dir, _path, store) = common::temp_store();
    let a = store.acquire_kind("pool", sem(2), TTL).unwrap();
    let b = store.acquire_kind("pool", sem(2), TTL).unwrap();
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_kind_wait("pool", sem(2), TTL, LONG))
    };
    // Whichever permit goes, the waiter gets its place; here the second one.
    std::thread::sleep(Duration::from_millis(20));
    drop(b);
    let c = waiter.join().unwrap().unwrap();
    assert!(c.token() > a.token());
    assert!(a.is_held().unwrap() && c.is_held().unwrap());
    let cancel = Cancel::new();
    cancel.cancel();
    assert!(matches!(
        store.acquire_kind_wait_cancellable("pool", sem(2), TTL, LONG, &cancel),
        Err(Error::Cancelled)
    ));
    assert!(matches!(
        store.acquire_kind_wait("pool", sem(2), TTL, Duration::from_millis(5)),
        Err(Error::Timeout)
    ));
}

#[test]
fn many_threads_never_hold_more_than_n_permits() {
    let (_dir, _path, store) = common::temp_store();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (store, inside, most) = (store.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..15 {
                    let permit = store.acquire_kind_wait("pool", sem(2), TTL, LONG).unwrap();
                    assert!(permit.token() > last);
                    last = permit.token();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2);
}

#[test]
fn kinds_exclude_each_other_on_one_name() {
    let (_dir, _path, store) = common::temp_store();
    let exclusive = store.acquire("name", TTL).unwrap();
    for kind in [Kind::Shared, sem(4)] {
        assert!(matches!(
            store.acquire_kind("name", kind, TTL),
            Err(Error::Locked { token, .. }) if token == exclusive.token()
        ));
    }
    drop(exclusive);
    let permit = store.acquire_kind("name", sem(4), TTL).unwrap();
    assert!(matches!(
        store.acquire("name", TTL),
        Err(Error::Locked { token, .. }) if token == permit.token()
    ));
    assert!(matches!(
        store.acquire_kind("name", Kind::Shared, TTL),
        Err(Error::Locked { .. })
    ));
    drop(permit);
    // A name whose holders are all gone is free for any kind.
    let shared = store.acquire_kind("name", Kind::Shared, TTL).unwrap();
    assert_eq!(store.lock("name").unwrap().unwrap().kind, Kind::Shared);
    drop(shared);
    let exclusive = store.acquire_kind("name", Kind::Exclusive, TTL).unwrap();
    assert_eq!(exclusive.kind(), Kind::Exclusive);
    assert_eq!(store.lock("name").unwrap().unwrap().kind, Kind::Exclusive);
}

// ---- shared locks --------------------------------------------------------------------------

#[test]
fn shared_holders_share_and_exclude_an_exclusive_holder() {
    let (_dir, _path, store) = common::temp_store();
    let readers: Vec<_> = (0..5)
        .map(|_| store.acquire_kind("config", Kind::Shared, TTL).unwrap())
        .collect();
    for pair in readers.windows(2) {
        assert!(pair[1].token() > pair[0].token());
    }
    assert!(matches!(
        store.acquire("config", TTL),
        Err(Error::Locked { .. })
    ));
    assert_eq!(store.lock_holders("config").unwrap().len(), 5);
    let mut readers = readers.into_iter();
    let last = readers.next_back().unwrap();
    drop(readers);
    // One shared holder left still excludes an exclusive one.
    assert!(matches!(
        store.acquire("config", TTL),
        Err(Error::Locked { token, .. }) if token == last.token()
    ));
    drop(last);
    let writer = store.acquire("config", TTL).unwrap();
    assert!(matches!(
        store.acquire_kind("config", Kind::Shared, TTL),
        Err(Error::Locked { token, .. }) if token == writer.token()
    ));
}

#[test]
fn a_shared_holder_is_refused_holder_checked_writes_but_its_token_fences() {
    let (_dir, _path, store) = common::temp_store();
    let reader = store.acquire_kind("config", Kind::Shared, TTL).unwrap();
    assert!(matches!(
        reader.put(b"k", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        reader.delete(b"k"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.get(b"k").unwrap(), None);
    // A fenced write with the token itself is the caller's to make, as for any token.
    store.put(b"k", b"v", reader.token()).unwrap();
    store.fence("bucket", reader.token()).unwrap();
    reader.extend(TTL).unwrap();
    assert!(reader.is_held().unwrap());
}

#[test]
fn a_waiting_exclusive_acquire_is_not_starved_by_a_stream_of_shared_ones() {
    let (_dir, _path, store) = common::temp_store();
    let reader = store.acquire_kind("config", Kind::Shared, TTL).unwrap();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_wait("config", TTL, LONG))
    };
    // Shared acquires join the live reader until the writer is queued; from then on they
    // stand behind it.
    loop {
        match store.acquire_kind("config", Kind::Shared, TTL) {
            Ok(joined) => drop(joined),
            Err(Error::Locked { .. }) => break,
            Err(other) => panic!("{other}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let late_reader = {
        let store = store.clone();
        std::thread::spawn(move || store.acquire_kind_wait("config", Kind::Shared, TTL, LONG))
    };
    assert!(matches!(
        store.acquire_kind("config", Kind::Shared, TTL),
        Err(Error::Locked { .. })
    ));
    drop(reader);
    let writer = writer.join().unwrap().unwrap();
    // The later shared waiter goes only after the writer.
    let token = writer.token();
    drop(writer);
    let late = late_reader.join().unwrap().unwrap();
    assert!(late.token() > token);
}

#[test]
fn single_process_mode_has_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        mode: Mode::SingleProcess,
        ..Options::default()
    };
    let store = Store::open_with(dir.path().join("s.db"), &options).unwrap();
    let a = store.acquire_kind("pool", sem(2), TTL).unwrap();
    let b = store.acquire_kind("pool", sem(2), TTL).unwrap();
    assert!(store.acquire_kind("pool", sem(2), TTL).is_err());
    let r = store.acquire_kind("cfg", Kind::Shared, TTL).unwrap();
    let all = store.acquire_all(&["x", "y"], TTL).unwrap();
    assert!(b.token() > a.token() && r.token() > b.token() && all[0].token() > r.token());
    drop((a, b, r, all));
    store.verify().unwrap();
}

// ---- atomic multi-lock acquire -------------------------------------------------------------

#[test]
fn an_acquire_of_several_locks_is_all_or_none() {
    let (_dir, _path, store) = common::temp_store();
    let b = store.acquire("b", TTL).unwrap();
    let before = store.info().unwrap().last_token;
    match store.acquire_all(&["a", "b", "c"], TTL) {
        Err(Error::Locked { token, .. }) => assert_eq!(token, b.token()),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.info().unwrap().last_token, before);
    assert!(store.lock("a").unwrap().is_none() && store.lock("c").unwrap().is_none());
    drop(b);
    let all = store.acquire_all(&["a", "b", "c"], TTL).unwrap();
    let names: Vec<_> = all.iter().map(|h| h.name().to_owned()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(all[0].token(), before + 1);
    assert_eq!(all[1].token(), before + 2);
    assert_eq!(all[2].token(), before + 3);
    // Each is a lease of its own.
    all[1].release().unwrap();
    assert!(all[0].is_held().unwrap() && all[2].is_held().unwrap());
    all[0].put(b"k", b"v").unwrap();
    let b_again = store.acquire("b", TTL).unwrap();
    assert!(b_again.token() > all[2].token());
}

#[test]
fn bad_lists_of_names_are_refused() {
    let (_dir, _path, store) = common::temp_store();
    for names in [&[][..], &["a", "a"][..], &["a", ""][..], &["a", "b\0"][..]] {
        assert!(
            matches!(
                store.acquire_all(names, TTL),
                Err(Error::InvalidArgument(_))
            ),
            "{names:?}"
        );
    }
    assert!(store.locks().unwrap().is_empty());
}

#[test]
fn waiting_multi_lock_acquires_in_opposite_orders_never_deadlock() {
    let (_dir, _path, store) = common::temp_store();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = [["a", "b"], ["b", "a"], ["b", "a"]]
        .into_iter()
        .map(|names| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0;
                while rounds < 20 || !stop.load(Ordering::Relaxed) {
                    let held = store.acquire_all_wait(&names, TTL, LONG).unwrap();
                    assert!(held.iter().all(|h| h.is_held().unwrap()));
                    drop(held);
                    rounds += 1;
                    if rounds >= 20 {
                        break;
                    }
                }
                rounds
            })
        })
        .collect();
    // An exclusive holder of one of them in between: the waits take both or neither.
    let one = store.acquire_wait("a", TTL, LONG).unwrap();
    assert!(matches!(
        store.acquire_all(&["b", "a"], TTL),
        Err(Error::Locked { .. })
    ));
    drop(one);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 20);
    }
    let cancel = Cancel::new();
    let held = store.acquire("b", TTL).unwrap();
    let waiter = {
        let (store, cancel) = (store.clone(), cancel.clone());
        std::thread::spawn(move || {
            store.acquire_all_wait_cancellable(&["a", "b"], TTL, LONG, &cancel)
        })
    };
    cancel.cancel();
    assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
    drop(held);
    // The cancelled wait holds nothing: both locks are free.
    let _both = store.acquire_all(&["a", "b"], TTL).unwrap();
}

// ---- across real processes -----------------------------------------------------------------

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let say = |line: String| {
        println!("@@ {line}");
        std::io::stdout().flush().unwrap();
    };
    if role == "serve" {
        let options = ServeOptions {
            wait: Duration::from_secs(60),
            ..ServeOptions::default()
        };
        let server = Server::start(std::env::var(DB).unwrap(), &options).unwrap();
        say("serving".into());
        server.run(&options).unwrap();
        return;
    }
    let store = Store::open(std::env::var(DB).unwrap()).unwrap();
    let holders = match role.as_str() {
        "permit" => store
            .acquire_kind("pool", sem(2), Duration::from_secs(600))
            .map(|h| vec![h]),
        "shared" => store
            .acquire_kind("config", Kind::Shared, Duration::from_secs(600))
            .map(|h| vec![h]),
        "exclusive-wait" => store
            .acquire_wait("config", Duration::from_secs(600), LONG)
            .map(|h| vec![h]),
        "all" => store.acquire_all(&["a", "b"], Duration::from_secs(600)),
        other => panic!("unknown role {other}"),
    }
    .unwrap();
    say(format!("token {}", holders[0].token()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

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
        store.acquire_kind("pool", sem(2), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(matches!(
        store.acquire_kind("pool", sem(5), TTL),
        Err(Error::PermitsMismatch {
            permits: 2,
            requested: 5
        })
    ));
    kill(&mut first);
    // The dead holder's 600 s permit frees its place at once; the other stays.
    let mine = store.acquire_kind("pool", sem(2), TTL).unwrap();
    assert!(mine.token() > t2);
    assert!(matches!(
        store.acquire_kind("pool", sem(2), TTL),
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
    loop {
        match store.acquire_kind("config", Kind::Shared, TTL) {
            Ok(joined) => drop(joined),
            Err(Error::Locked { .. }) => break,
            Err(other) => panic!("{other}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
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
        let _ = store.lock("probe");
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
    let a = store.acquire_kind("pool", sem(2), long).unwrap();
    let b = store.acquire_kind("pool", sem(2), long).unwrap();
    assert!(matches!(
        store.acquire_kind("pool", sem(2), TTL),
        Err(Error::Locked { .. })
    ));
    assert!(matches!(
        store.acquire_kind("pool", sem(3), TTL),
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
        other.acquire_kind("pool", sem(2), TTL),
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
    let c = other.acquire_kind("pool", sem(2), TTL).unwrap();
    assert!(c.token() > both[1].token());
}
