//! Loom models of the ring's protocols (make test-loom): the real code of `slots.rs`,
//! `queue.rs`, `map.rs` (with `share/buckets.rs` and `share/keys.rs` over it), `tokens.rs`,
//! `flush.rs` and `share/claims.rs` over the last two, run on a
//! ring on the heap over loom's atomics and futex (`sync.rs`), with every interleaving of a few threads
//! explored up to a bound of preemptions (`LOOM_MAX_PREEMPTIONS`, 2 in make test-loom, 3 in
//! make test-loom-long). A thread stands for a process; a process that dies is one whose
//! liveness lock [`Procs`] drops.
//!
//! Each model checks its invariants at its end or at each step, and each can fail: the seeded
//! mutants of `scripts/mutants.sh` (a weakened ordering, a dropped wake, no generation, no
//! floor, a token taken by a load and a store, a key index swap lost taken as won) each make one
//! of these fail.

use std::io;

use super::sync::Live;
use loom::sync::atomic::{AtomicBool, Ordering};

mod bell;
mod claims;
mod flush;
mod keys;
mod map;
mod queue;
mod server;
mod slots;
mod tokens;

/// The liveness locks of the model's processes: liveness id `n` (from 1) is process `n`'s.
pub(super) struct Procs {
    dead: Vec<AtomicBool>,
}

impl Procs {
    pub(super) fn new(count: usize) -> Procs {
        Procs {
            dead: (0..count).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Process `id` dies: its liveness lock is dropped, as the kernel drops a dead process's.
    #[allow(dead_code)]
    pub(super) fn kill(&self, id: u64) {
        self.dead[usize::try_from(id - 1).expect("an id")].store(true, Ordering::SeqCst);
    }
}

impl Live for Procs {
    fn is_held(&self, id: u64) -> io::Result<bool> {
        Ok(usize::try_from(id)
            .ok()
            .and_then(|id| id.checked_sub(1))
            .and_then(|index| self.dead.get(index))
            .is_some_and(|dead| !dead.load(Ordering::SeqCst)))
    }
}

/// Runs `model` under loom with the preemption bound of the environment (2 by default), prints
/// how many schedules it explored (`--nocapture` shows them), and fails a model that explored
/// only one.
///
/// One schedule means loom never interleaved the threads: in loom 0.7 a spawned thread whose
/// first operation is a load is not scheduled before its spawner's next operations (loom#392),
/// so a model whose threads only ever run one after the other checks nothing about their
/// races. The killed-writer map model ran one schedule per step until a `yield_now()` after its
/// spawn; this check keeps any model from falling back into that.
pub(super) fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    // A std atomic, outside loom's model: it counts the model's runs, not a step of one.
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&runs);
    builder.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    let name = std::thread::current()
        .name()
        .unwrap_or("a model")
        .to_owned();
    println!("{name}: {runs} schedules");
    assert!(
        runs > 1,
        "{name} explored one schedule: its threads never interleave (loom#392: yield after a spawn)"
    );
}
