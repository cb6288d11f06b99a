//! `fencelock hold`: a lock around a section of a shell script, as flock(1)'s `exec 9>f; flock
//! 9` and `etcdctl lock NAME` give. It takes the lock, prints the fencing token on a line of its
//! own, keeps the lease alive, and holds until the first of: its standard input closes (the
//! script closed the pipe, or died: the kernel closes it then), SIGTERM, SIGINT, SIGHUP or
//! SIGQUIT, or its parent exits. It then releases and exits 0. A lease lost while it holds
//! (the tool was paused past the TTL) ends it with status 85, and the writes fenced by the
//! printed token are refused from then on.
//!
//! Every way a script can end lets the lock go: a clean end closes the pipe or signals; a script
//! killed mid-way leaves the pipe without a writer (end of file) and `hold` without its parent;
//! a `hold` killed with SIGKILL is a holder that died, whose lock the next grant takes at once
//! (liveness); a `hold` paused loses the lease when its TTL runs out.
//!
//! Standard input must be a pipe the script keeps open (a bash coprocess, a FIFO). A standard
//! input that is `/dev/null` (the input of a background job, `cmd &`, in a script) would end the
//! hold at once: it is refused, unless `--no-stdin` says to hold until a signal or the parent's
//! exit alone.

use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{Cancel, Error, Holder};

use crate::commands::open_store;
use crate::duration::Wait;
use crate::run::{acquire, interrupted_failure, signal_set, what};
use crate::{exit, output, Failure, HoldArgs};

/// The signals that end a hold (and a wait for the lock before it).
const ENDING: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];
/// How often the hold looks whether its parent is still there.
const LOOK: Duration = Duration::from_millis(100);
/// `ended`'s value once standard input closed (signals are positive).
const STDIN_CLOSED: i32 = -1;

/// Runs `fencelock hold`; returns the status to exit with.
pub fn hold(db: &Path, busy_timeout: Duration, args: &HoldArgs) -> Result<u8, Failure> {
    let lock = &args.lock;
    if !args.no_stdin && stdin_is_dev_null() {
        return Err(Failure::new(
            exit::USAGE,
            "standard input is /dev/null, which would end the hold at once: give hold a pipe \
             that the script keeps open (a coprocess, a FIFO), or pass --no-stdin to hold until \
             a signal or the parent's exit",
        ));
    }
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let stop = Cancel::new();
    // What ended the hold: 0 nothing yet, a signal's number, or STDIN_CLOSED.
    let ended = Arc::new(AtomicI32::new(0));
    start_signal_thread(&stop, &ended)
        .map_err(|err| Failure::new(exit::IO, format!("cannot set up signal handling: {err}")))?;
    let names = lock.lock_names();
    let interrupted = || match ended.load(Ordering::Acquire) {
        signal if signal > 0 => Some(signal),
        _ => None,
    };
    let started = Instant::now();
    let open_wait = match lock.wait {
        Some(Wait::For(wait)) => wait.min(busy_timeout),
        _ => busy_timeout,
    };
    let store = open_store(db, true, open_wait, Some(stop.clone())).map_err(|failure| {
        interrupted().map_or(failure, |signal| interrupted_failure(signal, &names))
    })?;
    let holders = acquire(&store, lock, &stop, &interrupted, started)?;
    let release_all = || {
        let mut lost = None;
        for holder in &holders {
            if let Err(Error::LockLost { .. }) = holder.release() {
                lost.get_or_insert(holder);
            }
        }
        lost
    };
    if let Some(signal) = interrupted() {
        release_all();
        return Err(interrupted_failure(signal, &names));
    }
    for holder in &holders {
        if let Err(err) = holder.keep_alive(lock.ttl) {
            release_all();
            return Err(Failure::from_lib(&err));
        }
    }
    // The last grant's token is the highest of all, as run's FENCELOCK_TOKEN.
    let token = holders.last().map_or(0, Holder::token);
    let printed = {
        let mut out = io::stdout().lock();
        writeln!(out, "{token}").and_then(|()| out.flush())
    };
    if let Err(err) = printed {
        release_all();
        return Err(Failure::new(
            exit::IO,
            format!("cannot print the token (the reader is gone?): {err}"),
        ));
    }
    if lock.verbose {
        output::say(format_args!(
            "holding {} with token {token}",
            what(&names, lock.kind())
        ));
    }
    if !args.no_stdin {
        let (stop, ended) = (stop.clone(), Arc::clone(&ended));
        thread::Builder::new()
            .name("fencelock-stdin".into())
            .spawn(move || {
                let mut buf = [0u8; 4096];
                let mut stdin = io::stdin().lock();
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) => break,
                        Err(err) if err.kind() != io::ErrorKind::Interrupted => break,
                        _ => {}
                    }
                }
                let _ =
                    ended.compare_exchange(0, STDIN_CLOSED, Ordering::AcqRel, Ordering::Acquire);
                stop.cancel();
            })
            .map_err(|err| Failure::new(exit::IO, format!("no stdin thread: {err}")))?;
    }
    let why = loop {
        let lost = holders.iter().find(|holder| holder.is_lost());
        if let Some(holder) = lost {
            break Err(holder);
        }
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            break Ok("its parent exited".to_owned());
        }
        if stop.is_cancelled() {
            break Ok(match ended.load(Ordering::Acquire) {
                STDIN_CLOSED => "its standard input closed".to_owned(),
                signal => format!("it got signal {signal}"),
            });
        }
        if let Some(first) = holders.first() {
            let _ = first.wait_lost_cancellable(LOOK, &stop);
        }
    };
    let lost_at_release = release_all();
    match (why, lost_at_release) {
        (Ok(why), None) => {
            if lock.verbose {
                output::say(format_args!("released lock {names:?}: {why}"));
            }
            Ok(exit::OK)
        }
        (Err(holder), _) | (Ok(_), Some(holder)) => {
            output::say(format_args!(
                "lost the lease of lock {:?} (token {}) while holding it: writes fenced by \
                 the token are refused from now on",
                holder.name(),
                holder.token()
            ));
            Ok(exit::LOCK_LOST)
        }
    }
}

/// Whether standard input is `/dev/null`.
fn stdin_is_dev_null() -> bool {
    let Ok(null) = std::fs::metadata("/dev/null") else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/0")
        .is_ok_and(|stdin| stdin.dev() == null.dev() && stdin.ino() == null.ino())
}

/// Blocks the ending signals in this thread and every thread spawned after (this runs before
/// any other), then takes them in a thread of their own: the first records itself in `ended`
/// and fires `stop`, which ends the wait for the lock or the hold.
fn start_signal_thread(stop: &Cancel, ended: &Arc<AtomicI32>) -> io::Result<()> {
    let set = signal_set(&ENDING);
    // SAFETY: `set` is initialized; the old mask is not wanted.
    let rc =
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let (stop, ended) = (stop.clone(), Arc::clone(ended));
    thread::Builder::new()
        .name("fencelock-signals".into())
        .spawn(move || loop {
            // SAFETY: an all-zero siginfo_t is valid; sigwaitinfo fills it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` and `info` are valid for the call.
            let signal = unsafe { libc::sigwaitinfo(&raw const set, &raw mut info) };
            if signal > 0 {
                let _ = ended.compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire);
                stop.cancel();
            }
        })?;
    Ok(())
}
