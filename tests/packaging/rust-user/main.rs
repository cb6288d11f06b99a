//! The seed walkthrough as a crate outside the repository builds it (tests/packaging/rust.sh
//! copies it into a fresh crate that depends on fencelock by path, default features): A
//! acquires payment-export (token N) with a short lease that runs out, B acquires it (N+1) and
//! writes, A's write with N is refused, and B's data stays. Exits 0 only if all of that holds.

use std::process::ExitCode;
use std::time::Duration;

use fencelock::{Error, Store};

const KEY: &[u8] = b"payments/today.csv";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(problem) => {
            eprintln!("FAILED: {problem}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let dir = std::env::args().nth(1).ok_or("usage: user DIRECTORY")?;
    let store = Store::open(format!("{dir}/locks.db")).map_err(|e| e.to_string())?;
    let a = store
        .acquire("payment-export", Duration::from_millis(300))
        .map_err(|e| e.to_string())?;
    let n = a.token();
    println!("A holds payment-export with token {n}");
    // B, another party (another open of the store, as another process would be), waits until
    // A's lease has run out. The same open in the same thread would be refused at once: a
    // wait for this thread's own lease is a self-deadlock (Error::WouldDeadlock).
    let b_store = Store::open(format!("{dir}/locks.db")).map_err(|e| e.to_string())?;
    let b = b_store
        .acquire_wait(
            "payment-export",
            Duration::from_secs(30),
            Duration::from_secs(30),
        )
        .map_err(|e| e.to_string())?;
    if b.token() != n + 1 {
        return Err(format!("B's token is {}, expected {}", b.token(), n + 1));
    }
    store
        .put(KEY, b"B's fresh export", b.token())
        .map_err(|e| e.to_string())?;
    match store.put(KEY, b"A's stale export", n) {
        Err(Error::StaleToken { token, highest }) if token == n && highest == n + 1 => {
            println!("A's write with token {n}: refused (highest {highest})");
        }
        other => return Err(format!("A's write with token {n} gave {other:?}")),
    }
    let kept = store
        .get(KEY)
        .map_err(|e| e.to_string())?
        .ok_or("B's data is gone")?;
    if kept.value != b"B's fresh export" || kept.token != n + 1 {
        return Err(format!("the key holds {kept:?}"));
    }
    b.release().map_err(|e| e.to_string())?;
    println!("walkthrough ok with fencelock {}", fencelock::VERSION);
    Ok(())
}
