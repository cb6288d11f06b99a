//! Faults between the members of a three-node cluster (`peers.rs`): the leader cut off from
//! the other two, and slow links. What must hold: the side without a majority grants nothing,
//! the majority grants once it has a leader, tokens strictly increase, a holder whose renewals
//! come too late knows it lost the lease before anyone else is granted it, and a write with a
//! token from before the fault is refused once the cluster is whole again.

use std::thread;
use std::time::{Duration, Instant};

use fencelock::{Error, Options, Store, ETCD_MIN_TTL};

use crate::peers::Peers;

/// Each call's limit: long enough for an election, short enough to give up on a minority.
fn options() -> Options {
    Options {
        busy_timeout: Duration::from_secs(3),
        ..Options::default()
    }
}

/// A write with `token`, asked again while the member answers with timeouts or its connection
/// breaks (a member that catches up after the heal): the first answer from etcd.
fn put_settled(store: &Store, key: &[u8], value: &[u8], token: u64) -> fencelock::Result<()> {
    let start = Instant::now();
    loop {
        match store.put(key, value, token) {
            Err(Error::Timeout) if start.elapsed() < Duration::from_secs(30) => {}
            Err(Error::Storage(text))
                if text.contains("transport") && start.elapsed() < Duration::from_secs(30) =>
            {
                eprintln!("after the heal: {text}");
                thread::sleep(Duration::from_millis(100));
            }
            answer => return answer,
        }
    }
}

/// The leader cut off from both followers: a client of the old leader alone is granted
/// nothing, a client of the other two is granted the lock the old side held once they elect a
/// leader, and after the heal the old holder's token is stale and the new holder's write stays.
#[test]
fn a_leader_cut_off_from_the_others_grants_nothing_and_its_old_token_is_refused() {
    let peers = Peers::start(3);
    let old = peers
        .leader_among(&[0, 1, 2], Duration::from_secs(30))
        .expect("the cluster has a leader");
    let others: Vec<usize> = (0..3).filter(|&m| m != old).collect();
    let minority = Store::open_with(peers.url_of(&[old], "cut"), &options()).unwrap();
    let majority = Store::open_with(peers.url_of(&others, "cut"), &options()).unwrap();

    let before = minority.acquire("job", ETCD_MIN_TTL).unwrap();
    before.keep_alive(ETCD_MIN_TTL).unwrap();
    before.put(b"k", b"before").unwrap();

    peers.cut_off(old);
    // A lock nobody holds, so that a refusal is the partition's and not the lock's; each try
    // gives up within the busy timeout.
    for _ in 0..3 {
        let granted = minority.acquire("free", ETCD_MIN_TTL);
        assert!(
            granted.is_err(),
            "the cut-off old leader granted token {}",
            granted.map(|h| h.token()).unwrap_or_default()
        );
    }
    let new = peers
        .leader_among(&others, Duration::from_secs(30))
        .expect("the majority elects a leader");
    assert_ne!(new, old);
    let second = majority
        .acquire_wait("job", ETCD_MIN_TTL, Duration::from_secs(40))
        .expect("the majority grants the lock once the old holder's lease ends");
    assert!(second.token() > before.token());
    assert!(
        before.is_lost(),
        "the old holder still believes it holds the lock granted to {}",
        second.token()
    );
    second.put(b"k", b"majority").unwrap();

    peers.heal();
    let late = put_settled(&minority, b"k", b"late", before.token());
    assert!(
        matches!(late, Err(Error::StaleToken { .. })),
        "the old token's write after the heal: {late:?}"
    );
    assert!(matches!(
        before.put(b"k", b"late"),
        Err(Error::LockLost { .. })
    ));
    for store in [&majority, &minority] {
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"majority");
    }
    assert!(second.is_held().unwrap());
    second.release().unwrap();
}
