//! `fencelock history` and `fencelock metrics`: what the store recorded of a lock's grants, and
//! what it counted.

use std::fmt::Write as _;
use std::time::SystemTime;

use fencelock::{Ending, HistoryEntry, Kind, LockState, Metrics, Store, WAIT_BUCKET_BOUNDS};
use serde_json::{json, Value};

use crate::commands::{is_etcd, print_json, unix_ms, write_stdout};
use crate::duration::format_duration;
use crate::http;
use crate::output::{self, Cell, Colour};
use crate::timeline;
use crate::{exit, Failure};

/// The lock names `history` refuses before it opens the store, as the library would after.
pub fn check_lock_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() {
        return Err(Failure::new(exit::USAGE, "lock name is empty"));
    }
    Ok(())
}

/// How `history` prints.
#[derive(Clone, Copy)]
pub enum Format<'a> {
    Table,
    Json,
    /// The timeline picture, with these events marked on it.
    Svg(&'a [timeline::Event]),
}

/// `fencelock history NAME`: one row per grant, oldest first.
pub fn history(store: &Store, name: &str, format: Format<'_>) -> Result<(), Failure> {
    let entries = store.history(name).map_err(|err| Failure::from_lib(&err))?;
    if entries.is_empty() {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "no grant of lock {name:?} on record in {}",
                store.path().display()
            ),
        ));
    }
    // Ends the store could not keep (its history could not be written for a while): said on
    // standard error, so that the listing stays as scripts parse it.
    if let Ok(metrics) = store.metrics() {
        if metrics.history_dropped > 0 {
            output::say(format!(
                "{} lease ends of this store were left out of its history while it could not \
                 be written to the store file (metrics: history_dropped)",
                metrics.history_dropped
            ));
        }
    }
    match format {
        Format::Json => {
            return print_json(&Value::Array(entries.iter().map(entry_json).collect()));
        }
        Format::Svg(events) => {
            return write_stdout(timeline::render(name, &entries, events)?.as_bytes());
        }
        Format::Table => {}
    }
    let now = SystemTime::now();
    let rows: Vec<Vec<Cell>> = entries
        .iter()
        .map(|entry| {
            vec![
                Cell::from(entry.token.to_string()),
                Cell::from(entry.kind.describe()),
                Cell::from(entry.pid.to_string()),
                Cell::from(entry.granted.map_or_else(|| "?".to_owned(), local_time)),
                Cell::from(match (entry.ending, entry.ended) {
                    (Ending::Held, _) => "-".to_owned(),
                    (_, Some(ended)) => local_time(ended),
                    (_, None) => "?".to_owned(),
                }),
                Cell::from(held_for(entry, now)),
                Cell {
                    text: entry.ending.as_str().to_owned(),
                    colour: Some(ending_colour(entry.ending)),
                },
            ]
        })
        .collect();
    let text = output::table(
        &[
            "TOKEN", "KIND", "PID", "GRANTED", "ENDED", "HELD FOR", "HOW",
        ],
        &rows,
        output::colour_stdout(),
    );
    write_stdout(text.as_bytes())
}

/// From the grant to its end, or to `now` for a lease still held; `?` when either is unknown.
fn held_for(entry: &HistoryEntry, now: SystemTime) -> String {
    let end = match entry.ending {
        Ending::Held => Some(now),
        _ => entry.ended,
    };
    match (entry.granted, end) {
        (Some(granted), Some(end)) => {
            format_duration(end.duration_since(granted).unwrap_or_default())
        }
        _ => "?".to_owned(),
    }
}

fn ending_colour(ending: Ending) -> Colour {
    match ending {
        Ending::Held => Colour::Green,
        Ending::Expired | Ending::TakenOver => Colour::Yellow,
        Ending::HolderDied => Colour::Red,
        _ => Colour::Dim,
    }
}

/// `YYYY-MM-DD HH:MM:SS` in the local time zone (`TZ`), to the second.
pub(crate) fn local_time(at: SystemTime) -> String {
    let secs = unix_ms(at).div_euclid(1000);
    let Ok(time) = libc::time_t::try_from(u64::try_from(secs).unwrap_or(0)) else {
        return format!("@{secs}");
    };
    // SAFETY: an all-zero `tm` is a valid value of the plain C struct.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r reads `time` and writes `tm`, both valid for the call; it is the
    // reentrant form, and reads the time zone on its first use.
    if unsafe { libc::localtime_r(&raw const time, &raw mut tm) }.is_null() {
        return format!("@{secs}");
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

fn time_ms(at: Option<SystemTime>) -> Value {
    at.map_or(Value::Null, |at| unix_ms(at).into())
}

fn kind_json(kind: Kind) -> (&'static str, u32) {
    match kind {
        Kind::Shared => ("shared", 0),
        Kind::Semaphore(permits) => ("semaphore", permits),
        _ => ("exclusive", 0),
    }
}

fn entry_json(entry: &HistoryEntry) -> Value {
    let (kind, permits) = kind_json(entry.kind);
    json!({
        "name": entry.name,
        "token": entry.token,
        "kind": kind,
        "permits": permits,
        "pid": entry.pid,
        "granted_at_ms": time_ms(entry.granted),
        "expires_at_ms": time_ms(entry.expires),
        "ended_at_ms": time_ms(entry.ended),
        "recorded_at_ms": time_ms(entry.recorded),
        "ending": entry.ending.as_str(),
    })
}

/// `fencelock metrics`: the store's counters, in Prometheus' text format or as JSON.
pub fn metrics(store: &Store, json: bool, top_locks: usize) -> Result<(), Failure> {
    if json {
        let metrics = store.metrics().map_err(|err| Failure::from_lib(&err))?;
        return print_json(&metrics_json(&metrics, &store.path().to_string_lossy()));
    }
    let page = metrics_page(store, top_locks).map_err(|err| Failure::from_lib(&err))?;
    write_stdout(page.as_bytes())
}

/// `fencelock metrics --listen ADDR`: answers scrapes of /metrics until SIGTERM or SIGINT,
/// then exits 0. Each scrape opens the store, reads it and closes it (`open` is
/// `commands::open_store` for this store): a process that kept it open would hold the file, and
/// a server could not start (`serve` waits for the processes that have it open). So the
/// counters are those the processes that have the store open keep in its shared memory: they
/// start again once every one of them closed it, as the help says.
pub fn listen(
    open: impl Fn() -> Result<Store, Failure> + Send + 'static,
    addr: std::net::SocketAddr,
    top_locks: usize,
) -> Result<(), Failure> {
    let stop = crate::serve::block_stop_signals()?;
    let bound = http::start(addr, move || {
        let store = open().map_err(|failure| failure.message)?;
        metrics_page(&store, top_locks).map_err(|err| err.to_string())
    })
    .map_err(|err| Failure::new(exit::IO, format!("cannot listen on {addr}: {err}")))?;
    output::say(format_args!("metrics on http://{bound}/metrics"));
    stop();
    Ok(())
}

/// The page `metrics` prints and `/metrics` answers: the store's counters and gauges, then the
/// per-lock series of the `top_locks` locks held longest (at most that many series a family,
/// whatever the number of names).
pub fn metrics_page(store: &Store, top_locks: usize) -> fencelock::Result<String> {
    let metrics = store.metrics()?;
    let label = store.path().to_string_lossy();
    let mut page = metrics.prometheus(&label);
    if top_locks == 0 {
        return Ok(page);
    }
    // The held locks, each with its oldest live grant.
    let mut held: Vec<(String, SystemTime)> = Vec::new();
    for info in store.locks()? {
        if info.state != LockState::Held {
            continue;
        }
        match held.iter_mut().find(|(name, _)| *name == info.name) {
            Some((_, since)) => *since = (*since).min(info.granted_at),
            None => held.push((info.name, info.granted_at)),
        }
    }
    held.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    held.truncate(top_locks);
    let now = SystemTime::now();
    let labels = |name: &str| {
        format!(
            "store=\"{}\",scope=\"{}\",lock=\"{}\"",
            escape_label(&label),
            metrics.scope.as_str(),
            escape_label(name)
        )
    };
    let mut held_lines = String::new();
    let mut waiter_lines = String::new();
    for (name, since) in &held {
        let seconds = now.duration_since(*since).unwrap_or_default().as_secs_f64();
        let _ = writeln!(
            held_lines,
            "fencelock_lock_held_seconds{{{}}} {seconds:.3}",
            labels(name)
        );
        let waiters = if is_etcd(store.path()) {
            0
        } else {
            store.waiters(name)?.len()
        };
        let _ = writeln!(
            waiter_lines,
            "fencelock_lock_waiters{{{}}} {waiters}",
            labels(name)
        );
    }
    let _ = write!(
        page,
        "# HELP fencelock_lock_held_seconds How long the lock's oldest live grant has been held, \
         for the {top_locks} locks held longest (no more series, whatever the number of names).\n\
         # TYPE fencelock_lock_held_seconds gauge\n{held_lines}\
         # HELP fencelock_lock_waiters Acquires queued waiting for the lock, for the same locks.\n\
         # TYPE fencelock_lock_waiters gauge\n{waiter_lines}"
    );
    Ok(page)
}

/// A label value as the text format writes it: `\\`, `\"` and `\n` escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn metrics_json(m: &Metrics, store: &str) -> Value {
    let buckets: Vec<Value> = m
        .wait_buckets
        .iter()
        .enumerate()
        .map(|(i, count)| {
            let bound = WAIT_BUCKET_BOUNDS.get(i).map_or(Value::Null, |b| {
                Value::from(u64::try_from(b.as_millis()).unwrap_or(u64::MAX))
            });
            json!({ "up_to_ms": bound, "count": count })
        })
        .collect();
    json!({
        "store": store,
        "scope": m.scope.as_str(),
        "since_at_ms": unix_ms(m.since),
        "grants": m.grants,
        "releases": m.releases,
        "refused_locked": m.refused_locked,
        "refused_timeout": m.refused_timeout,
        "refused_cancelled": m.refused_cancelled,
        "refused_other": m.refused_other,
        "stale_writes": m.stale_writes,
        "lock_lost": m.lock_lost,
        "waits": m.waits,
        "wait_ns": u64::try_from(m.wait_time.as_nanos()).unwrap_or(u64::MAX),
        "wait_buckets": buckets,
        "ended_released": m.ended_released,
        "ended_expired": m.ended_expired,
        "ended_taken_over": m.ended_taken_over,
        "ended_holder_died": m.ended_holder_died,
        "leases_lost": m.leases_lost(),
        "commits": m.commits,
        "committed_ops": m.committed_ops,
        "history_dropped": m.history_dropped,
        "live_exclusive": m.live_exclusive,
        "live_shared": m.live_shared,
        "live_permits": m.live_permits,
        "queued_waiters": m.queued_waiters,
        "file_bytes": m.file_bytes,
    })
}
