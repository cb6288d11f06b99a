//! The router's failure rules, run through whole engines of one store file: a combiner that dies
//! before or after it commits, a requester that dies, a full ring, a paused combiner, the
//! waiting queue's order, one commit for several processes.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::api::store::Store;
use crate::local::LocalEngine;

/// A store and its engine, for tests that reach inside it.
struct Opened {
    store: Store,
    inner: Arc<LocalEngine>,
}

impl std::ops::Deref for Opened {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

fn open_with(path: &Path, options: &crate::Options) -> Opened {
    let inner = LocalEngine::open(path, options).unwrap();
    assert!(
        inner.router.member().is_some(),
        "the ring is usable in tests"
    );
    let store = Store::new(Arc::clone(&inner) as Arc<dyn crate::engine::Engine>);
    Opened { store, inner }
}

fn open(path: &Path) -> Opened {
    open_with(path, &crate::Options::default())
}

fn shared(store: &Opened) -> Arc<RingMember> {
    Arc::clone(store.inner.router.member().unwrap())
}

fn waiting() -> Waiting<'static> {
    Waiting::new(Duration::from_secs(10), None)
}

/// A fenced write of `key` with `token` by `store`, posted to the ring.
fn post_put(store: &Opened, key: &[u8], token: u64) -> Posted {
    let op = Op::Put {
        key: key.to_vec(),
        value: Some(b"v".to_vec()),
        token,
        lease: None,
    };
    let shared = shared(store);
    shared
        .ring()
        .post(shared.id(), &encode_op(&op), &store.inner.live)
        .unwrap()
}

fn wrote(done: Option<Done>) {
    assert!(matches!(done, Some(Done::Put { .. })), "{done:?}");
}

#[test]
fn a_request_whose_combiner_died_before_committing_is_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let requester = open(&path);
    let combiner = open(&path);
    let token = requester
        .acquire("a", Duration::from_secs(30))
        .unwrap()
        .token();
    let posted = post_put(&requester, b"k", token);
    let taken = shared(&combiner)
        .ring()
        .take_posted(shared(&combiner).id(), &combiner.inner.live);
    assert_eq!(taken.len(), 1);
    drop(combiner);
    wrote(
        requester
            .inner
            .router
            .await_done(&*requester.inner, &shared(&requester), posted, waiting())
            .unwrap(),
    );
    assert_eq!(requester.get(b"k").unwrap().unwrap().token, token);
}

/// A write transaction of `store`'s file, as a combiner begins one.
fn begin_write(store: &Opened) -> WriteTransaction {
    store
        .inner
        .database()
        .unwrap()
        .writable()
        .unwrap()
        .begin_write()
        .unwrap()
}

/// A combiner takes every posted request, runs and commits them, and dies before it
/// publishes the replies.
#[allow(clippy::needless_pass_by_value)] // it dies: nothing of it is used after
fn commit_posted_and_die(combiner: Opened) {
    let inner = Arc::clone(&combiner.inner);
    let jobs: Vec<Job> = shared(&combiner)
        .ring()
        .take_posted(shared(&combiner).id(), &combiner.inner.live)
        .into_iter()
        .map(|taken| {
            let op = crate::share::wire::decode_op(&taken.request).unwrap();
            let inner = Arc::clone(&inner);
            foreign_job(
                move |txn: &WriteTransaction| run(&*inner, &*inner, &op, txn, false),
                |_: Result<Done>| {},
            )
        })
        .collect();
    execute(Ok(begin_write(&combiner)), jobs, false, &|_| {}).unwrap();
}

#[test]
fn a_rerun_refused_for_what_came_after_its_first_run_has_an_unknown_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let requester = open(&path);
    let first = requester.acquire("a", Duration::from_secs(60)).unwrap();
    let op = Op::Fence {
        resource: "bucket".into(),
        token: first.token(),
    };
    let ring = shared(&requester);
    let posted = ring
        .ring()
        .post(ring.id(), &encode_op(&op), &requester.inner.live)
        .unwrap();
    commit_posted_and_die(open(&path));
    // A higher token passes the fence before the request runs again.
    let second = requester.acquire("b", Duration::from_secs(60)).unwrap();
    requester.fence("bucket", second.token()).unwrap();
    // Its first run landed, but the re-run cannot tell: not a definite refusal.
    let done = requester
        .inner
        .router
        .await_done(&*requester.inner, &ring, posted, waiting());
    assert!(matches!(done, Err(Error::Timeout { .. })), "{done:?}");
    assert_eq!(
        requester.fence_token("bucket").unwrap(),
        Some(second.token())
    );
    // A first run of the same fence now is a definite refusal.
    assert!(matches!(
        requester.fence("bucket", first.token()),
        Err(Error::StaleToken { .. })
    ));
}

/// `acquire_and_put` of lock "a" writing `k`, posted to the ring by `requester` under a
/// liveness id of its own, as `grant_in_lease_map` posts it.
fn post_acquire_and_put(requester: &Opened) -> (Posted, crate::local::acquire::Grant<'_>) {
    let grant = crate::local::acquire::Grant::take(&requester.inner).unwrap();
    let op = Op::Acquire {
        name: "a".into(),
        ttl: Duration::from_secs(60),
        write: Some((b"k".to_vec(), b"first".to_vec())),
        holder: requester.inner.me,
        live: grant.live,
        ticket: None,
    };
    let ring = shared(requester);
    let posted = ring
        .ring()
        .post(ring.id(), &encode_op(&op), &requester.inner.live)
        .unwrap();
    (posted, grant)
}

/// Whether its first run committed or not, an `acquire_and_put` run again finds its grant in
/// the lease map (visible from the first run on) and its key written since with a higher token:
/// not a definite refusal, which would say that nothing was written and nobody held the lock.
#[test]
fn an_acquire_and_put_run_again_after_a_higher_write_of_its_key_has_an_unknown_outcome() {
    for committed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let requester = open(&path);
        let combiner = open(&path);
        let (posted, _grant) = post_acquire_and_put(&requester);
        if committed {
            commit_posted_and_die(combiner);
        } else {
            // Granted in the map inside the transaction; the combiner dies before the commit.
            let ring = shared(&combiner);
            let taken = ring.ring().take_posted(ring.id(), &combiner.inner.live);
            assert_eq!(taken.len(), 1);
            let op = crate::share::wire::decode_op(&taken[0].request).unwrap();
            let txn = begin_write(&combiner);
            run(&*combiner.inner, &*combiner.inner, &op, &txn, false).unwrap();
            drop(txn);
            drop(combiner);
        }
        let first = requester.locks().unwrap();
        assert_eq!(first.len(), 1, "the grant is visible: {first:?}");
        // A token of another lock, above the grant's, writes the key before the rerun.
        let other = requester.acquire("b", Duration::from_secs(60)).unwrap();
        assert!(other.token() > first[0].token);
        requester.put(b"k", b"later", other.token()).unwrap();
        let done = requester.inner.router.await_done(
            &*requester.inner,
            &shared(&requester),
            posted,
            waiting(),
        );
        assert!(
            matches!(done, Err(Error::Timeout { .. })),
            "committed {committed}: {done:?}"
        );
        let value = requester.get(b"k").unwrap().unwrap();
        assert_eq!(
            (value.token, &value.value[..]),
            (other.token(), &b"later"[..])
        );
    }
}

#[test]
fn a_holders_write_whose_combiner_died_after_committing_reports_that_it_landed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let requester = open(&path);
    // Opened first: its open takes longer than the lease below lasts.
    let combiner = open(&path);
    let holder = requester.acquire("a", Duration::from_millis(30)).unwrap();
    let op = Op::Put {
        key: b"k".to_vec(),
        value: Some(b"v".to_vec()),
        token: holder.token(),
        lease: Some("a".into()),
    };
    let ring = shared(&requester);
    let posted = ring
        .ring()
        .post(ring.id(), &encode_op(&op), &requester.inner.live)
        .unwrap();
    commit_posted_and_die(combiner);
    // The lease runs out before the request runs again: the write landed all the same,
    // and is reported so, not refused as a holder's write after its lease.
    std::thread::sleep(Duration::from_millis(60));
    let done = requester
        .inner
        .router
        .await_done(&*requester.inner, &ring, posted, waiting())
        .unwrap();
    assert!(matches!(done, Some(Done::Put { .. })), "{done:?}");
    assert_eq!(requester.get(b"k").unwrap().unwrap().token, holder.token());
    // A first run of the same write now is refused: the lease ran out.
    assert!(matches!(
        holder.put(b"k", b"v"),
        Err(Error::LockLost { .. })
    ));
}

#[test]
fn a_request_of_a_dead_requester_is_dropped_unrun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let combiner = open(&path);
    let ring = shared(&combiner);
    // Posted under a liveness id that nobody holds: its requester is gone.
    let op = Op::Fence {
        resource: "r".into(),
        token: 1,
    };
    let posted = ring
        .ring()
        .post(
            crate::storage::liveness::fresh_id().unwrap(),
            &encode_op(&op),
            &combiner.inner.live,
        )
        .unwrap();
    assert!(ring
        .ring()
        .take_posted(ring.id(), &combiner.inner.live)
        .is_empty());
    assert_eq!(
        ring.ring().phase(&posted),
        Phase::Lost,
        "its slot is free again"
    );
}

#[test]
fn a_full_ring_commits_directly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = open(&path);
    let ring = shared(&store);
    let op = encode_op(&Op::Fence {
        resource: "r".into(),
        token: 1,
    });
    let mut posted = Vec::new();
    while let Some(p) = ring.ring().post(ring.id(), &op, &store.inner.live) {
        posted.push(p);
    }
    assert_eq!(posted.len(), 64);
    let holder = store.acquire("a", Duration::from_secs(5)).unwrap();
    holder.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
    // The direct commits took the posted requests along.
    for p in &posted {
        assert_eq!(ring.ring().phase(p), Phase::Done);
    }
}

#[test]
fn behind_a_paused_combiner_a_posted_write_withdraws_and_times_out_changing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let options = crate::Options {
        busy_timeout: Duration::from_millis(100),
        ..crate::Options::default()
    };
    let requester = open_with(&path, &options);
    let holder = requester.acquire("a", Duration::from_secs(30)).unwrap();
    let paused = open(&path);
    // Holds the write lock and takes nothing, as a combiner stopped before it took.
    let txn = begin_write(&paused);
    assert!(matches!(holder.put(b"k", b"v"), Err(Error::Timeout { .. })));
    drop(txn);
    assert!(requester.get(b"k").unwrap().is_none());
    holder.put(b"k", b"v").unwrap();
    assert_eq!(requester.get(b"k").unwrap().unwrap().value, b"v");
}

#[test]
fn waiting_acquires_are_granted_in_the_order_they_began_to_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = open(&path);
    let ring = shared(&store);
    let hot = lock_hash("hot");
    for _ in 0..5 {
        let holder = store.acquire("hot", Duration::from_secs(30)).unwrap();
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                // Another store of the same file: another process, as far as locks go.
                let store = open(&path);
                let waiter = std::thread::spawn(move || {
                    let holder = store
                        .acquire_wait("hot", Duration::from_secs(30), Duration::from_secs(60))
                        .unwrap();
                    let token = holder.token();
                    std::thread::sleep(Duration::from_millis(5));
                    drop(holder);
                    token
                });
                // The next waiter starts once this one is queued.
                while ring.ring().queued(hot) <= i {
                    std::thread::sleep(Duration::from_millis(1));
                }
                waiter
            })
            .collect();
        drop(holder);
        let tokens: Vec<u64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "granted out of the order of waiting: {tokens:?}"
        );
    }
}

#[test]
fn processes_share_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let a = open(&path);
    let b = open(&path);
    let token = a.acquire("a", Duration::from_secs(30)).unwrap().token();
    let commits = a.metrics().unwrap().commits;
    // Both post; one combine commits both.
    let posted_a = post_put(&a, b"a", token);
    let posted_b = post_put(&b, b"b", token);
    assert!(b.inner.router.combine(&*b.inner, &shared(&b)).unwrap());
    assert_eq!(shared(&a).ring().phase(&posted_a), Phase::Done);
    assert_eq!(shared(&b).ring().phase(&posted_b), Phase::Done);
    wrote(
        a.inner
            .router
            .await_done(&*a.inner, &shared(&a), posted_a, waiting())
            .unwrap(),
    );
    wrote(
        b.inner
            .router
            .await_done(&*b.inner, &shared(&b), posted_b, waiting())
            .unwrap(),
    );
    assert_eq!(a.metrics().unwrap().commits, commits + 1);
    assert!(a.get(b"a").unwrap().is_some() && a.get(b"b").unwrap().is_some());
}
