//! The controller: starts the workers, pauses them with SIGSTOP for longer than any lease,
//! kills them with SIGKILL and starts replacements, then checks the history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::Duration;

use fencelock::{boottime_ns, Store};

use crate::check::check;
use crate::history::{parse_log, FinalState, History, Kind, Worker};
use crate::rng::Rng;
use crate::worker::{self, KEYS, TTL_MS};

const USAGE: &str = "usage: torture [--processes N] [--threads N] [--duration 60s] [--seed N] \
                     [--dir PATH] [--keep] [--racing-create]";
/// Controller tick; fault probabilities below are per tick.
const TICK: Duration = Duration::from_millis(20);
const PAUSE_PERCENT_PER_TICK: u64 = 4;
const KILL_PERMILLE_PER_TICK: u64 = 20;
/// Pauses outlast the longest lease, so a paused holder always wakes up expired.
const PAUSE_MS: (u64, u64) = (TTL_MS.1 + 50, 900);
/// How long workers get to finish after the deadline before they are killed.
const GRACE: Duration = Duration::from_secs(20);

struct Config {
    processes: usize,
    threads: u32,
    duration: Duration,
    seed: u64,
    dir: Option<PathBuf>,
    keep: bool,
    /// Let the first workers race to create the store instead of creating it beforehand.
    racing_create: bool,
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
            "--help" | "-h" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {arg:?}\n{USAGE}")),
        }
    }
    Ok(config)
}

struct Running {
    index: usize,
    child: Child,
    resume_at: Option<u64>,
}

#[derive(Default)]
struct Faults {
    pauses: u64,
    kills: u64,
    kills_while_paused: u64,
    crashes: Vec<String>,
}

struct Run<'a> {
    config: &'a Config,
    dir: &'a Path,
    store: PathBuf,
    deadline: u64,
    rng: Rng,
    running: Vec<Running>,
    done: Vec<Worker>,
    faults: Faults,
    next_index: usize,
}

impl Run<'_> {
    fn log_path(&self, index: usize) -> PathBuf {
        self.dir.join(format!("worker-{index}.log"))
    }

    fn spawn(&mut self) {
        let index = self.next_index;
        self.next_index += 1;
        let args = worker::Args {
            store: self.store.display().to_string(),
            log: self.log_path(index).display().to_string(),
            index,
            threads: self.config.threads,
            deadline: self.deadline,
            seed: self.rng.next_u64(),
        };
        let stderr = std::fs::File::create(self.dir.join(format!("worker-{index}.err")))
            .expect("create the worker's stderr file");
        let child = Command::new(std::env::current_exe().expect("own executable"))
            .args(args.to_argv())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start a worker");
        self.running.push(Running {
            index,
            child,
            resume_at: None,
        });
    }

    fn signal(running: &Running, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(running.child.id()).expect("pid fits");
        // SAFETY: kill(2) with a pid of our own unreaped child and a valid signal number.
        unsafe { libc::kill(pid, signal) };
    }

    /// Records a worker that is gone (reaped at `gone_at`).
    fn finish(&mut self, mut running: Running, killed_at: Option<u64>, gone_at: u64, ok: bool) {
        if !ok && killed_at.is_none() {
            self.faults.crashes.push(format!(
                "worker {} exited with {:?}; see {}",
                running.index,
                running.child.try_wait(),
                self.dir
                    .join(format!("worker-{}.err", running.index))
                    .display()
            ));
        }
        self.done.push(Worker {
            index: running.index,
            pid: running.child.id(),
            opener: false,
            killed_at,
            gone_at,
            ops: Vec::new(),
        });
    }

    fn kill(&mut self, at: usize) {
        let mut victim = self.running.swap_remove(at);
        let killed_at = boottime_ns();
        Run::signal(&victim, libc::SIGKILL);
        victim.child.wait().expect("reap a killed worker");
        let gone_at = boottime_ns();
        self.faults.kills += 1;
        if victim.resume_at.is_some() {
            self.faults.kills_while_paused += 1;
        }
        self.finish(victim, Some(killed_at), gone_at, true);
    }

    /// Reaps workers that exited by themselves.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            match self.running[i].child.try_wait().expect("wait for a worker") {
                Some(status) => {
                    let gone_at = boottime_ns();
                    let done = self.running.swap_remove(i);
                    self.finish(done, None, gone_at, status.success());
                }
                None => i += 1,
            }
        }
    }

    fn inject_faults(&mut self) {
        let now = boottime_ns();
        for running in &mut self.running {
            if running.resume_at.is_some_and(|at| at <= now) {
                Run::signal(running, libc::SIGCONT);
                running.resume_at = None;
            }
        }
        if self.running.is_empty() {
            return;
        }
        if self.rng.chance(PAUSE_PERCENT_PER_TICK) {
            let at = (self.rng.next_u64() % self.running.len() as u64) as usize;
            if self.running[at].resume_at.is_none() {
                let pause = self.rng.range(PAUSE_MS.0, PAUSE_MS.1) * 1_000_000;
                Run::signal(&self.running[at], libc::SIGSTOP);
                self.running[at].resume_at = Some(now + pause);
                self.faults.pauses += 1;
            }
        }
        if self.rng.range(0, 999) < KILL_PERMILLE_PER_TICK {
            let at = (self.rng.next_u64() % self.running.len() as u64) as usize;
            self.kill(at);
            self.spawn();
        }
    }

    /// Resumes every paused worker and waits for all to exit, killing stragglers.
    fn wind_down(&mut self) {
        for running in &mut self.running {
            if running.resume_at.take().is_some() {
                Run::signal(running, libc::SIGCONT);
            }
        }
        let until = boottime_ns() + GRACE.as_nanos() as u64;
        while !self.running.is_empty() && boottime_ns() < until {
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
    }
}

fn read_final(path: &Path) -> Result<FinalState, String> {
    let store = Store::open(path).map_err(|err| format!("the final open failed: {err}"))?;
    let mut state = FinalState {
        verify: store.verify().map_err(|err| err.to_string()),
        values: Vec::new(),
        listed: Vec::new(),
    };
    for key in KEYS {
        let found = store.get(key.as_bytes()).map_err(|err| err.to_string())?;
        state.values.push((
            key.to_owned(),
            found.map(|f| (f.token, String::from_utf8_lossy(&f.value).into_owned())),
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
    println!(
        "fencelock torture: {} processes x {} threads for {:?}, seed {}, in {}",
        config.processes,
        config.threads,
        config.duration,
        config.seed,
        dir.display()
    );
    let started = boottime_ns();
    let mut run = Run {
        config: &config,
        dir: &dir,
        store: dir.join("torture.db"),
        deadline: started + config.duration.as_nanos() as u64,
        rng: Rng::new(config.seed),
        running: Vec::new(),
        done: Vec::new(),
        faults: Faults::default(),
        next_index: 0,
    };
    if !config.racing_create {
        if let Err(err) = Store::open(&run.store) {
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
    let ran = Duration::from_nanos(boottime_ns() - started);

    let mut history = History::default();
    let mut violations: Vec<String> = run.faults.crashes.clone();
    for mut worker in std::mem::take(&mut run.done) {
        let path = run.log_path(worker.index);
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
    let mut opens = (0, 0, 0);
    for worker in &history.workers {
        for op in &worker.ops {
            total += 1;
            let class = op.outcome.as_ref().map_or("unknown", |o| o.class());
            *table.entry(op.kind).or_default().entry(class).or_default() += 1;
            if op.kind == Kind::Open {
                match class {
                    "ok" => opens.0 += 1,
                    "unknown" => opens.2 += 1,
                    _ => opens.1 += 1,
                }
            }
        }
    }
    let faults = &run.faults;
    println!(
        "ran {:.1} s; workers started: {} ({} replacements); store opens: {} ok, {} failed, {} \
         cut short by a kill",
        ran.as_secs_f64(),
        run.next_index,
        run.next_index - run.config.processes,
        opens.0,
        opens.1,
        opens.2
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
    print!("operations: {total}\n{:<16}", "");
    for class in classes {
        print!("{class:>width$}");
    }
    println!();
    for (kind, counts) in &table {
        print!("{:<16}", kind.as_str());
        for class in classes {
            print!("{:>width$}", counts.get(class).copied().unwrap_or(0));
        }
        println!();
    }
    if let Some(state) = &history.final_state {
        println!(
            "final store: verify() {}, {} keys hold values",
            if state.verify.is_ok() {
                "passed"
            } else {
                "FAILED"
            },
            state.listed.len()
        );
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
