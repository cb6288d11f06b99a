//! A server: one process holds the store file exclusively and executes the value writes,
//! fences and reads of every process that opens the store, with one commit a batch.
//!
//! Without a server every commit of a shared file is redb's two-phase multi-process commit (two
//! fdatasyncs); a process that holds the file alone (redb's exclusive mode) commits in one phase
//! (one fdatasync). The leases need neither: every process grants, extends and releases in the
//! store's shared memory itself (`local/lease_map.rs`), served or not, so a server holds no lease
//! and its death or pause loses or delays none. The server announces itself in the store's
//! request ring (`ring/`) under a liveness id of its own: a store that finds a live server there
//! opens no database handle and posts every write and read, and one that had the file open
//! closes it at its next operation so the server can take the file. When the server's liveness
//! lock is gone (it exited, or was killed), stores open the file again and commit as before;
//! requests it had taken are posted again by their requesters, under the rules of
//! `local/route.rs`, which make a re-run give the result the first run had.
//!
//! redb's exclusive mode locks every byte of the file; the server's storage backend leaves out the
//! bytes fencelock itself locks (`storage/liveness.rs`), so holders keep their liveness locks on
//! the file whoever serves it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::ConcurrencyMode;

use crate::base::cancel::{Cancel, Waiting};
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::engine::options::Options;
use crate::local::LocalEngine;
use crate::share::member::RingMember;
use crate::storage::carved::open_carved;
use crate::storage::db::Db;
use crate::storage::liveness::Liveness;
// What the docs link to.
#[cfg(doc)]
use crate::api::store::Store;

/// How a server runs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{ServeOptions, Server};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let options = ServeOptions {
///     idle_exit: Some(Duration::from_millis(50)),
///     ..ServeOptions::default()
/// };
/// let server = Server::start(&path, &options)?;
/// server.run(&options)?; // returns after 50 ms without a request
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long [`Server::start`] waits for the processes that have the store open to move
    /// over to it (each does at its next operation) before it gives up with [`Error::InUse`].
    pub wait: Duration,
    /// Stops [`Server::run`] after this long without a request.
    pub idle_exit: Option<Duration>,
    /// Stops [`Server::run`] (at its next look, within milliseconds) once it fires.
    pub cancel: Option<Cancel>,
    /// Records how each lease ended in the lock's history, as [`Options::history`]: the server
    /// commits every process's grants, so its setting decides.
    pub history: bool,
    /// Called by [`Server::run`] from its loop while it serves: a sign of life for a watchdog
    /// (`fencelock serve` pings systemd's with it).
    pub heartbeat: Option<Heartbeat>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            wait: Duration::from_secs(10),
            idle_exit: None,
            cancel: None,
            history: true,
            heartbeat: None,
        }
    }
}

/// A function that [`Server::run`] calls between batches, from the thread that runs them, once
/// `every` has passed since its last call (or since `run` began): every `every` while batches
/// end in time, within the 10 ms the loop sleeps when idle, and not at all while a batch is stuck
/// (a commit that hangs on the disk). It should return at once: the loop waits for it.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use fencelock::{Heartbeat, ServeOptions, Server};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let beats = Arc::new(AtomicU64::new(0));
/// let counter = Arc::clone(&beats);
/// let options = ServeOptions {
///     idle_exit: Some(Duration::from_millis(200)),
///     heartbeat: Some(Heartbeat {
///         every: Duration::from_millis(1),
///         beat: Arc::new(move || { counter.fetch_add(1, Ordering::Relaxed); }),
///     }),
///     ..ServeOptions::default()
/// };
/// Server::start(&path, &options)?.run(&options)?;
/// assert!(beats.load(Ordering::Relaxed) > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Heartbeat {
    /// How often to call it: half a watchdog's period, say.
    pub every: Duration,
    /// What to call.
    pub beat: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// A running server of one store file. Dropping it stops serving: stores then open the file
/// themselves again.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{Cancel, ServeOptions, Server, Store};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// let cancel = Cancel::new();
/// let options = ServeOptions { cancel: Some(cancel.clone()), ..ServeOptions::default() };
/// let server = Server::start(&path, &options)?;
/// let serving = std::thread::spawn(move || server.run(&options));
/// // Stores of every process now commit through the server.
/// let store = Store::open(&path)?;
/// let ttl = Duration::from_secs(30);
/// let holder = store.acquire_and_put("nightly", ttl, b"nightly/report", b"done")?;
/// assert_eq!(store.get(b"nightly/report")?.map(|f| f.token), Some(holder.token()));
/// cancel.cancel();
/// serving.join().unwrap()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Server {
    engine: Arc<LocalEngine>,
    shared: Arc<RingMember>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("path", &self.engine.path)
            .finish_non_exhaustive()
    }
}

/// How long a server looks for new requests, yielding, before it sleeps on the doorbell.
const SPIN_NS: u64 = 50_000;
/// How often a server without requests looks at its idle time and its cancel handle.
const IDLE_LOOK: Duration = Duration::from_millis(10);

impl Server {
    /// Opens the store at `path` (creating it if needed) exclusively, to serve it.
    ///
    /// # Errors
    ///
    /// [`Error::InUse`] when another server serves it, or when processes that have it open
    /// did not move over within `options.wait` ([`Server::holders`] names them);
    /// [`Error::Cancelled`]; [`Error::Storage`] when the store's shared request ring cannot be
    /// used (another user's, in `/dev/shm`); [`Error::InvalidArgument`] for an etcd store
    /// string; otherwise as [`Store::open`].
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Error, ServeOptions, Server};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let server = Server::start(&path, &ServeOptions::default())?;
    /// assert!(matches!(Server::start(&path, &ServeOptions::default()), Err(Error::InUse)));
    /// drop(server);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start(path: impl AsRef<Path>, options: &ServeOptions) -> Result<Server> {
        if let Some(text) = crate::engine::etcd_string(path.as_ref()) {
            return Err(Error::invalid(format!(
                "{text}: an etcd store has no fencelock server; etcd serves it"
            )));
        }
        let path = path.as_ref().to_path_buf();
        if path.is_dir() {
            return Err(Error::invalid(format!("{} is a directory", path.display())));
        }
        let live = Liveness::shared(&path)?;
        let boot_id = clock::boot_id()?;
        // A server commits its clients' writes, and a grant that writes is made in its write's
        // transaction: it claims the lease map as every store that writes does.
        let claim = Waiting::new(options.wait, options.cancel.as_ref());
        let shared = Arc::new(RingMember::join(&path, &live, boot_id, Some(claim))?);
        let ring = shared.ring();
        // The server recorded in the ring, if any, unless it is gone.
        let recorded = || -> Result<u64> {
            match ring.server() {
                Some((id, _)) if live.is_held(id)? => Err(Error::InUse),
                Some((id, _)) => Ok(id),
                None => Ok(0),
            }
        };
        recorded()?;
        if ring.log_on() {
            return Err(refused_for_log(&path));
        }
        // Stores that have the file open see this and close it at their next operation; those
        // that open it from now on wait for this server.
        ring.set_wanted(shared.id());
        let opened = open_exclusive(&path, options);
        // Recorded as the server before it stops being the wanted one, so that no store sees
        // neither in between (and tries the file, which this process holds).
        let recorded = opened.is_ok()
            && recorded()
                .is_ok_and(|previous| ring.set_server(previous, shared.id(), std::process::id()));
        ring.clear_wanted(shared.id());
        let db = opened?;
        if !recorded {
            return Err(Error::InUse);
        }
        let engine = LocalEngine::assemble(
            path,
            &Options {
                history: options.history,
                ..Options::default()
            },
            ConcurrencyMode::ExclusiveWriter,
            Some(db),
            live,
            Some(Arc::clone(&shared)),
            true,
        )?;
        let engine = LocalEngine::ready(engine)?;
        let server = Server { engine, shared };
        // Processes of the store that write through the redo log (`Options::write_log`): a
        // server would commit their writes to the file beside a log it does not read.
        if server.engine.log.get().is_some() {
            return Err(refused_for_log(&server.engine.path));
        }
        Ok(server)
    }

    /// The store file.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{ServeOptions, Server};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let server = Server::start(&path, &ServeOptions::default())?;
    /// assert_eq!(server.path(), path);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.engine.path
    }

    /// The processes other than this one that have the file `path` open (as `/proc` shows
    /// them): those a server waits for.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{Server, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let _store = Store::open(&path)?;
    /// // Only other processes count: a server started here would wait for nobody.
    /// assert_eq!(Server::holders(&path), Vec::<u32>::new());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn holders(path: &Path) -> Vec<u32> {
        let Ok(target) = std::fs::canonicalize(path) else {
            return Vec::new();
        };
        let me = std::process::id();
        let mut pids = Vec::new();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for entry in procs.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
                continue;
            };
            let opens = fds
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link == target));
            if opens && pid != me {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        pids
    }

    /// Serves until `options.idle_exit` passes without a request or `options.cancel` fires,
    /// calling `options.heartbeat` as it goes.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] or [`Error::Storage`] when the store fails (a commit's failure is each
    /// request's error, not the server's).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::{ServeOptions, Server};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let options = ServeOptions {
    ///     idle_exit: Some(Duration::from_millis(50)),
    ///     ..ServeOptions::default()
    /// };
    /// let server = Server::start(&path, &options)?;
    /// server.run(&options)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(&self, options: &ServeOptions) -> Result<()> {
        let inner = &self.engine;
        let ring = self.shared.ring();
        let mut last_request = clock::now_ns();
        let mut last_beat = last_request;
        loop {
            if let Some(heartbeat) = &options.heartbeat {
                let now = clock::now_ns();
                if now.saturating_sub(last_beat)
                    >= crate::base::limits::duration_ns(heartbeat.every)
                {
                    (heartbeat.beat)();
                    last_beat = now;
                }
            }
            if options.cancel.as_ref().is_some_and(Cancel::is_cancelled) {
                return Ok(());
            }
            // A cut ring is zeros: nothing would ever be posted again.
            ring.intact()?;
            if ring.any_posted() {
                // One batch of the posted requests, as a combiner runs it.
                inner.router.combine(&**inner, &self.shared)?;
                last_request = clock::now_ns();
                continue;
            }
            if let Some(idle) = options.idle_exit {
                if clock::now_ns().saturating_sub(last_request)
                    >= crate::base::limits::duration_ns(idle)
                {
                    return Ok(());
                }
            }
            // A requester just answered posts again within microseconds: looking a little
            // longer, yielding, spares it the wake-up of a sleeping server, which on an idle
            // machine costs more than the commit.
            if clock::now_ns().saturating_sub(last_request) < SPIN_NS {
                std::thread::yield_now();
                continue;
            }
            ring.await_posted(IDLE_LOOK);
        }
    }
}

/// A server's refusal of a store whose processes write through the redo log.
fn refused_for_log(path: &Path) -> Error {
    Error::invalid(format!(
        "{}: its processes write through the redo log (Options::write_log), which `fencelock \
         serve` does not serve yet; serve it once they closed it",
        path.display()
    ))
}

impl Drop for Server {
    fn drop(&mut self) {
        // A clean stop is a close of the store: the server, the last user of the lease map when
        // no other process has the store open, seals it as any last user does
        // (`Durable::seal`), so that the next grant goes on from the counter and not a block of
        // tokens beyond it. With other users left, the map lives on in them, and nothing is
        // sealed.
        self.engine.record_releases();
        // The file is let go before the record: a store that finds no server recorded can
        // open it. (Stores that post meanwhile commit themselves once the record is gone.)
        self.engine.close_database();
        self.shared.ring().clear_server(self.shared.id());
        self.shared.wake();
    }
}

/// Opens `path` in redb's exclusive mode, through [`Carved`], waiting up to `options.wait`
/// while other processes have it open.
fn open_exclusive(path: &Path, options: &ServeOptions) -> Result<Db> {
    let waiting = Waiting::new(options.wait, options.cancel.as_ref());
    loop {
        match open_carved(path) {
            Err(Error::InUse) => {
                waiting.step().map_err(|err| match err {
                    Error::Timeout { .. } => Error::InUse,
                    other => other,
                })?;
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::store::Store;

    #[test]
    fn a_served_store_goes_through_the_server_and_keeps_its_liveness_locks() {
        let dir = tempfile_dir();
        let path = dir.join("served.db");
        let direct = Store::open(&path).unwrap();
        let before = direct.acquire("a", Duration::from_secs(30)).unwrap();
        let server_path = path.clone();
        let stop = Cancel::new();
        let options = ServeOptions {
            cancel: Some(stop.clone()),
            ..ServeOptions::default()
        };
        let serving = std::thread::spawn(move || {
            let server = Server::start(&server_path, &options).unwrap();
            server.run(&options).unwrap();
        });
        // The open store moves over at its operations; a new store goes through the server.
        let mut moved = false;
        for _ in 0..2000 {
            if direct.server().is_some() {
                moved = true;
                break;
            }
            assert!(before.is_held().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(moved, "the store moved over to the server");
        let other = Store::open(&path).unwrap();
        assert!(other.server().is_some());
        match other.acquire("a", Duration::from_secs(30)) {
            Err(Error::Locked { token, .. }) => assert_eq!(token, before.token()),
            other => panic!("{other:?}"),
        }
        let b = other.acquire("b", Duration::from_secs(30)).unwrap();
        assert!(b.token() > before.token());
        b.put(b"k", &vec![7u8; 20_000]).unwrap();
        assert_eq!(direct.get(b"k").unwrap().unwrap().value, vec![7u8; 20_000]);
        before.release().unwrap();
        let again = other.acquire("a", Duration::from_secs(30)).unwrap();
        assert!(again.token() > b.token());
        stop.cancel();
        serving.join().unwrap();
        // Without the server, the stores open the file themselves again.
        let after = direct.acquire("c", Duration::from_secs(30)).unwrap();
        assert!(after.token() > again.token());
        assert!(direct.server().is_none());
        assert_eq!(other.get(b"k").unwrap().unwrap().token, b.token());
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "fencelock-serve-{}-{}",
            std::process::id(),
            clock::now_ns()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
