//! The one line a wait prints on a terminal once it has lasted a second, as `consul lock
//! -verbose` does: what it waits for, who holds it and for how long more. `run -w`, `serve
//! --wait` and any other command that blocks (`elect`) start a [`Notice`] before the wait and
//! drop it after: nothing is printed when the wait ended sooner, when standard error is not a
//! terminal (a cron job's mail, a log), or with `-q`.

use std::io::IsTerminal;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use fencelock::{LockInfo, LockState, Store};

use crate::duration::format_duration;
use crate::output;
use crate::procs;

/// How long a wait lasts before it is told.
pub const AFTER: Duration = Duration::from_secs(1);

/// A wait that will be told once it has lasted [`AFTER`]; dropping it ends the wait's notice
/// (a line being written is finished first).
pub struct Notice {
    done: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Notice {
    /// Starts the notice of a wait: after `after`, unless dropped before, writes `fencelock:` and
    /// what `describe` says to standard error. Nothing is started when `quiet` or when standard
    /// error is not a terminal.
    pub fn start(
        after: Duration,
        quiet: bool,
        describe: impl FnOnce() -> String + Send + 'static,
    ) -> Notice {
        if quiet || !std::io::stderr().is_terminal() {
            return Notice {
                done: None,
                thread: None,
            };
        }
        let (done, ended) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("fencelock-notice".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(after) {
                    output::say(describe());
                }
            })
            .ok();
        Notice {
            done: Some(done),
            thread,
        }
    }

    /// The notice of a wait for a lock: `waiting for WHAT: held by pid N (COMMAND) with token
    /// T for 12s more` (every holder of a shared lock or semaphore, and how many wait).
    pub fn for_lock(store: &Store, names: &[String], what: String, quiet: bool) -> Notice {
        let store = store.clone();
        let names = names.to_vec();
        Notice::start(AFTER, quiet, move || {
            let holders: Vec<LockInfo> = names
                .iter()
                .filter_map(|name| store.lock_holders(name).ok())
                .flatten()
                .filter(|info| info.state == LockState::Held)
                .collect();
            lock_line(&what, &holders)
        })
    }
}

/// `waiting for lock "x": held by pid 42 (backup.sh) with token 7 for 29s more`.
pub fn lock_line(what: &str, holders: &[LockInfo]) -> String {
    if holders.is_empty() {
        return format!("waiting for {what}");
    }
    let who: Vec<String> = holders
        .iter()
        .map(|info| {
            format!(
                "pid {} ({}) with token {} for {} more",
                info.pid,
                output::quote_for_terminal(&procs::brief(info.pid, 40)),
                info.token,
                format_duration(info.remaining)
            )
        })
        .collect();
    let names: std::collections::BTreeSet<&str> =
        holders.iter().map(|info| info.name.as_str()).collect();
    let held = if names.len() > 1 {
        let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
        format!("{} held by ", names.join(", "))
    } else {
        "held by ".to_owned()
    };
    format!("waiting for {what}: {held}{}", who.join("; "))
}

impl Drop for Notice {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
