//! A holder cut off from etcd by a proxy (`proxy.rs`) learns that it lost its lease before
//! etcd grants the lock to anyone else, and its writes are refused once the link heals.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{Error, Options, Store, ETCD_MIN_TTL};

use crate::cluster::Cluster;
use crate::proxy::Proxy;

/// A holder on a slow link (answers come 300 ms after they were sent each way, so that its
/// grant's answer comes long after etcd started the lease) keeps its lease alive, then is cut
/// off past its TTL; a second client on a direct link waits for the lock meanwhile.
#[test]
fn a_cut_off_holder_reports_its_loss_before_another_is_granted_the_lock() {
    let etcd = Cluster::single();
    let proxy = Proxy::start(etcd.members[0].client_port);
    let options = Options {
        busy_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    let cut = Store::open_with(
        format!("etcd://127.0.0.1:{}/partition", proxy.port),
        &options,
    )
    .expect("open through the proxy");
    let direct = etcd.open("partition");

    proxy.delay(Duration::from_millis(300));
    let holder = cut.acquire("job", ETCD_MIN_TTL).unwrap();
    holder.keep_alive(ETCD_MIN_TTL).unwrap();
    proxy.freeze();

    let (lost_tx, lost_rx) = mpsc::channel();
    thread::scope(|scope| {
        scope.spawn(|| {
            let lost = holder.wait_lost(Duration::from_secs(60));
            lost_tx.send((lost, Instant::now())).unwrap();
        });
        let second = direct
            .acquire_wait("job", ETCD_MIN_TTL, Duration::from_secs(60))
            .expect("the second client is granted the lock once the first lease ends");
        let granted_at = Instant::now();
        let (lost, lost_at) = lost_rx.recv().unwrap();
        assert!(lost, "the cut-off holder never learned of its loss");
        assert!(
            lost_at <= granted_at,
            "the second client was granted the lock {:?} before the cut-off holder knew it \
             had lost it",
            lost_at - granted_at
        );
        assert!(second.token() > holder.token());
        second.put(b"k", b"second").unwrap();

        proxy.thaw();
        proxy.delay(Duration::ZERO);
        assert!(holder.is_lost());
        assert!(matches!(
            holder.put(b"k", b"first"),
            Err(Error::LockLost { .. })
        ));
        assert!(matches!(
            cut.put(b"k", b"first", holder.token()),
            Err(Error::StaleToken { .. })
        ));
        assert_eq!(direct.get(b"k").unwrap().unwrap().value, b"second");
        assert!(matches!(holder.release(), Err(Error::LockLost { .. })));
        second.release().unwrap();
    });
}

/// A queued waiter cut off past its TTL loses its place: etcd ends its lease and its waiter key
/// with it, and the waiter queued behind it is granted the lock at the holder's release.
#[test]
fn a_queued_waiter_whose_lease_ended_is_passed_over() {
    let etcd = Cluster::single();
    let proxy = Proxy::start(etcd.members[0].client_port);
    let options = Options {
        busy_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    let cut = Store::open_with(format!("etcd://127.0.0.1:{}/queue", proxy.port), &options)
        .expect("open through the proxy");
    let direct = etcd.open("queue");
    let holder = direct.acquire("job", Duration::from_secs(30)).unwrap();
    thread::scope(|scope| {
        let first = scope.spawn(|| cut.acquire_wait("job", ETCD_MIN_TTL, Duration::from_secs(60)));
        // Time for each waiter to join the queue before the next step.
        thread::sleep(Duration::from_millis(500));
        proxy.freeze();
        let behind =
            scope.spawn(|| direct.acquire_wait("job", ETCD_MIN_TTL, Duration::from_secs(60)));
        thread::sleep(Duration::from_millis(500));
        // Past the cut-off waiter's TTL, and etcd's half-second look at expired leases.
        thread::sleep(ETCD_MIN_TTL + Duration::from_secs(1));
        holder.release().unwrap();
        let second = behind
            .join()
            .unwrap()
            .expect("the waiter behind the cut-off one is granted the lock");
        proxy.thaw();
        let first = first.join().unwrap();
        assert!(first.is_err(), "the cut-off waiter was granted: {first:?}");
        assert!(second.is_held().unwrap());
        second.release().unwrap();
    });
}
