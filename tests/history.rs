//! The grant history of each lock and the store's metrics, including across real processes:
//! who held a lock, with which token, and how each lease ended; what the store counted.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fencelock::{Ending, Error, Event, Kind, Mode, Observer, Options, Scope, Store};

use common::{say, temp_store, Kid, DB, ROLE};

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let store = Store::open(std::env::var(DB).unwrap()).unwrap();
    match role.as_str() {
        // Holds the lock until killed.
        "hold" => {
            let holder = store.acquire("nightly", Duration::from_secs(600)).unwrap();
            say(format!("token {}", holder.token()));
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
        }
        // Takes the lock, keeps it alive, releases it and exits, as `fencelock run` from cron
        // does (its keep-alive thread may still hold the holder as the process exits).
        "job" => {
            let holder = store.acquire("nightly", Duration::from_secs(600)).unwrap();
            holder.keep_alive(Duration::from_secs(600)).unwrap();
            say(format!("token {}", holder.token()));
            holder.release().unwrap();
        }
        // Counts into the store's metrics: a grant and a refusal.
        "count" => {
            let holder = store.acquire("counted", Duration::from_secs(60)).unwrap();
            assert!(matches!(
                store.acquire("counted", Duration::from_secs(60)),
                Err(Error::Locked { .. })
            ));
            say(format!("token {}", holder.token()));
        }
        other => panic!("unknown role {other}"),
    }
}

fn endings(store: &Store, name: &str) -> Vec<(u64, Ending)> {
    store
        .history(name)
        .unwrap()
        .iter()
        .map(|entry| (entry.token, entry.ending))
        .collect()
}

#[test]
fn the_walkthrough_is_on_record_paused_holder_taken_over_then_released() {
    let (_dir, _path, store) = temp_store();
    let before = SystemTime::now();
    // A is granted payment-export and pauses past its TTL, still holding on.
    let a = store
        .acquire("payment-export", Duration::from_millis(150))
        .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let b = store
        .acquire("payment-export", Duration::from_secs(60))
        .unwrap();
    b.put(b"report", b"fresh").unwrap();
    assert!(matches!(
        a.put(b"report", b"stale"),
        Err(Error::LockLost { .. })
    ));
    let history = store.history("payment-export").unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    let (first, second) = (&history[0], &history[1]);
    assert_eq!((first.token, first.ending), (a.token(), Ending::TakenOver));
    assert_eq!(first.pid, std::process::id());
    assert_eq!(first.kind, Kind::Exclusive);
    let granted = first.granted.unwrap();
    assert!(granted >= before - Duration::from_secs(1));
    assert!(
        first.expires.unwrap() < first.ended.unwrap(),
        "taken over after its expiry"
    );
    assert!(first.recorded.is_some());
    assert_eq!((second.token, second.ending), (b.token(), Ending::Held));
    assert_eq!(second.recorded, None, "a current grant is not recorded yet");
    // B releases; the next grant records that, with the time of the release.
    let released = SystemTime::now();
    b.release().unwrap();
    let c = store
        .acquire("payment-export", Duration::from_secs(60))
        .unwrap();
    let history = store.history("payment-export").unwrap();
    assert_eq!(
        history
            .iter()
            .map(|e| (e.token, e.ending))
            .collect::<Vec<_>>(),
        [
            (a.token(), Ending::TakenOver),
            (b.token(), Ending::Released),
            (c.token(), Ending::Held)
        ]
    );
    let ended = history[1].ended.expect("the release's time is known");
    assert!(ended >= released - Duration::from_millis(5) && ended <= SystemTime::now());
    drop(a);
}

#[test]
fn an_expired_lease_and_a_dead_holder_are_told_apart_from_a_release() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).unwrap();
    // A holder killed while holding.
    let mut kid = Kid::spawn("hold", &path);
    let killed = kid.token();
    kid.child.kill().unwrap();
    kid.child.wait().unwrap();
    let next = store.acquire("nightly", Duration::from_secs(60)).unwrap();
    // A lease left to expire in this process, released only after its expiry.
    let late = store.acquire("late", Duration::from_millis(100)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The release says the lease was lost: it ran out before it.
    assert!(matches!(late.release(), Err(Error::LockLost { .. })));
    let after = store.acquire("late", Duration::from_secs(60)).unwrap();
    assert_eq!(
        endings(&store, "nightly"),
        [(killed, Ending::HolderDied), (next.token(), Ending::Held)]
    );
    assert_eq!(
        endings(&store, "late"),
        [
            (late.token(), Ending::Expired),
            (after.token(), Ending::Held)
        ]
    );
    let metrics = store.metrics().unwrap();
    assert_eq!(metrics.ended_holder_died, 1);
    assert_eq!(metrics.ended_expired, 1);
    assert_eq!(metrics.leases_lost(), 2);
}

#[test]
fn a_job_that_released_and_exited_is_recorded_as_released_once_every_process_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    drop(Store::open(&path).unwrap());
    // Jobs one after another, none of them overlapping another open of the store: the
    // store's shared memory of releases is gone between them, and each job records its own
    // release as it closes the store.
    let mut tokens = Vec::new();
    for _ in 0..6 {
        let mut kid = Kid::spawn("job", &path);
        tokens.push(kid.token());
        assert!(kid.child.wait().unwrap().success());
    }
    let store = Store::open(&path).unwrap();
    let history = store.history("nightly").unwrap();
    assert_eq!(
        history
            .iter()
            .map(|e| (e.token, e.ending))
            .collect::<Vec<_>>(),
        tokens
            .iter()
            .map(|&t| (t, Ending::Released))
            .collect::<Vec<_>>()
    );
    assert!(history
        .iter()
        .all(|e| e.ended.is_some() && e.recorded.is_some()));
}

#[test]
fn each_lock_keeps_its_latest_entries() {
    let (_dir, _path, store) = temp_store();
    let mut last = 0;
    for _ in 0..fencelock::HISTORY_PER_LOCK + 8 {
        last = store
            .acquire("busy", Duration::from_secs(60))
            .unwrap()
            .token();
    }
    let _other = store.acquire("other", Duration::from_secs(60)).unwrap();
    let history = store.history("busy").unwrap();
    // The bound holds the latest ended grants; the last grant is among them once a later
    // grant pruned its released record, or follows them, not recorded yet.
    let recorded = history.iter().filter(|e| e.recorded.is_some()).count();
    assert_eq!(recorded, fencelock::HISTORY_PER_LOCK);
    assert!(history.len() <= fencelock::HISTORY_PER_LOCK + 1);
    assert_eq!(history.last().unwrap().token, last);
    assert!(history.windows(2).all(|w| w[0].token < w[1].token));
    assert!(history.iter().all(|e| e.ending == Ending::Released));
    assert!(store.history("never-granted").unwrap().is_empty());
    assert!(matches!(store.history(""), Err(Error::InvalidArgument(_))));
    store.verify().unwrap();
}

#[test]
fn the_store_keeps_the_histories_of_a_bounded_number_of_locks() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        mode: Mode::SingleProcess,
        ..Options::default()
    };
    let store = Store::open_with(dir.path().join("s.db"), &options).unwrap();
    // Locks named once each, as one per job: each release is recorded when a later grant
    // prunes its record.
    let history_locks = usize::try_from(fencelock::HISTORY_LOCKS).unwrap();
    let locks = history_locks + 200;
    for i in 0..locks {
        drop(
            store
                .acquire(&format!("job-{i:05}"), Duration::from_secs(60))
                .unwrap(),
        );
    }
    let recorded = (0..locks)
        .filter(|i| {
            store
                .history(&format!("job-{i:05}"))
                .unwrap()
                .iter()
                .any(|entry| entry.recorded.is_some())
        })
        .count();
    assert!(recorded <= history_locks, "{recorded}");
    assert!(recorded > history_locks - 100, "{recorded}");
    // The oldest went first.
    assert!(store.history("job-00000").unwrap().is_empty());
    store.verify().unwrap();
}

#[test]
fn a_store_that_keeps_no_history_still_counts_how_leases_ended() {
    let (_dir, path, _store) = temp_store();
    let options = Options {
        history: false,
        ..Options::default()
    };
    let store = Store::open_with(&path, &options).unwrap();
    let before = store.metrics().unwrap();
    let first = store.acquire("quiet", Duration::from_secs(60)).unwrap();
    first.release().unwrap();
    let second = store.acquire("quiet", Duration::from_secs(60)).unwrap();
    assert_eq!(endings(&store, "quiet"), [(second.token(), Ending::Held)]);
    let after = store.metrics().unwrap();
    assert_eq!(after.ended_released - before.ended_released, 1);
}

#[test]
fn permits_and_shared_grants_each_have_their_entry() {
    let (_dir, _path, store) = temp_store();
    let one = store
        .acquire_kind("pool", Kind::Semaphore(2), Duration::from_secs(60))
        .unwrap();
    let two = store
        .acquire_kind("pool", Kind::Semaphore(2), Duration::from_secs(60))
        .unwrap();
    one.release().unwrap();
    let three = store
        .acquire_kind("pool", Kind::Semaphore(2), Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        endings(&store, "pool"),
        [
            (one.token(), Ending::Released),
            (two.token(), Ending::Held),
            (three.token(), Ending::Held)
        ]
    );
    let history = store.history("pool").unwrap();
    assert!(history.iter().all(|e| e.kind == Kind::Semaphore(2)));
    assert!(
        history[0].recorded.is_some(),
        "the grant that dropped it recorded it"
    );
}

#[test]
fn metrics_count_grants_refusals_waits_stale_writes_and_commits() {
    let (_dir, _path, store) = temp_store();
    let start = store.metrics().unwrap();
    assert_eq!(start.scope, Scope::Store);
    let holder = store.acquire("m", Duration::from_secs(60)).unwrap();
    assert!(store.acquire("m", Duration::from_secs(60)).is_err());
    // Waited for from another thread: the holder's own thread would be refused at once.
    let waited = std::thread::scope(|scope| {
        scope
            .spawn(|| store.acquire_wait("m", Duration::from_secs(60), Duration::from_millis(30)))
            .join()
            .unwrap()
    });
    assert!(matches!(waited, Err(Error::Timeout { .. })));
    holder.put(b"k", b"v").unwrap();
    let newer = {
        let release = holder.token();
        drop(holder);
        let newer = store
            .acquire_wait("m", Duration::from_secs(60), Duration::from_secs(5))
            .unwrap();
        assert!(newer.token() > release);
        newer.put(b"k", b"newer").unwrap();
        assert!(matches!(
            store.put(b"k", b"stale", release),
            Err(Error::StaleToken { .. })
        ));
        newer
    };
    let m = store.metrics().unwrap();
    assert_eq!(m.grants - start.grants, 2);
    assert_eq!(m.refused_locked - start.refused_locked, 1);
    assert_eq!(m.refused_timeout - start.refused_timeout, 1);
    assert_eq!(m.stale_writes - start.stale_writes, 1);
    assert_eq!(m.releases - start.releases, 1);
    assert_eq!(m.ended_released - start.ended_released, 1);
    // The timed-out wait waited; the wait that was granted at once did not.
    assert_eq!(m.waits - start.waits, 1);
    assert!(m.wait_time >= Duration::from_millis(25));
    assert_eq!(m.wait_buckets.iter().sum::<u64>(), m.waits);
    // The two writes committed (grants commit nothing where the leases are in the store's
    // shared memory), in as many commits or fewer.
    assert!(m.committed_ops - start.committed_ops >= 2);
    assert!(m.commits > start.commits && m.commits - start.commits <= m.committed_ops);
    let text = m.prometheus("/data/locks.db");
    assert!(text.contains(&format!(
        "fencelock_grants_total{{store=\"/data/locks.db\",scope=\"store\"}} {}",
        m.grants
    )));
    assert!(text.contains("reason=\"stale_token\"} 1"));
    drop(newer);
}

#[test]
fn every_process_counts_into_the_stores_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let store = Store::open(&path).unwrap();
    let before = store.metrics().unwrap();
    let mut kid = Kid::spawn("count", &path);
    kid.token();
    assert!(kid.child.wait().unwrap().success());
    let after = store.metrics().unwrap();
    assert_eq!(after.grants - before.grants, 1);
    assert_eq!(after.refused_locked - before.refused_locked, 1);
    // A store that shares nothing counts its own operations only.
    let options = Options {
        mode: Mode::SingleProcess,
        ..Options::default()
    };
    let single_dir = tempfile::tempdir().unwrap();
    let single = Store::open_with(single_dir.path().join("s.db"), &options).unwrap();
    drop(single.acquire("x", Duration::from_secs(5)).unwrap());
    let m = single.metrics().unwrap();
    assert_eq!((m.scope, m.grants, m.releases), (Scope::Process, 1, 1));
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Observer for Recorder {
    fn observe(&self, event: &Event<'_>) {
        let line = match event {
            Event::Acquire {
                name,
                result,
                waited,
                ..
            } => match result {
                Ok(token) => format!("acquire {name} {token} waited={}", !waited.is_zero()),
                Err(err) => format!("refused {name} {:?}", err.status()),
            },
            Event::Release { name, token, .. } => format!("release {name} {token}"),
            Event::Lost { name, token, .. } => format!("lost {name} {token}"),
            _ => "other".into(),
        };
        self.0.lock().unwrap().push(line);
    }
}

#[test]
fn an_observer_hears_grants_refusals_releases_and_losses() {
    let (_dir, _path, store) = temp_store();
    let recorder = Arc::new(Recorder::default());
    store.set_observer(Some(recorder.clone())).unwrap();
    let a = store.acquire("o", Duration::from_millis(100)).unwrap();
    assert!(store.acquire("o", Duration::from_secs(5)).is_err());
    // B waits in a thread of its own: the holder's own thread would be refused at once.
    let b = std::thread::scope(|scope| {
        scope
            .spawn(|| store.acquire_wait("o", Duration::from_secs(5), Duration::from_secs(5)))
            .join()
            .unwrap()
    })
    .unwrap();
    assert!(a.put(b"k", b"v").is_err());
    drop(a);
    drop(b);
    let both = store
        .acquire_all(&["p", "q"], Duration::from_secs(5))
        .unwrap();
    store.set_observer(None).unwrap();
    drop(both);
    let (ta, tb) = (1, 2);
    assert_eq!(
        *recorder.0.lock().unwrap(),
        [
            format!("acquire o {ta} waited=false"),
            "refused o Locked".to_owned(),
            format!("acquire o {tb} waited=true"),
            format!("lost o {ta}"),
            format!("release o {tb}"),
            "acquire p 3 waited=false".to_owned(),
            "acquire q 4 waited=false".to_owned(),
        ]
    );
}

/// An observer that is inside a call until it is let out.
struct Slow {
    inside: std::sync::atomic::AtomicBool,
    entered: std::sync::mpsc::SyncSender<()>,
}

impl Observer for Slow {
    fn observe(&self, _event: &Event<'_>) {
        self.inside.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.entered.try_send(());
        std::thread::sleep(Duration::from_millis(100));
        self.inside
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn replacing_an_observer_waits_for_its_calls_in_progress() {
    let (_dir, _path, store) = temp_store();
    let (entered, wait_entered) = std::sync::mpsc::sync_channel(1);
    let slow = Arc::new(Slow {
        inside: std::sync::atomic::AtomicBool::new(false),
        entered,
    });
    store.set_observer(Some(slow.clone())).unwrap();
    let other = store.clone();
    let caller = std::thread::spawn(move || {
        drop(other.acquire("slow", Duration::from_secs(5)).unwrap());
    });
    wait_entered.recv().unwrap();
    store.set_observer(None).unwrap();
    // What the replaced observer uses may be freed now: none of its calls is running.
    assert!(!slow.inside.load(std::sync::atomic::Ordering::SeqCst));
    caller.join().unwrap();
}

#[test]
fn each_end_is_counted_once_even_past_a_locks_history_bound() {
    let (_dir, path, keeper) = temp_store();
    let before = keeper.metrics().unwrap();
    // More shared holders than a lock's history keeps, released; the store that released
    // them records them as it closes, and the grant that takes the lock over later again.
    let holders = fencelock::HISTORY_PER_LOCK + 8;
    {
        let store = Store::open(&path).unwrap();
        let shared: Vec<_> = (0..holders)
            .map(|_| {
                store
                    .acquire_kind("wide", Kind::Shared, Duration::from_secs(60))
                    .unwrap()
            })
            .collect();
        drop(shared);
    }
    let exclusive = keeper.acquire("wide", Duration::from_secs(60)).unwrap();
    let after = keeper.metrics().unwrap();
    assert_eq!(after.ended_released - before.ended_released, holders as u64);
    let history = keeper.history("wide").unwrap();
    assert_eq!(history.len(), fencelock::HISTORY_PER_LOCK + 1);
    assert_eq!(history.last().unwrap().token, exclusive.token());
}

#[test]
fn several_locks_at_once_take_over_a_paused_holders_lease_on_record() {
    let (_dir, _path, store) = temp_store();
    let paused = store.acquire("b", Duration::from_millis(100)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let both = store
        .acquire_all(&["a", "b"], Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        endings(&store, "b"),
        [
            (paused.token(), Ending::TakenOver),
            (both[1].token(), Ending::Held)
        ]
    );
}

#[test]
fn the_gauges_count_live_leases_by_kind_queued_waiters_and_the_files_bytes() {
    let (dir, path, store) = temp_store();
    let ttl = Duration::from_secs(60);
    let empty = store.metrics().unwrap();
    assert_eq!(
        (empty.live_exclusive, empty.live_shared, empty.live_permits),
        (0, 0, 0)
    );
    assert_eq!(empty.queued_waiters, 0);
    let held = store.acquire("job", ttl).unwrap();
    let readers: Vec<_> = (0..2)
        .map(|_| store.acquire_kind("config", Kind::Shared, ttl).unwrap())
        .collect();
    let permits: Vec<_> = (0..3)
        .map(|_| store.acquire_kind("pool", Kind::Semaphore(5), ttl).unwrap())
        .collect();
    // Not live: released, expired, and a holder killed with its lease's hour still to run.
    store.acquire("done", ttl).unwrap().release().unwrap();
    let _expired = store.acquire("brief", Duration::from_millis(50)).unwrap();
    let mut kid = Kid::spawn("hold", &path);
    kid.token();
    kid.child.kill().unwrap();
    kid.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let m = store.metrics().unwrap();
    assert_eq!((m.live_exclusive, m.live_shared, m.live_permits), (1, 2, 3));
    assert_eq!(m.queued_waiters, 0);
    assert_eq!(m.file_bytes, std::fs::metadata(&path).unwrap().len());
    assert!(m.file_bytes > 0);

    // A waiter queues behind the held lock, and leaves the queue with its grant.
    let waiting = store.clone();
    let waiter = std::thread::spawn(move || {
        waiting
            .acquire_wait("job", ttl, Duration::from_secs(120))
            .unwrap()
    });
    let mut queued = 0;
    for _ in 0..12_000 {
        queued = store.metrics().unwrap().queued_waiters;
        if queued > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(queued, 1);
    held.release().unwrap();
    let next = waiter.join().unwrap();
    let m = store.metrics().unwrap();
    assert_eq!((m.queued_waiters, m.live_exclusive), (0, 1));

    let text = m.prometheus("s");
    for series in [
        "fencelock_live_leases{store=\"s\",scope=\"store\",kind=\"exclusive\"} 1\n",
        "fencelock_live_leases{store=\"s\",scope=\"store\",kind=\"shared\"} 2\n",
        "fencelock_live_leases{store=\"s\",scope=\"store\",kind=\"semaphore\"} 3\n",
        "fencelock_queued_waiters{store=\"s\",scope=\"store\"} 0\n",
        &format!(
            "fencelock_file_size_bytes{{store=\"s\",scope=\"store\"}} {}\n",
            m.file_bytes
        ),
        &format!(
            "fencelock_build_info{{store=\"s\",scope=\"store\",version=\"{}\"}} 1\n",
            fencelock::VERSION
        ),
    ] {
        assert!(text.contains(series), "{series} in:\n{text}");
    }
    drop((next, readers, permits, dir));
}
