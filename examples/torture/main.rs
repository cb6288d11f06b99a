//! Torture test with a history checker.
//!
//! ```text
//! cargo run --release --example torture -- --processes 8 --duration 60s
//! ```
//!
//! Worker processes (this program re-executed with the role `worker`) run several threads
//! each, doing random acquires (try and wait), extends, releases, puts by token, holder-checked
//! puts, acquire-and-puts, deletes, gets and fences on 3 locks, 4 keys and 2 fence resources,
//! with leases of 50-300 ms. The controller pauses workers with SIGSTOP for longer than any
//! lease and resumes them, and kills them with SIGKILL and starts replacements. Every operation
//! is logged with its start, end and result; afterwards the checker reads the logs and the
//! final store and reports every violation of fencelock's rules (see `check.rs`). The exit
//! status is non-zero when there is one.
//!
//! Some workers load an `LD_PRELOAD` shim (`stop_shim.c`) that stops its own process inside a
//! commit (at a store pwrite, under redb's write lock) or inside an open (holding fencelock's
//! open byte). The controller resumes them like its own pauses, and meanwhile starts short-lived
//! openers (the role `opener`) that open the store with a short busy timeout, read, maybe
//! write once, and must finish, `Ok` or refused with `Timeout`, never hang.
//!
//! The controller creates the store before it starts the workers; `--racing-create` lets the
//! first workers race to create it instead. With `--server` it also runs a server of the store
//! (the role `server`), which it kills with SIGKILL and replaces, and pauses with SIGSTOP, at
//! random moments; the workers' operations go through whichever server runs, or use the file
//! themselves while none does, and the same checks hold. With `--write-log` every process
//! writes through the redo log (`Options::write_log`, small segments), and the shim also stops
//! workers right before a pwrite or a sync of a log segment.

mod check;
mod controller;
mod history;
mod opener;
// Shared with tests/crash.rs, which uses parts of it this run does not.
#[allow(dead_code)]
mod rng;
mod worker;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        return worker::main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("opener") {
        return opener::main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("server") {
        return serve(&args[1..]);
    }
    controller::main(&args)
}

/// The role `server <store>` (with `--server`): serves the store until killed. A start refused
/// (the previous server's file still held, workers not moving over in time) exits non-zero;
/// the controller starts another.
fn serve(args: &[String]) -> ExitCode {
    let [store] = args else {
        eprintln!("usage: torture server STORE");
        return ExitCode::from(2);
    };
    let options = fencelock::ServeOptions::default();
    match fencelock::Server::start(store, &options).and_then(|server| server.run(&options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("server: {err}");
            ExitCode::FAILURE
        }
    }
}
