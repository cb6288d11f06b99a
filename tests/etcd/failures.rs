//! A three-node etcd cluster on loopback whose members, the leader among them, are killed
//! (`SIGKILL`) and stopped (`SIGSTOP`) while clients acquire, extend and write. What must hold
//! whatever the faults: tokens strictly increase, at most one holder is live (no holder's checked
//! write lands once a later grant was seen), no stale write is accepted, and every acknowledged
//! write is present.
//! Errors during faults (timeouts, unreachable members) are allowed; wrong answers are not.
//! And a single node stopped under a holder that keeps its lease alive: the holder learns
//! that it lost the lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{Options, Store, ETCD_MIN_TTL};

use crate::cluster::Cluster;

/// Faults go on for at least this long, and until a kill and a stop have each hit the leader.
const CHAOS: Duration = Duration::from_secs(20);
/// The clients' leases.
const TTL: Duration = Duration::from_secs(3);
/// A cluster whose leader cannot be found for this long fails the test.
const CHAOS_LIMIT: Duration = Duration::from_secs(90);

#[derive(Default)]
struct History {
    /// (start, end, token) of every grant.
    grants: Vec<(Instant, Instant, u64)>,
    /// (start, token) of every acknowledged write of a holder to the shared key.
    holder_writes: Vec<(Instant, u64)>,
    /// Keys written once each and acknowledged, with their values.
    acked: Vec<(Vec<u8>, Vec<u8>)>,
    /// Stale writes that were accepted: must stay empty.
    stale_accepted: Vec<(u64, u64)>,
}

/// The leader, asked again for a few seconds while an election runs.
fn find_leader(cluster: &Cluster) -> Option<usize> {
    (0..10).find_map(|_| {
        let found = leader(cluster);
        if found.is_none() {
            thread::sleep(Duration::from_millis(300));
        }
        found
    })
}

/// The member that is leader now, asked of each member in turn.
fn leader(cluster: &Cluster) -> Option<usize> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for (i, member) in cluster.members.iter().enumerate() {
            if !member.is_running() {
                continue;
            }
            let endpoint = format!("http://127.0.0.1:{}", member.client_port);
            let asked = tokio::time::timeout(Duration::from_secs(1), async {
                let mut client = etcd_client::Client::connect([endpoint], None).await?;
                client.status().await
            })
            .await;
            if let Ok(Ok(status)) = asked {
                if status.leader()
                    == status
                        .header()
                        .map_or(0, etcd_client::ResponseHeader::member_id)
                {
                    return Some(i);
                }
            }
        }
        None
    })
}

fn client(url: &str, history: &Mutex<History>, stop: &AtomicBool, id: usize) {
    let options = Options {
        busy_timeout: Duration::from_secs(3),
        ..Options::default()
    };
    let store = loop {
        match Store::open_with(url, &options) {
            Ok(store) => break store,
            Err(_) if !stop.load(Ordering::Acquire) => thread::sleep(Duration::from_millis(100)),
            Err(err) => panic!("client {id} never opened the store: {err}"),
        }
    };
    let mut previous: Option<u64> = None;
    for grant in 0u64.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let start = Instant::now();
        let Ok(holder) = store.acquire_wait("job", TTL, Duration::from_secs(4)) else {
            continue;
        };
        let token = holder.token();
        history
            .lock()
            .unwrap()
            .grants
            .push((start, Instant::now(), token));
        // Every third grant pauses past its lease (a GC pause) before it writes: the others
        // take the lock meanwhile, and its writes must be refused, also to a key that no other
        // grant writes (where only the lease check can refuse it).
        if grant % 3 == 2 {
            thread::sleep(TTL + Duration::from_secs(1));
            let key = format!("w/{token}/late").into_bytes();
            let start = Instant::now();
            if holder.put(&key, b"late").is_ok() {
                let mut history = history.lock().unwrap();
                history.holder_writes.push((start, token));
                history.acked.push((key, b"late".to_vec()));
            }
        }
        let mut wrote = false;
        for seq in 0..3u64 {
            let value = [token.to_be_bytes(), seq.to_be_bytes()].concat();
            let start = Instant::now();
            if holder.put(b"shared", &value).is_ok() {
                history.lock().unwrap().holder_writes.push((start, token));
                wrote = true;
                let key = format!("w/{token}/{seq}").into_bytes();
                if holder.put(&key, &value).is_ok() {
                    history.lock().unwrap().acked.push((key, value));
                }
            }
            if seq == 1 {
                let _ = holder.extend(TTL);
            }
        }
        // The previous grant's token is stale for the key this grant wrote.
        if let (true, Some(old)) = (wrote, previous) {
            if store.put(b"shared", b"stale", old).is_ok() {
                history.lock().unwrap().stale_accepted.push((old, token));
            }
        }
        previous = Some(token);
        let _ = holder.release();
    }
}

#[test]
fn three_members_killed_and_stopped_under_load_keep_every_rule() {
    let mut cluster = Cluster::start(3);
    let url = cluster.url("chaos");
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|id| {
            let (url, history, stop) = (url.clone(), Arc::clone(&history), Arc::clone(&stop));
            thread::spawn(move || client(&url, &history, &stop, id))
        })
        .collect();

    let initial = cluster.initial();
    let mut faults: Vec<(&str, usize, bool)> = Vec::new();
    let start = Instant::now();
    for round in 0usize.. {
        let hit = |kind: &str| faults.iter().any(|f| f.2 && f.0 == kind);
        if start.elapsed() >= CHAOS && hit("kill") && hit("stop") {
            break;
        }
        assert!(
            start.elapsed() < CHAOS_LIMIT,
            "the leader was never found for a fault: {faults:?}\n{}",
            cluster.logs()
        );
        let kind = if round % 2 == 0 { "kill" } else { "stop" };
        // The leader, until each kind of fault has hit it; then the leader every other round.
        let at_leader = !hit(kind) || round % 4 < 2;
        let found = if at_leader {
            find_leader(&cluster)
        } else {
            None
        };
        let target = found.unwrap_or((round / 2) % 3);
        let was_leader = found.is_some();
        let member = &mut cluster.members[target];
        if kind == "kill" {
            member.kill();
            thread::sleep(Duration::from_millis(1500));
            member.restart(&initial);
            faults.push(("kill", target, was_leader));
        } else {
            member.signal(libc::SIGSTOP);
            thread::sleep(Duration::from_millis(2500));
            member.signal(libc::SIGCONT);
            faults.push(("stop", target, was_leader));
        }
        thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, Ordering::Release);
    for client in clients {
        client.join().expect("a client panicked");
    }

    let history = history.lock().unwrap();
    let report = format!("faults (kind, member, was leader): {faults:?}");
    assert!(faults.iter().any(|f| f.2 && f.0 == "kill"), "{report}");
    assert!(faults.iter().any(|f| f.2 && f.0 == "stop"), "{report}");
    assert!(
        !history.grants.is_empty() && !history.acked.is_empty(),
        "nothing got through; {report}"
    );

    // Strictly increasing tokens: a grant that ended before another began has a lower token.
    let mut tokens: Vec<u64> = history.grants.iter().map(|g| g.2).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        history.grants.len(),
        "a token was granted twice"
    );
    for a in &history.grants {
        for b in &history.grants {
            if a.1 < b.0 {
                assert!(a.2 < b.2, "grant {} ended before grant {} began", a.2, b.2);
            }
        }
    }
    // At most one live holder: no checked write of a token lands once a later grant returned.
    for &(start, token) in &history.holder_writes {
        for &(_, granted, later) in &history.grants {
            assert!(
                !(later > token && granted < start),
                "holder {token} wrote after grant {later} returned"
            );
        }
    }
    assert!(
        history.stale_accepted.is_empty(),
        "stale writes accepted (stale token, newer token): {:?}",
        history.stale_accepted
    );
    // Every acknowledged write is present, read through a fresh store.
    let store = loop {
        if let Ok(store) = Store::open(&url) {
            break store;
        }
        thread::sleep(Duration::from_millis(100));
    };
    for (key, value) in &history.acked {
        let got = store.get(key).unwrap();
        assert_eq!(got.map(|f| f.value).as_ref(), Some(value), "{key:?} lost");
    }
    let last = store.get(b"shared").unwrap().unwrap();
    let highest_acked = history.holder_writes.iter().map(|w| w.1).max().unwrap();
    assert!(
        last.token >= highest_acked,
        "the shared key went back to an older token"
    );
    store.verify().unwrap();
    eprintln!(
        "{} grants, {} acknowledged writes; {report}",
        history.grants.len(),
        history.acked.len()
    );
}

/// A single node that stops answering: renewals fail and the lease runs out on the holder's
/// side, which says so.
#[test]
fn a_paused_holder_whose_keep_alive_stops_is_told_it_lost_the_lease() {
    let etcd = Cluster::single();
    let store = etcd.open("t");
    let holder = store.acquire("job", ETCD_MIN_TTL).unwrap();
    holder.keep_alive(ETCD_MIN_TTL).unwrap();
    // Every member stops answering: renewals fail and the lease runs out on this side.
    for member in &etcd.members {
        member.signal(libc::SIGSTOP);
    }
    assert!(holder.wait_lost(Duration::from_secs(60)));
    for member in &etcd.members {
        member.signal(libc::SIGCONT);
    }
    assert!(holder.is_lost());
}
