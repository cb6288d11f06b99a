//! Semaphores and `acquire_all` where the etcd implementation has risks of its own
//! (`src/etcd/kinds.rs`): stores of their own racing for one permit slot, a permit's etcd lease
//! ended by etcd, and the later tokens of an `acquire_all`, which are not the revision that
//! created their keys.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use fencelock::{Error, Holder, Kind, Store};

use crate::cluster::Cluster;
use crate::pool::Raw;

const TTL: Duration = Duration::from_secs(30);

/// Stores of their own (an engine each, as on two hosts) race for the last free permit: in
/// every round exactly one wins and the others are refused as `Locked`.
#[test]
fn stores_racing_for_the_last_permit_never_both_win() {
    let etcd = Cluster::single();
    let stores: Vec<Store> = (0..4).map(|_| etcd.open("kinds")).collect();
    let kind = Kind::Semaphore(3);
    for _ in 0..15 {
        let held: Vec<Holder> = (0..2)
            .map(|_| stores[0].acquire_kind("pool", kind, TTL).unwrap())
            .collect();
        let start = Arc::new(Barrier::new(stores.len()));
        let racers: Vec<_> = stores
            .iter()
            .map(|store| {
                let (store, start) = (store.clone(), Arc::clone(&start));
                thread::spawn(move || {
                    start.wait();
                    store.acquire_kind("pool", kind, TTL)
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let winners: Vec<&Holder> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        for result in &results {
            assert!(
                matches!(result, Ok(_) | Err(Error::Locked { .. })),
                "{result:?}"
            );
        }
        let mut tokens: Vec<u64> = stores[1]
            .lock_holders("pool")
            .unwrap()
            .iter()
            .map(|info| info.token)
            .collect();
        tokens.sort_unstable();
        let mut expected: Vec<u64> = held.iter().map(Holder::token).collect();
        expected.push(winners[0].token());
        expected.sort_unstable();
        assert_eq!(tokens, expected);
    }
}

/// A permit whose etcd lease ends (revoked here by hand, as etcd ends a dead holder's at its
/// TTL) frees its place for another store, and its holder learns it lost the permit.
#[test]
fn a_permit_whose_lease_ends_frees_its_place() {
    let etcd = Cluster::single();
    let mut raw = Raw::connect(&etcd);
    let (mine, theirs) = (etcd.open("kinds"), etcd.open("kinds"));
    let kind = Kind::Semaphore(2);
    let permit = mine.acquire_kind("pool", kind, TTL).unwrap();
    let other = theirs.acquire_kind("pool", kind, TTL).unwrap();
    assert!(matches!(
        theirs.acquire_kind("pool", kind, TTL),
        Err(Error::Locked { .. })
    ));
    let key = "kinds/@/lock/pool\0permits/0002/";
    let lease = raw.runtime.block_on(async {
        let options = etcd_client::GetOptions::new().with_prefix();
        let answer = raw.client.get(key, Some(options)).await.unwrap();
        let kv = answer
            .kvs()
            .iter()
            .find(|kv| u64::try_from(kv.create_revision()).unwrap() == permit.token())
            .expect("the permit's key")
            .clone();
        kv.lease()
    });
    raw.runtime
        .block_on(raw.client.lease_revoke(lease))
        .unwrap();
    assert!(raw.lease(lease).is_none());
    assert!(!permit.is_held().unwrap());
    let next = theirs.acquire_kind("pool", kind, TTL).unwrap();
    assert!(next.token() > other.token());
    assert!(other.is_held().unwrap() && next.is_held().unwrap());
    assert!(matches!(
        permit.put(b"k", b"v"),
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(permit.release(), Err(Error::LockLost { .. })));
    assert_eq!(theirs.lock_holders("pool").unwrap().len(), 2);
}

/// The locks of an `acquire_all` after the first take tokens of transactions of their own:
/// distinct, increasing, what `locks()` and `lock_holders()` report, accepted by fenced writes
/// (never above the last grant), and kept by an extend that moves a lock to a new lease.
#[test]
fn acquire_all_gives_each_lock_a_token_of_its_own() {
    let etcd = Cluster::single();
    let store = etcd.open("kinds");
    let all = store.acquire_all(&["a", "b", "c"], TTL).unwrap();
    let tokens: Vec<u64> = all.iter().map(Holder::token).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let listed: Vec<(String, u64)> = store
        .locks()
        .unwrap()
        .into_iter()
        .map(|info| (info.name, info.token))
        .collect();
    let expected: Vec<(String, u64)> = ["a", "b", "c"]
        .iter()
        .map(|name| (*name).to_owned())
        .zip(tokens.iter().copied())
        .collect();
    assert_eq!(listed, expected);
    assert!(store.info().unwrap().last_token >= tokens[2]);
    // Holder-checked and fenced writes with the later tokens.
    all[2].put(b"k", b"c").unwrap();
    assert!(matches!(
        all[1].put(b"k", b"b"),
        Err(Error::StaleToken { .. })
    ));
    store.fence("bucket", tokens[2]).unwrap();
    // An extend to another TTL moves the key to a new lease and keeps its token.
    all[1].extend(Duration::from_secs(20)).unwrap();
    assert_eq!(store.lock_info("b").unwrap().unwrap().token, tokens[1]);
    assert!(all[1].is_held().unwrap());
    all[1].put(b"other", b"b").unwrap();
    // A waiting acquire of a lock this thread holds (the later one) is refused at once.
    assert!(matches!(
        store.acquire_wait("c", TTL, TTL),
        Err(Error::WouldDeadlock { token, .. }) if token == tokens[2]
    ));
    all[1].release().unwrap();
    assert!(store.lock_info("b").unwrap().is_none());
    assert!(store.acquire("b", TTL).unwrap().token() > tokens[2]);
}

/// Shared holders and an exclusive one from stores of their own never hold a name together,
/// and an exclusive wait that one of this thread's shared holds blocks is refused at once,
/// although the first shared key is another thread's.
#[test]
fn shared_and_exclusive_holders_of_stores_of_their_own_never_overlap() {
    let etcd = Cluster::single();
    let stores: Vec<Store> = (0..4).map(|_| etcd.open("kinds")).collect();
    for round in 0..10 {
        let start = Arc::new(Barrier::new(stores.len()));
        let racers: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                let (store, start) = (store.clone(), Arc::clone(&start));
                let kind = if i == round % 4 {
                    Kind::Exclusive
                } else {
                    Kind::Shared
                };
                thread::spawn(move || {
                    start.wait();
                    store.acquire_kind("config", kind, TTL)
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let held: Vec<&Holder> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        let exclusive = held.iter().filter(|h| h.kind() == Kind::Exclusive).count();
        assert!(!held.is_empty(), "{results:?}");
        assert!(exclusive == 0 || held.len() == 1, "{results:?}");
        assert_eq!(stores[0].lock_holders("config").unwrap().len(), held.len());
    }
    let theirs = {
        let store = stores[1].clone();
        thread::spawn(move || store.acquire_kind("reader", Kind::Shared, TTL).unwrap())
            .join()
            .unwrap()
    };
    let mine = stores[0].acquire_kind("reader", Kind::Shared, TTL).unwrap();
    assert!(matches!(
        mine.put(b"k", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    match stores[0].acquire_wait("reader", TTL, Duration::from_secs(10)) {
        Err(Error::WouldDeadlock { token, .. }) => assert_eq!(token, mine.token()),
        other => panic!("an exclusive wait behind this thread's shared hold: {other:?}"),
    }
    drop(theirs);
}
