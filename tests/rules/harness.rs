//! What a rule test runs on: a [`Harness`] gives each test a store of its own on one backend
//! (a file in multi-process mode, the same with its fenced writes through the redo log, a file
//! in single-process mode, a file a [`Server`] serves, an etcd prefix), and says what that backend does not have ([`Capability`]), so that one
//! body checks the rule on every backend and accepts only the documented refusal where a
//! backend lacks a feature. [`on_every_backend!`](crate::on_every_backend) turns each body
//! into one test a backend.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use fencelock::{Cancel, Error, Holder, Mode, Options, ServeOptions, Server, Store};

/// Where a test's store lives and how it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A file of this host, multi-process mode (the default).
    File,
    /// The same, its fenced writes through the redo log (`Options::write_log`).
    Logged,
    /// A file held by this process alone (`Mode::SingleProcess`).
    SingleProcess,
    /// A file served by a [`Server`] running in a thread of this process.
    Served,
    /// A key prefix of its own on the test binary's one etcd node.
    #[cfg(feature = "etcd")]
    Etcd,
}

/// What not every backend has (README: "Guarantees", "Beyond one host: etcd").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Semaphores, shared locks and `acquire_all` (every backend has them; one without them
    /// would refuse each with `InvalidArgument`).
    Kinds,
    /// Each grant's token is the one before plus one (etcd's tokens are revisions).
    ConsecutiveTokens,
    /// `locks()` and `lock()` keep the records of expired and released leases (etcd deletes
    /// a lock's key with its lease).
    EndedRecords,
    /// Waiting acquires of a name are granted oldest first, so later grants that would join
    /// live holders stand behind a queued waiter (the request ring of a shared file, the
    /// waiter keys of etcd; not in single-process mode).
    FairQueue,
    /// Another open of the store in this process is a store of its own (single-process mode
    /// refuses it with `InUse`).
    SecondOpen,
    /// `history()` (etcd refuses it with `InvalidArgument`).
    History,
    /// `metrics()` and `set_observer()` (etcd refuses them with `InvalidArgument`).
    Metrics,
}

/// A test's store, on one backend; dropped, it stops what it started (a server).
pub struct Harness {
    backend: Backend,
    /// The store file, or the etcd store string.
    location: PathBuf,
    /// The options the test's store was opened with.
    options: Mutex<Options>,
    store: Mutex<Option<Store>>,
    /// Stopped when the harness drops (before its directory goes).
    _server: Option<Serving>,
    /// Dropped last: the directory of the store file.
    _dir: Option<tempfile::TempDir>,
}

/// A server of the test's store, running in a thread until its cancel handle fires.
struct Serving {
    stop: Cancel,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            // A server that failed fails the test: its stores would have gone on without it,
            // on the file itself.
            let failed = thread.join().is_err();
            assert!(
                !failed || thread::panicking(),
                "the server of the test's store failed (its panic is above)"
            );
        }
    }
}

impl Harness {
    /// Runs `body` on a fresh harness of `backend`.
    pub fn run(backend: Backend, body: fn(&Harness)) {
        body(&Harness::new(backend));
    }

    pub fn new(backend: Backend) -> Harness {
        #[cfg(feature = "etcd")]
        if backend == Backend::Etcd {
            return Harness {
                backend,
                location: PathBuf::from(etcd::fresh_url()),
                options: Mutex::new(Options::default()),
                store: Mutex::new(None),
                _server: None,
                _dir: None,
            };
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let location = dir.path().join("locks.db");
        let server = (backend == Backend::Served).then(|| serve(&location));
        Harness {
            backend,
            location,
            options: Mutex::new(Options::default()),
            store: Mutex::new(None),
            _server: server,
            _dir: Some(dir),
        }
    }

    /// Another harness of the same backend, with a store of its own.
    pub fn fresh(&self) -> Harness {
        Harness::new(self.backend)
    }

    /// The store file, for what is a file's alone; `None` on etcd.
    #[cfg_attr(not(feature = "etcd"), allow(clippy::unnecessary_wraps))] // `None` only on etcd
    pub fn file(&self) -> Option<&Path> {
        match self.backend {
            #[cfg(feature = "etcd")]
            Backend::Etcd => None,
            _ => Some(&self.location),
        }
    }

    /// The store file before anything opened it: on the local backends that create nothing
    /// before the test's first open (a server creates its file as it starts).
    pub fn unopened_file(&self) -> Option<&Path> {
        let opened = self.store.lock().unwrap().is_some();
        match self.backend {
            Backend::File | Backend::Logged | Backend::SingleProcess if !opened => {
                Some(&self.location)
            }
            _ => None,
        }
    }

    /// Whether the store's fenced writes go through the redo log (`Options::write_log`).
    pub fn writes_through_the_log(&self) -> bool {
        matches!(self.backend, Backend::Logged)
    }

    /// The path a store of this harness reports ([`Store::path`]).
    pub fn path(&self) -> &Path {
        &self.location
    }

    pub fn supports(&self, capability: Capability) -> bool {
        use Capability::*;
        match (self.backend, capability) {
            #[cfg(feature = "etcd")]
            (Backend::Etcd, FairQueue | Kinds) => true,
            #[cfg(feature = "etcd")]
            (Backend::Etcd, _) => false,
            (Backend::SingleProcess, FairQueue | SecondOpen) => false,
            _ => true,
        }
    }

    /// `result`'s value where the backend has `capability`; where it has not, checks that
    /// `result` is the refusal a missing feature gets (`InvalidArgument`) and gives `None`.
    pub fn if_supported<T: std::fmt::Debug>(
        &self,
        capability: Capability,
        result: fencelock::Result<T>,
    ) -> Option<T> {
        if self.supports(capability) {
            return Some(result.unwrap_or_else(|err| panic!("{capability:?}: {err:?}")));
        }
        match result {
            Err(Error::InvalidArgument(_)) => None,
            other => panic!("without {capability:?}: expected InvalidArgument, got {other:?}"),
        }
    }

    /// Checks that `later` was granted after `earlier`, as the first grant after it: one
    /// above it where tokens follow each other, higher where they do not.
    pub fn assert_next(&self, earlier: u64, later: u64) {
        if self.supports(Capability::ConsecutiveTokens) {
            assert_eq!(later, earlier + 1);
        } else {
            assert!(later > earlier, "{later} after {earlier}");
        }
    }

    /// The options the harness opens with on this backend, from `options`.
    fn adapted(&self, options: &Options) -> Options {
        let mut options = options.clone();
        match self.backend {
            Backend::SingleProcess => options.mode = Mode::SingleProcess,
            Backend::Logged => options.write_log = true,
            _ => {}
        }
        options
    }

    /// Opens the test's store once more with `options`, as it is: for refusals.
    pub fn try_open(&self, options: &Options) -> fencelock::Result<Store> {
        Store::open_with(&self.location, &self.adapted(options))
    }

    /// Opens the test's store with `options`, checking that it is on the path the backend
    /// names (through the server, when served).
    fn open(&self, options: &Options) -> Store {
        let store = self
            .try_open(options)
            .unwrap_or_else(|err| panic!("open {:?} store: {err}", self.backend));
        if self.backend == Backend::Served {
            assert_eq!(store.server(), Some(std::process::id()), "not served");
        }
        if self.backend == Backend::Logged && !options.read_only {
            assert!(self.log_segments() > 0, "no redo log beside the store");
        }
        store
    }

    /// How many segments of the redo log lie beside the store file.
    fn log_segments(&self) -> usize {
        let mut prefix = self.location.file_name().unwrap_or_default().to_owned();
        prefix.push(".wal.");
        let prefix = prefix.into_encoded_bytes();
        let names = std::fs::read_dir(self.location.parent().expect("a directory"));
        names
            .expect("the store's directory")
            .filter(|entry| {
                let name = entry.as_ref().expect("an entry").file_name();
                name.as_encoded_bytes().starts_with(&prefix)
            })
            .count()
    }

    /// The test's store, opened at the first call (with default options).
    pub fn store(&self) -> Store {
        let mut store = self.store.lock().unwrap();
        let opened = store.get_or_insert_with(|| self.open(&self.options.lock().unwrap()));
        opened.clone()
    }

    /// The test's store, opened now with `options` (the first open of the test).
    pub fn store_with(&self, options: &Options) -> Store {
        let mut store = self.store.lock().unwrap();
        assert!(store.is_none(), "the test's store is open already");
        *self.options.lock().unwrap() = options.clone();
        store.insert(self.open(options)).clone()
    }

    /// Another open of the test's store, with the same options: a store of its own where the
    /// backend allows one; in single-process mode, which refuses a second open, a clone.
    pub fn another(&self) -> Store {
        let store = self.store();
        if self.supports(Capability::SecondOpen) {
            self.open(&self.options.lock().unwrap())
        } else {
            store
        }
    }

    /// Lets go of the harness's handle of the test's store: closed once the test dropped
    /// its own handles and holders too.
    pub fn close(&self) {
        drop(self.store.lock().unwrap().take());
    }

    /// The test's store closed and opened again (with the options it had): the test must have
    /// dropped its handles and holders, for a single-process store.
    pub fn reopen(&self) -> Store {
        self.close();
        self.store()
    }

    /// A TTL that runs out soon, as short as the backend keeps.
    pub fn short_ttl(&self) -> Duration {
        match self.backend {
            #[cfg(feature = "etcd")]
            Backend::Etcd => fencelock::ETCD_MIN_TTL,
            _ => Duration::from_millis(50),
        }
    }

    /// Waits until `holder`'s lease ran out: past its TTL, and (etcd checks expiries twice a
    /// second) until the backend no longer counts it held. A lease still held a minute later
    /// fails the test.
    #[allow(clippy::unused_self)] // One of the harness's steps, called as the others are.
    pub fn expire(&self, holder: &Holder) {
        thread::sleep(holder.remaining() + Duration::from_millis(30));
        for _ in 0..600 {
            if !holder.is_held().unwrap() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("{holder:?} still held a minute after its TTL");
    }
}

/// Checks that `result` is the refusal of a lock that the grant `token` holds.
#[track_caller]
pub fn assert_held_by<T: std::fmt::Debug>(result: fencelock::Result<T>, token: u64) {
    match result {
        Err(Error::Locked { token: holder, .. }) if holder == token => {}
        other => panic!("expected Locked by {token}, got {other:?}"),
    }
}

/// Checks that a write through `holder` is refused as lost, and that `key` holds nothing.
#[track_caller]
pub fn assert_write_lost(store: &Store, holder: &Holder, key: &[u8]) {
    let put = holder.put(key, b"v");
    assert!(matches!(put, Err(Error::LockLost { .. })), "{put:?}");
    assert!(store.get(key).unwrap().is_none());
}

/// Starts a server of `path` in a thread, returning once it serves.
fn serve(path: &Path) -> Serving {
    let stop = Cancel::new();
    let options = ServeOptions {
        cancel: Some(stop.clone()),
        ..ServeOptions::default()
    };
    let (started, serving) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    let thread = thread::spawn(move || {
        let server = Server::start(&path, &options).expect("start the server");
        started.send(()).unwrap();
        server.run(&options).expect("the server failed");
    });
    serving
        .recv()
        .expect("the server did not start (see its panic)");
    Serving {
        stop,
        thread: Some(thread),
    }
}

/// The one etcd node of the test binary, started at the first etcd test.
#[cfg(feature = "etcd")]
mod etcd {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Mutex, OnceLock};

    use crate::cluster::Cluster;

    static NODE: OnceLock<Mutex<Cluster>> = OnceLock::new();

    /// The store string of a key prefix that no other test of this binary uses.
    pub fn fresh_url() -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let prefix = format!("rules-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        node().lock().unwrap().url(&prefix)
    }

    fn node() -> &'static Mutex<Cluster> {
        NODE.get_or_init(|| {
            // etcd dies with the thread that started it (cluster.rs), so it is started from
            // one that lives as long as the test process: then it dies with the process,
            // however that ends. A normal exit stops it and removes its data first.
            let (started, cluster) = mpsc::channel();
            std::thread::Builder::new()
                .name("etcd-parent".into())
                .spawn(move || {
                    started.send(Cluster::single()).unwrap();
                    loop {
                        std::thread::park();
                    }
                })
                .expect("a thread for etcd");
            let cluster = cluster
                .recv()
                .expect("etcd did not start (see the panic above)");
            // SAFETY: registers a function without arguments that runs at exit.
            assert_eq!(unsafe { libc::atexit(shut_down) }, 0);
            Mutex::new(cluster)
        })
    }

    extern "C" fn shut_down() {
        if let Some(node) = NODE.get() {
            let mut cluster = node
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cluster.shut_down();
        }
    }
}
