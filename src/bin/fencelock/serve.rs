//! `fencelock serve`: runs a server of one store until a signal or its idle time ends it. Under
//! systemd (`Type=notify`, `notify.rs`) it says `READY=1` once it serves, pings the watchdog
//! from its batch loop, and says `STOPPING=1` as it stops.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fencelock::{Cancel, Error, Heartbeat, ServeOptions, Server, Store};

use crate::duration::format_duration;
use crate::notice::{self, Notice};
use crate::notify::{watchdog_period, Notifier};
use crate::procs;
use crate::{exit, output, Failure, ServeArgs};
use crate::{http, observe};

pub fn serve(path: &Path, args: &ServeArgs) -> Result<(), Failure> {
    let stop = Cancel::new();
    stop_on_signals(&stop)?;
    let notifier = Notifier::from_env()
        .map_err(|err| Failure::new(exit::IO, format!("NOTIFY_SOCKET: {err}")))?
        .map(Arc::new);
    // At half the watchdog's period, as sd_watchdog_enabled(3) advises; from the loop that
    // serves the batches, so that a server stuck in one (which stalls every process of the
    // store up to its busy timeout) stops pinging and is restarted.
    let heartbeat = notifier
        .as_ref()
        .zip(watchdog_period())
        .map(|(notifier, period)| {
            let notifier = Arc::clone(notifier);
            Heartbeat {
                every: period / 2,
                beat: Arc::new(move || {
                    let _ = notifier.notify("WATCHDOG=1");
                }),
            }
        });
    let options = ServeOptions {
        wait: args.wait,
        idle_exit: args.idle_exit,
        cancel: Some(stop),
        history: !args.no_history,
        heartbeat,
    };
    let notice = {
        let (path, wait) = (path.to_path_buf(), args.wait);
        Notice::start(notice::AFTER, args.quiet, move || {
            let pids: Vec<String> = Server::holders(&path)
                .into_iter()
                .map(|pid| {
                    format!(
                        "pid {pid} ({})",
                        output::quote_for_terminal(&procs::brief(pid, 40))
                    )
                })
                .collect();
            format!(
                "waiting up to {} for the processes that have {} open to move over: {}",
                format_duration(wait),
                path.display(),
                if pids.is_empty() {
                    "none left".to_owned()
                } else {
                    pids.join(", ")
                }
            )
        })
    };
    let started = Server::start(path, &options);
    drop(notice);
    let server = started.map_err(|err| match err {
        Error::InUse => {
            let holders = Server::holders(path);
            let read_only = fencelock::Options {
                read_only: true,
                ..fencelock::Options::default()
            };
            let server = fencelock::Store::open_with(path, &read_only)
                .ok()
                .and_then(|store| store.server());
            let who = if let Some(pid) = server {
                format!("the server with pid {pid} serves it already")
            } else if holders.is_empty() {
                "another server serves it".to_owned()
            } else {
                let pids: Vec<String> = holders.iter().map(u32::to_string).collect();
                format!(
                    "processes that did not move over hold it open: {}",
                    pids.join(", ")
                )
            };
            Failure::new(
                exit::DATABASE,
                format!("{} cannot be served: {who}", path.display()),
            )
        }
        other => Failure::from_lib(&other),
    })?;
    output::say(format_args!(
        "serving {} (pid {})",
        server.path().display(),
        std::process::id()
    ));
    // A store of this process, served by the server like any other, for the scrapes; taken out
    // of the slot before the server stops, so that the server is the store's last user then
    // and seals its tokens (`Server`'s drop).
    let scraped: Arc<Mutex<Option<Store>>> = Arc::new(Mutex::new(None));
    if let Some(addr) = args.metrics_listen {
        let store = Store::open(path).map_err(|err| Failure::from_lib(&err))?;
        *lock_slot(&scraped) = Some(store);
        let (slot, top) = (
            Arc::clone(&scraped),
            usize::try_from(args.metrics_locks).unwrap_or(usize::MAX),
        );
        let bound = http::start(addr, move || match &*lock_slot(&slot) {
            Some(store) => observe::metrics_page(store, top).map_err(|err| err.to_string()),
            None => Err("the server is stopping".to_owned()),
        })
        .map_err(|err| Failure::new(exit::IO, format!("cannot listen on {addr}: {err}")))?;
        output::say(format_args!("metrics on http://{bound}/metrics"));
    }
    let tell = |state: &str| {
        if let Some(notifier) = &notifier {
            if let Err(err) = notifier.notify(state) {
                output::say(format_args!("telling systemd {state:?} failed: {err}"));
            }
        }
    };
    // The server holds the file, and is recorded in the ring: stores find it from now on.
    tell(&format!(
        "READY=1\nSTATUS=serving {}",
        server.path().display()
    ));
    let served = server.run(&options);
    drop(lock_slot(&scraped).take());
    served.map_err(|err| Failure::from_lib(&err))?;
    // Before the server's drop lets the file go and clears its record in the ring.
    tell("STOPPING=1");
    Ok(())
}

/// Job control of a shell must never pause the server (every process of the store would wait
/// for it): the terminal's stop signals are ignored. SIGTERM and SIGINT fire `stop`, from a
/// thread that waits for them; they are blocked in every other thread (spawned after this).
/// Not signal-hook: it catches signals and cannot ignore them (a caught SIGTTOU makes a
/// background write to the terminal restart for ever), and its handlers would run on the
/// engine's threads, where blocked signals never interrupt a wait.
fn stop_on_signals(stop: &Cancel) -> Result<(), Failure> {
    // SAFETY: setting signal dispositions with valid arguments.
    unsafe {
        for signal in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let wait = block_stop_signals()?;
    let stop = stop.clone();
    std::thread::Builder::new()
        .name("fencelock-signals".into())
        .spawn(move || {
            wait();
            stop.cancel();
        })
        .map_err(|err| Failure::new(exit::IO, format!("no signal thread: {err}")))?;
    Ok(())
}

/// Blocks SIGTERM and SIGINT in this thread and every thread spawned after it (call it before
/// any other), and returns what waits for the first of them.
pub fn block_stop_signals() -> Result<impl FnOnce(), Failure> {
    // SAFETY: the set is local and initialized by sigemptyset before use.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        set
    };
    // SAFETY: `set` is initialized; the old mask is not wanted.
    if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) } != 0
    {
        return Err(Failure::new(exit::IO, "the signal mask could not be set"));
    }
    Ok(move || {
        let mut signal = 0;
        // SAFETY: `set` and `signal` are valid for the call.
        unsafe { libc::sigwait(&raw const set, &raw mut signal) };
    })
}

fn lock_slot(slot: &Mutex<Option<Store>>) -> MutexGuard<'_, Option<Store>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}
