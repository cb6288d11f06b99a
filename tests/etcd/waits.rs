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
        Err(err @ (Error::Storage(_) | Error::Io(_) | Error::Timeout)) => {
            panic!("a waiter of 12 s lost its wait: {err:?}")
        }
        Err(other) => panic!("a waiter of 12 s: {other:?}"),
    }
}
