//! The async API (cargo feature `tokio`): each awaitable wait is granted or ends as it should,
//! and a dropped future (a timeout, an aborted task, a `select!` branch not taken) ends its wait
//! without a grant, changing nothing; nothing is set by hand for tokio's blocking pool.
//!
//! Sleeps only give a wait the chance to be under way; no test asserts how long anything took.
#![cfg(feature = "tokio")]

use std::time::Duration;

use fencelock::{CampaignOptions, Cancel, Error, Store};

const TTL: Duration = Duration::from_secs(60);

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("locks.db")).unwrap();
    (dir, store)
}

/// A runtime whose blocking pool has one thread, so that every call of every task runs on it.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_time()
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_waiting_acquire_is_granted_once_the_lock_is_freed() {
    let (_dir, store) = store();
    let holder = store
        .lock("job")
        .ttl(TTL)
        .try_acquire_async()
        .await
        .unwrap();
    let waiting = tokio::spawn(store.lock("job").ttl(TTL).acquire_async());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiting.is_finished(),
        "the wait ended while the lock was held"
    );
    holder.release().unwrap();
    let granted = waiting.await.unwrap().unwrap();
    assert_eq!(granted.token(), holder.token() + 1);
}

/// Runs `drop_it` on a wait for a held lock in a runtime of its own, drops that runtime (which
/// waits for its blocking pool, so the wait has ended), and checks that the wait ended as
/// cancelled and was never granted.
fn a_dropped_wait_ends_cancelled_and_never_takes_the_lock<F: std::future::Future<Output = ()>>(
    drop_it: impl FnOnce(Store) -> F,
) {
    let (_dir, store) = store();
    let holder = store.lock("job").ttl(TTL).try_acquire().unwrap();
    let rt = runtime();
    rt.block_on(drop_it(store.clone()));
    drop(rt);
    assert_eq!(store.metrics().unwrap().refused_cancelled, 1);
    holder.release().unwrap();
    let next = store.lock("job").try_acquire().unwrap();
    assert_eq!(
        next.token(),
        holder.token() + 1,
        "the dropped wait was granted"
    );
}

#[test]
fn a_timeout_cancels_the_wait() {
    a_dropped_wait_ends_cancelled_and_never_takes_the_lock(|store| async move {
        let wait = store.lock("job").ttl(TTL).acquire_async();
        let ended = tokio::time::timeout(Duration::from_millis(100), wait).await;
        assert!(ended.is_err(), "the wait was not cut short");
    });
}

#[test]
fn an_aborted_task_cancels_its_wait() {
    a_dropped_wait_ends_cancelled_and_never_takes_the_lock(|store| async move {
        let task = tokio::spawn(store.lock("job").ttl(TTL).acquire_async());
        tokio::time::sleep(Duration::from_millis(50)).await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
    });
}

#[test]
fn tasks_sharing_one_pool_thread_wait_for_each_other_without_deadlock_refusals() {
    // With the store's default `refuse_own_waits`, a wait judged as the pool thread's would be
    // refused (WouldDeadlock): that thread made the first task's grant.
    let (_dir, store) = store();
    runtime().block_on(async {
        let first = store.lock("job").ttl(TTL).acquire_async().await.unwrap();
        let second = tokio::spawn(store.lock("job").ttl(TTL).acquire_async());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "the second wait ended: {second:?}");
        drop(first);
        drop(second.await.unwrap().unwrap());
    });
}

#[tokio::test]
async fn an_async_acquire_can_write_wait_all_or_none_and_refuses_a_cancel_handle() {
    let (_dir, store) = store();
    let holder = store
        .lock("job")
        .put(b"owner", b"a")
        .acquire_async()
        .await
        .unwrap();
    assert_eq!(store.get(b"owner").unwrap().unwrap().token, holder.token());
    let both = store.lock_all(&["x", "y"]).acquire_async().await.unwrap();
    assert!(matches!(
        store.lock_all(&["y", "z"]).try_acquire_async().await,
        Err(Error::Locked { token, .. }) if token == both[1].token()
    ));
    let cancel = Cancel::new();
    let refused = store.lock("other").cancel(&cancel).acquire_async().await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    assert!(store.lock_info("other").unwrap().is_none());
}

#[tokio::test]
async fn a_wait_for_a_lost_lease_resolves_when_it_ends_and_ends_when_dropped() {
    let (_dir, store) = store();
    let holder = store.lock("job").ttl(TTL).try_acquire().unwrap();
    let cut = tokio::time::timeout(Duration::from_millis(50), holder.wait_lost_async()).await;
    assert!(cut.is_err(), "the wait ended while the lease was held");
    let lost = tokio::spawn(holder.wait_lost_async());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !lost.is_finished(),
        "the wait ended while the lease was held"
    );
    holder.release().unwrap();
    lost.await.unwrap();
}

#[tokio::test]
async fn keep_alive_renews_while_awaited_and_stops_when_dropped() {
    let (_dir, store) = store();
    let ttl = Duration::from_millis(300);
    let holder = store.lock("job").ttl(ttl).try_acquire().unwrap();
    tokio::select! {
        () = tokio::time::sleep(3 * ttl) => {}
        ended = holder.keep_alive_async(ttl) => panic!("keep-alive ended: {ended:?}"),
    }
    assert!(holder.is_held().unwrap(), "renewed past three TTLs");
    // The keep-alive's future is gone: nothing renews the lease, and it runs out.
    holder.wait_lost_async().await;
    assert!(!holder.is_held().unwrap());
    // Taken over: a keep-alive reports the loss.
    let next = Store::open(store.path())
        .unwrap()
        .lock("job")
        .try_acquire()
        .unwrap();
    assert!(matches!(
        holder.keep_alive_async(ttl).await,
        Err(Error::LockLost { .. })
    ));
    // Released: a keep-alive resolves Ok.
    let keeping = tokio::spawn(next.keep_alive_async(ttl));
    next.release().unwrap();
    keeping.await.unwrap().unwrap();
    assert!(matches!(
        holder.keep_alive_async(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
}

// The election's async forms.

/// Campaign options whose lease does not run out during a test.
fn long() -> CampaignOptions {
    CampaignOptions {
        ttl: TTL,
        ..CampaignOptions::default()
    }
}

#[tokio::test]
async fn an_async_campaign_waits_its_turn_and_an_async_observer_sees_every_term_in_order() {
    let (_dir, store) = store();
    let mut leaders = store.observe_leader_async("jobs").await.unwrap();
    let first = store.campaign_async("jobs", b"a", &long()).await.unwrap();
    let second = tokio::spawn(store.campaign_async("jobs", b"b", &long()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !second.is_finished(),
        "a second leader while the first leads"
    );
    let told = leaders.next_change().await.unwrap();
    assert_eq!((told.term, told.value), (first.term(), b"a".to_vec()));
    first.proclaim(b"a2").unwrap();
    let told = leaders.next_change().await.unwrap();
    assert_eq!((told.term, told.version), (first.term(), 2));
    // The leadership's end is awaitable, and hands over to the waiting campaign.
    let lost = tokio::spawn(first.wait_lost_async());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!lost.is_finished(), "the leadership ended while it led");
    first.resign().unwrap();
    lost.await.unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(second.term() > first.term());
    let told = leaders.next_change().await.unwrap();
    assert_eq!((told.term, told.value), (second.term(), b"b".to_vec()));
}

#[test]
fn a_dropped_async_campaign_leaves_no_trace() {
    let (_dir, store) = store();
    let first = store.campaign("jobs", b"a", &long()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let wait = store.campaign_async("jobs", b"b", &long());
        let ended = tokio::time::timeout(Duration::from_millis(100), wait).await;
        assert!(ended.is_err(), "the campaign was not cut short");
    });
    // Dropping the runtime waits for its blocking pool: the campaign's wait has ended.
    drop(rt);
    assert_eq!(store.waiters("jobs").unwrap(), []);
    first.resign().unwrap();
    assert_eq!(
        store.leader("jobs").unwrap(),
        None,
        "the dropped campaign led"
    );
    assert_eq!(store.keys(b"fencelock.election/jobs/").unwrap().len(), 1);
    let refused = runtime().block_on(store.campaign_async(
        "jobs",
        b"c",
        &CampaignOptions {
            cancel: Some(Cancel::new()),
            ..long()
        },
    ));
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_dropped_next_leaves_the_stream_telling_every_change() {
    let (_dir, store) = store();
    let mut leaders = store.observe_leader_async("jobs").await.unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(50), leaders.next_change()).await;
    assert!(quiet.is_err(), "a change while nobody campaigned");
    let first = store.campaign_async("jobs", b"a", &long()).await.unwrap();
    first.resign().unwrap();
    let second = store.campaign_async("jobs", b"b", &long()).await.unwrap();
    let terms = [
        leaders.next_change().await.unwrap().term,
        leaders.next_change().await.unwrap().term,
    ];
    assert_eq!(terms, [first.term(), second.term()]);
}
