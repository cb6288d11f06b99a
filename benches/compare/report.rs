//! The results of a comparison run: the markdown table, the fenced writes read against the
//! disk's floor, the goals checked against it, timings of single fencelock operations, and a
//! bar chart drawn as plain SVG.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencelock::{Mode, Options, Store};

use crate::clients::{RedisServer, System};
use crate::stats::{median, Histogram};
use crate::{Outcome, Workload};

pub struct Cell {
    pub system: System,
    pub workload: Workload,
    /// The round it ran in, from 0 (`--rounds`).
    pub round: usize,
    pub outcome: Outcome,
    /// The store file's commits per grant during the cell, per write in the fenced-put
    /// workloads (fencelock only, from its metrics).
    pub commits_per_op: Option<f64>,
}

/// The p50 and mean of one fencelock operation repeated alone.
pub struct SingleOp {
    pub mode: &'static str,
    pub op: &'static str,
    pub p50: Duration,
    pub mean: Duration,
}

pub fn latency(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1_000.0 {
        format!("{:.2} us", ns / 1_000.0)
    } else if ns < 100_000.0 {
        format!("{:.1} us", ns / 1_000.0)
    } else if ns < 1_000_000.0 {
        format!("{:.0} us", ns / 1_000.0)
    } else {
        format!("{:.2} ms", ns / 1_000_000.0)
    }
}

fn rate(ops: f64) -> String {
    if ops >= 10_000.0 {
        let digits = format!("{ops:.0}");
        // Thousands separated by commas, for reading large numbers at a glance.
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{ops:.0}")
    }
}

pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Measured {
            ops_per_sec,
            p50,
            p99,
        } => format!(
            "{:>10} ops/s  p50 {:>9}  p99 {:>9}",
            rate(*ops_per_sec),
            latency(*p50),
            latency(*p99)
        ),
        Outcome::Skipped(why) => why.to_string(),
    }
}

/// The throughput, p50 and p99 of `system` in `workload`, when it was measured.
fn measured(
    cells: &[Cell],
    system: System,
    workload: Workload,
) -> Option<(f64, Duration, Duration)> {
    cells.iter().find_map(|cell| match cell.outcome {
        Outcome::Measured {
            ops_per_sec,
            p50,
            p99,
        } if cell.system == system && cell.workload == workload => Some((ops_per_sec, p50, p99)),
        _ => None,
    })
}

/// `latency` over `floor`, the number of floor syncs it is worth.
fn in_floor_syncs(latency: Duration, floor: Duration) -> f64 {
    latency.as_secs_f64() / floor.as_secs_f64().max(1e-9)
}

/// The fenced-put workloads read against SQLite and the disk's floor: every system measured
/// there, its throughput over SQLite's in the same workload, and its p50 in floor syncs (the
/// p50 of the floor's one-thread cell). `None` when no fenced-put workload ran.
fn fenced_table(cells: &[Cell]) -> Option<String> {
    if !cells.iter().any(|cell| cell.workload.fenced_puts()) {
        return None;
    }
    let floor = measured(cells, System::Floor, Workload::FencedPut);
    let mut out = match floor {
        Some((writes, p50, _)) => format!(
            "The floor in this run: the kernel's in-place `pwrite` + `fdatasync` of a \
             preallocated file, one thread, p50 {} ({} writes/s). A row's p50 over it is the \
             row's latency in floor syncs.\n\n",
            latency(p50),
            rate(writes)
        ),
        None => "The floor did not run (it runs in the one-thread fenced put, system key \
                 `floor`): no latencies in floor syncs.\n\n"
            .to_owned(),
    };
    out.push_str(
        "| workload | system | writes/s | p50 | p99 | throughput vs SQLite | p50 in floor syncs | file commits per write |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for workload in Workload::ALL.into_iter().filter(|w| w.fenced_puts()) {
        let sqlite = throughput(cells, System::Sqlite, workload);
        for cell in cells.iter().filter(|cell| cell.workload == workload) {
            let Outcome::Measured {
                ops_per_sec,
                p50,
                p99,
            } = cell.outcome
            else {
                continue;
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                workload.label(),
                cell.system.label(),
                rate(ops_per_sec),
                latency(p50),
                latency(p99),
                sqlite.map_or(String::new(), |sqlite| format!(
                    "{:.2}x",
                    ops_per_sec / sqlite
                )),
                floor.map_or(String::new(), |(_, floor, _)| format!(
                    "{:.2}",
                    in_floor_syncs(p50, floor)
                )),
                cell.commits_per_op
                    .map_or(String::new(), |ratio| format!("{ratio:.3}")),
            );
        }
    }
    Some(out)
}

fn throughput(cells: &[Cell], system: System, workload: Workload) -> Option<f64> {
    cells.iter().find_map(|cell| match cell.outcome {
        Outcome::Measured { ops_per_sec, .. }
            if cell.system == system && cell.workload == workload =>
        {
            Some(ops_per_sec)
        }
        _ => None,
    })
}

fn table(cells: &[Cell]) -> String {
    let mut out = String::from(
        "| workload | system | throughput (ops/s) | p50 | p99 | throughput vs fencelock | file commits per grant (per write in fenced puts) |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for workload in Workload::ALL {
        let base = throughput(cells, System::FencelockMulti, workload);
        for cell in cells.iter().filter(|cell| cell.workload == workload) {
            let commits = cell
                .commits_per_op
                .map_or(String::new(), |ratio| format!("{ratio:.4}"));
            let row = match &cell.outcome {
                Outcome::Measured {
                    ops_per_sec,
                    p50,
                    p99,
                } => format!(
                    "{} | {} | {} | {} | {commits}",
                    rate(*ops_per_sec),
                    latency(*p50),
                    latency(*p99),
                    base.map_or(String::new(), |base| format!("{:.2}x", ops_per_sec / base))
                ),
                Outcome::Skipped(why) => format!("{why} | | | | "),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {row} |",
                workload.label(),
                cell.system.label()
            );
        }
    }
    out
}

/// One cell per system and workload, in the order they first ran: the median throughput, p50
/// and p99 of its rounds (skipped when a round was), and the median commits per grant.
pub fn summarize(rounds: &[Cell]) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    for first in rounds.iter().filter(|cell| cell.round == 0) {
        let same: Vec<&Cell> = rounds
            .iter()
            .filter(|cell| cell.system == first.system && cell.workload == first.workload)
            .collect();
        let measured: Vec<(f64, Duration, Duration)> = same
            .iter()
            .filter_map(|cell| match cell.outcome {
                Outcome::Measured {
                    ops_per_sec,
                    p50,
                    p99,
                } => Some((ops_per_sec, p50, p99)),
                Outcome::Skipped(_) => None,
            })
            .collect();
        let outcome = match (&first.outcome, measured.len() == same.len()) {
            (Outcome::Measured { .. }, true) => {
                let of = |pick: fn(&(f64, Duration, Duration)) -> f64| {
                    median(measured.iter().map(pick).collect()).expect("measured")
                };
                Outcome::Measured {
                    ops_per_sec: of(|m| m.0),
                    p50: Duration::from_secs_f64(of(|m| m.1.as_secs_f64())),
                    p99: Duration::from_secs_f64(of(|m| m.2.as_secs_f64())),
                }
            }
            (Outcome::Skipped(why), _) => Outcome::Skipped(why),
            (Outcome::Measured { .. }, false) => Outcome::Skipped("skipped in a later round"),
        };
        cells.push(Cell {
            system: first.system,
            workload: first.workload,
            round: 0,
            outcome,
            commits_per_op: median(same.iter().filter_map(|c| c.commits_per_op).collect()),
        });
    }
    cells
}

/// A system against its anchor ([`System::anchor`]) in one workload, round by round.
struct Paired {
    system: System,
    anchor: System,
    workload: Workload,
    /// The system's throughput over the anchor's, one a round.
    throughput: Vec<f64>,
    /// The system's p50 over the anchor's, one a round.
    p50: Vec<f64>,
}

/// Every system whose anchor ran beside it, in the rounds where both were measured.
fn paired(rounds: &[Cell]) -> Vec<Paired> {
    let measured = |cell: &Cell| match cell.outcome {
        Outcome::Measured {
            ops_per_sec, p50, ..
        } => Some((ops_per_sec, p50.as_secs_f64())),
        Outcome::Skipped(_) => None,
    };
    let mut out: Vec<Paired> = Vec::new();
    for cell in rounds {
        let Some(anchor) = cell.system.anchor() else {
            continue;
        };
        let Some((ours, our_p50)) = measured(cell) else {
            continue;
        };
        let Some((theirs, their_p50)) = rounds
            .iter()
            .find(|c| c.system == anchor && c.workload == cell.workload && c.round == cell.round)
            .and_then(measured)
        else {
            continue;
        };
        let index = match out
            .iter()
            .position(|p| p.system == cell.system && p.workload == cell.workload)
        {
            Some(index) => index,
            None => {
                out.push(Paired {
                    system: cell.system,
                    anchor,
                    workload: cell.workload,
                    throughput: Vec::new(),
                    p50: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[index].throughput.push(ours / theirs);
        out[index].p50.push(our_p50 / their_p50.max(1e-12));
    }
    out
}

/// A list of ratios as its median, with the least and the most when there are several.
fn spread(ratios: &[f64]) -> String {
    let middle = median(ratios.to_vec()).unwrap_or(f64::NAN);
    if ratios.len() < 2 {
        return format!("{middle:.2}x");
    }
    let least = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let most = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{middle:.2}x ({least:.2} to {most:.2})")
}

fn paired_table(pairs: &[Paired]) -> String {
    let mut out = String::from(
        "| workload | system | against | throughput ratio, median of rounds | p50 ratio, median of rounds | rounds |\n\
         |---|---|---|---:|---:|---:|\n",
    );
    for pair in pairs {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            pair.workload.label(),
            pair.system.label(),
            pair.anchor.label(),
            spread(&pair.throughput),
            spread(&pair.p50),
            pair.throughput.len()
        );
    }
    out
}

/// Times fencelock's single operations in both modes, and in multi-process mode with the redo
/// log, each repeated alone for `each`.
pub fn single_ops(each: Duration) -> Vec<SingleOp> {
    let mut results = Vec::new();
    for (label, mode, write_log) in [
        ("multi-process", Mode::MultiProcess, false),
        ("multi-process, redo log", Mode::MultiProcess, true),
        ("single-process", Mode::SingleProcess, false),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            mode,
            write_log,
            ..Options::default()
        };
        let store = Store::open_with(dir.path().join("locks.db"), &options).expect("open");
        let ttl = crate::clients::TTL;
        let holder = store.acquire("held", ttl).expect("acquire");
        let token = holder.token();
        store.put(b"key", &[b'v'; 100], token).expect("put");
        store.fence("resource", token).expect("fence");
        let mut time = |op: &'static str, f: &mut dyn FnMut() -> Duration| {
            let mut histogram = Histogram::default();
            let mut total = Duration::ZERO;
            let until = Instant::now() + each;
            while Instant::now() < until {
                let spent = f();
                histogram.record(spent);
                total += spent;
            }
            results.push(SingleOp {
                mode: label,
                op,
                p50: histogram.quantile(0.5),
                mean: total / u32::try_from(histogram.count().max(1)).unwrap(),
            });
        };
        let timed = |f: &mut dyn FnMut()| {
            let start = Instant::now();
            f();
            start.elapsed()
        };
        time("durable commit (holder.put)", &mut || {
            timed(&mut || holder.put(b"key", b"value").expect("put"))
        });
        time("extend", &mut || {
            timed(&mut || holder.extend(ttl).expect("extend"))
        });
        time("acquire (release not timed)", &mut || {
            let start = Instant::now();
            let h = store.acquire("cycle", ttl).expect("acquire");
            let spent = start.elapsed();
            h.release().expect("release");
            spent
        });
        time("release (acquire not timed)", &mut || {
            let h = store.acquire("cycle", ttl).expect("acquire");
            timed(&mut || h.release().expect("release"))
        });
        time("get", &mut || {
            timed(&mut || drop(store.get(b"key").expect("get")))
        });
        time("fence check (same token)", &mut || {
            timed(&mut || store.fence("resource", token).expect("fence"))
        });
        time("holder.is_held", &mut || {
            timed(&mut || assert!(holder.is_held().expect("is_held")))
        });
    }
    results
}

fn single_table(singles: &[SingleOp]) -> String {
    let mut out = String::from("| mode | operation | p50 | mean |\n|---|---|---:|---:|\n");
    for s in singles {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            s.mode,
            s.op,
            latency(s.p50),
            latency(s.mean)
        );
    }
    out
}

fn p50(cells: &[Cell], system: System, workload: Workload) -> Option<Duration> {
    cells.iter().find_map(|cell| match cell.outcome {
        Outcome::Measured { p50, .. } if cell.system == system && cell.workload == workload => {
            Some(p50)
        }
        _ => None,
    })
}

fn p99(cells: &[Cell], system: System, workload: Workload) -> Option<Duration> {
    cells.iter().find_map(|cell| match cell.outcome {
        Outcome::Measured { p99, .. } if cell.system == system && cell.workload == workload => {
            Some(p99)
        }
        _ => None,
    })
}

/// The project's performance goals (those of leases in shared memory, issue 24, and of fenced
/// writes at the disk's floor, issue 35), checked against this run.
fn goals(cells: &[Cell], pairs: &[Paired], singles: &[SingleOp]) -> String {
    let mut out = String::from("| goal | measured | met |\n|---|---|---|\n");
    let mut row = |goal: &str, measured: Measured| {
        let (text, met) = measured.unwrap_or_else(|| ("not measured".into(), false));
        let _ = writeln!(
            out,
            "| {goal} | {text} | {} |",
            if met { "yes" } else { "no" }
        );
    };
    let of = |a: System, b: System, workload: Workload| {
        Some(throughput(cells, a, workload)? / throughput(cells, b, workload)?)
    };
    let (multi, single_process, sqlite) = (
        System::FencelockMulti,
        System::FencelockSingle,
        System::Sqlite,
    );
    row(
        "1 thread, acquire+release, default mode: at least 10x SQLite, within 1.5x of single-process mode",
        of(multi, sqlite, Workload::OneThread)
            .zip(of(multi, single_process, Workload::OneThread))
            .map(|(vs_sqlite, vs_single)| {
                (
                    format!("{vs_sqlite:.1}x SQLite, {vs_single:.2}x single-process"),
                    vs_sqlite >= 10.0 && vs_single >= 1.0 / 1.5,
                )
            }),
    );
    for (label, workload, want) in [
        (
            "4 processes, distinct locks: at least 10x SQLite",
            Workload::FourProcesses,
            10.0,
        ),
        (
            "8 processes, distinct locks: at least 12x SQLite",
            Workload::EightProcesses,
            12.0,
        ),
    ] {
        row(
            label,
            of(multi, sqlite, workload).map(|ratio| (format!("{ratio:.2}x"), ratio >= want)),
        );
    }
    // Fenced writes (issue 35), medians of this run: through the redo log, the path the issue
    // builds, then the store file's commits it replaces, as the baseline.
    let floor = p50(cells, System::Floor, Workload::FencedPut);
    for system in [System::FencelockLog, multi] {
        fenced_goals(&mut row, cells, system, floor);
    }
    row(
        "4 processes, one hot lock: at least 5x SQLite, p99 at most SQLite's",
        of(multi, sqlite, Workload::HotLock)
            .zip(p99(cells, multi, Workload::HotLock))
            .zip(p99(cells, sqlite, Workload::HotLock))
            .map(|((ratio, ours), theirs)| {
                (
                    format!(
                        "{ratio:.1}x, p99 {} against {}",
                        latency(ours),
                        latency(theirs)
                    ),
                    ratio >= 5.0 && ours <= theirs,
                )
            }),
    );
    row(
        "stretch: 1 thread, acquire+release within 10x of the kernel's OFD lock cycle (p50)",
        p50(cells, multi, Workload::OneThread)
            .zip(p50(cells, System::Ofd, Workload::OneThread))
            .map(|(ours, kernel)| {
                let ratio = ours.as_secs_f64() / kernel.as_secs_f64().max(1e-9);
                (
                    format!(
                        "{ratio:.1}x ({} against {})",
                        latency(ours),
                        latency(kernel)
                    ),
                    ratio <= 10.0,
                )
            }),
    );
    for process_workload in [
        Workload::OneThread,
        Workload::FourProcesses,
        Workload::EightProcesses,
    ] {
        let commits = cells
            .iter()
            .find(|cell| cell.system == multi && cell.workload == process_workload)
            .and_then(|cell| cell.commits_per_op);
        row(
            &format!(
                "{}: file commits per grant, default mode (zero is the goal; 2 fdatasyncs each)",
                process_workload.label()
            ),
            commits.map(|ratio| (format!("{ratio:.4}"), ratio < 0.01)),
        );
    }
    let mutex = pairs
        .iter()
        .find(|pair| pair.system == System::EtcdOne && pair.workload == Workload::AcquireWrite);
    row(
        "on etcd, acquire + fenced write + release: at least etcd's Go concurrency.Mutex's \
         throughput, at most its p50 (medians of the rounds' ratios, the same node)",
        mutex.map(|pair| {
            let throughput = median(pair.throughput.clone()).unwrap_or(0.0);
            let p50 = median(pair.p50.clone()).unwrap_or(f64::INFINITY);
            (
                format!(
                    "{throughput:.2}x its throughput, {p50:.2}x its p50 ({} rounds)",
                    pair.throughput.len()
                ),
                throughput >= 1.0 && p50 <= 1.0,
            )
        }),
    );
    for op in ["get", "fence check"] {
        let worst = singles
            .iter()
            .filter(|s| s.op.starts_with(op))
            .map(|s| s.p50)
            .max();
        row(
            &format!("{op} under 10 us (p50, every mode)"),
            worst.map(|d| (latency(d), d < Duration::from_micros(10))),
        );
    }
    out
}

/// What a goal's row reads from the run: the measured text and whether the goal is met, or
/// `None` when it was not measured.
type Measured = Option<(String, bool)>;

/// The goals of fenced writes (issue 35) for `system` (a fencelock row) against SQLite and the
/// disk's `floor` (the floor's one-thread p50), each row through `row`.
fn fenced_goals(
    row: &mut dyn FnMut(&str, Measured),
    cells: &[Cell],
    system: System,
    floor: Option<Duration>,
) {
    let key = system.key();
    let against_sqlite = |workload: Workload| {
        let (ours, our_p50, _) = measured(cells, system, workload)?;
        let (theirs, their_p50, _) = measured(cells, System::Sqlite, workload)?;
        let ratio = ours / theirs;
        Some((
            ratio,
            format!(
                "{ratio:.2}x: {} writes/s (p50 {}) against SQLite's {} (p50 {})",
                rate(ours),
                latency(our_p50),
                rate(theirs),
                latency(their_p50)
            ),
        ))
    };
    row(
        &format!(
            "{key}, fenced put, 1 thread: at least 1.2x SQLite, p50 within 1.2x of the floor \
             (in-place pwrite + fdatasync)"
        ),
        against_sqlite(Workload::FencedPut)
            .zip(p50(cells, system, Workload::FencedPut))
            .zip(floor)
            .map(|(((ratio, text), ours), floor)| {
                let syncs = in_floor_syncs(ours, floor);
                (
                    format!("{text}; p50 {syncs:.2}x the floor's {}", latency(floor)),
                    ratio >= 1.2 && syncs <= 1.2,
                )
            }),
    );
    for (workload, want) in [
        (Workload::EightProcessPuts, 8.0),
        (Workload::SixteenProcessPuts, 12.0),
    ] {
        row(
            &format!("{key}, {}: at least {want}x SQLite", workload.label()),
            against_sqlite(workload).map(|(ratio, text)| (text, ratio >= want)),
        );
    }
    for workload in [Workload::EightProcessPuts, Workload::SixteenProcessPuts] {
        row(
            &format!(
                "{key}, {}: p99 at most 3 floor syncs (3x the floor's p50)",
                workload.label()
            ),
            p99(cells, system, workload)
                .zip(floor)
                .map(|(ours, floor)| {
                    let syncs = in_floor_syncs(ours, floor);
                    (
                        format!("p99 {}: {syncs:.1} floor syncs", latency(ours)),
                        syncs <= 3.0,
                    )
                }),
        );
    }
    row(
        &format!("{key}, acquire + fenced write + release: at least 2x SQLite"),
        against_sqlite(Workload::AcquireWrite).map(|(ratio, text)| (text, ratio >= 2.0)),
    );
}

const COLORS: [(System, &str); 16] = [
    (System::FencelockMulti, "#1f6feb"),
    (System::FencelockLog, "#8250df"),
    (System::FencelockAlone, "#a5b4fc"),
    (System::FencelockSingle, "#79b8ff"),
    (System::FencelockServed, "#0a3069"),
    (System::Sqlite, "#d97706"),
    (System::RedisAlways, "#c2410c"),
    (System::RedisEverysec, "#fca5a5"),
    (System::Flock, "#9ca3af"),
    (System::Ofd, "#6b7280"),
    (System::OfdDurable, "#374151"),
    (System::Floor, "#111827"),
    (System::EtcdGet, "#14532d"),
    (System::EtcdMutex, "#4d7c0f"),
    (System::EtcdOne, "#16a34a"),
    (System::EtcdThree, "#86efac"),
];

fn color(system: System) -> &'static str {
    COLORS
        .iter()
        .find(|(s, _)| *s == system)
        .map_or("#000", |(_, c)| c)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A horizontal bar chart of throughput, one group of bars per workload, on a log scale.
fn chart(cells: &[Cell], subtitle: &str) -> String {
    let systems: Vec<System> = System::ALL
        .into_iter()
        .filter(|s| cells.iter().any(|c| c.system == *s))
        .collect();
    let measured: Vec<f64> = cells
        .iter()
        .filter_map(|c| match c.outcome {
            Outcome::Measured { ops_per_sec, .. } if ops_per_sec > 0.0 => Some(ops_per_sec),
            _ => None,
        })
        .collect();
    let lo = measured
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .log10()
        .floor()
        .min(2.0);
    let hi = measured
        .iter()
        .copied()
        .fold(0.0, f64::max)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let (x0, x1) = (20.0, 760.0);
    let x = |ops: f64| x0 + (ops.max(1.0).log10() - lo) / (hi - lo) * (x1 - x0);
    let (bar, gap, header) = (15.0, 3.0, 22.0);
    let legend_rows = systems.len().div_ceil(2) as f64;
    let top = 58.0 + legend_rows * 18.0 + 10.0;
    let group = header + systems.len() as f64 * (bar + gap) + 14.0;
    let height = top + group * Workload::ALL.len() as f64 + 30.0;
    let width = 960.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{x0}" y="22" font-size="16" font-weight="bold">Lock cycles, or fenced writes, per second (log scale; longer is faster)</text>"#
    );
    let _ = writeln!(
        svg,
        r##"<text x="{x0}" y="40" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    for (i, system) in systems.iter().enumerate() {
        let lx = x0 + (i % 2) as f64 * 460.0;
        let ly = 58.0 + (i / 2) as f64 * 18.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            ly - 10.0,
            color(*system),
            lx + 18.0,
            ly,
            escape(system.label())
        );
    }
    let bottom = height - 30.0;
    let mut decade = lo;
    while decade <= hi {
        let gx = x(10f64.powf(decade));
        // The decade's exponent: a whole number, and `as` takes one below 0 to 0.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let label = match decade as u32 {
            d if d >= 6 => format!("{}M", 10u64.pow(d - 6)),
            d if d >= 3 => format!("{}k", 10u64.pow(d - 3)),
            d => format!("{}", 10u64.pow(d)),
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{gx}" y1="{top}" x2="{gx}" y2="{bottom}" stroke="#e5e7eb"/><text x="{gx}" y="{}" text-anchor="middle" fill="#555">{label}</text>"##,
            bottom + 16.0
        );
        decade += 1.0;
    }
    for (w, workload) in Workload::ALL.into_iter().enumerate() {
        let gy = top + w as f64 * group;
        let _ = writeln!(
            svg,
            r#"<text x="{x0}" y="{}" font-weight="bold">{}</text>"#,
            gy + 15.0,
            escape(workload.label())
        );
        for (s, system) in systems.iter().enumerate() {
            let by = gy + header + s as f64 * (bar + gap);
            let cell = cells
                .iter()
                .find(|c| c.system == *system && c.workload == workload);
            match cell.map(|c| &c.outcome) {
                Some(Outcome::Measured {
                    ops_per_sec, p50, ..
                }) => {
                    let bx = x(*ops_per_sec);
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{x0}" y="{by}" width="{:.1}" height="{bar}" fill="{}"><title>{}: {} ops/s, p50 {}</title></rect><text x="{:.1}" y="{}" fill="#222">{} /s</text>"##,
                        (bx - x0).max(1.0),
                        color(*system),
                        escape(system.label()),
                        rate(*ops_per_sec),
                        latency(*p50),
                        bx + 5.0,
                        by + 12.0,
                        rate(*ops_per_sec)
                    );
                }
                Some(Outcome::Skipped(why)) => {
                    let _ = writeln!(
                        svg,
                        r##"<text x="{}" y="{}" fill="#888" font-style="italic">{}: {}</text>"##,
                        x0 + 4.0,
                        by + 12.0,
                        escape(system.label()),
                        why
                    );
                }
                None => {}
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// Today's date (UTC) as YYYY-MM-DD.
fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = i64::try_from(secs / 86_400).unwrap() + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The CPU, cores, kernel and the filesystem of the temporary directory.
fn machine() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU".into(), |(_, m)| m.trim().to_owned());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let tmp = std::env::temp_dir();
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let fs_type = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && tmp.starts_with(f[1])).then(|| (f[1].len(), f[2].to_owned()))
        })
        .max()
        .map_or("unknown".into(), |(_, t)| t);
    format!(
        "{cpu}, {cores} cores, Linux {}, temporary files on {fs_type} ({})",
        kernel.trim(),
        tmp.display()
    )
}

fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    // This program runs as <target>/release/deps/compare-<hash>.
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target"))
}

pub fn write_all(rounds: &[Cell], singles: &[SingleOp], command: &str, write_docs: bool) {
    let cells = &summarize(rounds);
    let date = today();
    let machine = machine();
    let versions = format!(
        "fencelock {}, SQLite {} (rusqlite, bundled), Redis {}",
        fencelock::VERSION,
        rusqlite::version(),
        RedisServer::version().unwrap_or_else(|| "not installed".into())
    );
    let table = table(cells);
    let pairs = paired(rounds);
    let goals = goals(cells, &pairs, singles);
    let pairs = paired_table(&pairs);
    let count = rounds.iter().map(|cell| cell.round + 1).max().unwrap_or(1);
    let fenced = fenced_table(cells).map_or(String::new(), |fenced| {
        format!("\n## Fenced writes against the disk's floor\n\n{fenced}")
    });
    let table = format!(
        "{}{table}\n## Ratios, round by round\n\n\
         Each system against the one it is measured beside, in the same round on the same server \
         (fencelock on a file against SQLite, fencelock on etcd against etcd's own Mutex on the \
         same node); the median of the rounds' ratios, with the least and the most.\n\n{pairs}{fenced}",
        if count > 1 {
            format!("Medians of {count} rounds: each cell ran once a round, the systems of one server in turn.\n\n")
        } else {
            String::new()
        }
    );
    let singles = single_table(singles);
    let results = format!(
        "# fencelock compared\n\n\
         - date: {date}\n- machine: {machine}\n- versions: {versions}\n- command: `{command}`\n\n\
         {table}\n## Goals\n\n{goals}\n## Single fencelock operations\n\n{singles}"
    );
    println!("\n{results}");

    let out = target_dir().join("compare");
    fs::create_dir_all(&out).expect("create target/compare");
    fs::write(out.join("results.md"), &results).expect("write results.md");
    let svg = chart(cells, &format!("{date}, {machine}"));
    fs::write(out.join("chart.svg"), &svg).expect("write chart.svg");
    eprintln!("wrote {0}/results.md and {0}/chart.svg", out.display());

    if write_docs {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        fs::create_dir_all(&docs).expect("create docs");
        fs::write(docs.join("compare.svg"), &svg).expect("write docs/compare.svg");
        fs::write(
            docs.join("benchmarks.md"),
            docs_page(
                &date, &machine, &versions, command, &table, &goals, &singles,
            ),
        )
        .expect("write docs/benchmarks.md");
        eprintln!("wrote docs/benchmarks.md and docs/compare.svg");
    }
}

fn docs_page(
    date: &str,
    machine: &str,
    versions: &str,
    command: &str,
    table: &str,
    goals: &str,
    singles: &str,
) -> String {
    format!(
        "# Benchmarks\n\n\
fencelock next to what a user would pick instead, measured in one run on one machine. Absolute \
numbers move from run to run on a shared machine; the ratios within one run are what to read.\n\n\
- Date: {date}\n- Machine: {machine}\n- Versions: {versions}\n- Command: `{command}`\n\n\
![throughput chart](compare.svg)\n\n\
## What runs\n\n\
Every system does the same work, through the same loop:\n\n\
- **fencelock**: `Store::acquire`, `Holder::put` (a durable commit that checks the lease and \
the key's highest token), `Holder::release`. In multi-process mode (the default) a grant and a \
release change the store's lease map in shared memory, with no commit and no fsync (tokens come \
from a block reserved durably ahead of need); the \"file commits per grant\" column counts what \
is still committed (token reservations, the history's flushes), each commit two `fdatasync`s. \
In single-process mode and through a server (`fencelock serve`), grants commit to the file \
without an fsync. The hot-lock workload uses `acquire_wait`. Single-process mode refuses a \
second process, so the process workloads do not apply to it.\n\
- **fencelock (multi-process, writes through the redo log)**: the same client, every process's \
store opened with `Options {{ write_log: true, .. }}`: a fenced write (a put, and an acquire's \
write) goes to the redo log beside the store file, one `fdatasync` shared by every process \
writing at that moment, and checkpoints move the log into the store file (docs/design/writes.md). \
Its \"file commits per grant\" column stays empty: the store's metrics count every write \
acknowledged through the log as a commit, and cannot tell the store file's own commits apart.\n\
- **SQLite**: a lease table and a token counter; WAL journal, `synchronous=FULL` (every commit is \
fsynced), `busy_timeout`. Acquire is one `BEGIN IMMEDIATE` transaction (check the lease, bump the \
counter, upsert the lease); release deletes the lease if it still carries the token; the write \
checks the lease and the key's token in one transaction. Waiting acquires poll every millisecond.\n\
- **Redis**: a Lua script does `SET NX PX` of the lease to the next token and `INCR` of the \
counter; release is a compare-and-delete script; the write is a script that checks the lease and \
the key's token. Once with `appendfsync always` (durable), once with `everysec` (a crash loses up \
to a second of grants). Waiting acquires poll every millisecond.\n\
- **flock(2)** and **kernel: OFD lock**: one file per lock, `pwrite` for the write: no \
durability, no token, no lease. The floor of what any lock on this host costs (fencelock's \
liveness locks are OFD locks).\n\
- **kernel: OFD lock + durable token**: the same lock, and a token counter bumped under its own \
lock with `pwrite` + `fdatasync` at every grant (the write is followed by an `fdatasync`): what \
a grant costs that makes its own token durable.\n\n\
The fenced-put workloads (\"1 thread, lock held: fenced put\" and \"N processes, fenced puts on \
keys of their own\" for 4, 8 and 16 real processes) time the durable write alone:\n\n\
- Each worker takes a lock of its own and writes a key of its own once before the measurement; \
each timed cycle is then one write of 100 bytes to that key under the lease it holds: \
`Holder::put` (the lease and the key's highest token checked in the same commit), SQLite's \
write transaction above (the lease, then the token at least the key's highest, then the upsert, \
in one `BEGIN IMMEDIATE` transaction), Redis's write script, a Put guarded by the Mutex's \
ownership on etcd. Every write carries a counter in its value, so that each one changes the key \
(SQLite commits a row rewritten as it was without a sync). In these workloads the \"file commits \
per grant\" column counts commits per write.\n\
- **kernel: in-place pwrite+fdatasync (the disk's floor)** runs in these workloads only: an OFD \
lock held through the cell, and each write a `pwrite` at offset 0 of a file preallocated when it \
is opened (a page of zeros, synced), then an `fdatasync`, which has only data to sync. Its \
one-thread p50 is the floor: the \"Fenced writes against the disk's floor\" table gives every \
row's throughput against SQLite's and its p50 in floor syncs. With N processes each writes a \
file of its own. flock(2) and the OFD-lock rows run no fenced puts: their write is not durable, \
or, with the durable token, it is the floor's write once the lock is held.\n\
- The goals of fenced writes (issue 35) are read from the same run, for fencelock through the \
redo log and, as the baseline it replaces, for fencelock committing to its file: one thread at least 1.2x \
SQLite with a p50 within 1.2x of the floor, 8 processes at least 8x SQLite and 16 at least \
12x, each with a p99 of at most 3 floor syncs, and acquire + fenced write + release at least 2x \
SQLite.\n\n\
Each cell runs for a fixed time on fresh state; throughput counts completed cycles, p50 and p99 \
are the latencies of one cycle (acquire and release, plus the write where there is one; the \
write alone in the fenced puts). \
\"Throughput vs fencelock\" divides a row's throughput by fencelock's (multi-process mode) in the \
same workload: above 1 is faster than fencelock.\n\n\
## Results\n\n{table}\n\
## Goals\n\n{goals}\n\
## Single fencelock operations\n\n\
Each repeated alone on a store of a few records. Fenced writes are durable commits in both \
modes (with the redo log, a record in the log and its `fdatasync`); in multi-process mode acquires, extends and releases change the shared lease map, in \
single-process mode grants and extends commit without an fsync (tokens are reserved durably 4096 at a time).\n\n{singles}\n\
Per-operation benches, including acquire as the store grows to a million live locks: \
`cargo bench --bench ops`.\n"
    )
}
