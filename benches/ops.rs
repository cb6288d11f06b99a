//! Criterion benches of single fencelock operations, in both modes.
//!
//! `cargo bench --bench ops` runs them all; a filter narrows them, e.g.
//! `cargo bench --bench ops -- multi-process/get`. The store-size benches fill the lease table
//! with live locks first; `FENCELOCK_BENCH_RECORDS=1000,100000` picks the sizes (default
//! `1000,100000,1000000`).
//!
//! Every operation runs against a store in a fresh temporary directory (on the same disk as
//! `/tmp`); the durable ones pay the fsyncs of a real commit.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fencelock::{Error, Holder, Mode, Options, Store};

const TTL: Duration = Duration::from_secs(600);
const VALUE: &[u8] = &[b'v'; 100];
const MODES: [(Mode, &str); 2] = [
    (Mode::MultiProcess, "multi-process"),
    (Mode::SingleProcess, "single-process"),
];
/// Threads that fill the lease table; enough that group commit fills its batches of 128.
const FILL_THREADS: usize = 256;

fn open(mode: Mode) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        mode,
        ..Options::default()
    };
    let store = Store::open_with(dir.path().join("locks.db"), &options).expect("open store");
    (dir, store)
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    group
}

/// One operation each, on a store holding a handful of records.
fn single_ops(c: &mut Criterion) {
    for (mode, label) in MODES {
        let (_dir, store) = open(mode);
        let mut group = configure(c, label);

        group.bench_function("acquire+release", |b| {
            b.iter(|| store.acquire("cycle", TTL).expect("acquire").release());
        });

        // Release alone: the acquire that precedes each release is not timed.
        group.bench_function("release", |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let holder = store.acquire("released", TTL).expect("acquire");
                    let start = Instant::now();
                    holder.release().expect("release");
                    spent += start.elapsed();
                }
                spent
            });
        });

        let held = store.acquire("held", TTL).expect("acquire");
        group.bench_function("acquire refused (held)", |b| {
            b.iter(|| match store.acquire("held", TTL) {
                Err(Error::Locked { .. }) => {}
                other => panic!("expected Locked, got {other:?}"),
            });
        });

        group.bench_function("extend", |b| b.iter(|| held.extend(TTL).expect("extend")));

        let token = held.token();
        // The value `get` reads, there also when a filter skips the put benches.
        store.put(b"plain", VALUE, token).expect("put");
        group.bench_function("put with token", |b| {
            b.iter(|| store.put(b"plain", VALUE, token).expect("put"));
        });

        group.bench_function("holder-checked put", |b| {
            b.iter(|| held.put(b"checked", VALUE).expect("put"));
        });

        group.bench_function("acquire_and_put+release", |b| {
            b.iter(|| {
                store
                    .acquire_and_put("with-write", TTL, b"written", VALUE)
                    .expect("acquire_and_put")
                    .release()
            });
        });

        group.bench_function("get", |b| {
            b.iter(|| black_box(store.get(b"plain").expect("get").expect("value")));
        });

        store.fence("resource", token).expect("fence");
        group.bench_function("fence check (same token)", |b| {
            b.iter(|| store.fence("resource", token).expect("fence"));
        });

        group.bench_function("is_held", |b| {
            b.iter(|| assert!(held.is_held().expect("is_held")));
        });

        group.finish();
        drop(held);
    }
}

/// Fills the lease table with `count` live locks (distinct names, held by this process), using
/// many threads so that group commit batches the grants.
fn fill(store: &Store, count: usize) -> Vec<Holder> {
    let next = AtomicU64::new(0);
    thread::scope(|scope| {
        let threads: Vec<_> = (0..FILL_THREADS)
            .map(|_| {
                let next = &next;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count as u64 {
                            return mine;
                        }
                        mine.push(store.acquire(&format!("fill-{i:08}"), TTL).expect("fill"));
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|thread| thread.join().expect("fill thread"))
            .collect()
    })
}

fn record_counts() -> Vec<usize> {
    std::env::var("FENCELOCK_BENCH_RECORDS")
        .unwrap_or_else(|_| "1000,100000,1000000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("FENCELOCK_BENCH_RECORDS: numbers"))
        .collect()
}

/// A store filled with `count` live locks, and their holders (dropping them releases the locks).
fn filled_store(mode: Mode, label: &str, count: usize) -> (tempfile::TempDir, Store, Vec<Holder>) {
    let (dir, store) = open(mode);
    let start = Instant::now();
    let holders = fill(&store, count);
    let took = start.elapsed();
    let info = store.info().expect("info");
    assert_eq!(
        usize::try_from(info.lock_records).unwrap(),
        count,
        "the fill left {count} records"
    );
    eprintln!(
        "{label}: filled {count} live locks in {:.1} s ({:.0} grants/s), file {} MiB",
        took.as_secs_f64(),
        count as f64 / took.as_secs_f64(),
        info.file_size >> 20
    );
    (dir, store, holders)
}

/// Releases in token order. The kernel merges the liveness locks of adjacent tokens into one
/// range; releasing from the low end keeps it one range, where a scattered order would split it
/// into as many pieces as there are holders and make every unlock scan them all.
fn release_in_token_order(mut holders: Vec<Holder>) {
    holders.sort_unstable_by_key(Holder::token);
    for holder in holders {
        holder.release().expect("release");
    }
}

/// Acquire+release of one lock while the lease table holds `n` other live locks. Each grant
/// examines two records for pruning; live ones stay, so the table keeps its size.
fn store_size(c: &mut Criterion) {
    for (mode, label) in MODES {
        let mut group = configure(c, &format!("{label}/acquire+release with live locks"));
        for count in record_counts() {
            // Filled on first use, so that a filter that skips this bench skips the fill too.
            let mut filled = None;
            group.bench_with_input(BenchmarkId::from_parameter(count), &count, |b, &count| {
                let (_, store, _) = filled.get_or_insert_with(|| filled_store(mode, label, count));
                b.iter(|| store.acquire("probe", TTL).expect("acquire").release());
            });
            if let Some((_dir, store, holders)) = filled {
                assert_eq!(
                    usize::try_from(store.info().expect("info").lock_records).unwrap(),
                    count + 1,
                    "live locks were pruned"
                );
                release_in_token_order(holders);
            }
        }
        group.finish();
    }
}

criterion_group!(benches, single_ops, store_size);
criterion_main!(benches);
