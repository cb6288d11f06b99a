//! `fencelock run`: hold a lock while a command runs; `fencelock elect`: lead an election while
//! a command runs. Both run the command under a [`Lease`]: the holders of `run`'s locks, or the
//! leadership `elect` won (which ends a safety margin before its lease could run out).
//!
//! Threads: the main thread acquires, spawns the command and waits for it; a signal thread takes
//! the forwarded signals with `sigwaitinfo` (they are blocked in every thread, so no handler
//! runs); a watcher thread waits on `Holder::wait_lost` and signals the command when the lease
//! is lost (and SIGKILL `--kill-after` later if it still runs). The one mutex `Shared::phase`
//! orders them: a signal or a loss is delivered to the command only while it is `Running`, and
//! the command is reaped only after the phase became `Done` (announced on `Shared::ended`), so
//! no signal can reach a recycled pid.
//!
//! The signals stay blocked and are taken with `sigwaitinfo`, rather than by signal-hook's
//! handlers: a handler runs on whichever thread the kernel picks (the engine's too, whose timed
//! waits then return EINTR), and a handler the command inherits between fork and exec swallows
//! a Ctrl-C that a blocked signal, unblocked in `spawn`, delivers with its default action.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{CampaignOptions, Cancel, Error, Holder, Kind, Leadership, LockState, Store};

use crate::commands::{is_etcd, open_store};
use crate::duration::{format_duration, Wait};
use crate::elect::ElectArgs;
use crate::notice::Notice;
use crate::{exit, output, Failure, LockArgs, RunArgs};

/// What the command runs under: a lease of `run`'s locks, or `elect`'s leadership.
trait Lease: Send + Sync {
    fn name(&self) -> &str;
    fn token(&self) -> u64;
    fn kind(&self) -> Kind;
    /// Keeps it alive in the background (a leadership is kept alive since it was won).
    fn keep_alive(&self, ttl: Duration) -> fencelock::Result<()>;
    /// Waits up to `timeout` for its end; whether it ended.
    fn wait_lost(&self, timeout: Duration) -> bool;
    fn is_lost(&self) -> bool;
    fn is_held(&self) -> fencelock::Result<bool>;
    fn release(&self) -> fencelock::Result<()>;
}

impl Lease for Holder {
    fn name(&self) -> &str {
        Holder::name(self)
    }
    fn token(&self) -> u64 {
        Holder::token(self)
    }
    fn kind(&self) -> Kind {
        Holder::kind(self)
    }
    fn keep_alive(&self, ttl: Duration) -> fencelock::Result<()> {
        Holder::keep_alive(self, ttl)
    }
    fn wait_lost(&self, timeout: Duration) -> bool {
        Holder::wait_lost(self, timeout)
    }
    fn is_lost(&self) -> bool {
        Holder::is_lost(self)
    }
    fn is_held(&self) -> fencelock::Result<bool> {
        Holder::is_held(self)
    }
    fn release(&self) -> fencelock::Result<()> {
        Holder::release(self)
    }
}

impl Lease for Leadership {
    fn name(&self) -> &str {
        Leadership::name(self)
    }
    fn token(&self) -> u64 {
        self.term()
    }
    fn kind(&self) -> Kind {
        Kind::Exclusive
    }
    fn keep_alive(&self, _ttl: Duration) -> fencelock::Result<()> {
        Ok(())
    }
    fn wait_lost(&self, timeout: Duration) -> bool {
        Leadership::wait_lost(self, timeout)
    }
    /// Ended for its holder: its margin reached counts as lost, though the lease may live on.
    fn is_lost(&self) -> bool {
        Leadership::is_lost(self)
    }
    fn is_held(&self) -> fencelock::Result<bool> {
        Ok(!self.is_lost() && self.holder().is_held()?)
    }
    fn release(&self) -> fencelock::Result<()> {
        self.resign()
    }
}

/// How the command's lease is taken.
enum Take<'a> {
    /// `run`: the locks, as the arguments say.
    Locks,
    /// `elect`: the leadership of the election the arguments' lock names, with this value.
    Election {
        value: &'a [u8],
        margin: Option<Duration>,
    },
}

/// Signals the tool takes for the command: forwarded while it runs, aborting a wait before.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// How long the watcher waits for a loss before looking whether the command ended.
const WATCH_SLICE: Duration = Duration::from_millis(250);

const SIGNAL_NAMES: [(&str, libc::c_int); 14] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ABRT", libc::SIGABRT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("WINCH", libc::SIGWINCH),
];

/// Parses a signal name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse_signal(text: &str) -> Result<libc::c_int, String> {
    if let Ok(number) = text.parse::<libc::c_int>() {
        return if (1..=libc::SIGRTMAX()).contains(&number) {
            Ok(number)
        } else {
            Err(format!(
                "signal number {number} is outside 1 to {}",
                libc::SIGRTMAX()
            ))
        };
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNAL_NAMES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, number)| *number)
        .ok_or_else(|| {
            let known: Vec<&str> = SIGNAL_NAMES.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown signal {text:?}: use a number or one of {}",
                known.join(", ")
            )
        })
}

/// `SIGTERM` for 15, `signal 40` for a signal without a name here.
fn signal_name(number: libc::c_int) -> String {
    SIGNAL_NAMES.iter().find(|(_, n)| *n == number).map_or_else(
        || format!("signal {number}"),
        |(name, _)| format!("SIG{name}"),
    )
}

enum Phase {
    /// Acquiring the lock; the first forwarded signal to arrive aborts it.
    Acquiring { interrupted: Option<libc::c_int> },
    /// The command runs as `pid` and is not reaped.
    Running { pid: libc::pid_t },
    /// The command ended; nothing may be sent to its pid any more.
    Done,
}

struct Shared {
    phase: Mutex<Phase>,
    /// Notified when the phase becomes `Done`: a watcher waiting to send SIGKILL ends at once.
    ended: Condvar,
    /// Fired by the first forwarded signal while acquiring: ends the open or the wait at once.
    cancel: Cancel,
    /// Set by the watcher when it found the lease lost and signalled the command.
    lost: AtomicBool,
}

impl Shared {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn interrupted(&self) -> Option<libc::c_int> {
        match *self.phase() {
            Phase::Acquiring { interrupted } => interrupted,
            _ => None,
        }
    }

    fn on_signal(&self, signal: libc::c_int, code: libc::c_int) {
        let mut phase = self.phase();
        match &mut *phase {
            Phase::Acquiring { interrupted } => {
                interrupted.get_or_insert(signal);
                self.cancel.cancel();
            }
            Phase::Running { pid } => {
                // The terminal sends Ctrl-C and friends to its whole foreground process group;
                // when the command is in ours, it got the signal already.
                // The pid is not reaped yet (phase is Running): it is still the command's.
                let from_terminal = code == libc::SI_KERNEL
                    && rustix::process::Pid::from_raw(*pid).is_some_and(|pid| {
                        rustix::process::getpgid(Some(pid))
                            .is_ok_and(|group| group == rustix::process::getpgrp())
                    });
                if !from_terminal {
                    send(*pid, signal);
                }
            }
            Phase::Done => {}
        }
    }
}

/// Sends `signal` to the command. Callers hold the phase lock and found it `Running { pid }`:
/// the pid is not reaped, so it cannot have been recycled.
fn send(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill(2) takes plain integers.
    unsafe { libc::kill(pid, signal) };
}

pub fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset initializes the set before sigaddset reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for &signal in signals {
            libc::sigaddset(&raw mut set, signal);
        }
        set
    }
}

/// Blocks the forwarded signals in this thread, and so in every thread spawned after, then
/// starts the thread that takes them. Must run before any other thread exists. The command
/// would inherit the mask across exec: `spawn` empties it in the child.
fn start_signal_thread(shared: Arc<Shared>) -> io::Result<()> {
    let set = signal_set(&FORWARDED);
    // SAFETY: `set` is initialized; the old mask is not wanted.
    let rc =
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    thread::Builder::new()
        .name("fencelock-signals".into())
        .spawn(move || loop {
            // SAFETY: an all-zero siginfo_t is valid; sigwaitinfo fills it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` and `info` are valid for the call.
            let signal = unsafe { libc::sigwaitinfo(&raw const set, &raw mut info) };
            if signal > 0 {
                shared.on_signal(signal, info.si_code);
            }
        })?;
    // The thread runs until the process exits: a signal may come at any moment until then.
    Ok(())
}

/// Runs `fencelock run`; returns the status to exit with.
pub fn run(db: &Path, busy_timeout: Duration, args: &RunArgs) -> Result<u8, Failure> {
    run_under(db, busy_timeout, args, &Take::Locks)
}

/// Runs `fencelock elect`: as `run`, under the leadership of the election; returns the status
/// to exit with.
pub fn elect(db: &Path, busy_timeout: Duration, args: &ElectArgs) -> Result<u8, Failure> {
    args.check()?;
    let take = Take::Election {
        value: args.value.as_bytes(),
        margin: args.margin,
    };
    run_under(db, busy_timeout, &args.as_run_args(), &take)
}

fn run_under(
    db: &Path,
    busy_timeout: Duration,
    args: &RunArgs,
    take: &Take<'_>,
) -> Result<u8, Failure> {
    let shared = Arc::new(Shared {
        phase: Mutex::new(Phase::Acquiring { interrupted: None }),
        ended: Condvar::new(),
        cancel: Cancel::new(),
        lost: AtomicBool::new(false),
    });
    if args.locks.len() > 1 && args.kind() != Kind::Exclusive {
        return Err(Failure::new(
            exit::USAGE,
            "several --lock names are taken exclusively: --shared and --permits take one lock",
        ));
    }
    let lock = args.lock_names();
    start_signal_thread(Arc::clone(&shared))
        .map_err(|err| Failure::new(exit::IO, format!("cannot set up signal handling: {err}")))?;
    // With -w, the open counts against the wait, so the whole acquisition ends on time.
    let started = Instant::now();
    let open_wait = match args.wait {
        Some(Wait::For(wait)) => wait.min(busy_timeout),
        _ => busy_timeout,
    };
    let store = open_store(db, true, open_wait, Some(shared.cancel.clone())).map_err(
        |failure| match shared.interrupted() {
            Some(signal) => interrupted_failure(signal, &lock),
            None => failure,
        },
    )?;
    let holders: Vec<Arc<dyn Lease>> = match take {
        Take::Locks => acquire(
            &store,
            args,
            &shared.cancel,
            &|| shared.interrupted(),
            started,
        )?
        .into_iter()
        .map(|holder| Arc::new(holder) as Arc<dyn Lease>)
        .collect(),
        Take::Election { value, margin } => {
            vec![Arc::new(campaign(
                &store, args, value, *margin, &shared, started,
            )?)]
        }
    };
    if args.verbose {
        let tokens: Vec<String> = holders.iter().map(|h| h.token().to_string()).collect();
        output::say(format_args!(
            "took {} with token {} after {}",
            match take {
                Take::Locks => what(&lock, args.kind()),
                Take::Election { .. } => format!("the lead of election {lock:?}"),
            },
            tokens.join(","),
            format_duration(started.elapsed())
        ));
    }
    let release_all = || {
        for holder in &holders {
            let _ = holder.release();
        }
    };
    for holder in &holders {
        if let Err(err) = holder.keep_alive(args.ttl) {
            release_all();
            return Err(Failure::from_lib(&err));
        }
    }

    let mut child = {
        let mut phase = shared.phase();
        if let Phase::Acquiring {
            interrupted: Some(signal),
        } = *phase
        {
            release_all();
            return Err(interrupted_failure(signal, &lock));
        }
        // Spawned under the phase lock, so a signal arriving meanwhile waits and then finds
        // the command's pid.
        match spawn(db, args, &holders) {
            Ok(child) => {
                *phase = Phase::Running {
                    pid: libc::pid_t::try_from(child.id()).expect("pids fit in pid_t"),
                };
                child
            }
            Err(failure) => {
                release_all();
                return Err(failure);
            }
        }
    };

    // A watcher for each lease: losing any of them is losing the lock the command ran under.
    let watchers: Vec<_> = holders
        .iter()
        .map(|holder| {
            let (holder, shared) = (Arc::clone(holder), Arc::clone(&shared));
            let (store, signal, kill_after) = (store.clone(), args.lost_signal, args.kill_after);
            thread::Builder::new()
                .name("fencelock-watcher".into())
                .spawn(move || watch(holder.as_ref(), &shared, &store, signal, kill_after))
        })
        .collect();

    // Wait for the end without reaping, so the pid stays ours until the phase is Done.
    let waited = wait_exited(child.id());
    *shared.phase() = Phase::Done;
    shared.ended.notify_all();
    let status = child.wait();
    if let Err(err) = &waited {
        output::say(format_args!("waiting for the command failed: {err}"));
    }

    let lost_noticed = shared.lost.load(Ordering::Acquire);
    // A loss the keep-alive has not seen yet (the tool just woke from a pause) counts too.
    let mut held = Ok(!lost_noticed);
    let mut lost_one = None;
    for holder in &holders {
        if !matches!(held, Ok(true)) {
            break;
        }
        held = if holder.is_lost() {
            Ok(false)
        } else {
            holder.is_held()
        };
        if matches!(held, Ok(false)) {
            lost_one = Some(Arc::clone(holder));
        }
    }
    for holder in &holders {
        match holder.release() {
            // Whether the command ran under the lease was decided above, after it ended: a
            // loss it found is reported below, and a loss this release finds came after.
            Ok(()) | Err(Error::LockLost { .. }) => {}
            Err(err) => output::say(format_args!(
                "releasing lock {:?} failed: {err}",
                holder.name()
            )),
        }
    }
    for watcher in watchers.into_iter().flatten() {
        let _ = watcher.join();
    }

    let status = status.map_err(|err| {
        Failure::new(
            exit::IO,
            format!("cannot get the command's exit status: {err}"),
        )
    })?;
    match held {
        Ok(true) => Ok(command_code(status)),
        Ok(false) => {
            if let (false, Some(holder)) = (lost_noticed, lost_one) {
                output::say(format_args!(
                    "lost the lease of lock {:?} (token {}) while the command ran",
                    holder.name(),
                    holder.token()
                ));
            }
            output::say(format_args!(
                "the command {} after the lease was lost",
                describe(status)
            ));
            Ok(exit::LOCK_LOST)
        }
        Err(err) => Err(Failure::new(
            exit::DATABASE,
            format!(
                "cannot confirm lock {:?} was still held when the command ended ({}): {err}",
                lock,
                describe(status)
            ),
        )),
    }
}

/// Takes the lock (or every lock of several, all or none) once, or waits as `-w` says (a limit
/// counted from `started`, or none); a forwarded signal fires the cancel handle, which ends the
/// wait at once. A conflict exits with `-E`'s status when it is given.
pub fn acquire(
    store: &Store,
    args: &LockArgs,
    cancel: &Cancel,
    interrupted: &dyn Fn() -> Option<libc::c_int>,
    started: Instant,
) -> Result<Vec<Holder>, Failure> {
    let lock = args.lock_names();
    let names: Vec<&str> = args.locks.iter().map(String::as_str).collect();
    let kind = args.kind();
    // A conflict is an outcome a caller branches on by status, silent unless --verbose (as
    // flock's); every other failure is printed.
    let conflict = |mut failure: Failure| {
        if let Some(code) = args.conflict_exit_code {
            failure.code = code;
        }
        failure.quiet = !args.verbose;
        failure
    };
    let limit = match args.wait {
        None | Some(Wait::Once) => {
            let granted = match names.as_slice() {
                [name] => store.acquire_kind(name, kind, args.ttl).map(|h| vec![h]),
                _ => store.acquire_all(&names, args.ttl),
            };
            return granted
                .map_err(|err| acquire_failure(&err, &lock, kind, args.wait.is_some()))
                .map_err(|failure| match failure.code {
                    exit::LOCKED => conflict(failure),
                    _ => failure,
                });
        }
        Some(Wait::For(wait)) => Some(wait),
        Some(Wait::Forever) => None,
    };
    // The engine saturates its deadline, so the longest Duration is a wait without a limit.
    let left = limit.map_or(Duration::MAX, |wait| wait.saturating_sub(started.elapsed()));
    let notice = Notice::for_lock(store, &args.locks, what(&lock, kind), args.quiet);
    let granted = match names.as_slice() {
        [name] => store
            .acquire_kind_wait_cancellable(name, kind, args.ttl, left, cancel)
            .map(|h| vec![h]),
        _ => store.acquire_all_wait_cancellable(&names, args.ttl, left, cancel),
    };
    drop(notice);
    match granted {
        Err(Error::Cancelled) => Err(interrupted().map_or_else(
            || Failure::from_lib(&Error::Cancelled),
            |signal| interrupted_failure(signal, &lock),
        )),
        Err(Error::Timeout { .. }) => {
            let holder = names
                .iter()
                .filter_map(|name| store.lock_holders(name).ok())
                .flatten()
                .find(|info| info.state == LockState::Held)
                .map_or_else(String::new, |info| {
                    format!(
                        " ({:?} held by pid {} with token {})",
                        info.name, info.pid, info.token
                    )
                });
            Err(conflict(Failure::new(
                exit::TIMEOUT,
                format!(
                    "timed out after {} waiting for {}{holder}",
                    format_duration(limit.unwrap_or(left)),
                    what(&lock, kind)
                ),
            )))
        }
        other => other.map_err(|err| acquire_failure(&err, &lock, kind, true)),
    }
}

/// Campaigns for the election the arguments' lock names, waiting as `-w` says (a limit counted
/// from `started`; by default, and with `-w forever`, none); a forwarded signal ends the wait.
fn campaign(
    store: &Store,
    args: &RunArgs,
    value: &[u8],
    margin: Option<Duration>,
    shared: &Shared,
    started: Instant,
) -> Result<Leadership, Failure> {
    let lock = args.lock_names();
    let limit = match args.wait {
        Some(Wait::Once) => Some(Duration::ZERO),
        Some(Wait::For(wait)) => Some(wait),
        None | Some(Wait::Forever) => None,
    };
    let options = CampaignOptions {
        ttl: args.ttl,
        margin,
        timeout: limit.map(|wait| wait.saturating_sub(started.elapsed())),
        cancel: Some(shared.cancel.clone()),
    };
    let notice = Notice::for_lock(
        store,
        &args.locks,
        format!("leadership of election {lock:?}"),
        args.quiet,
    );
    let campaigned = store.campaign(&lock, value, &options);
    drop(notice);
    match campaigned {
        Ok(leadership) => Ok(leadership),
        Err(Error::Cancelled) => Err(shared.interrupted().map_or_else(
            || Failure::from_lib(&Error::Cancelled),
            |signal| interrupted_failure(signal, &lock),
        )),
        Err(Error::Timeout { .. }) => {
            let leader = store
                .leader(&lock)
                .ok()
                .flatten()
                .map_or_else(String::new, |l| {
                    format!(" (pid {} leads with term {})", l.pid, l.term)
                });
            let mut failure = Failure::new(
                exit::TIMEOUT,
                format!(
                    "timed out after {} waiting to lead election {lock:?}{leader}",
                    format_duration(limit.unwrap_or_default())
                ),
            );
            failure.quiet = !args.verbose;
            Err(failure)
        }
        Err(err) => Err(Failure::from_lib(&err)),
    }
}

/// `lock "x"`, `a permit of semaphore "x" (3 permits)`, `lock "x" shared`.
pub fn what(lock: &str, kind: Kind) -> String {
    match kind {
        Kind::Semaphore(permits) => format!("a permit of semaphore {lock:?} ({permits} permits)"),
        Kind::Shared => format!("lock {lock:?} shared"),
        _ => format!("lock {lock:?}"),
    }
}

/// `asked_to_wait`: whether `-w` was given, so that the message for a held lock says how to
/// wait only to those who did not.
fn acquire_failure(err: &Error, lock: &str, kind: Kind, asked_to_wait: bool) -> Failure {
    match err {
        Error::Locked {
            token,
            pid,
            remaining,
            ..
        } => Failure::new(
            exit::LOCKED,
            format!(
                "{} is refused: held by pid {pid} with token {token} for {} more{}",
                what(lock, kind),
                format_duration(*remaining),
                if asked_to_wait {
                    ""
                } else {
                    "; pass -w SECONDS (or -w forever) to wait for it"
                }
            ),
        ),
        other => Failure::from_lib(other),
    }
}

pub fn interrupted_failure(signal: libc::c_int, lock: &str) -> Failure {
    Failure::new(
        u8::try_from(128 + signal).unwrap_or(u8::MAX),
        format!(
            "interrupted by {} while waiting for lock {lock:?}",
            signal_name(signal)
        ),
    )
}

/// `FENCELOCK_TOKENS`: `NAME=TOKEN` pairs joined by `,`, with `%`, `,` and `=` in a name
/// percent-escaped (`%25`, `%2C`, `%3D`), so that any name splits back out unchanged.
fn tokens_variable(holders: &[Arc<dyn Lease>]) -> String {
    let pairs: Vec<String> = holders
        .iter()
        .map(|h| format!("{}={}", escape_separators(h.name()), h.token()))
        .collect();
    pairs.join(",")
}

fn escape_separators(name: &str) -> String {
    let mut escaped = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            ',' => escaped.push_str("%2C"),
            '=' => escaped.push_str("%3D"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn spawn(
    db: &Path,
    args: &RunArgs,
    holders: &[Arc<dyn Lease>],
) -> Result<std::process::Child, Failure> {
    let argv = args.argv();
    let program = &argv[0];
    // The store string as given: a file's path made absolute (the command may change
    // directory), an etcd string untouched (as a path, its `//` would be squashed).
    let db = if is_etcd(db) {
        db.to_path_buf()
    } else {
        std::path::absolute(db).unwrap_or_else(|_| db.to_path_buf())
    };
    let mut command = Command::new(program);
    command
        .args(&argv[1..])
        .env("FENCELOCK_DB", db)
        .env("FENCELOCK_LOCK", args.lock_names());
    // The last grant's token is the highest of all (tokens follow the names' order).
    if let Some(last) = holders.last() {
        command.env("FENCELOCK_TOKEN", last.token().to_string());
    }
    if holders.len() > 1 {
        command.env("FENCELOCK_TOKENS", tokens_variable(holders));
    }
    let parent = libc::pid_t::try_from(std::process::id()).expect("pids fit in pid_t");
    let death_signal = args.lost_signal;
    // Made before the fork: the closure only reads it.
    let empty = signal_set(&[]);
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe system
    // calls; it allocates nothing (the error is built from an errno).
    unsafe {
        command.pre_exec(move || {
            // The forwarded signals are blocked in the tool; a command must not start with
            // them blocked, or it could neither be stopped by them nor by --lost-signal.
            let rc =
                libc::pthread_sigmask(libc::SIG_SETMASK, &raw const empty, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            // If the tool dies (even by SIGKILL), its lease dies with it: stop the command too.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::c_ulong::try_from(death_signal).unwrap_or(0),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The tool died before the line above took effect.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    command.spawn().map_err(|err| {
        let shown = program.to_string_lossy();
        match err.kind() {
            io::ErrorKind::NotFound => Failure::new(
                exit::COMMAND_NOT_FOUND,
                format!("command not found: {shown}"),
            ),
            _ => Failure::new(
                exit::CANNOT_EXECUTE,
                format!("cannot execute {shown}: {err}"),
            ),
        }
    })
}

/// The watcher: signals the command once the lease is known lost, and sends SIGKILL
/// `kill_after` later (unless zero) if it still runs; ends as well when the command ended first.
fn watch(
    holder: &dyn Lease,
    shared: &Shared,
    store: &Store,
    signal: libc::c_int,
    kill_after: Duration,
) {
    let lock = holder.name();
    loop {
        if holder.wait_lost(WATCH_SLICE) {
            if !matches!(*shared.phase(), Phase::Running { .. }) {
                return;
            }
            // Read before taking the phase lock: this reads the store.
            // Another permit or shared holder is no successor: only an exclusive lock names one.
            let successor = store
                .lock_info(lock)
                .ok()
                .flatten()
                .filter(|info| info.token != holder.token() && holder.kind() == Kind::Exclusive)
                .map_or_else(
                    || "it expired".to_owned(),
                    |info| {
                        if info.state == LockState::Held {
                            format!("pid {} holds it now with token {}", info.pid, info.token)
                        } else {
                            format!("it was taken over with token {}", info.token)
                        }
                    },
                );
            let phase = shared.phase();
            // With several locks, the first loss signals the command; the others only end.
            if let (Phase::Running { pid }, false) =
                (&*phase, shared.lost.swap(true, Ordering::AcqRel))
            {
                let pid = *pid;
                output::say(format_args!(
                    "lost the lease of lock {lock:?} (token {}): {successor}; \
                     sending {} to the command (pid {pid})",
                    holder.token(),
                    signal_name(signal)
                ));
                send(pid, signal);
                if !kill_after.is_zero() {
                    kill_later(shared, phase, pid, signal, kill_after);
                }
            }
            return;
        }
        if matches!(*shared.phase(), Phase::Done) {
            return;
        }
    }
}

/// Sends SIGKILL to the command (`pid`, sent `signal` just now) if it still runs `kill_after`
/// from now. Waits on `Shared::ended`, which releases the phase lock meanwhile.
fn kill_later(
    shared: &Shared,
    mut phase: MutexGuard<'_, Phase>,
    pid: libc::pid_t,
    signal: libc::c_int,
    kill_after: Duration,
) {
    let deadline = Instant::now() + kill_after;
    while matches!(*phase, Phase::Running { .. }) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            output::say(format_args!(
                "the command (pid {pid}) still runs {} after {}; sending SIGKILL",
                format_duration(kill_after),
                signal_name(signal)
            ));
            send(pid, libc::SIGKILL);
            return;
        }
        phase = shared
            .ended
            .wait_timeout(phase, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Waits until the child exited, leaving it unreaped (`WNOWAIT`).
fn wait_exited(pid: u32) -> io::Result<()> {
    use rustix::process::{Pid, WaitId, WaitIdOptions};
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ECHILD))?;
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    loop {
        match rustix::process::waitid(WaitId::Pid(pid), options) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// The command's status as the tool's: its exit code, or 128+N when signal N killed it.
fn command_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        (None, None) => u8::MAX,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by {}", signal_name(signal)),
        (None, None) => format!("ended with {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_name_and_number() {
        assert_eq!(parse_signal("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("SIGTERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("kill"), Ok(libc::SIGKILL));
        assert_eq!(parse_signal("10"), Ok(10));
        assert!(parse_signal("0").unwrap_err().contains("outside"));
        assert!(parse_signal("NOPE").unwrap_err().contains("unknown signal"));
        assert_eq!(signal_name(libc::SIGINT), "SIGINT");
    }
}
