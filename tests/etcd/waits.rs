//! Waits that outlast the connection's first seconds: a waiting acquire follows its watch for
//! as long as it waits, whatever the client's HTTP/2 keep-alive does meanwhile.

use std::thread;
use std::time::Duration;

use fencelock::Error;

use crate::cluster::Cluster;

/// Held 12 s by another thread, the lock is granted to a waiter that began to wait at once
/// (before, etcd closed the connection after about 9 s for pinging too often, and the wait
/// ended with a `Storage` error: "h2 protocol error").
#[test]
fn a_wait_of_many_seconds_is_granted_the_lock_at_its_release() {
    let etcd = Cluster::single();
    let store = etcd.open("long-wait");
    let holder = store.acquire("job", Duration::from_secs(60)).unwrap();
    let first = holder.token();
    let waiter = {
        let store = store.clone();
        thread::spawn(move || {
            store.acquire_wait("job", Duration::from_secs(60), Duration::from_secs(120))
        })
    };
    thread::sleep(Duration::from_secs(12));
    holder.release().unwrap();
    match waiter.join().unwrap() {
        Ok(next) => assert!(next.token() > first),
        Err(err @ (Error::Storage(_) | Error::Io(_) | Error::Timeout { .. })) => {
            panic!("a waiter of 12 s lost its wait: {err:?}")
        }
        Err(other) => panic!("a waiter of 12 s: {other:?}"),
    }
}

/// A store left idle while etcd pings its connections every second and closes one whose ping
/// goes unanswered for a second is answered at its next calls, and its holder's lease is kept
/// alive meanwhile. The connection of a store's calls is driven by the threads that call (its
/// runtime has no thread of its own), so only the ticker answers etcd's pings between calls;
/// without it etcd closed that connection while idle (`--grpc-keepalive-interval 1s
/// --grpc-keepalive-timeout 1s`, etcd's defaults being 2 h and 20 s).
#[test]
fn an_idle_store_is_answered_after_etcd_pinged_its_connection() {
    let etcd = Cluster::single_with(&[
        "--grpc-keepalive-interval",
        "1s",
        "--grpc-keepalive-timeout",
        "1s",
    ]);
    let store = etcd.open("idle");
    let first = store.acquire("job", Duration::from_secs(60)).unwrap();
    first.release().unwrap();
    let kept = store.acquire("kept", Duration::from_secs(3)).unwrap();
    kept.keep_alive(Duration::from_secs(3)).unwrap();
    thread::sleep(Duration::from_secs(12));
    assert!(
        !kept.is_lost(),
        "the kept-alive holder lost its lease while the store was idle"
    );
    let next = store
        .acquire("job", Duration::from_secs(60))
        .expect("a grant after 12 s idle");
    assert!(next.token() > first.token());
    next.put(b"after-idle", b"v").unwrap();
    next.release().unwrap();
    assert!(kept.is_held().unwrap());
    kept.release().unwrap();
}

/// Stores of their own taking turns on one lock, each waiting as soon as it released, are all
/// granted every turn: no waiter misses the delete that ends its wait. A waiter watches the
/// key ahead of it from the moment the watch exists (a watch from the refused grant's revision
/// would be answered only at etcd's next catch-up, every 100 ms), and reads that key once the
/// watch exists, in case it was deleted in between; without that read a waiter slept through
/// such a delete until its deadline.
#[test]
fn waiters_taking_turns_on_one_lock_are_each_granted_every_turn() {
    let etcd = Cluster::single();
    let turns = 40;
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let store = etcd.open("turns");
            thread::spawn(move || {
                let mut tokens = Vec::with_capacity(turns);
                for _ in 0..turns {
                    let holder = store
                        .acquire_wait("hot", Duration::from_secs(30), Duration::from_secs(20))
                        .expect("a turn within 20 s");
                    tokens.push(holder.token());
                    holder.release().unwrap();
                }
                tokens
            })
        })
        .collect();
    let mut all = Vec::new();
    for waiter in waiters {
        let tokens = waiter.join().unwrap();
        assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]));
        all.extend(tokens);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 4 * turns, "two grants shared a token");
}
