//! `fencelock history` and `fencelock metrics`: what the store recorded of a lock's grants, and
//! what it counted.

use std::time::SystemTime;

use fencelock::{Ending, HistoryEntry, Kind, Metrics, Store, WAIT_BUCKET_BOUNDS};
use serde_json::{json, Value};

use crate::commands::{print_json, unix_ms, write_stdout};
use crate::duration::format_duration;
use crate::output::{self, Cell, Colour};
use crate::{exit, Failure};

/// The lock names `history` refuses before it opens the store, as the library would after.
pub fn check_lock_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() {
        return Err(Failure::new(exit::USAGE, "lock name is empty"));
    }
    Ok(())
}

/// `fencelock history NAME`: one row per grant, oldest first.
pub fn history(store: &Store, name: &str, json: bool) -> Result<(), Failure> {
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
    if json {
        return print_json(&Value::Array(entries.iter().map(entry_json).collect()));
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
    if unsafe { libc::localtime_r(&time, &mut tm) }.is_null() {
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
pub fn metrics(store: &Store, json: bool) -> Result<(), Failure> {
    let metrics = store.metrics().map_err(|err| Failure::from_lib(&err))?;
    let label = store.path().to_string_lossy();
    if json {
        return print_json(&metrics_json(&metrics, &label));
    }
    write_stdout(metrics.prometheus(&label).as_bytes())
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
