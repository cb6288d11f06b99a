//! A worker process: several threads doing random operations on a few locks and keys, each
//! logged before and after.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use fencelock::Kind as LockKind;
use fencelock::{boottime_ns, Holder, Options, Store};
use parking_lot::Mutex;

use crate::history::{Kind, Op, Outcome};
use crate::rng::Rng;

/// The locks, keys and fence resources of the workload: few, so that operations collide.
/// `lock-a` and `lock-b1` share a bucket of the lease map (FNV-1a modulo 4096), so that the
/// grant of one settles the other's ended record out of the bucket while a grant of it may be
/// stopped between taking its token and publishing it (`ring/map.rs`, the token floor).
pub const LOCKS: [&str; 3] = ["lock-a", "lock-b1", "lock-c"];
/// A semaphore of [`PERMITS`] permits, and a lock taken shared or exclusive.
pub const SEMAPHORE: &str = "sem-a";
pub const PERMITS: u32 = 2;
pub const SHARED_LOCK: &str = "rw-a";
pub const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
pub const RESOURCES: [&str; 2] = ["fence-x", "fence-y"];
/// Tokens from here up are never granted in a run: a write carrying one must be refused.
pub const FORGED_BASE: u64 = 1 << 62;
pub const TTL_MS: (u64, u64) = (50, 300);

pub struct Args {
    pub store: String,
    pub log: String,
    pub index: usize,
    pub threads: u32,
    pub deadline: u64,
    pub seed: u64,
    /// `Options::busy_timeout` of the open and of every write without a timeout of its own.
    pub busy_timeout_ms: u64,
    /// The storm workload (`Thread::storm`) rather than the mixed one.
    pub storm: bool,
    /// `Options::write_log`: fenced writes through the redo log.
    pub write_log: bool,
}

/// Through the redo log, one value in 16 is written this long (its name, `|` and filler), past
/// the log's inline limit of 64 KiB, so that values committed to the store file first go
/// through the run: kills, stops and checkpoints among them. The history keeps the name alone.
const LARGE: usize = 70_000;

/// The bytes a worker writes for the value `name`: a name ending in `L` is padded to
/// [`LARGE`] bytes.
pub fn value_bytes(name: &str) -> Vec<u8> {
    let mut bytes = name.as_bytes().to_vec();
    if name.ends_with('L') {
        bytes.push(b'|');
        bytes.extend(name.bytes().cycle().take(LARGE - bytes.len()));
    }
    bytes
}

/// The name of the value a read returned (what [`value_bytes`] wrote it from), or the bytes
/// themselves, lossily, when they are not such a value: the check then finds no write of them.
pub fn value_name(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.split_once('|') {
        Some((name, _)) if value_bytes(name) == bytes => name.to_owned(),
        _ => text.into_owned(),
    }
}

/// `Options::write_log` as an argument of a worker or an opener.
pub fn write_log_arg(write_log: bool) -> String {
    if write_log { "write-log" } else { "store-file" }.into()
}

/// An argument of [`write_log_arg`]; `None` for anything else.
pub fn parse_write_log(arg: &str) -> Option<bool> {
    match arg {
        "write-log" => Some(true),
        "store-file" => Some(false),
        _ => None,
    }
}

impl Args {
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "worker".into(),
            self.store.clone(),
            self.log.clone(),
            self.index.to_string(),
            self.threads.to_string(),
            self.deadline.to_string(),
            self.seed.to_string(),
            self.busy_timeout_ms.to_string(),
            if self.storm { "storm" } else { "mixed" }.into(),
            write_log_arg(self.write_log),
        ]
    }

    fn parse(argv: &[String]) -> Option<Args> {
        match argv {
            [store, log, index, threads, deadline, seed, busy_timeout_ms, workload, write_log] => {
                Some(Args {
                    store: store.clone(),
                    log: log.clone(),
                    index: index.parse().ok()?,
                    threads: threads.parse().ok()?,
                    deadline: deadline.parse().ok()?,
                    seed: seed.parse().ok()?,
                    busy_timeout_ms: busy_timeout_ms.parse().ok()?,
                    storm: match workload.as_str() {
                        "storm" => true,
                        "mixed" => false,
                        _ => return None,
                    },
                    write_log: parse_write_log(write_log)?,
                })
            }
            _ => None,
        }
    }
}

/// The log of one process. Each line goes out in one `write(2)` under the mutex, so lines of
/// different threads never interleave and a SIGKILL loses at most the line being written.
pub struct Log {
    file: Mutex<File>,
    seq: AtomicU64,
}

impl Log {
    /// Opens (creating it) the log at `path`.
    pub fn create(path: &str) -> Log {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open the log");
        Log {
            file: Mutex::new(file),
            seq: AtomicU64::new(0),
        }
    }

    pub fn begin(&self, thread: u32, kind: Kind, fill: impl FnOnce(&mut Op)) -> Op {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut op = Op::new(thread, seq, kind, 0);
        fill(&mut op);
        let mut file = self.file.lock();
        op.start = boottime_ns();
        file.write_all(op.begin_line().as_bytes())
            .expect("write the worker log");
        op
    }

    /// The end of a grant, with a moment at or before the store's moment of grant (`granted`).
    pub fn end_granted(&self, op: &Op, token: u64, granted: u64) {
        let line = Op::end_line(op.seq, boottime_ns(), &Outcome::Granted(token));
        let line = format!("{}\t{granted}\n", line.trim_end());
        self.file
            .lock()
            .write_all(line.as_bytes())
            .expect("write the worker log");
    }

    pub fn end(&self, op: &Op, outcome: &Outcome) {
        let line = Op::end_line(op.seq, boottime_ns(), outcome);
        self.file
            .lock()
            .write_all(line.as_bytes())
            .expect("write the worker log");
    }
}

pub fn outcome<T>(result: &fencelock::Result<T>, ok: impl FnOnce(&T) -> Outcome) -> Outcome {
    match result {
        Ok(value) => ok(value),
        Err(err) => Outcome::from_error(err),
    }
}

pub fn main(argv: &[String]) -> ExitCode {
    let Some(args) = Args::parse(argv) else {
        eprintln!(
            "usage: torture worker STORE LOG INDEX THREADS DEADLINE_NS SEED BUSY_TIMEOUT_MS \
             mixed|storm write-log|store-file"
        );
        return ExitCode::from(2);
    };
    let log = Arc::new(Log::create(&args.log));
    let options = Options {
        busy_timeout: Duration::from_millis(args.busy_timeout_ms),
        // The storm leaves leases to expire and waits for their names: its own ones too.
        refuse_own_waits: !args.storm,
        write_log: args.write_log,
        ..Options::default()
    };
    // An open refused with `Timeout` (another process held the store past the busy timeout:
    // paused inside a commit or an open) changed nothing; the worker tries again.
    let store = loop {
        let op = log.begin(0, Kind::Open, |_| {});
        let opened = Store::open_with(&args.store, &options);
        log.end(&op, &outcome(&opened, |_| Outcome::Ok));
        match opened {
            Ok(store) => break store,
            Err(fencelock::Error::Timeout { .. }) if boottime_ns() < args.deadline => {}
            // The run ended while the store was held: nothing left to do.
            Err(fencelock::Error::Timeout { .. }) => return ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("worker {}: open failed: {err}", args.index);
                return ExitCode::from(3);
            }
        }
    };
    let threads: Vec<_> = (0..args.threads)
        .map(|thread| {
            let mut worker = Thread {
                store: store.clone(),
                log: Arc::clone(&log),
                thread: thread + 1,
                index: args.index,
                rng: Rng::new(args.seed ^ (u64::from(thread) + 1).wrapping_mul(0x1234_5678_9ABC)),
                held: None,
                seen: Vec::new(),
                writes: 0,
                large: args.write_log,
            };
            let (deadline, storm) = (args.deadline, args.storm);
            thread::spawn(move || {
                if storm {
                    worker.storm(deadline);
                } else {
                    worker.run(deadline);
                }
            })
        })
        .collect();
    let mut failed = false;
    for handle in threads {
        failed |= handle.join().is_err();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[allow(clippy::struct_field_names)] // `thread`: its number, as the log names it.
struct Thread {
    store: Store,
    log: Arc<Log>,
    thread: u32,
    index: usize,
    rng: Rng,
    held: Option<Holder>,
    /// Tokens this thread saw (its own grants, values read, holders met): used for puts by
    /// token alone, which are then sometimes stale.
    seen: Vec<u64>,
    writes: u64,
    /// Whether one value in 16 is large ([`value_bytes`]): through the redo log.
    large: bool,
}

impl Thread {
    fn run(&mut self, deadline: u64) {
        while boottime_ns() < deadline {
            if self.held.is_some() {
                self.step_holding();
            } else {
                self.step_free();
            }
        }
        self.release();
    }

    /// The storm: grants (try-once and waiting) of the two names of the workload that share a bucket of the
    /// lease map, back to back, with leases of 1-10 ms, each released or left to expire (no
    /// writes: their commits would take most of the time): a stop between a grant's taking of
    /// its token and its publishing is likely, and while it lasts the other name's grants
    /// settle this one's ended records out of the bucket (the hostile round's second fencing
    /// break).
    fn storm(&mut self, deadline: u64) {
        const PAIR: [&str; 2] = [LOCKS[0], LOCKS[1]];
        // Leases left to expire, released (and so logged) once their TTL passed.
        let mut expiring: Vec<(Holder, u64)> = Vec::new();
        while boottime_ns() < deadline {
            let now = boottime_ns();
            while let Some(i) = expiring.iter().position(|(_, at)| *at < now) {
                self.held = Some(expiring.swap_remove(i).0);
                self.release();
            }
            let lock = *self.rng.pick(&PAIR);
            let ttl = self.rng.range(1, 10);
            // Even threads try once (the races of grants with releases and with the pruning of
            // ended records), odd ones wait (so that attempts are grants, where stops land).
            let wait = self.rng.range(1, 50);
            let try_once = self.thread % 2 == 0;
            let kind = if try_once {
                Kind::Acquire
            } else {
                Kind::AcquireWait
            };
            let op = self.log.begin(self.thread, kind, |op| {
                op.lock = Some(lock.into());
                op.ttl_ms = ttl;
            });
            let result = if try_once {
                self.store.acquire(lock, Duration::from_millis(ttl))
            } else {
                self.store.acquire_wait(
                    lock,
                    Duration::from_millis(ttl),
                    Duration::from_millis(wait),
                )
            };
            self.granted(&op, result);
            match self.rng.range(0, 1) {
                0 => self.release(),
                // Left to expire.
                _ => {
                    if let Some(holder) = self.held.take() {
                        expiring.push((holder, boottime_ns() + ttl * 1_000_000));
                    }
                }
            }
        }
        for (holder, _) in expiring {
            self.held = Some(holder);
            self.release();
        }
    }

    /// A value no other write of the run carries, so a value read names its write.
    fn next_value(&mut self) -> String {
        self.writes += 1;
        let large = if self.large && self.writes % 16 == 0 {
            "L"
        } else {
            ""
        };
        format!("w{}.{}.{}{large}", self.index, self.thread, self.writes)
    }

    fn ttl(&mut self) -> u64 {
        self.rng.range(TTL_MS.0, TTL_MS.1)
    }

    fn see(&mut self, token: u64) {
        if token != 0 && token < FORGED_BASE {
            if self.seen.len() == 32 {
                self.seen.remove(0);
            }
            self.seen.push(token);
        }
    }

    fn some_token(&mut self) -> u64 {
        if self.seen.is_empty() {
            1
        } else {
            *self.rng.pick(&self.seen)
        }
    }

    fn step_free(&mut self) {
        let lock = *self.rng.pick(&LOCKS);
        let key = *self.rng.pick(&KEYS);
        let roll = self.rng.range(0, 99);
        // A third of the acquires go to the semaphore or the shared lock.
        if roll <= 34 && self.rng.range(0, 2) == 0 {
            return self.acquire_kind(roll >= 20);
        }
        match roll {
            0..=19 => {
                let ttl = self.ttl();
                let op = self.log.begin(self.thread, Kind::Acquire, |op| {
                    op.lock = Some(lock.into());
                    op.ttl_ms = ttl;
                });
                let result = self.store.acquire(lock, Duration::from_millis(ttl));
                self.granted(&op, result);
            }
            20..=34 => {
                let ttl = self.ttl();
                let wait = self.rng.range(0, 300);
                let op = self.log.begin(self.thread, Kind::AcquireWait, |op| {
                    op.lock = Some(lock.into());
                    op.ttl_ms = ttl;
                });
                let result = self.store.acquire_wait(
                    lock,
                    Duration::from_millis(ttl),
                    Duration::from_millis(wait),
                );
                self.granted(&op, result);
            }
            35..=44 => {
                let ttl = self.ttl();
                let value = self.next_value();
                let op = self.log.begin(self.thread, Kind::AcquireAndPut, |op| {
                    op.lock = Some(lock.into());
                    op.key = Some(key.into());
                    op.ttl_ms = ttl;
                    op.value = Some(value.clone());
                });
                let result = self.store.acquire_and_put(
                    lock,
                    Duration::from_millis(ttl),
                    key.as_bytes(),
                    &value_bytes(&value),
                );
                self.granted(&op, result);
            }
            45..=59 => {
                let token = self.some_token();
                self.put(key, token);
            }
            60..=61 => {
                let token = FORGED_BASE + self.rng.range(0, 1 << 20);
                self.put(key, token);
            }
            62..=65 => {
                let token = self.some_token();
                let op = self.log.begin(self.thread, Kind::Delete, |op| {
                    op.key = Some(key.into());
                    op.token = token;
                });
                let result = self.store.delete(key.as_bytes(), token);
                self.log.end(&op, &outcome(&result, |_| Outcome::Ok));
            }
            66..=84 => self.get(key),
            85..=94 => {
                let token = self.some_token();
                self.fence(token);
            }
            _ => thread::sleep(Duration::from_millis(self.rng.range(1, 20))),
        }
    }

    /// A try-once (or, with `wait`, waiting) acquire of a permit of the semaphore, or of the
    /// shared lock, shared or exclusive.
    fn acquire_kind(&mut self, wait: bool) {
        let ttl = self.ttl();
        let wait_ms = self.rng.range(0, 300);
        let (lock, kind, logged) = match self.rng.range(0, 2) {
            0 => (
                SEMAPHORE,
                LockKind::Semaphore(PERMITS),
                if wait {
                    Kind::AcquirePermitWait
                } else {
                    Kind::AcquirePermit
                },
            ),
            1 => (
                SHARED_LOCK,
                LockKind::Shared,
                if wait {
                    Kind::AcquireSharedWait
                } else {
                    Kind::AcquireShared
                },
            ),
            _ => (
                SHARED_LOCK,
                LockKind::Exclusive,
                if wait {
                    Kind::AcquireWait
                } else {
                    Kind::Acquire
                },
            ),
        };
        let op = self.log.begin(self.thread, logged, |op| {
            op.lock = Some(lock.into());
            op.ttl_ms = ttl;
        });
        let ttl = Duration::from_millis(ttl);
        let result = if wait {
            self.store
                .acquire_kind_wait(lock, kind, ttl, Duration::from_millis(wait_ms))
        } else {
            self.store.acquire_kind(lock, kind, ttl)
        };
        self.granted(&op, result);
    }

    fn step_holding(&mut self) {
        let key = *self.rng.pick(&KEYS);
        let mut roll = self.rng.range(0, 99);
        // A shared holder does not write through its lease (refused by design): it writes by
        // token instead.
        if self
            .held
            .as_ref()
            .is_some_and(|h| h.kind() == LockKind::Shared)
            && (35..=59).contains(&roll)
        {
            roll = 60;
        }
        let ttl = self.ttl();
        let value = self.next_value();
        let holder = self.held.as_ref().expect("holding");
        let (lock, token) = (holder.name().to_owned(), holder.token());
        match roll {
            0..=19 => {
                let op = self.log.begin(self.thread, Kind::Extend, |op| {
                    op.lock = Some(lock);
                    op.token = token;
                    op.ttl_ms = ttl;
                });
                let result = holder.extend(Duration::from_millis(ttl));
                let lost = matches!(result, Err(fencelock::Error::LockLost { .. }));
                self.log.end(&op, &outcome(&result, |()| Outcome::Ok));
                if lost {
                    self.release();
                }
            }
            20..=34 => self.release(),
            35..=59 => {
                let op = self.log.begin(self.thread, Kind::HolderPut, |op| {
                    op.lock = Some(lock);
                    op.key = Some(key.into());
                    op.token = token;
                    op.value = Some(value.clone());
                });
                let result = holder.put(key.as_bytes(), &value_bytes(&value));
                let lost = matches!(result, Err(fencelock::Error::LockLost { .. }));
                self.log.end(&op, &outcome(&result, |()| Outcome::Ok));
                if lost {
                    self.release();
                }
            }
            60..=69 => self.put(key, token),
            70..=79 => self.get(key),
            80..=89 => self.fence(token),
            // Idle while holding, so that leases run out under their holders.
            _ => thread::sleep(Duration::from_millis(self.rng.range(10, 150))),
        }
    }

    fn granted(&mut self, op: &Op, result: fencelock::Result<Holder>) {
        let logged = outcome(&result, |holder| Outcome::Granted(holder.token()));
        match &result {
            // When the store granted it, at the latest: its expiry less its TTL, with the
            // clock read before the time left (so never after the store's moment of grant).
            // Unknown (0) once the lease ran out: the time left is then 0, not negative.
            Ok(holder) => {
                let now = boottime_ns();
                let left = u64::try_from(holder.remaining().as_nanos()).unwrap_or(u64::MAX);
                let granted = if left == 0 {
                    0
                } else {
                    (now + left).saturating_sub(op.ttl_ms * 1_000_000)
                };
                self.log.end_granted(op, holder.token(), granted);
            }
            Err(_) => self.log.end(op, &logged),
        }
        match (&logged, result) {
            (Outcome::Granted(token), Ok(holder)) => {
                self.see(*token);
                self.held = Some(holder);
            }
            (Outcome::Locked(token), _) => self.see(*token),
            _ => {}
        }
    }

    fn release(&mut self) {
        let Some(holder) = self.held.take() else {
            return;
        };
        let op = self.log.begin(self.thread, Kind::Release, |op| {
            op.lock = Some(holder.name().to_owned());
            op.token = holder.token();
        });
        let result = holder.release();
        self.log.end(&op, &outcome(&result, |()| Outcome::Ok));
    }

    fn put(&mut self, key: &str, token: u64) {
        let value = self.next_value();
        let op = self.log.begin(self.thread, Kind::Put, |op| {
            op.key = Some(key.into());
            op.token = token;
            op.value = Some(value.clone());
        });
        let result = self.store.put(key.as_bytes(), &value_bytes(&value), token);
        self.log.end(&op, &outcome(&result, |()| Outcome::Ok));
    }

    fn get(&mut self, key: &str) {
        let op = self.log.begin(self.thread, Kind::Get, |op| {
            op.key = Some(key.into());
        });
        let result = self.store.get(key.as_bytes());
        let logged = outcome(&result, |found| match found {
            Some(fenced) => Outcome::Value(fenced.token, value_name(&fenced.value)),
            None => Outcome::NotFound,
        });
        self.log.end(&op, &logged);
        if let Outcome::Value(token, _) = logged {
            self.see(token);
        }
    }

    fn fence(&mut self, token: u64) {
        let resource = *self.rng.pick(&RESOURCES);
        let op = self.log.begin(self.thread, Kind::Fence, |op| {
            op.lock = Some(resource.into());
            op.token = token;
        });
        let result = self.store.fence(resource, token);
        self.log.end(&op, &outcome(&result, |()| Outcome::Ok));
    }
}
