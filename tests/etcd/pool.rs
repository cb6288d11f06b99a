//! The leases an etcd store obtains ahead of its grants (`src/etcd/pool.rs`): a grant with one
//! carries its whole TTL, a pooled lease that the store forgets ends at its TTL without ever
//! holding a key, and closing the store revokes them.

use std::thread;
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseTimeToLiveOptions};
use fencelock::{Store, ETCD_MIN_TTL};

use crate::cluster::Cluster;

/// A plain etcd client of the member `port`, with a runtime of its own.
pub(crate) struct Raw {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: Client,
}

impl Raw {
    pub(crate) fn connect(cluster: &Cluster) -> Raw {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let endpoint = format!("127.0.0.1:{}", cluster.members[0].client_port);
        let client = runtime.block_on(Client::connect([endpoint], None)).unwrap();
        Raw { runtime, client }
    }

    /// Every lease etcd keeps now.
    fn leases(&mut self) -> Vec<i64> {
        let answer = self.runtime.block_on(self.client.leases()).unwrap();
        answer
            .leases()
            .iter()
            .map(etcd_client::LeaseStatus::id)
            .collect()
    }

    /// The keys attached to `lease` and its time left in whole seconds; `None` once it ended.
    pub(crate) fn lease(&mut self, lease: i64) -> Option<(usize, i64)> {
        let options = LeaseTimeToLiveOptions::new().with_keys();
        let answer = self
            .runtime
            .block_on(self.client.lease_time_to_live(lease, Some(options)))
            .unwrap();
        (answer.ttl() > 0).then(|| (answer.keys().len(), answer.ttl()))
    }

    /// The etcd lease that carries the lock `name` of the store of `prefix`.
    fn lock_lease(&mut self, prefix: &str, name: &str) -> i64 {
        let key = format!("{prefix}/@/lock/{name}");
        let answer = self.runtime.block_on(self.client.get(key, None)).unwrap();
        answer.kvs()[0].lease()
    }

    /// Waits until `done` holds, for `limit` at most; returns whether it did.
    fn until(&mut self, limit: Duration, mut done: impl FnMut(&mut Raw) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if done(self) {
                return true;
            }
            thread::sleep(Duration::from_millis(50));
        }
        done(self)
    }
}

/// Grants and releases until the store has pooled leases beside what etcd kept before.
fn pooled_leases(raw: &mut Raw, store: &Store, ttl: Duration, before: &[i64]) -> Vec<i64> {
    store.acquire("warm", ttl).unwrap().release().unwrap();
    let mut pooled = Vec::new();
    assert!(
        raw.until(Duration::from_secs(10), |raw| {
            pooled = raw
                .leases()
                .into_iter()
                .filter(|lease| !before.contains(lease))
                .collect();
            !pooled.is_empty()
        }),
        "the store pooled no lease"
    );
    pooled
}

/// A lease that waited in the pool is renewed by the grant that takes it: etcd gives the
/// holder's lease its whole TTL, not what was left after the wait.
#[test]
fn a_grant_with_a_pooled_lease_carries_its_whole_ttl() {
    let etcd = Cluster::single();
    let mut raw = Raw::connect(&etcd);
    let store = etcd.open("pool");
    let ttl = Duration::from_secs(10);
    let before = raw.leases();
    pooled_leases(&mut raw, &store, ttl, &before);
    // Less than half the TTL: the pooled leases are still used.
    thread::sleep(Duration::from_secs(3));
    let pooled: Vec<i64> = raw
        .leases()
        .into_iter()
        .filter(|lease| !before.contains(lease))
        .collect();
    let holder = store.acquire("job", ttl).unwrap();
    let lease = raw.lock_lease("pool", "job");
    assert!(pooled.contains(&lease), "the grant took no pooled lease");
    let (keys, left) = raw.lease(lease).expect("the holder's lease lives");
    assert_eq!(keys, 1);
    assert!(
        left >= 9,
        "etcd keeps the holder's lease for {left} s of 10"
    );
    assert!(holder.remaining() > Duration::from_secs(9));
    holder.release().unwrap();
}

/// A store that is never closed (leaked, as by a killed process): its pooled leases are not
/// renewed, end at their TTL, and never carried a key.
#[test]
fn a_forgotten_pooled_lease_ends_at_its_ttl_without_a_key() {
    let etcd = Cluster::single();
    let mut raw = Raw::connect(&etcd);
    let store = etcd.open("pool");
    let before = raw.leases();
    let pooled = pooled_leases(&mut raw, &store, ETCD_MIN_TTL, &before);
    std::mem::forget(store);
    for &lease in &pooled {
        if let Some((keys, _)) = raw.lease(lease) {
            assert_eq!(keys, 0, "a pooled lease carries a key");
        }
    }
    assert!(
        raw.until(ETCD_MIN_TTL * 5, |raw| {
            pooled.iter().all(|&lease| raw.lease(lease).is_none())
        }),
        "a forgotten pooled lease lived past its TTL"
    );
}

/// Closing the store's last handle revokes what it pooled.
#[test]
fn closing_the_store_revokes_its_pooled_leases() {
    let etcd = Cluster::single();
    let mut raw = Raw::connect(&etcd);
    let store = etcd.open("pool");
    let ttl = Duration::from_secs(60);
    let before = raw.leases();
    pooled_leases(&mut raw, &store, ttl, &before);
    // Once the refills landed (one beyond the pool's depth is revoked as it lands).
    thread::sleep(Duration::from_secs(1));
    let pooled: Vec<i64> = raw
        .leases()
        .into_iter()
        .filter(|lease| !before.contains(lease))
        .collect();
    let copy = store.clone();
    drop(store);
    assert!(
        pooled.iter().all(|&lease| raw.lease(lease).is_some()),
        "a handle is still open"
    );
    drop(copy);
    // What refills were under way revoke theirs as they land.
    assert!(
        raw.until(Duration::from_secs(10), |raw| {
            raw.leases().iter().all(|lease| before.contains(lease))
        }),
        "leases of a closed store remain: {:?}",
        raw.leases()
    );
}
