//! fencelock's position on async: no async layer of its own, but a recipe (the README's "Async
//! code" section) that puts each blocking wait on the runtime's blocking pool and ties it to a
//! `Cancel` handle, fired when the future is dropped. These tests hold the recipe to its
//! promises with tokio: a wait is granted when the lock is freed; a dropped future (a timeout,
//! an aborted task) ends the wait as `Cancelled`, and the lock is never granted by it.
//!
//! Sleeps only give a wait the chance to be under way; no test asserts how long anything took.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::{Cancel, Holder, Result, Store};

// --- the recipe, as the README gives it ---------------------------------------------------------

/// Runs `wait`, a blocking fencelock call that takes a [`Cancel`], on tokio's blocking pool and
/// awaits it. Dropping the returned future (a `tokio::time::timeout` running out, a `select!`
/// taking another branch, an aborted task) fires the cancel: the wait ends within about a
/// millisecond with [`fencelock::Error::Cancelled`], changing nothing. A grant that raced the cancel is
/// dropped with the finished task's output, and dropping a `Holder` releases it.
async fn unblock<T: Send + 'static>(wait: impl FnOnce(&Cancel) -> T + Send + 'static) -> T {
    struct FireOnDrop(Cancel);
    impl Drop for FireOnDrop {
        fn drop(&mut self) {
            self.0.cancel();
        }
    }
    let cancel = Cancel::new();
    let _fire = FireOnDrop(cancel.clone());
    tokio::task::spawn_blocking(move || wait(&cancel))
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
}

/// [`Store::acquire_wait_cancellable`] for async code; `Duration::MAX` waits without a limit.
async fn acquire(store: &Store, name: &str, ttl: Duration, timeout: Duration) -> Result<Holder> {
    let (store, name) = (store.clone(), name.to_owned());
    unblock(move |cancel| store.acquire_wait_cancellable(&name, ttl, timeout, cancel)).await
}

// --- the tests -----------------------------------------------------------------------------------

const TTL: Duration = Duration::from_secs(60);
/// A wait long enough never to end by itself in a test: a recipe whose cancel does not work
/// leaves the wait to time out instead, which the tests see as `Timeout`, not `Cancelled`.
const LONG: Duration = Duration::from_secs(60);

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("locks.db")).unwrap();
    (dir, store)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_waiting_acquire_is_granted_once_the_lock_is_freed() {
    let (_dir, store) = store();
    let holder = store.acquire("job", TTL).unwrap();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { acquire(&store, "job", TTL, Duration::MAX).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiting.is_finished(),
        "the wait ended while the lock was held"
    );
    holder.release().unwrap();
    let granted = waiting.await.unwrap().unwrap();
    assert_eq!(granted.token(), holder.token() + 1);
}

type Wait = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `cancel_it` on a wait for a held lock in a runtime of its own, drops that runtime (which
/// waits for its blocking pool, so the wait has ended), and checks what the wait did.
fn a_dropped_wait_ends_cancelled_and_never_takes_the_lock<F: Future<Output = ()>>(
    cancel_it: impl FnOnce(Wait) -> F,
) {
    let (_dir, store) = store();
    let holder = store.acquire("job", TTL).unwrap();
    // What the blocking call returned, as the dropped future can no longer say.
    let outcome: Arc<Mutex<Option<std::result::Result<u64, String>>>> = Arc::default();
    let wait: Wait = {
        let (store, outcome) = (store.clone(), Arc::clone(&outcome));
        Box::pin(async move {
            let result = unblock(move |cancel| {
                let result = store.acquire_wait_cancellable("job", TTL, LONG, cancel);
                let seen = result
                    .as_ref()
                    .map(Holder::token)
                    .map_err(|e| format!("{e:?}"));
                *outcome.lock().unwrap() = Some(seen);
                result
            })
            .await;
            drop(result);
        })
    };
    let rt = runtime();
    rt.block_on(cancel_it(wait));
    drop(rt);
    let outcome = outcome.lock().unwrap().take().expect("the wait ran");
    assert_eq!(outcome, Err("Cancelled".to_owned()));
    holder.release().unwrap();
    let next = store.acquire("job", TTL).unwrap();
    assert_eq!(
        next.token(),
        holder.token() + 1,
        "the cancelled wait was granted"
    );
}

#[test]
fn a_timeout_cancels_the_wait() {
    a_dropped_wait_ends_cancelled_and_never_takes_the_lock(|wait| async {
        let ended = tokio::time::timeout(Duration::from_millis(100), wait).await;
        assert!(ended.is_err(), "the wait was not cut short");
    });
}

#[test]
fn an_aborted_task_cancels_its_wait() {
    a_dropped_wait_ends_cancelled_and_never_takes_the_lock(|wait| async {
        let task = tokio::spawn(wait);
        tokio::time::sleep(Duration::from_millis(50)).await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
    });
}

#[tokio::test]
async fn a_wait_for_a_lost_lease_is_awaitable() {
    let (_dir, store) = store();
    let holder = Arc::new(store.acquire("job", TTL).unwrap());
    let watched = Arc::clone(&holder);
    let lost = tokio::spawn(unblock(move |cancel| {
        watched.wait_lost_cancellable(Duration::MAX, cancel)
    }));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !lost.is_finished(),
        "the wait ended while the lease was held"
    );
    holder.release().unwrap();
    assert!(lost.await.unwrap().unwrap());
}

/// The README's recipe is this file's, so what these tests check is what users copy.
#[test]
fn the_readme_gives_this_recipe() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let section = &readme[readme.find("### Async code").expect("an async section")..];
    // Not a doctest (`ignore`): this file compiles and runs it.
    let start = section.find("```rust,ignore\n").expect("a Rust block") + 15;
    let block = &section[start..];
    let recipe = &block[..block.find("\n// ").expect("the usage after the recipe")];
    // Code only, whitespace collapsed: the README may wrap and comment the recipe its own way.
    let code = |text: &str| {
        text.lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let source = std::fs::read_to_string(format!("{root}/tests/async_recipe.rs")).unwrap();
    assert!(
        code(&source).contains(&code(recipe)),
        "the README's recipe differs from tests/async_recipe.rs:\n{recipe}"
    );
}
