//! The tokio runtime every etcd store of the process shares, started at the first open, and
//! the one way the sync API waits on it.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::base::error::{Error, Result};

/// The runtime, and the process that started it: its threads do not survive `fork()`, so a
/// child refuses to wait on it ([`Error::Forked`]) rather than wait forever.
fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<(u32, std::result::Result<Runtime, String>)> = OnceLock::new();
    let (pid, runtime) = RUNTIME.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fencelock-etcd")
            .enable_all()
            .build()
            .map_err(|err| err.to_string());
        (std::process::id(), runtime)
    });
    if *pid != std::process::id() {
        return Err(Error::Forked);
    }
    runtime
        .as_ref()
        .map_err(|err| Error::Io(std::io::Error::other(format!("tokio runtime: {err}"))))
}

/// Runs `future` to completion on the shared runtime and returns its output. Callable from
/// any thread, also from inside a user's own tokio runtime: there the wait runs on a thread
/// of its own, since a runtime cannot be blocked on from inside another.
pub(crate) fn block<F>(future: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
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

/// Like [`block`], giving up with [`Error::Timeout`] after `timeout`.
pub(crate) fn block_for<F, T>(timeout: Duration, future: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send,
    T: Send,
{
    block(async move {
        tokio::time::timeout(timeout, future)
            .await
            .unwrap_or(Err(Error::Timeout))
    })?
}

/// Starts `future` on the shared runtime without waiting for it.
pub(crate) fn spawn<F>(future: F) -> Result<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(runtime()?.spawn(future))
}
