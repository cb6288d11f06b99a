//! The controller: starts the workers, pauses them with SIGSTOP for longer than any lease,
//! kills them with SIGKILL and starts replacements, resumes workers that the stop shim stopped
//! inside a commit or an open and starts openers meanwhile, then checks the history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::Duration;

use fencelock::{boottime_ns, Options, Store};

use crate::check::check;
use crate::history::{parse_log, FinalState, History, Kind, Worker};
use crate::opener;
use crate::rng::Rng;
use crate::worker::{self, KEYS, TTL_MS};

const USAGE: &str = "usage: torture [--processes N] [--threads N] [--duration 60s] [--seed N] \
                     [--dir PATH] [--keep] [--racing-create] [--no-shim] [--server] [--storm] \
                     [--write-log]";
/// Controller tick; fault probabilities below are per tick.
const TICK: Duration = Duration::from_millis(20);
const PAUSE_PERCENT_PER_TICK: u64 = 4;
const KILL_PERMILLE_PER_TICK: u64 = 20;
/// Pauses outlast the longest lease, so a paused holder always wakes up expired.
const PAUSE_MS: (u64, u64) = (TTL_MS.1 + 50, 900);
/// How long workers get to finish after the deadline before they are killed.
const GRACE: Duration = Duration::from_secs(20);
/// Workers' busy timeout: often shorter than a pause, so that writes behind a process paused
/// inside a commit are refused with `Timeout`; always far below the grace period.
const WORKER_BUSY_MS: (u64, u64) = (300, 2000);
/// The stop shim, compiled at run time into the run's directory.
const SHIM_SOURCE: &str = include_str!("stop_shim.c");
/// The share of workers that load the shim.
const SHIM_WORKER_PERCENT: u64 = 50;
/// A shimmed worker's chance to stop at a store pwrite, and right after taking the open byte,
/// in parts per million; each worker draws its own rates in these ranges.
const SHIM_WRITE_PPM: (u64, u64) = (300, 1500);
const SHIM_OPEN_PPM: (u64, u64) = (100_000, 400_000);
/// And its chance to stop inside a lease path of the shared lease map (after a liveness lock
/// or test, before a futex call), in parts per million.
const SHIM_LEASE_PPM: (u64, u64) = (200, 1_000);
/// With `--storm`, far more often: a grant's liveness tests of its bucket's other records come
/// between its taking of a token and its publishing, and a stop there is what the storm is for.
const STORM_SHIM_LEASE_PPM: (u64, u64) = (2_000, 8_000);
/// With `--write-log`, its chance to stop right before a pwrite or a sync of a log segment
/// (inside a fenced write, inside the shared sync), in parts per million.
const SHIM_LOG_PPM: (u64, u64) = (1_000, 5_000);
/// With `--write-log`, the chance to stop at a store pwrite instead of `SHIM_WRITE_PPM`: the
/// store file is written only by checkpoints (and an open's recovery) then, a few hundred
/// pwrites a run, and a stop inside a checkpoint (holding the store file's write lock while
/// the others write on into the log) is what the rarer chance would almost never give.
const LOG_SHIM_WRITE_PPM: (u64, u64) = (20_000, 50_000);
/// With `--write-log`, the log's segment size (`FENCELOCK_LOG_SEGMENT`, for every process of
/// the run): small, so that a short run passes segment ends and background checkpoints.
const LOG_SEGMENT: &str = "262144";
/// With `--storm`, as many workers load the shim, and kills are rarer, so that most stopped
/// grants are resumed (a killed one publishes nothing).
const STORM_SHIM_WORKER_PERCENT: u64 = 50;
const STORM_KILL_PERMILLE_PER_TICK: u64 = 4;
/// Openers started when the controller notices a worker stopped by the shim, each at a random
/// moment of its pause (so that some still wait when it ends), at most `MAX_OPENERS` at a time,
/// each with a busy timeout in `OPENER_BUSY_MS`.
const OPENERS_PER_STOP: (u64, u64) = (1, 3);
const MAX_OPENERS: usize = 6;
const OPENER_BUSY_MS: (u64, u64) = (200, 500);
/// An opener still running after this hangs: it is killed and reported.
const OPENER_LIMIT: Duration = Duration::from_secs(30);
/// With `--server`: per tick, the chance to kill the server (in permille) and to pause it (in
/// percent), how long it stays paused, and how long until a killed server is replaced.
const SERVER_KILL_PERMILLE_PER_TICK: u64 = 15;
const SERVER_PAUSE_PERCENT_PER_TICK: u64 = 2;
const SERVER_PAUSE_MS: (u64, u64) = (5, 600);
const SERVER_RESTART_MS: (u64, u64) = (0, 300);

struct Config {
    processes: usize,
    threads: u32,
    duration: Duration,
    seed: u64,
    dir: Option<PathBuf>,
    keep: bool,
    /// Let the first workers race to create the store instead of creating it beforehand.
    racing_create: bool,
    /// Load the stop shim into some workers.
    shim: bool,
    /// Run a server of the store (`fencelock serve`), killed, paused and replaced.
    server: bool,
    /// The workers only grant two names of one bucket of the lease map, back to back, with
    /// leases of a few milliseconds (`worker::Thread::storm`).
    storm: bool,
    /// Every process opens the store with `Options::write_log` (fenced writes through the redo
    /// log), with segments of `LOG_SEGMENT` bytes.
    write_log: bool,
}

fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, "s"), |i| text.split_at(i));
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" | "min" => number * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

fn parse_args(args: &[String]) -> Result<Config, String> {
    let mut config = Config {
        processes: 4,
        threads: 3,
        duration: Duration::from_secs(60),
        seed: boottime_ns(),
        dir: None,
        keep: false,
        racing_create: false,
        shim: true,
        server: false,
        storm: false,
        write_log: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        let bad = |v: &str| format!("bad value {v:?} for {arg}\n{USAGE}");
        match arg.as_str() {
            "--processes" => {
                let v = value()?;
                config.processes = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad(v))?;
            }
            "--threads" => {
                let v = value()?;
                config.threads = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad(v))?;
            }
            "--duration" => {
                let v = value()?;
                config.duration = parse_duration(v).ok_or_else(|| bad(v))?;
            }
            "--seed" => {
                let v = value()?;
                config.seed = v.parse().map_err(|_| bad(v))?;
            }
            "--dir" => config.dir = Some(PathBuf::from(value()?)),
            "--keep" => config.keep = true,
            "--racing-create" => config.racing_create = true,
            "--no-shim" => config.shim = false,
            "--server" => config.server = true,
            "--storm" => config.storm = true,
            "--write-log" => config.write_log = true,
            "--help" | "-h" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {arg:?}\n{USAGE}")),
        }
    }
    if config.write_log && config.server {
        // A server refuses a store whose processes write through the log (`fencelock serve`).
        return Err(format!(
            "--write-log and --server exclude each other: a server refuses a store whose \
             processes write through the redo log\n{USAGE}"
        ));
    }
    Ok(config)
}

struct Running {
    index: usize,
    child: Child,
    resume_at: Option<u64>,
    /// Loads the stop shim.
    shimmed: bool,
}

/// An opener process under way.
struct Opening {
    index: usize,
    child: Child,
    started: u64,
}

#[derive(Default)]
struct Faults {
    pauses: u64,
    /// Stops by the shim that the controller noticed and resumed (or killed).
    shim_stops: u64,
    kills: u64,
    kills_while_paused: u64,
    /// Openers killed after `OPENER_LIMIT`.
    hung_openers: u64,
    servers_started: u64,
    server_kills: u64,
    server_pauses: u64,
    /// Servers that exited by themselves (a start refused while another held the file).
    server_exits: u64,
    crashes: Vec<String>,
}

/// Compiles the stop shim into `dir`; returns the library's path.
fn build_shim(dir: &Path) -> Result<PathBuf, String> {
    let source = dir.join("stop_shim.c");
    let library = dir.join("stop_shim.so");
    std::fs::write(&source, SHIM_SOURCE).map_err(|err| format!("write the shim: {err}"))?;
    let output = Command::new("cc")
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&library)
        .arg(&source)
        .arg("-ldl")
        .output()
        .map_err(|err| format!("run cc: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(library)
}

/// Whether the process is stopped by a signal (state `T` in /proc/PID/stat).
fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The command name, in parentheses, may hold spaces; the state follows the last ')'.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())
        == Some('T')
}

/// Stops the shim logged, per place.
#[derive(Default, Clone, Copy)]
struct Stops {
    /// Inside a commit (a pwrite of the store file).
    commit: u64,
    /// Inside an open (holding the open byte).
    open: u64,
    /// Inside a lease path (a liveness lock or test, a futex call).
    lease: u64,
    /// Inside a fenced write or the shared sync of the redo log (a pwrite or a sync of a
    /// segment).
    log: u64,
}

/// Stops the shim logged in `path`.
fn count_stops(path: &Path) -> Stops {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    let mut stops = Stops::default();
    for line in complete.lines() {
        match line.split(' ').next() {
            Some("commit") => stops.commit += 1,
            Some("open") => stops.open += 1,
            Some("lease") => stops.lease += 1,
            Some("log") => stops.log += 1,
            _ => {}
        }
    }
    stops
}

struct Run<'a> {
    config: &'a Config,
    dir: &'a Path,
    store: PathBuf,
    deadline: u64,
    rng: Rng,
    running: Vec<Running>,
    openers: Vec<Opening>,
    /// When to start openers, during pauses of the shim.
    planned_openers: Vec<u64>,
    done: Vec<Worker>,
    faults: Faults,
    /// Indices are shared by workers and openers, so that each names one process.
    next_index: usize,
    workers_started: usize,
    openers_started: usize,
    shim: Option<PathBuf>,
    shimmed_workers: usize,
    /// The server process with `--server`, and when to resume it if paused.
    server: Option<(Child, Option<u64>)>,
    /// When to start the next server, while none runs.
    server_at: u64,
}

impl Run<'_> {
    /// With `--server`: starts, kills, pauses and resumes the server.
    fn run_server(&mut self, now: u64) {
        if !self.config.server {
            return;
        }
        let Some((child, resume_at)) = &mut self.server else {
            if now >= self.server_at {
                let index = usize::try_from(self.faults.servers_started).unwrap();
                let argv = vec!["server".to_owned(), self.store.display().to_string()];
                let child = self
                    .command("server", index, argv)
                    .spawn()
                    .expect("start a server");
                self.faults.servers_started += 1;
                self.server = Some((child, None));
            }
            return;
        };
        if child.try_wait().expect("wait for the server").is_some() {
            self.faults.server_exits += 1;
            self.server = None;
            return;
        }
        if let Some(at) = *resume_at {
            if at <= now {
                Run::signal(child, libc::SIGCONT);
                *resume_at = None;
            }
            return;
        }
        if self.rng.range(0, 999) < SERVER_KILL_PERMILLE_PER_TICK {
            Run::signal(child, libc::SIGKILL);
            child.wait().expect("reap a killed server");
            self.faults.server_kills += 1;
            self.server = None;
            self.server_at =
                now + self.rng.range(SERVER_RESTART_MS.0, SERVER_RESTART_MS.1) * 1_000_000;
        } else if self.rng.chance(SERVER_PAUSE_PERCENT_PER_TICK) {
            Run::signal(child, libc::SIGSTOP);
            *resume_at =
                Some(now + self.rng.range(SERVER_PAUSE_MS.0, SERVER_PAUSE_MS.1) * 1_000_000);
            self.faults.server_pauses += 1;
        }
    }

    /// Stops the server at the end of the run.
    fn stop_server(&mut self) {
        if let Some((mut child, _)) = self.server.take() {
            Run::signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }

    fn file(&self, role: &str, index: usize, ext: &str) -> PathBuf {
        self.dir.join(format!("{role}-{index}.{ext}"))
    }

    fn log_path(&self, worker: &Worker) -> PathBuf {
        let role = if worker.opener { "opener" } else { "worker" };
        self.file(role, worker.index, "log")
    }

    fn command(&self, role: &str, index: usize, argv: Vec<String>) -> Command {
        let stderr =
            std::fs::File::create(self.file(role, index, "err")).expect("create a stderr file");
        let mut command = Command::new(std::env::current_exe().expect("own executable"));
        command
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        command
    }

    fn spawn(&mut self) {
        let index = self.next_index;
        self.next_index += 1;
        self.workers_started += 1;
        let args = worker::Args {
            store: self.store.display().to_string(),
            log: self.file("worker", index, "log").display().to_string(),
            index,
            threads: self.config.threads,
            deadline: self.deadline,
            seed: self.rng.next_u64(),
            busy_timeout_ms: self.rng.range(WORKER_BUSY_MS.0, WORKER_BUSY_MS.1),
            storm: self.config.storm,
            write_log: self.config.write_log,
        };
        let mut command = self.command("worker", index, args.to_argv());
        let shimmed = self.shim.is_some()
            && self.rng.chance(if self.config.storm {
                STORM_SHIM_WORKER_PERCENT
            } else {
                SHIM_WORKER_PERCENT
            });
        if let (true, Some(shim)) = (shimmed, &self.shim) {
            self.shimmed_workers += 1;
            command
                .env("LD_PRELOAD", shim)
                .env("FENCELOCK_SHIM_STORE", &self.store)
                .env("FENCELOCK_SHIM_LOG", self.file("worker", index, "stops"))
                .env("FENCELOCK_SHIM_SEED", self.rng.next_u64().to_string())
                .env("FENCELOCK_SHIM_WRITE_PPM", {
                    let (low, high) = if self.config.write_log {
                        LOG_SHIM_WRITE_PPM
                    } else {
                        SHIM_WRITE_PPM
                    };
                    self.rng.range(low, high).to_string()
                })
                .env(
                    "FENCELOCK_SHIM_OPEN_PPM",
                    self.rng.range(SHIM_OPEN_PPM.0, SHIM_OPEN_PPM.1).to_string(),
                )
                .env("FENCELOCK_SHIM_LEASE_PPM", {
                    let (low, high) = if self.config.storm {
                        STORM_SHIM_LEASE_PPM
                    } else {
                        SHIM_LEASE_PPM
                    };
                    self.rng.range(low, high).to_string()
                });
            if self.config.write_log {
                command.env(
                    "FENCELOCK_SHIM_LOG_PPM",
                    self.rng.range(SHIM_LOG_PPM.0, SHIM_LOG_PPM.1).to_string(),
                );
            }
        }
        let child = command.spawn().expect("start a worker");
        self.running.push(Running {
            index,
            child,
            resume_at: None,
            shimmed,
        });
    }

    fn spawn_opener(&mut self) {
        let index = self.next_index;
        self.next_index += 1;
        self.openers_started += 1;
        let args = opener::Args {
            store: self.store.display().to_string(),
            log: self.file("opener", index, "log").display().to_string(),
            index,
            seed: self.rng.next_u64(),
            busy_timeout_ms: self.rng.range(OPENER_BUSY_MS.0, OPENER_BUSY_MS.1),
            write_log: self.config.write_log,
        };
        let child = self
            .command("opener", index, args.to_argv())
            .spawn()
            .expect("start an opener");
        self.openers.push(Opening {
            index,
            child,
            started: boottime_ns(),
        });
    }

    fn signal(child: &Child, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
        // SAFETY: kill(2) with a pid of our own unreaped child and a valid signal number.
        unsafe { libc::kill(pid, signal) };
    }

    /// Records a worker or opener that is gone (reaped at `gone_at`).
    fn finish(
        &mut self,
        (index, opener): (usize, bool),
        child: &mut Child,
        killed_at: Option<u64>,
        gone_at: u64,
        ok: bool,
    ) {
        let role = if opener { "opener" } else { "worker" };
        if !ok && killed_at.is_none() {
            self.faults.crashes.push(format!(
                "{role} {index} exited with {:?}; see {}",
                child.try_wait(),
                self.file(role, index, "err").display()
            ));
        }
        self.done.push(Worker {
            index,
            pid: child.id(),
            opener,
            killed_at,
            gone_at,
            ops: Vec::new(),
        });
    }

    fn kill(&mut self, at: usize) {
        let mut victim = self.running.swap_remove(at);
        let killed_at = boottime_ns();
        Run::signal(&victim.child, libc::SIGKILL);
        victim.child.wait().expect("reap a killed worker");
        let gone_at = boottime_ns();
        self.faults.kills += 1;
        if victim.resume_at.is_some() {
            self.faults.kills_while_paused += 1;
        }
        self.finish(
            (victim.index, false),
            &mut victim.child,
            Some(killed_at),
            gone_at,
            true,
        );
    }

    /// Reaps workers that exited by themselves.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            match self.running[i].child.try_wait().expect("wait for a worker") {
                Some(status) => {
                    let gone_at = boottime_ns();
                    let mut done = self.running.swap_remove(i);
                    let index = (done.index, false);
                    self.finish(index, &mut done.child, None, gone_at, status.success());
                }
                None => i += 1,
            }
        }
        let mut i = 0;
        while i < self.openers.len() {
            let now = boottime_ns();
            if let Some(status) = self.openers[i]
                .child
                .try_wait()
                .expect("wait for an opener")
            {
                let mut done = self.openers.swap_remove(i);
                let index = (done.index, true);
                self.finish(index, &mut done.child, None, now, status.success());
            } else if now - self.openers[i].started > nanos(OPENER_LIMIT) {
                let mut hung = self.openers.swap_remove(i);
                Run::signal(&hung.child, libc::SIGKILL);
                hung.child.wait().expect("reap a killed opener");
                let gone_at = boottime_ns();
                self.faults.hung_openers += 1;
                self.faults.crashes.push(format!(
                    "opener {} did not finish within {OPENER_LIMIT:?}; killed; see {}",
                    hung.index,
                    self.file("opener", hung.index, "log").display()
                ));
                let index = (hung.index, true);
                self.finish(index, &mut hung.child, Some(now), gone_at, true);
            } else {
                i += 1;
            }
        }
    }

    /// Schedules the resumption of workers the shim stopped, like the controller's own
    /// pauses, and starts openers while they hold the store.
    fn notice_stops(&mut self, now: u64) {
        for i in 0..self.running.len() {
            let running = &self.running[i];
            if running.shimmed && running.resume_at.is_none() && is_stopped(running.child.id()) {
                let pause = self.rng.range(PAUSE_MS.0, PAUSE_MS.1) * 1_000_000;
                self.running[i].resume_at = Some(now + pause);
                self.faults.shim_stops += 1;
                for _ in 0..self.rng.range(OPENERS_PER_STOP.0, OPENERS_PER_STOP.1) {
                    let at = now + self.rng.range(0, pause);
                    self.planned_openers.push(at);
                }
            }
        }
        let mut i = 0;
        while i < self.planned_openers.len() {
            if self.planned_openers[i] > now {
                i += 1;
                continue;
            }
            self.planned_openers.swap_remove(i);
            if self.openers.len() < MAX_OPENERS {
                self.spawn_opener();
            }
        }
    }

    fn inject_faults(&mut self) {
        let now = boottime_ns();
        self.run_server(now);
        for running in &mut self.running {
            if running.resume_at.is_some_and(|at| at <= now) {
                Run::signal(&running.child, libc::SIGCONT);
                running.resume_at = None;
            }
        }
        self.notice_stops(now);
        if self.running.is_empty() {
            return;
        }
        if self.rng.chance(PAUSE_PERCENT_PER_TICK) {
            let at = self.rng.below(self.running.len());
            if self.running[at].resume_at.is_none() {
                let pause = self.rng.range(PAUSE_MS.0, PAUSE_MS.1) * 1_000_000;
                Run::signal(&self.running[at].child, libc::SIGSTOP);
                self.running[at].resume_at = Some(now + pause);
                self.faults.pauses += 1;
            }
        }
        let kill_permille = if self.config.storm {
            STORM_KILL_PERMILLE_PER_TICK
        } else {
            KILL_PERMILLE_PER_TICK
        };
        if self.rng.range(0, 999) < kill_permille {
            let at = self.rng.below(self.running.len());
            self.kill(at);
            self.spawn();
        }
    }

    /// Resumes every paused worker and waits for all to exit, killing stragglers. Workers
    /// the shim stops from now on are resumed at once.
    fn wind_down(&mut self) {
        let until = boottime_ns() + nanos(GRACE);
        // The server stays up (and is resumed) while the workers finish.
        if let Some((child, resume_at)) = &mut self.server {
            if resume_at.take().is_some() {
                Run::signal(child, libc::SIGCONT);
            }
        }
        while !(self.running.is_empty() && self.openers.is_empty()) && boottime_ns() < until {
            for running in &mut self.running {
                if running.resume_at.take().is_some()
                    || (running.shimmed && is_stopped(running.child.id()))
                {
                    Run::signal(&running.child, libc::SIGCONT);
                }
            }
            self.reap();
            thread::sleep(TICK);
        }
        while !self.running.is_empty() {
            eprintln!(
                "worker {} did not stop in time; killing it",
                self.running[0].index
            );
            self.kill(0);
        }
        // Openers are killed and reported once they pass their limit.
        while !self.openers.is_empty() {
            self.reap();
            thread::sleep(TICK);
        }
    }
}

/// How many segment files of the redo log (`STORE.wal.<16 hex digits>`) lie beside `store`.
fn log_segments(store: &Path) -> std::io::Result<usize> {
    let name = store.file_name().map(|n| n.to_string_lossy().into_owned());
    let prefix = format!("{}.wal.", name.unwrap_or_default());
    let mut count = 0;
    for entry in std::fs::read_dir(store.parent().unwrap_or(Path::new(".")))? {
        let entry = entry?.file_name();
        let entry = entry.to_string_lossy();
        if entry
            .strip_prefix(&prefix)
            .is_some_and(|seq| seq.len() == 16 && seq.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            count += 1;
        }
    }
    Ok(count)
}

fn read_final(path: &Path) -> Result<FinalState, String> {
    let store = Store::open(path).map_err(|err| format!("the final open failed: {err}"))?;
    let mut state = FinalState {
        verify: store.verify().map_err(|err| err.to_string()),
        values: Vec::new(),
        listed: Vec::new(),
        grants: Vec::new(),
    };
    let locks = crate::worker::LOCKS
        .iter()
        .chain([&crate::worker::SEMAPHORE, &crate::worker::SHARED_LOCK]);
    for lock in locks {
        for entry in store.history(lock).map_err(|err| err.to_string())? {
            state.grants.push((
                (*lock).to_owned(),
                entry.token,
                entry.pid,
                entry.ending.as_str().to_owned(),
            ));
        }
    }
    for key in KEYS {
        let found = store.get(key.as_bytes()).map_err(|err| err.to_string())?;
        state.values.push((
            key.to_owned(),
            found.map(|f| (f.token, crate::worker::value_name(&f.value))),
        ));
    }
    for key in store.keys(b"").map_err(|err| err.to_string())? {
        state
            .listed
            .push(String::from_utf8_lossy(&key).into_owned());
    }
    Ok(state)
}

pub fn main(args: &[String]) -> ExitCode {
    let config = match parse_args(args) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let dir = config.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fencelock-torture-{}", std::process::id()))
    });
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {err}", dir.display());
        return ExitCode::from(2);
    }
    if config.write_log {
        // Before any thread or child exists: every process of the run (this one's opens, the
        // workers, the openers) inherits it, and all must agree on it.
        std::env::set_var("FENCELOCK_LOG_SEGMENT", LOG_SEGMENT);
    }
    println!(
        "fencelock torture: {} processes x {} threads for {:?}, seed {}, in {}{}",
        config.processes,
        config.threads,
        config.duration,
        config.seed,
        dir.display(),
        if config.write_log {
            format!(", writes through the redo log (segments of {LOG_SEGMENT} bytes)")
        } else {
            String::new()
        }
    );
    let started = boottime_ns();
    let mut run = Run {
        config: &config,
        dir: &dir,
        store: dir.join("torture.db"),
        deadline: started + nanos(config.duration),
        rng: Rng::new(config.seed),
        running: Vec::new(),
        openers: Vec::new(),
        planned_openers: Vec::new(),
        done: Vec::new(),
        faults: Faults::default(),
        next_index: 0,
        workers_started: 0,
        openers_started: 0,
        shim: None,
        shimmed_workers: 0,
        server: None,
        server_at: 0,
    };
    if config.shim {
        match build_shim(&dir) {
            Ok(library) => run.shim = Some(library),
            Err(err) => {
                eprintln!("{err}\n(--no-shim runs without the stop shim)");
                return ExitCode::from(2);
            }
        }
    }
    if !config.racing_create {
        let options = Options {
            write_log: config.write_log,
            ..Options::default()
        };
        if let Err(err) = Store::open_with(&run.store, &options) {
            eprintln!("cannot create the store {}: {err}", run.store.display());
            return ExitCode::FAILURE;
        }
    }
    for _ in 0..config.processes {
        run.spawn();
    }
    while boottime_ns() < run.deadline {
        thread::sleep(TICK);
        run.reap();
        // Keep the number of workers up, also after a crash (which is reported).
        while run.running.len() < config.processes {
            run.spawn();
        }
        run.inject_faults();
    }
    run.wind_down();
    run.stop_server();
    let ran = Duration::from_nanos(boottime_ns() - started);

    let mut history = History::default();
    let mut violations: Vec<String> = run.faults.crashes.clone();
    for mut worker in std::mem::take(&mut run.done) {
        let path = run.log_path(&worker);
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse_log(&text) {
                Ok(ops) => worker.ops = ops,
                Err(err) => violations.push(format!("{}: {err}", path.display())),
            },
            // Killed before it opened its log.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => violations.push(format!("{}: {err}", path.display())),
        }
        history.workers.push(worker);
    }
    history.workers.sort_by_key(|w| w.index);
    if config.write_log {
        // The newest segment outlives every checkpoint: none means the run's writes did not
        // go through the log, and the run did not test what it says.
        match log_segments(&run.store) {
            Ok(0) => violations.push(format!(
                "no segment of the redo log beside {}: the writes did not go through the log",
                run.store.display()
            )),
            Ok(_) => {}
            Err(err) => violations.push(format!("list {}: {err}", dir.display())),
        }
    }
    match read_final(&run.store) {
        Ok(state) => history.final_state = Some(state),
        Err(err) => violations.push(err),
    }
    let checked = std::time::Instant::now();
    violations.extend(check(&history));
    let check_time = checked.elapsed();
    summarize(&run, &history, ran, check_time, &violations);
    if violations.is_empty() {
        // A run directory of our own is removed after a clean run; a failed run is kept for
        // a post-mortem.
        if config.keep || config.dir.is_some() {
            println!("the run is in {}", dir.display());
        } else if let Err(err) = std::fs::remove_dir_all(&dir) {
            eprintln!("cannot remove {}: {err}", dir.display());
        }
        ExitCode::SUCCESS
    } else {
        println!("the run is kept in {}", dir.display());
        ExitCode::FAILURE
    }
}

fn summarize(
    run: &Run,
    history: &History,
    ran: Duration,
    check_time: Duration,
    violations: &[String],
) {
    let classes = [
        "ok",
        "locked",
        "timeout",
        "stale",
        "lost",
        "invalid",
        "not-found",
        "error",
        "unknown",
    ];
    let width = classes.iter().map(|c| c.len()).max().unwrap_or(0) + 1;
    let mut table: BTreeMap<Kind, BTreeMap<&str, u64>> = BTreeMap::new();
    let mut total = 0;
    // Per role (worker, opener), classes of opens and of writes.
    let mut opens: [BTreeMap<&str, u64>; 2] = Default::default();
    let mut opener_writes: BTreeMap<&str, u64> = BTreeMap::new();
    let mut opener_reads = 0;
    let mut stops = Stops::default();
    for worker in &history.workers {
        if !worker.opener {
            let counted = count_stops(&run.file("worker", worker.index, "stops"));
            stops.commit += counted.commit;
            stops.open += counted.open;
            stops.lease += counted.lease;
            stops.log += counted.log;
        }
        for op in &worker.ops {
            total += 1;
            let class = op.outcome.as_ref().map_or("unknown", |o| o.class());
            *table.entry(op.kind).or_default().entry(class).or_default() += 1;
            match op.kind {
                Kind::Open => *opens[usize::from(worker.opener)].entry(class).or_default() += 1,
                Kind::Get | Kind::Locks | Kind::Info if worker.opener => opener_reads += 1,
                _ if worker.opener => *opener_writes.entry(class).or_default() += 1,
                _ => {}
            }
        }
    }
    let classes_of = |counts: &BTreeMap<&str, u64>| {
        let listed: Vec<String> = counts.iter().map(|(c, n)| format!("{n} {c}")).collect();
        if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(", ")
        }
    };
    let faults = &run.faults;
    println!(
        "ran {:.1} s; workers started: {} ({} replacements, {} with the stop shim); worker \
         store opens: {}",
        ran.as_secs_f64(),
        run.workers_started,
        run.workers_started - run.config.processes,
        run.shimmed_workers,
        classes_of(&opens[0])
    );
    println!(
        "faults: {} pauses (SIGSTOP {}-{} ms, longer than every TTL of {}-{} ms), {} kills \
         (SIGKILL; {} of them while paused)",
        faults.pauses,
        PAUSE_MS.0,
        PAUSE_MS.1,
        TTL_MS.0,
        TTL_MS.1,
        faults.kills,
        faults.kills_while_paused
    );
    if run.config.server {
        println!(
            "server: {} started, {} killed (SIGKILL), {} paused (SIGSTOP {}-{} ms), {} exited \
             by themselves",
            faults.servers_started,
            faults.server_kills,
            faults.server_pauses,
            SERVER_PAUSE_MS.0,
            SERVER_PAUSE_MS.1,
            faults.server_exits
        );
    }
    println!(
        "stop shim: {} pauses inside a commit, {} inside an open, {} inside a lease path, {} \
         inside a fenced write or sync of the log ({} noticed and resumed by the controller, \
         the rest cut short by a kill or the end)",
        stops.commit, stops.open, stops.lease, stops.log, faults.shim_stops
    );
    println!(
        "openers: {} run ({} hung and killed); opens: {}; reads: {}; writes: {}",
        run.openers_started,
        faults.hung_openers,
        classes_of(&opens[1]),
        opener_reads,
        classes_of(&opener_writes)
    );
    print!("operations: {total}\n{:<20}", "");
    for class in classes {
        print!("{class:>width$}");
    }
    println!();
    for (kind, counts) in &table {
        print!("{:<20}", kind.as_str());
        for class in classes {
            print!("{:>width$}", counts.get(class).copied().unwrap_or(0));
        }
        println!();
    }
    if let Some(state) = &history.final_state {
        println!(
            "final store: verify() {}, {} keys hold values, {} grants in the locks' histories",
            if state.verify.is_ok() {
                "passed"
            } else {
                "FAILED"
            },
            state.listed.len(),
            state.grants.len()
        );
        let mut endings: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, _, _, ending) in &state.grants {
            *endings.entry(ending.as_str()).or_default() += 1;
        }
        println!("history endings: {endings:?}");
    }
    println!("checked in {:.2} s", check_time.as_secs_f64());
    println!("violations: {}", violations.len());
    for violation in violations.iter().take(30) {
        println!("  {violation}");
    }
    if violations.len() > 30 {
        println!("  ... and {} more", violations.len() - 30);
    }
}

/// `duration` in nanoseconds: the run's durations are minutes, and u64 holds 584 years.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).expect("a duration of the run")
}
