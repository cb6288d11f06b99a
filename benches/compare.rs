//! Side-by-side comparison of fencelock with what a user would pick instead, in one run on one
//! machine: SQLite (a lease table and a token counter, durable), Redis (Lua scripts, with
//! `appendfsync always` and `everysec`), `flock(2)` and OFD locks (no durability, no token: the
//! floor), the same OFD lock with a token made durable at every grant (`pwrite` + `fdatasync`);
//! and fencelock on etcd (one node and three, on loopback), the cost of going distributed.
//!
//! The fenced-put workloads (issue 35) time the write alone: each worker holds one lock through
//! the cell and puts 100 bytes to a key of its own, from one thread and from 4, 8 and 16
//! processes. Beside them runs the disk's floor, an in-place `pwrite` + `fdatasync` of a
//! preallocated file, against whose one-thread p50 the "Fenced writes" table reads every row.
//! `fencelock-log` is `fencelock-mp` with every process's store opened with
//! `Options { write_log: true, .. }` (fenced writes through the redo log, docs/design/writes.md);
//! the goals rows of issue 35 read it, and `fencelock-mp` beside it as the baseline.
//!
//! ```text
//! cargo bench --bench compare                 # 2 s a cell
//! cargo bench --bench compare -- --quick      # 1 s a cell
//! cargo bench --bench compare -- --write-docs # also docs/benchmarks.md and docs/compare.svg
//! cargo bench --bench compare -- --secs 3 --only sqlite,fencelock-mp
//! cargo bench --bench compare -- --only fencelock-mp --workloads four-processes
//! cargo bench --bench compare -- --rounds 5    # each cell 5 times, in turn; medians
//! cargo bench --bench compare -- --only fencelock-mp,fencelock-log,sqlite,floor --workloads \
//!     fenced-put,four-process-puts,eight-process-puts,sixteen-process-puts,acquire-write
//! ```
//!
//! The systems of one server run beside each other: with `--rounds N` every one of them runs
//! each workload once a round, in an order reversed every other round, and the tables give the
//! medians; the "Ratios, round by round" table divides each system by its anchor in the same
//! round (fencelock on a file by SQLite, fencelock on etcd by etcd's own Mutex on the same node)
//! and gives the median of those ratios, which a noisy machine moves far less than either side.
//!
//! Writes `target/compare/results.md` and `target/compare/chart.svg`. Worker processes are this
//! same program, started again with `FENCELOCK_COMPARE_WORKER` set. Redis runs only when
//! `redis-server` is on PATH; it listens on a free loopback port, in a temporary directory, and
//! is killed at exit. The etcd rows run when the bench is built with `--features etcd` and
//! `etcd` is on PATH (`cargo bench --features etcd --bench compare -- --only etcd-1,etcd-3`).
//! The etcd rows of one member count share one node (each cell under a key prefix of its own).
//! `etcd-get` is one plain Get a cycle, the round trip a grant on etcd is measured against
//! (`-- --only etcd-get,etcd-1 --workloads one-thread`). `etcd-mutex` is etcd's own Go
//! `concurrency.Mutex` with a Put guarded by its ownership, the anchor a grant, fenced write and
//! release on etcd is measured against (`-- --rounds 10 --only etcd-mutex,etcd-1 --workloads
//! one-thread,acquire-write`), in every workload: a process workload runs one Go program a
//! process, and in the hot-lock one their Locks wait in the Mutex's own queue. It needs `go`,
//! and builds benches/compare/mutex into target/compare-mutex/.

#[path = "compare/clients.rs"]
mod clients;
#[path = "compare/report.rs"]
mod report;
#[path = "compare/stats.rs"]
mod stats;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clients::{Client, EtcdServer, Lease, RedisServer, Server, Shared, System, Target, TTL};
use stats::Histogram;

const WORKER_ENV: &str = "FENCELOCK_COMPARE_WORKER";
/// The value of the write workload: small, like a pointer or a manifest.
const VALUE: [u8; 100] = [b'v'; 100];
/// Time the worker processes get to start and connect before the measurement begins.
const PROCESS_START: Duration = Duration::from_millis(700);

/// The workloads of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// One thread: acquire a lock, release it.
    OneThread,
    /// Eight threads of one process, each on its own lock.
    EightThreads,
    /// Four processes, each on its own lock.
    FourProcesses,
    /// Eight processes, each on its own lock.
    EightProcesses,
    /// Four processes taking turns on one lock (waiting acquires).
    HotLock,
    /// One thread: acquire, write 100 bytes guarded by the lease, release.
    AcquireWrite,
    /// One thread holding its lock: write 100 bytes to its key, guarded by the lease.
    FencedPut,
    /// Four processes, each holding its own lock: fenced writes to a key of its own.
    FourProcessPuts,
    /// The same with eight processes.
    EightProcessPuts,
    /// The same with sixteen processes.
    SixteenProcessPuts,
}

impl Workload {
    pub const ALL: [Workload; 10] = [
        Workload::OneThread,
        Workload::EightThreads,
        Workload::FourProcesses,
        Workload::EightProcesses,
        Workload::HotLock,
        Workload::AcquireWrite,
        Workload::FencedPut,
        Workload::FourProcessPuts,
        Workload::EightProcessPuts,
        Workload::SixteenProcessPuts,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Workload::OneThread => "1 thread: acquire+release",
            Workload::EightThreads => "8 threads, distinct locks: acquire+release",
            Workload::FourProcesses => "4 processes, distinct locks: acquire+release",
            Workload::EightProcesses => "8 processes, distinct locks: acquire+release",
            Workload::HotLock => "4 processes, one lock: waiting acquire+release",
            Workload::AcquireWrite => "1 thread: acquire+fenced write+release",
            Workload::FencedPut => "1 thread, lock held: fenced put",
            Workload::FourProcessPuts => "4 processes, fenced puts on keys of their own",
            Workload::EightProcessPuts => "8 processes, fenced puts on keys of their own",
            Workload::SixteenProcessPuts => "16 processes, fenced puts on keys of their own",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Workload::OneThread => "one-thread",
            Workload::EightThreads => "eight-threads",
            Workload::FourProcesses => "four-processes",
            Workload::EightProcesses => "eight-processes",
            Workload::HotLock => "hot-lock",
            Workload::AcquireWrite => "acquire-write",
            Workload::FencedPut => "fenced-put",
            Workload::FourProcessPuts => "four-process-puts",
            Workload::EightProcessPuts => "eight-process-puts",
            Workload::SixteenProcessPuts => "sixteen-process-puts",
        }
    }

    fn from_key(key: &str) -> Workload {
        Workload::ALL
            .into_iter()
            .find(|workload| workload.key() == key)
            .expect("a workload key")
    }

    /// Workers and whether they are processes (else threads of this process).
    fn workers(self) -> (usize, bool) {
        match self {
            Workload::OneThread | Workload::AcquireWrite | Workload::FencedPut => (1, false),
            Workload::EightThreads => (8, false),
            Workload::FourProcesses | Workload::HotLock | Workload::FourProcessPuts => (4, true),
            Workload::EightProcesses | Workload::EightProcessPuts => (8, true),
            Workload::SixteenProcessPuts => (16, true),
        }
    }

    /// Whether it times fenced writes alone, each worker holding its lock through the cell.
    pub fn fenced_puts(self) -> bool {
        matches!(
            self,
            Workload::FencedPut
                | Workload::FourProcessPuts
                | Workload::EightProcessPuts
                | Workload::SixteenProcessPuts
        )
    }

    /// Whether `system` takes part. The floor is a write alone, so it runs the fenced puts
    /// only; the kernel's locks run no fenced puts: their write is a plain `pwrite` (not
    /// durable), or with the durable token the floor's own write once the lock is held.
    fn compares(self, system: System) -> bool {
        match system {
            System::Floor => self.fenced_puts(),
            System::Flock | System::Ofd | System::OfdDurable => !self.fenced_puts(),
            _ => true,
        }
    }

    /// The lock worker `index` uses.
    fn lock(self, index: usize) -> String {
        match self {
            Workload::HotLock => "hot".into(),
            _ => format!("lock-{index}"),
        }
    }
}

/// What one cell measured.
#[derive(Debug, Clone)]
pub enum Outcome {
    Measured {
        ops_per_sec: f64,
        p50: Duration,
        p99: Duration,
    },
    /// Why the cell did not run.
    Skipped(&'static str),
}

/// The key worker `lock` writes.
fn key(lock: &str) -> String {
    format!("key-{lock}")
}

/// The lease a fenced-put worker holds through its cell, when it took it, and how many
/// writes it made under it.
struct Held {
    lease: Lease,
    since: Instant,
    writes: u64,
}

impl Held {
    /// The next value to write: [`VALUE`] with the count of writes so far in its first 8
    /// bytes, so that every write changes the key. A write that changes nothing would be free
    /// to some peers: SQLite leaves a page clean when an update rewrites a row as it was, and
    /// then commits without a sync.
    fn next_value(&mut self) -> [u8; 100] {
        let mut value = VALUE;
        value[..8].copy_from_slice(&self.writes.to_le_bytes());
        self.writes += 1;
        value
    }
}

/// What a worker does before the measurement starts: in the fenced-put workloads it takes its
/// lock and writes its key once, so that every timed write overwrites the key under a lease
/// already held; the other workloads hold nothing.
fn prepare(client: &mut dyn Client, workload: Workload, lock: &str) -> Option<Held> {
    workload.fenced_puts().then(|| {
        let mut held = Held {
            lease: client.try_acquire(lock).expect("a free lock"),
            since: Instant::now(),
            writes: 0,
        };
        let value = held.next_value();
        client.write(&held.lease, &key(lock), &value);
        held
    })
}

/// Releases what [`prepare`] took, after the measurement.
fn finish(client: &mut dyn Client, held: Option<Held>) {
    if let Some(held) = held {
        client.release(held.lease);
    }
}

/// Runs `workload` on one client until `until`, timing every cycle; `held` is what
/// [`prepare`] took.
fn drive(
    client: &mut dyn Client,
    workload: Workload,
    lock: &str,
    held: &mut Option<Held>,
    until: Instant,
) -> Histogram {
    let key = key(lock);
    let mut histogram = Histogram::default();
    loop {
        // A cell longer than half the lease's TTL takes its lease again, untimed, so that a
        // fenced write never meets a lease that ran out.
        if held
            .as_ref()
            .is_some_and(|held| held.since.elapsed() > TTL / 2)
        {
            finish(client, held.take());
            *held = prepare(client, workload, lock);
        }
        let start = Instant::now();
        if start >= until {
            return histogram;
        }
        match workload {
            Workload::HotLock => {
                let lease = client.acquire_wait(lock);
                client.release(lease);
            }
            Workload::AcquireWrite => {
                let lease = client.try_acquire(lock).expect("a free lock");
                client.write(&lease, &key, &VALUE);
                client.release(lease);
            }
            Workload::FencedPut
            | Workload::FourProcessPuts
            | Workload::EightProcessPuts
            | Workload::SixteenProcessPuts => {
                let held = held.as_mut().expect("a fenced-put worker holds its lease");
                let value = held.next_value();
                client.write(&held.lease, &key, &value);
            }
            Workload::OneThread
            | Workload::EightThreads
            | Workload::FourProcesses
            | Workload::EightProcesses => {
                let lease = client.try_acquire(lock).expect("a free lock");
                client.release(lease);
            }
        }
        histogram.record(start.elapsed());
    }
}

/// The Mutex row's cell: the Go program times its own cycles, into the same histogram.
fn run_mutex(url: &str, workload: Workload, secs: Duration) -> Outcome {
    let (workers, processes) = workload.workers();
    let runs: Vec<clients::MutexRun> = if processes {
        let start = (SystemTime::now() + PROCESS_START)
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos();
        // A process runs one worker: a lock cycle, or fenced puts under a lock it holds.
        let each = if workload.fenced_puts() {
            Workload::FencedPut.key()
        } else {
            Workload::OneThread.key()
        };
        (0..workers)
            .map(|index| clients::MutexRun {
                workload: each,
                lock: Some(workload.lock(index)),
                start_unix_ns: Some(start),
            })
            .collect()
    } else {
        vec![clients::MutexRun {
            workload: workload.key(),
            lock: None,
            start_unix_ns: None,
        }]
    };
    match clients::run_mutex(url, &runs, secs) {
        Ok((window, latencies)) => {
            let mut histogram = Histogram::default();
            for latency in latencies {
                histogram.record(latency);
            }
            outcome(&histogram, window)
        }
        Err(why) => {
            eprintln!("etcd-mutex: {why}");
            Outcome::Skipped("go or the Mutex program's build is missing (see above)")
        }
    }
}

fn outcome(histogram: &Histogram, window: Duration) -> Outcome {
    Outcome::Measured {
        ops_per_sec: histogram.count() as f64 / window.as_secs_f64(),
        p50: histogram.quantile(0.50),
        p99: histogram.quantile(0.99),
    }
}

/// Every cycle the threads timed, and the longest time one measured for.
fn run_threads(
    shared: &Shared,
    workload: Workload,
    threads: usize,
    secs: Duration,
) -> (Histogram, Duration) {
    let barrier = Barrier::new(threads);
    let results: Vec<(Histogram, Duration)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut client = shared.client();
                    let lock = workload.lock(index);
                    let mut held = prepare(client.as_mut(), workload, &lock);
                    barrier.wait();
                    let start = Instant::now();
                    let histogram =
                        drive(client.as_mut(), workload, &lock, &mut held, start + secs);
                    let elapsed = start.elapsed();
                    finish(client.as_mut(), held);
                    (histogram, elapsed)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("bench thread"))
            .collect()
    });
    let mut total = Histogram::default();
    let mut window = Duration::ZERO;
    for (histogram, elapsed) in &results {
        total.merge(histogram);
        window = window.max(*elapsed);
    }
    (total, window)
}

/// Every cycle the worker processes timed, and the longest time one measured for.
fn run_processes(
    shared: &Shared,
    workload: Workload,
    count: usize,
    secs: Duration,
) -> (Histogram, Duration) {
    let exe = std::env::current_exe().expect("this program's path");
    let start_ns = fencelock::boottime_ns() + u64::try_from(PROCESS_START.as_nanos()).unwrap();
    let end_ns = start_ns + u64::try_from(secs.as_nanos()).unwrap();
    let children: Vec<_> = (0..count)
        .map(|index| {
            let spec = format!(
                "{} {} {} {} {start_ns} {end_ns}",
                shared.system.key(),
                workload.key(),
                workload.lock(index),
                shared.target.encode()
            );
            Command::new(&exe)
                .env(WORKER_ENV, spec)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a worker process")
        })
        .collect();
    let mut total = Histogram::default();
    let mut window = Duration::ZERO;
    for child in children {
        let output = child.wait_with_output().expect("worker output");
        assert!(output.status.success(), "a worker process failed");
        let text = String::from_utf8(output.stdout).expect("worker output is text");
        let (elapsed, histogram) = text.split_once('\n').expect("two lines");
        total.merge(&Histogram::decode(histogram));
        window = window.max(Duration::from_nanos(
            elapsed.trim().parse().expect("elapsed"),
        ));
    }
    (total, window)
}

/// A worker process: `<system> <workload> <lock> <target> <start_ns> <end_ns>`. Prints the
/// nanoseconds it measured for, then its histogram.
fn worker(spec: &str) {
    let fields: Vec<&str> = spec.split(' ').collect();
    let [system, workload, lock, target, start_ns, end_ns] = fields[..] else {
        panic!("malformed {WORKER_ENV}: {spec}")
    };
    let system = System::from_key(system).expect("a system key");
    let workload = Workload::from_key(workload);
    let (start_ns, end_ns): (u64, u64) = (start_ns.parse().unwrap(), end_ns.parse().unwrap());
    let shared = Shared::prepare(system, Target::decode(target), false);
    let mut client = shared.client();
    let mut held = prepare(client.as_mut(), workload, lock);
    let now = fencelock::boottime_ns();
    if now < start_ns {
        thread::sleep(Duration::from_nanos(start_ns - now));
    } else {
        eprintln!(
            "worker {lock}: started {} ms late",
            (now - start_ns) / 1_000_000
        );
    }
    let start = Instant::now();
    let until = start + Duration::from_nanos(end_ns.saturating_sub(fencelock::boottime_ns()));
    let histogram = drive(client.as_mut(), workload, lock, &mut held, until);
    let elapsed = start.elapsed().as_nanos();
    finish(client.as_mut(), held);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{elapsed}\n{}", histogram.encode()).expect("stdout");
}

/// One cell: `system` under `workload`, on fresh state. Returns what it measured and, for
/// fencelock, the store file's commits per grant (per write in the fenced-put workloads).
fn run_cell(
    system: System,
    workload: Workload,
    secs: Duration,
    redis: Option<&RedisServer>,
    etcd: Option<&EtcdServer>,
) -> (Outcome, Option<f64>) {
    let (workers, processes) = workload.workers();
    if processes && !system.multi_process() {
        return (Outcome::Skipped("one process only"), None);
    }
    if system == System::EtcdGet && workload != Workload::OneThread {
        return (Outcome::Skipped("the round trip, one thread only"), None);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let target = if system.is_redis() {
        let Some(server) = redis else {
            return (Outcome::Skipped("redis-server not installed"), None);
        };
        server.flush();
        Target::Redis(server.port)
    } else if system.etcd_members().is_some() {
        let Some(server) = etcd else {
            return (
                Outcome::Skipped("built without the etcd feature, or etcd not installed"),
                None,
            );
        };
        server.target()
    } else {
        Target::Dir(dir.path().to_path_buf())
    };
    if system == System::EtcdMutex {
        let Target::Etcd(url) = &target else {
            panic!("etcd without a store string")
        };
        return (run_mutex(url, workload, secs), None);
    }
    let shared = Shared::prepare(system, target, true);
    let before = shared.commits_and_grants();
    let (histogram, window) = if processes {
        run_processes(&shared, workload, workers, secs)
    } else {
        run_threads(&shared, workload, workers, secs)
    };
    // A fenced-put worker writes its key once before the timed writes.
    let writes = histogram.count() + workers as u64;
    let commits_per_op = before.zip(shared.commits_and_grants()).and_then(
        |((commits0, grants0), (commits1, grants1))| {
            let ops = if workload.fenced_puts() {
                writes
            } else {
                grants1 - grants0
            };
            (ops > 0).then(|| (commits1 - commits0) as f64 / ops as f64)
        },
    );
    (outcome(&histogram, window), commits_per_op)
}

struct Args {
    secs: Duration,
    /// Each cell this many times, the systems of a server in turn (medians in the tables).
    rounds: usize,
    write_docs: bool,
    only: Option<Vec<String>>,
    /// Only these workloads (keys such as `four-processes`), for example under strace.
    workloads: Option<Vec<Workload>>,
    command: String,
}

fn parse_args() -> Args {
    let mut args = Args {
        secs: Duration::from_secs(2),
        rounds: 1,
        write_docs: false,
        only: None,
        workloads: None,
        command: if cfg!(feature = "etcd") {
            "cargo bench --features etcd --bench compare".into()
        } else {
            "cargo bench --bench compare".into()
        },
    };
    let mut flags = Vec::new();
    let mut iter = std::env::args().skip(1);
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            // Cargo passes `--bench` to every bench target.
            "--bench" => continue,
            "--quick" => args.secs = Duration::from_secs(1),
            "--write-docs" => args.write_docs = true,
            "--secs" => {
                let value = iter.next().expect("--secs needs a number");
                args.secs = Duration::from_secs_f64(value.parse().expect("--secs needs a number"));
                flags.push(format!("--secs {value}"));
                continue;
            }
            "--rounds" => {
                let value = iter.next().expect("--rounds needs a number");
                args.rounds = value.parse().expect("--rounds needs a number");
                assert!(args.rounds > 0, "--rounds needs a number above 0");
                flags.push(format!("--rounds {value}"));
                continue;
            }
            "--only" => {
                let value = iter.next().expect("--only needs system keys");
                args.only = Some(value.split(',').map(str::to_owned).collect());
                flags.push(format!("--only {value}"));
                continue;
            }
            "--workloads" => {
                let value = iter.next().expect("--workloads needs workload keys");
                args.workloads = Some(value.split(',').map(Workload::from_key).collect());
                flags.push(format!("--workloads {value}"));
                continue;
            }
            other if other.starts_with("--") => {
                eprintln!(
                    "unknown flag {other}; flags: --quick, --secs N, --rounds N, --only KEYS, \
                     --workloads KEYS, --write-docs"
                );
                std::process::exit(2);
            }
            _ => continue,
        }
        flags.push(arg);
    }
    if !flags.is_empty() {
        args.command = format!("{} -- {}", args.command, flags.join(" "));
    }
    args
}

/// `systems` by the server they run on, each group in the order of `systems`.
fn groups(systems: &[System]) -> Vec<(Server, Vec<System>)> {
    let mut groups: Vec<(Server, Vec<System>)> = Vec::new();
    for &system in systems {
        match groups
            .iter_mut()
            .find(|(server, _)| *server == system.server())
        {
            Some((_, group)) => group.push(system),
            None => groups.push((system.server(), vec![system])),
        }
    }
    groups
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        worker(&spec);
        return;
    }
    if let Ok(path) = std::env::var(clients::SERVE_ENV) {
        clients::serve(&path);
        return;
    }
    let args = parse_args();
    let systems: Vec<System> = System::ALL
        .into_iter()
        .filter(|system| {
            args.only
                .as_ref()
                .is_none_or(|only| only.iter().any(|key| key == system.key()))
        })
        .collect();
    let workloads = args
        .workloads
        .clone()
        .unwrap_or_else(|| Workload::ALL.to_vec());
    eprintln!(
        "fencelock compare: {} s a cell, {} systems, {} workloads",
        args.secs.as_secs_f64(),
        systems.len(),
        workloads.len()
    );

    // The systems of one server run beside each other: in each round every one of them runs
    // each workload, one after the other, in an order reversed every other round, so that a
    // ratio of two of them compares cells of the same round on the same server.
    let mut cells = Vec::new();
    for (server, group) in groups(&systems) {
        let redis = match server {
            Server::Redis(fsync) => RedisServer::start(fsync),
            Server::Files | Server::Etcd(_) => None,
        };
        let etcd = match server {
            Server::Etcd(members) => EtcdServer::start(members),
            Server::Files | Server::Redis(_) => None,
        };
        for round in 0..args.rounds {
            for &workload in &workloads {
                let mut order = group.clone();
                if round % 2 == 1 {
                    order.reverse();
                }
                for system in order.into_iter().filter(|&s| workload.compares(s)) {
                    let (outcome, commits_per_op) =
                        run_cell(system, workload, args.secs, redis.as_ref(), etcd.as_ref());
                    eprintln!(
                        "  {}{:<45} {:<42} {}",
                        if args.rounds > 1 {
                            format!("round {:>2}  ", round + 1)
                        } else {
                            String::new()
                        },
                        system.label(),
                        workload.label(),
                        report::describe(&outcome)
                    );
                    cells.push(report::Cell {
                        system,
                        workload,
                        round,
                        outcome,
                        commits_per_op,
                    });
                }
            }
        }
    }
    let singles = if systems.iter().any(|s| s.is_fencelock()) {
        report::single_ops(args.secs / 2)
    } else {
        Vec::new()
    };
    report::write_all(&cells, &singles, &args.command, args.write_docs);
}
