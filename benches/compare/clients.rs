//! One client per compared system, all behind the same small interface: try to acquire a lock,
//! wait for it, write a value guarded by the lease, release it.
//!
//! Each peer is set up the way a careful user would use it for leased locks with fencing tokens:
//! a token that grows at every grant, a release that touches only its own lease, and a write
//! that is refused once the lease is lost or a newer token wrote the key.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{Error, Holder, Mode, Options, Store};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// The lease every system grants; long enough never to run out during a cell.
pub const TTL: Duration = Duration::from_secs(30);
/// How long a waiting acquire may wait before the bench gives up.
const WAIT_LIMIT: Duration = Duration::from_secs(60);
/// How often a polling waiter (SQLite, Redis) tries again; fencelock polls another process's
/// release at the same period.
const POLL: Duration = Duration::from_millis(1);

/// The systems compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    FencelockMulti,
    /// Multi-process mode with `write_log` on: fenced writes go to the redo log beside the
    /// store file, one `fdatasync` shared by the processes writing at that moment (issue 35).
    FencelockLog,
    /// Multi-process mode with `share_commits` off: each process commits its own writes.
    FencelockAlone,
    FencelockSingle,
    /// Multi-process mode through a server (`fencelock serve`) in a process of its own.
    FencelockServed,
    Sqlite,
    RedisAlways,
    RedisEverysec,
    Flock,
    /// An open-file-description lock (`fcntl(F_OFD_SETLK)`), what fencelock's liveness locks
    /// are: the kernel's lock cycle alone.
    Ofd,
    /// The same lock and a token bumped durably at every grant (`pwrite` + `fdatasync`): what a
    /// grant costs that makes its token durable itself.
    OfdDurable,
    /// The disk's floor of a durable write, in the fenced-put workloads only: an OFD lock held
    /// through the cell, and each write a `pwrite` in place into a preallocated file and an
    /// `fdatasync` (a data-only sync: the file's size never changes); no token, no check.
    Floor,
    /// fencelock on an etcd node on loopback (the cargo feature `etcd`).
    EtcdOne,
    /// fencelock on a three-node etcd cluster on loopback.
    EtcdThree,
    /// One plain etcd Get a cycle on `EtcdOne`'s node: the round trip a
    /// grant on etcd is measured against (one thread only).
    EtcdGet,
    /// etcd's own Go `concurrency.Mutex` on `EtcdOne`'s node, with a Put
    /// guarded by the mutex's ownership as the fenced write: the anchor of the etcd rows
    /// (`benches/compare/mutex`, built with `go`; a program a process).
    EtcdMutex,
}

impl System {
    pub const ALL: [System; 16] = [
        System::FencelockMulti,
        System::FencelockLog,
        System::FencelockAlone,
        System::FencelockSingle,
        System::FencelockServed,
        System::Sqlite,
        System::RedisAlways,
        System::RedisEverysec,
        System::Flock,
        System::Ofd,
        System::OfdDurable,
        System::Floor,
        System::EtcdGet,
        System::EtcdMutex,
        System::EtcdOne,
        System::EtcdThree,
    ];

    /// The name in tables and the chart.
    pub fn label(self) -> &'static str {
        match self {
            System::FencelockMulti => "fencelock (multi-process mode)",
            System::FencelockLog => "fencelock (multi-process, writes through the redo log)",
            System::FencelockAlone => "fencelock (multi-process, each process commits alone)",
            System::FencelockSingle => "fencelock (single-process mode)",
            System::FencelockServed => "fencelock (served: fencelock serve)",
            System::Sqlite => "SQLite (WAL, synchronous=FULL)",
            System::RedisAlways => "Redis (appendfsync always)",
            System::RedisEverysec => "Redis (appendfsync everysec, not durable)",
            System::Flock => "flock(2) (no durability, no token)",
            System::Ofd => "kernel: OFD lock (no durability, no token)",
            System::OfdDurable => "kernel: OFD lock + durable token (pwrite+fdatasync)",
            System::Floor => "kernel: in-place pwrite+fdatasync (the disk's floor)",
            System::EtcdOne => "fencelock on etcd (1 node, loopback)",
            System::EtcdThree => "fencelock on etcd (3 nodes, loopback)",
            System::EtcdGet => "etcd alone: one Get (1 node, loopback)",
            System::EtcdMutex => "etcd alone: Go concurrency.Mutex (1 node, loopback)",
        }
    }

    /// The name passed to worker processes.
    pub fn key(self) -> &'static str {
        match self {
            System::FencelockMulti => "fencelock-mp",
            System::FencelockLog => "fencelock-log",
            System::FencelockAlone => "fencelock-mp-alone",
            System::FencelockSingle => "fencelock-sp",
            System::FencelockServed => "fencelock-served",
            System::Sqlite => "sqlite",
            System::RedisAlways => "redis-always",
            System::RedisEverysec => "redis-everysec",
            System::Flock => "flock",
            System::Ofd => "ofd",
            System::OfdDurable => "ofd-durable",
            System::Floor => "floor",
            System::EtcdOne => "etcd-1",
            System::EtcdThree => "etcd-3",
            System::EtcdGet => "etcd-get",
            System::EtcdMutex => "etcd-mutex",
        }
    }

    pub fn from_key(key: &str) -> Option<System> {
        System::ALL.into_iter().find(|system| system.key() == key)
    }

    /// Whether several processes can share it.
    pub fn multi_process(self) -> bool {
        !matches!(self, System::FencelockSingle | System::EtcdGet)
    }

    pub fn is_fencelock(self) -> bool {
        matches!(
            self,
            System::FencelockMulti
                | System::FencelockLog
                | System::FencelockAlone
                | System::FencelockSingle
                | System::FencelockServed
        )
    }

    pub fn is_redis(self) -> bool {
        matches!(self, System::RedisAlways | System::RedisEverysec)
    }

    /// The system its ratios are taken against, round by round, when both ran: SQLite for
    /// fencelock on a file, etcd's own `concurrency.Mutex` for fencelock on the same etcd node.
    pub fn anchor(self) -> Option<System> {
        if self.is_fencelock() {
            return Some(System::Sqlite);
        }
        (self == System::EtcdOne).then_some(System::EtcdMutex)
    }

    /// The server it runs on: the systems of one server run beside each other, round by round
    /// (the etcd rows of one member count on the very same node).
    pub fn server(self) -> Server {
        match self {
            System::RedisAlways => Server::Redis("always"),
            System::RedisEverysec => Server::Redis("everysec"),
            _ => self.etcd_members().map_or(Server::Files, Server::Etcd),
        }
    }

    /// The etcd members it needs, if it is an etcd system.
    pub fn etcd_members(self) -> Option<usize> {
        match self {
            System::EtcdOne | System::EtcdGet | System::EtcdMutex => Some(1),
            System::EtcdThree => Some(3),
            _ => None,
        }
    }
}

/// What a group of systems runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// Files in a directory of each cell's own: nothing to start.
    Files,
    /// A Redis server with this `appendfsync`.
    Redis(&'static str),
    /// An etcd cluster of this many members.
    Etcd(usize),
}

/// Where a client connects: the directory of the file-based systems, a Redis port, or an etcd
/// store string.
#[derive(Debug, Clone)]
pub enum Target {
    Dir(PathBuf),
    Redis(u16),
    Etcd(String),
}

impl Target {
    /// The text form handed to worker processes.
    pub fn encode(&self) -> String {
        match self {
            Target::Dir(dir) => dir.display().to_string(),
            Target::Redis(port) => format!("redis:{port}"),
            Target::Etcd(url) => url.clone(),
        }
    }

    pub fn decode(text: &str) -> Target {
        if text.starts_with("etcd://") {
            return Target::Etcd(text.to_owned());
        }
        match text.strip_prefix("redis:") {
            Some(port) => Target::Redis(port.parse().expect("redis port")),
            None => Target::Dir(PathBuf::from(text)),
        }
    }

    fn dir(&self) -> &Path {
        match self {
            Target::Dir(dir) => dir,
            Target::Redis(_) | Target::Etcd(_) => {
                panic!("a file-based system was given a server's target")
            }
        }
    }
}

/// A granted lease of any system.
pub enum Lease {
    Holder(Holder),
    Token { name: String, token: i64 },
    File(String),
}

/// The interface every system implements. Failures other than a refusal panic: a bench cell
/// that hits one is broken.
pub trait Client: Send {
    /// Tries once; `None` when the lock is held.
    fn try_acquire(&mut self, name: &str) -> Option<Lease>;
    /// Waits until the lock is free and takes it; by default by polling `try_acquire`, for the
    /// peers that have no waiting form.
    fn acquire_wait(&mut self, name: &str) -> Lease {
        poll_until_acquired(|| self.try_acquire(name))
    }
    /// Writes `value` under `key`, refused unless `lease` is still current and no newer token
    /// wrote `key`.
    fn write(&mut self, lease: &Lease, key: &str, value: &[u8]);
    fn release(&mut self, lease: Lease);
}

/// What one cell of the comparison shares: the open fencelock store (threads of one process
/// share it, as an application would), or the target the clients connect to.
pub struct Shared {
    pub system: System,
    pub target: Target,
    store: Option<Store>,
    /// The server process of `FencelockServed`, stopped when its stdin closes.
    server: Option<std::process::Child>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            drop(server.stdin.take());
            let _ = server.wait();
        }
    }
}

/// The environment variable that makes this program a store's server (`FencelockServed`).
pub const SERVE_ENV: &str = "FENCELOCK_COMPARE_SERVE";

/// The server process: serves the store at `path` until its stdin closes.
pub fn serve(path: &str) {
    let stop = fencelock::Cancel::new();
    let options = fencelock::ServeOptions {
        cancel: Some(stop.clone()),
        ..fencelock::ServeOptions::default()
    };
    let server = fencelock::Server::start(path, &options).expect("start the server");
    println!("serving");
    std::io::Write::flush(&mut std::io::stdout()).expect("stdout");
    thread::spawn(move || {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        stop.cancel();
    });
    server.run(&options).expect("serve");
}

/// Starts the server of the store at `path` in a process of its own, and waits until it serves.
fn start_server(path: &Path) -> std::process::Child {
    let mut child = std::process::Command::new(std::env::current_exe().expect("this program"))
        .env(SERVE_ENV, path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the server process");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the server's report");
    assert_eq!(line.trim(), "serving", "the server did not start");
    child
}

impl Shared {
    /// Attaches to `system` in `target`; with `create`, first creates the SQLite schema (the
    /// fencelock store creates itself). A fencelock store stays open, shared by the clients.
    pub fn prepare(system: System, target: Target, create: bool) -> Shared {
        let server = (system == System::FencelockServed && create)
            .then(|| start_server(&target.dir().join("locks.db")));
        let store = match system {
            System::FencelockMulti
            | System::FencelockLog
            | System::FencelockAlone
            | System::FencelockSingle
            | System::FencelockServed => Some(open_store(system, target.dir())),
            System::Sqlite => {
                if create {
                    SqliteClient::create_schema(target.dir());
                }
                None
            }
            System::EtcdOne | System::EtcdThree => {
                let Target::Etcd(url) = &target else {
                    panic!("etcd without a store string")
                };
                Some(Store::open(url).expect("open the etcd store"))
            }
            System::RedisAlways
            | System::RedisEverysec
            | System::Flock
            | System::Ofd
            | System::OfdDurable
            | System::Floor
            | System::EtcdGet
            | System::EtcdMutex => None,
        };
        Shared {
            system,
            target,
            store,
            server,
        }
    }

    /// The store's commits and grants so far (from its metrics: every process's, in
    /// multi-process mode), for a fencelock system that commits to its file: with the redo log
    /// the metrics count every acknowledged write as a commit of its own, so that they cannot
    /// tell the store file's commits (checkpoints, token reservations) apart.
    pub fn commits_and_grants(&self) -> Option<(u64, u64)> {
        if !self.system.is_fencelock() || self.system == System::FencelockLog {
            return None;
        }
        let metrics = self.store.as_ref()?.metrics().expect("fencelock metrics");
        Some((metrics.commits, metrics.grants))
    }

    /// A new client; fencelock clients of one process share the store.
    pub fn client(&self) -> Box<dyn Client> {
        match self.system {
            System::FencelockMulti
            | System::FencelockLog
            | System::FencelockAlone
            | System::FencelockSingle
            | System::FencelockServed
            | System::EtcdOne
            | System::EtcdThree => Box::new(FencelockClient {
                store: self.store.clone().expect("the store opened in prepare"),
            }),
            System::Sqlite => Box::new(SqliteClient::connect(self.target.dir())),
            System::EtcdGet => {
                let Target::Etcd(url) = &self.target else {
                    panic!("etcd without a store string")
                };
                etcd_get_client(url)
            }
            System::EtcdMutex => unreachable!("the Go program is the Mutex row's client"),
            System::RedisAlways | System::RedisEverysec => {
                let Target::Redis(port) = self.target else {
                    panic!("Redis without a port")
                };
                Box::new(RedisClient::connect(port))
            }
            System::Flock | System::Ofd | System::OfdDurable | System::Floor => {
                Box::new(FileLockClient {
                    system: self.system,
                    dir: self.target.dir().to_path_buf(),
                    locks: HashMap::new(),
                    values: HashMap::new(),
                    tokens: None,
                })
            }
        }
    }
}

fn open_store(system: System, dir: &Path) -> Store {
    let mode = if system == System::FencelockSingle {
        Mode::SingleProcess
    } else {
        Mode::MultiProcess
    };
    let options = Options {
        mode,
        share_commits: system != System::FencelockAlone,
        write_log: system == System::FencelockLog,
        ..Options::default()
    };
    Store::open_with(dir.join("locks.db"), &options).expect("open the fencelock store")
}

struct FencelockClient {
    store: Store,
}

impl Client for FencelockClient {
    fn try_acquire(&mut self, name: &str) -> Option<Lease> {
        match self.store.acquire(name, TTL) {
            Ok(holder) => Some(Lease::Holder(holder)),
            Err(Error::Locked { .. }) => None,
            Err(err) => panic!("fencelock acquire: {err}"),
        }
    }

    fn acquire_wait(&mut self, name: &str) -> Lease {
        let holder = self
            .store
            .acquire_wait(name, TTL, WAIT_LIMIT)
            .expect("fencelock acquire_wait");
        Lease::Holder(holder)
    }

    fn write(&mut self, lease: &Lease, key: &str, value: &[u8]) {
        let Lease::Holder(holder) = lease else {
            unreachable!()
        };
        holder.put(key.as_bytes(), value).expect("fencelock put");
    }

    fn release(&mut self, lease: Lease) {
        let Lease::Holder(holder) = lease else {
            unreachable!()
        };
        holder.release().expect("fencelock release");
    }
}

/// A lease table and a token counter in SQLite, WAL journal, `synchronous=FULL` (each commit
/// is fsynced), waits for the write lock through `busy_timeout`.
struct SqliteClient {
    conn: Connection,
}

impl SqliteClient {
    fn open(dir: &Path) -> Connection {
        let conn = Connection::open(dir.join("locks.sqlite")).expect("open sqlite");
        conn.busy_timeout(WAIT_LIMIT).expect("busy_timeout");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("journal_mode");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("synchronous");
        conn
    }

    fn create_schema(dir: &Path) {
        SqliteClient::open(dir)
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS leases (
                     name TEXT PRIMARY KEY, token INTEGER NOT NULL, expires INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS counter (
                     id INTEGER PRIMARY KEY CHECK (id = 0), last INTEGER NOT NULL);
                 INSERT OR IGNORE INTO counter VALUES (0, 0);
                 CREATE TABLE IF NOT EXISTS vals (
                     key TEXT PRIMARY KEY, token INTEGER NOT NULL, value BLOB NOT NULL);",
            )
            .expect("sqlite schema");
    }

    fn connect(dir: &Path) -> SqliteClient {
        SqliteClient {
            conn: SqliteClient::open(dir),
        }
    }
}

/// Nanoseconds of the host-wide boot-time clock, as SQLite's and Redis's lease times.
fn now_ns() -> i64 {
    i64::try_from(fencelock::boottime_ns()).expect("boot time fits i64")
}

impl Client for SqliteClient {
    fn try_acquire(&mut self, name: &str) -> Option<Lease> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("sqlite begin");
        let now = now_ns();
        let expires: Option<i64> = tx
            .prepare_cached("SELECT expires FROM leases WHERE name = ?1")
            .expect("prepare")
            .query_row([name], |row| row.get(0))
            .optional()
            .expect("sqlite select");
        if expires.is_some_and(|expires| expires > now) {
            return None; // dropping the transaction rolls it back
        }
        let token: i64 = tx
            .prepare_cached("UPDATE counter SET last = last + 1 WHERE id = 0 RETURNING last")
            .expect("prepare")
            .query_row([], |row| row.get(0))
            .expect("sqlite counter");
        let ttl = i64::try_from(TTL.as_nanos()).expect("ttl");
        tx.prepare_cached(
            "INSERT INTO leases (name, token, expires) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET token = excluded.token, expires = excluded.expires",
        )
        .expect("prepare")
        .execute(params![name, token, now + ttl])
        .expect("sqlite lease");
        tx.commit().expect("sqlite commit");
        Some(Lease::Token {
            name: name.to_owned(),
            token,
        })
    }

    fn write(&mut self, lease: &Lease, key: &str, value: &[u8]) {
        let Lease::Token { name, token } = lease else {
            unreachable!()
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("sqlite begin");
        let current: Option<(i64, i64)> = tx
            .prepare_cached("SELECT token, expires FROM leases WHERE name = ?1")
            .expect("prepare")
            .query_row([name], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
            .expect("sqlite select");
        assert!(
            current.is_some_and(|(t, expires)| t == *token && expires > now_ns()),
            "sqlite lease lost"
        );
        let highest: Option<i64> = tx
            .prepare_cached("SELECT token FROM vals WHERE key = ?1")
            .expect("prepare")
            .query_row([key], |row| row.get(0))
            .optional()
            .expect("sqlite select");
        assert!(highest.is_none_or(|h| h <= *token), "sqlite stale token");
        tx.prepare_cached(
            "INSERT INTO vals (key, token, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET token = excluded.token, value = excluded.value",
        )
        .expect("prepare")
        .execute(params![key, token, value])
        .expect("sqlite write");
        tx.commit().expect("sqlite commit");
    }

    fn release(&mut self, lease: Lease) {
        let Lease::Token { name, token } = lease else {
            unreachable!()
        };
        self.conn
            .prepare_cached("DELETE FROM leases WHERE name = ?1 AND token = ?2")
            .expect("prepare")
            .execute(params![name, token])
            .expect("sqlite release");
    }
}

fn poll_until_acquired(mut attempt: impl FnMut() -> Option<Lease>) -> Lease {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        if let Some(lease) = attempt() {
            return lease;
        }
        assert!(Instant::now() < deadline, "waited too long for a lock");
        thread::sleep(POLL);
    }
}

/// Acquire: `SET NX PX` of the lease to the next token, then `INCR` of the counter, in one Lua
/// script. Release: delete only if the lease still holds this token.
const REDIS_ACQUIRE: &str = r"
local t = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if not redis.call('SET', KEYS[1], t, 'NX', 'PX', ARGV[1]) then return 0 end
redis.call('INCR', KEYS[2])
return t";
const REDIS_RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";
const REDIS_WRITE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('lease lost') end
local highest = tonumber(redis.call('HGET', KEYS[2], 't') or '0')
if tonumber(ARGV[1]) < highest then return redis.error_reply('stale token') end
redis.call('HSET', KEYS[2], 't', ARGV[1], 'v', ARGV[2])
return 1";

struct RedisClient {
    conn: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
    write: redis::Script,
}

impl RedisClient {
    fn connect(port: u16) -> RedisClient {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("redis url");
        RedisClient {
            conn: client.get_connection().expect("redis connect"),
            acquire: redis::Script::new(REDIS_ACQUIRE),
            release: redis::Script::new(REDIS_RELEASE),
            write: redis::Script::new(REDIS_WRITE),
        }
    }
}

impl Client for RedisClient {
    fn try_acquire(&mut self, name: &str) -> Option<Lease> {
        let token: i64 = self
            .acquire
            .key(format!("lease:{name}"))
            .key("last_token")
            .arg(u64::try_from(TTL.as_millis()).unwrap())
            .invoke(&mut self.conn)
            .expect("redis acquire");
        (token > 0).then(|| Lease::Token {
            name: name.to_owned(),
            token,
        })
    }

    fn write(&mut self, lease: &Lease, key: &str, value: &[u8]) {
        let Lease::Token { name, token } = lease else {
            unreachable!()
        };
        let _: i64 = self
            .write
            .key(format!("lease:{name}"))
            .key(format!("value:{key}"))
            .arg(*token)
            .arg(value)
            .invoke(&mut self.conn)
            .expect("redis write");
    }

    fn release(&mut self, lease: Lease) {
        let Lease::Token { name, token } = lease else {
            unreachable!()
        };
        let _: i64 = self
            .release
            .key(format!("lease:{name}"))
            .arg(token)
            .invoke(&mut self.conn)
            .expect("redis release");
    }
}

/// The kernel alone, the floor of what a lock on this host can cost: `flock(2)` or an
/// open-file-description lock on one file per lock, and a plain `pwrite` for the write; no
/// durability, no token, no lease. `OfdDurable` adds what a token made durable at every grant
/// costs: a counter file bumped under its own lock, `pwrite` + `fdatasync`, and an
/// `fdatasync` after the write. `Floor` is the OFD lock and the durable write alone, into a
/// value file preallocated when it is opened.
struct FileLockClient {
    system: System,
    dir: PathBuf,
    locks: HashMap<String, File>,
    values: HashMap<String, File>,
    tokens: Option<File>,
}

fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open a lock file")
}

/// Locks (`F_WRLCK`) or unlocks (`F_UNLCK`) the first byte of `file` with an
/// open-file-description lock; waits with `wait`. False when another holds it.
fn ofd_lock(file: &File, kind: libc::c_int, wait: bool) -> bool {
    // SAFETY: an all-zero `flock` is a valid value of that plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::c_short::try_from(kind).unwrap();
    lock.l_whence = libc::c_short::try_from(libc::SEEK_SET).unwrap();
    lock.l_len = 1;
    let command = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    // SAFETY: the descriptor is open while `file` lives, and `lock` outlives the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), command, &lock) } == 0 {
        return true;
    }
    let err = std::io::Error::last_os_error();
    assert!(
        matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)),
        "fcntl: {err}"
    );
    false
}

impl FileLockClient {
    fn lock_file(&mut self, name: &str) -> &File {
        if !self.locks.contains_key(name) {
            let file = open_rw(&self.dir.join(format!("{name}.lock")));
            self.locks.insert(name.to_owned(), file);
        }
        &self.locks[name]
    }

    /// Takes (`wait`: waiting) or releases (`unlock`) the lock `name`.
    fn lock(&mut self, name: &str, wait: bool, unlock: bool) -> bool {
        let system = self.system;
        let file = self.lock_file(name);
        if system != System::Flock {
            return ofd_lock(
                file,
                if unlock { libc::F_UNLCK } else { libc::F_WRLCK },
                wait,
            );
        }
        let operation = match (unlock, wait) {
            (true, _) => libc::LOCK_UN,
            (false, true) => libc::LOCK_EX,
            (false, false) => libc::LOCK_EX | libc::LOCK_NB,
        };
        // SAFETY: the descriptor is open while `self.locks` keeps the file.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return true;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(err.raw_os_error(), Some(libc::EWOULDBLOCK), "flock: {err}");
        false
    }

    /// Bumps the durable token counter (`OfdDurable` only).
    fn bump_token(&mut self) {
        if self.system != System::OfdDurable {
            return;
        }
        let dir = &self.dir;
        let tokens = self
            .tokens
            .get_or_insert_with(|| open_rw(&dir.join("tokens")));
        assert!(ofd_lock(tokens, libc::F_WRLCK, true));
        let mut bytes = [0u8; 8];
        let read = tokens.read_at(&mut bytes, 0).expect("pread");
        let token = if read == 8 {
            u64::from_le_bytes(bytes)
        } else {
            0
        } + 1;
        tokens
            .write_all_at(&token.to_le_bytes(), 0)
            .expect("pwrite");
        tokens.sync_data().expect("fdatasync");
        assert!(ofd_lock(tokens, libc::F_UNLCK, false));
    }

    fn granted(&mut self, name: &str) -> Lease {
        self.bump_token();
        Lease::File(name.to_owned())
    }
}

/// Writes zeros over the first page (at least `len` bytes) of `file` and syncs it with its
/// size and inode, so that later writes there are overwrites in place: an `fdatasync` then
/// syncs data alone.
fn preallocate(file: &File, len: usize) {
    file.write_all_at(&vec![0; len.max(4096)], 0)
        .expect("pwrite zeros");
    file.sync_all().expect("fsync");
}

impl Client for FileLockClient {
    fn try_acquire(&mut self, name: &str) -> Option<Lease> {
        self.lock(name, false, false).then(|| self.granted(name))
    }

    fn acquire_wait(&mut self, name: &str) -> Lease {
        assert!(self.lock(name, true, false));
        self.granted(name)
    }

    fn write(&mut self, _lease: &Lease, key: &str, value: &[u8]) {
        if !self.values.contains_key(key) {
            let file = open_rw(&self.dir.join(format!("{key}.value")));
            if self.system == System::Floor {
                preallocate(&file, value.len());
            }
            self.values.insert(key.to_owned(), file);
        }
        let file = &self.values[key];
        file.write_all_at(value, 0).expect("pwrite");
        if matches!(self.system, System::OfdDurable | System::Floor) {
            file.sync_data().expect("fdatasync");
        }
    }

    fn release(&mut self, lease: Lease) {
        let Lease::File(name) = lease else {
            unreachable!()
        };
        assert!(self.lock(&name, false, true));
    }
}

/// A `redis-server` of this program: loopback only, a free port, its own directory; killed
/// when dropped.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one with `appendfsync` set to `fsync`; `None` when `redis-server` is not on PATH.
    pub fn start(fsync: &str) -> Option<RedisServer> {
        let dir = tempfile::tempdir().expect("tempdir");
        for _attempt in 0..5 {
            // Free now; another program could take it before Redis binds, hence the retries.
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free loopback port")
                .port();
            let child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--dir", &dir.path().display().to_string()])
                .args(["--appendonly", "yes", "--appendfsync", fsync])
                .args(["--save", "", "--daemonize", "no", "--protected-mode", "yes"])
                .args(["--logfile", "redis.log"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match child {
                Ok(child) => child,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
                Err(err) => panic!("starting redis-server: {err}"),
            };
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if child.try_wait().expect("redis-server status").is_some() {
                    break;
                }
                if let Ok(mut conn) = client.get_connection() {
                    if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                        return Some(RedisServer {
                            child,
                            port,
                            _dir: dir,
                        });
                    }
                }
                thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start on a free loopback port")
    }

    /// Empties the database between cells.
    pub fn flush(&self) {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("url");
        let mut conn = client.get_connection().expect("redis connect");
        redis::cmd("FLUSHALL")
            .query::<String>(&mut conn)
            .expect("FLUSHALL");
    }

    pub fn version() -> Option<String> {
        let out = Command::new("redis-server")
            .arg("--version")
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        Some(version.to_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain etcd client doing one Get a cycle (`try_acquire` reads the key, `release` does
/// nothing), waited on from this thread as fencelock waits on its runtime.
#[cfg(feature = "etcd")]
struct EtcdGetClient {
    runtime: tokio::runtime::Runtime,
    client: etcd_client::Client,
}

#[cfg(feature = "etcd")]
fn etcd_get_client(url: &str) -> Box<dyn Client> {
    let endpoint = url
        .strip_prefix("etcd://")
        .and_then(|rest| rest.split('/').next())
        .expect("an etcd store string");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let client = runtime
        .block_on(etcd_client::Client::connect([endpoint], None))
        .expect("connect to etcd");
    Box::new(EtcdGetClient { runtime, client })
}

#[cfg(not(feature = "etcd"))]
fn etcd_get_client(_url: &str) -> Box<dyn Client> {
    unreachable!("the etcd rows are skipped without the etcd feature")
}

#[cfg(feature = "etcd")]
impl Client for EtcdGetClient {
    fn try_acquire(&mut self, name: &str) -> Option<Lease> {
        let mut client = self.client.clone();
        self.runtime
            .block_on(client.get(name, None))
            .expect("etcd get");
        Some(Lease::File(name.to_owned()))
    }

    fn write(&mut self, _lease: &Lease, _key: &str, _value: &[u8]) {
        unreachable!("the Get row runs one thread's acquire+release only")
    }

    fn release(&mut self, _lease: Lease) {}
}

#[path = "../../tests/etcd/cluster.rs"]
mod cluster;

/// An etcd cluster on loopback for the etcd rows (the tests' own helper); `None` when the
/// bench was built without the `etcd` feature or `etcd` is not on PATH.
pub struct EtcdServer {
    cluster: cluster::Cluster,
    cells: std::cell::Cell<u32>,
}

impl EtcdServer {
    pub fn start(members: usize) -> Option<EtcdServer> {
        let installed = Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        (cfg!(feature = "etcd") && installed).then(|| EtcdServer {
            cluster: cluster::Cluster::start(members),
            cells: std::cell::Cell::new(0),
        })
    }

    /// A fresh key prefix for each cell.
    pub fn target(&self) -> Target {
        self.cells.set(self.cells.get() + 1);
        Target::Etcd(self.cluster.url(&format!("cell-{}", self.cells.get())))
    }
}

/// The Go program of the Mutex row, built (once a run; Go's own cache makes a rebuild quick)
/// into `target/compare-mutex/`; `Err` says why it cannot be (no `go`, or the build failed).
fn mutex_program() -> Result<PathBuf, String> {
    static PROGRAM: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| root.join("target"), PathBuf::from);
            let program = target.join("compare-mutex").join("mutex");
            let built = Command::new("go")
                .args(["build", "-o"])
                .arg(&program)
                .arg(".")
                .current_dir(root.join("benches/compare/mutex"))
                .stdout(Stdio::null())
                .output();
            match built {
                Ok(output) if output.status.success() => Ok(program),
                Ok(output) => Err(format!(
                    "go build of benches/compare/mutex failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                )),
                Err(err) => Err(format!("cannot run go ({err})")),
            }
        })
        .clone()
}

/// How one Mutex program runs: its workload (`one-thread`, `acquire-write`, `eight-threads`
/// or `fenced-put`), and for a process workload its lock and the wall-clock start every
/// process waits for.
pub struct MutexRun {
    pub workload: &'static str,
    pub lock: Option<String>,
    pub start_unix_ns: Option<u128>,
}

/// Runs the Mutex row's Go program once per entry of `runs`, at the same time, against the
/// etcd store string `url` for `secs`; returns the longest time one measured for and the
/// latency of every cycle of all of them, or why they could not run.
pub fn run_mutex(
    url: &str,
    runs: &[MutexRun],
    secs: Duration,
) -> Result<(Duration, Vec<Duration>), String> {
    let program = mutex_program()?;
    let rest = url.strip_prefix("etcd://").expect("an etcd store string");
    let (endpoint, prefix) = rest.split_once('/').expect("an endpoint and a prefix");
    let children = runs
        .iter()
        .map(|run| {
            let mut command = Command::new(&program);
            command
                .args(["-endpoint", endpoint, "-prefix", prefix])
                .args(["-workload", run.workload])
                .arg("-secs")
                .arg(secs.as_secs_f64().to_string());
            if let Some(lock) = &run.lock {
                command.args(["-lock", lock]);
            }
            if let Some(start) = run.start_unix_ns {
                command.arg("-start-unix-ns").arg(start.to_string());
            }
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|err| format!("cannot start the Mutex program: {err}"))
        })
        .collect::<Result<Vec<Child>, String>>()?;
    let mut window = Duration::ZERO;
    let mut latencies = Vec::new();
    for child in children {
        let output = child
            .wait_with_output()
            .map_err(|err| format!("the Mutex program: {err}"))?;
        if !output.status.success() {
            return Err(format!("the Mutex program failed ({})", output.status));
        }
        let text = String::from_utf8(output.stdout).expect("the Mutex program prints text");
        let mut lines = text.lines().map(|line| {
            Duration::from_nanos(line.trim().parse().expect("nanoseconds, one a line"))
        });
        window = window.max(lines.next().expect("the time measured for"));
        latencies.extend(lines);
    }
    Ok((window, latencies))
}
