//! The tokio runtimes every etcd store of the process shares, started at the first open, and
//! the one way the sync API waits on them.
//!
//! - **The callers' runtime** (current-thread). Every sync call blocks on it, and the thread
//!   that blocks drives it: a call's request goes out and its answer comes in on that thread,
//!   through no other. Against blocking on a multi-thread runtime whose workers do the I/O,
//!   that is a third of the context switches (about 2.7 a round trip instead of 8) and about
//!   an eighth less time a loopback round trip on the 2-core machine (p50s). The engine's
//!   unary calls go through a connection of this runtime's own ([`Conn::Callers`]). Callers of
//!   several threads share it: one drives it at a time, and the others' answers wake them.
//! - **The background runtime** (two worker threads): what runs while no caller waits, on a
//!   connection of its own ([`Conn::Background`]): keep-alives, the lease pool's refills and
//!   revokes, and every stream (keep-alive streams, watches), which must be read while no
//!   caller is in a call.
//! - While no caller blocks, nothing drives the callers' connection; a ticker thread drives it
//!   for a moment every [`TICK`], so that it answers etcd's HTTP/2 pings (etcd closes a
//!   connection whose ping goes unanswered for 20 s) and notices a closed connection before
//!   the next call. A connection closed less than a tick before a call can still fail that
//!   one call with a transport error, as any call whose connection breaks under it.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::base::error::{Error, Result};

/// How often the ticker drives the callers' runtime, and for how long: often enough to answer
/// etcd's pings (20 s allowed) and to notice a connection that etcd closed within a second.
const TICK: Duration = Duration::from_secs(1);
const TICK_FOR: Duration = Duration::from_millis(5);

/// Which runtime a connection lives on, and so which one drives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conn {
    /// The callers' runtime: unary calls, answered while their caller waits.
    Callers,
    /// The background runtime: streams and tasks that run while no caller waits.
    Background,
}

/// A runtime, and the process that started it: runtime threads do not survive `fork()`, so a
/// child refuses to wait on it ([`Error::Forked`]) rather than wait forever.
type Started = OnceLock<(u32, std::result::Result<Runtime, String>)>;

fn started(
    cell: &'static Started,
    build: fn() -> std::io::Result<Runtime>,
) -> Result<&'static Runtime> {
    let (pid, runtime) =
        cell.get_or_init(|| (std::process::id(), build().map_err(|err| err.to_string())));
    if *pid != std::process::id() {
        return Err(Error::Forked);
    }
    runtime
        .as_ref()
        .map_err(|err| Error::Io(std::io::Error::other(format!("tokio runtime: {err}"))))
}

fn runtime(on: Conn) -> Result<&'static Runtime> {
    static CALLERS: Started = OnceLock::new();
    static BACKGROUND: Started = OnceLock::new();
    match on {
        Conn::Background => started(&BACKGROUND, || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("fencelock-etcd")
                .enable_all()
                .build()
        }),
        Conn::Callers => started(&CALLERS, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            std::thread::Builder::new()
                .name("fencelock-etcd-tick".into())
                .spawn(tick)?;
            Ok(runtime)
        }),
    }
}

/// The ticker thread: drives the callers' runtime for [`TICK_FOR`] every [`TICK`].
fn tick() {
    loop {
        std::thread::sleep(TICK);
        let Ok(runtime) = runtime(Conn::Callers) else {
            return;
        };
        // The sleep is made inside the runtime, whose timer it needs.
        runtime.block_on(async { tokio::time::sleep(TICK_FOR).await });
    }
}

/// Runs `future` to completion on the runtime of `on` and returns its output: on the callers'
/// runtime for a call, on the background runtime for what must start there (a connection of
/// its own). Callable from any thread, also from inside a user's own tokio runtime: there the
/// wait runs on a thread of its own, since a runtime cannot be blocked on from inside another.
pub(crate) fn block_on<F>(on: Conn, future: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime(on)?;
    // On the heap once: a call's future (etcd-client's, in ours) is large, and each move of it
    // inline was a copy.
    let future = Box::pin(future);
    if Handle::try_current().is_err() {
        return Ok(runtime.block_on(future));
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| runtime.block_on(future))
            .join()
            .map_err(|_| Error::Storage("an etcd call panicked".into()))
    })
}

/// A call: `future` run on the callers' runtime ([`block_on`]).
pub(crate) fn block<F>(future: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    block_on(Conn::Callers, future)
}

/// Like [`block`], giving up with [`Error::Timeout`] after `timeout`.
pub(crate) fn block_for<F, T>(timeout: Duration, future: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send,
    T: Send,
{
    let future = Box::pin(future);
    block(async move {
        tokio::time::timeout(timeout, future)
            .await
            .unwrap_or(Err(Error::timed_out()))
    })?
}

/// Starts `future` on the background runtime without waiting for it.
pub(crate) fn spawn<F>(future: F) -> Result<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(runtime(Conn::Background)?.spawn(future))
}
