//! The cost of a call through the C ABI next to the same call in Rust: `fencelock_store_get`
//! vs `Store::get` on an existing key and on a missing one (the `NOT_FOUND` path, which builds an
//! error object), and `fencelock_holder_token` vs `Holder::token`.
//! Informational; prints the median of 31 batches.
//!
//! Run: cargo bench --features capi --bench ffi

use std::ffi::CString;
use std::hint::black_box;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use fencelock::ffi::{
    fencelock_buffer_free, fencelock_error_free, fencelock_holder_free, fencelock_holder_put,
    fencelock_holder_token, fencelock_store_acquire, fencelock_store_close, fencelock_store_get,
    fencelock_store_open, FENCELOCK_NOT_FOUND,
};
use fencelock::Store;

const BATCHES: usize = 31;

/// Nanoseconds per call of `op` over `calls` calls.
fn per_call(calls: u32, op: &mut impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        op();
    }
    start.elapsed().as_secs_f64() * 1e9 / f64::from(calls)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median nanoseconds per call of `rust` and of `c`, from `BATCHES` rounds that each time a
/// batch of one and then of the other, so both see the same machine conditions; and the
/// median of the per-round differences.
fn compare(calls: u32, mut rust: impl FnMut(), mut c: impl FnMut()) -> (f64, f64, f64) {
    per_call(calls, &mut rust); // warm up
    per_call(calls, &mut c);
    let (mut r, mut k, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        let rust_ns = per_call(calls, &mut rust);
        let c_ns = per_call(calls, &mut c);
        r.push(rust_ns);
        k.push(c_ns);
        d.push(c_ns - rust_ns);
    }
    (median(r), median(k), median(d))
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = b"payments/today.csv";
    let value = vec![7u8; 100];

    // The Rust side: its own store file with one value.
    // One file for both sides, so the storage work is the same.
    let rust_store = Store::open(dir.path().join("bench.db")).expect("open");
    let rust_holder = rust_store
        .acquire("bench", Duration::from_secs(600))
        .expect("acquire");
    rust_holder.put(key, &value).expect("put");

    // The C side: the same file through the C ABI, under another lock name.
    let path = CString::new(dir.path().join("bench.db").to_str().expect("UTF-8")).expect("no NUL");
    let name = CString::new("bench-c").expect("no NUL");
    let mut store = null_mut();
    let mut holder = null_mut();
    // SAFETY: valid pointers throughout; every buffer is freed with its length.
    unsafe {
        assert_eq!(
            fencelock_store_open(path.as_ptr(), &raw mut store, null_mut()),
            0
        );
        assert_eq!(
            fencelock_store_acquire(store, name.as_ptr(), 600_000, &raw mut holder, null_mut()),
            0
        );
        assert_eq!(
            fencelock_holder_put(
                holder,
                key.as_ptr(),
                key.len(),
                value.as_ptr(),
                value.len(),
                null_mut()
            ),
            0
        );
    }

    let get = compare(
        20_000,
        || {
            black_box(rust_store.get(black_box(key)).expect("get"));
        },
        // SAFETY: `store`, `holder` and the out-pointers are live for the whole bench; each
        // buffer the library returns is freed once, by its own function.
        || unsafe {
            let (mut ptr, mut len, mut token) = (null_mut(), 0usize, 0u64);
            let status = fencelock_store_get(
                black_box(store),
                key.as_ptr(),
                key.len(),
                &raw mut ptr,
                &raw mut len,
                &raw mut token,
                null_mut(),
            );
            assert_eq!(status, 0);
            black_box((ptr, token));
            fencelock_buffer_free(ptr, len);
        },
    );
    let token = compare(
        1_000_000,
        || {
            black_box(black_box(&rust_holder).token());
        },
        // SAFETY: `store`, `holder` and the out-pointers are live for the whole bench; each
        // buffer the library returns is freed once, by its own function.
        || unsafe {
            black_box(fencelock_holder_token(black_box(holder)));
        },
    );
    // A failing call: the error path allocates an error object with a message.
    let missing = compare(
        20_000,
        || {
            black_box(rust_store.get(black_box(b"missing")).expect("get"));
        },
        // SAFETY: `store`, `holder` and the out-pointers are live for the whole bench; each
        // buffer the library returns is freed once, by its own function.
        || unsafe {
            let (mut ptr, mut len) = (null_mut(), 0usize);
            let mut err = null_mut();
            let status = fencelock_store_get(
                black_box(store),
                b"missing".as_ptr(),
                7,
                &raw mut ptr,
                &raw mut len,
                null_mut(),
                &raw mut err,
            );
            assert_eq!(status, FENCELOCK_NOT_FOUND);
            fencelock_error_free(err);
        },
    );

    println!("median of {BATCHES} interleaved batches, per call:");
    for (what, (rust, c, overhead)) in [
        ("Store::get vs fencelock_store_get", get),
        ("Holder::token vs fencelock_holder_token", token),
        ("get of a missing key (C: NOT_FOUND + error)", missing),
    ] {
        println!("{what:<46} Rust {rust:>8.1} ns  C ABI {c:>8.1} ns  overhead {overhead:>6.1} ns");
    }

    // SAFETY: freed once each.
    unsafe {
        fencelock_holder_free(holder);
        fencelock_store_close(store);
    }
}
