//! The store's change bell (`activity.rs`, [`Bell`]): an observer that takes its mark before it
//! reads the store, and sleeps only while the bell is that mark, is woken by every commit after
//! its read, or sees it before it sleeps (a model's wait has no timeout: a lost wake-up is a
//! deadlock loom reports). Mutants `bell-no-wake` and `bell-counted-late` fail it.

use std::time::Duration;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::check;
use crate::ring::activity::Bell;

#[test]
fn an_observer_is_woken_by_every_commit_after_its_read() {
    check(|| {
        let bell = Arc::new(Bell::new());
        // The store's values: a commit makes its value visible, then rings.
        let value = Arc::new(AtomicU64::new(0));
        let committer = {
            let (bell, value) = (bell.clone(), value.clone());
            thread::spawn(move || {
                for v in 1..=2 {
                    value.store(v, Ordering::Release);
                    bell.ring();
                }
            })
        };
        // The observer waits to see the last commit, as an election's observer reads the
        // leader records after its mark.
        loop {
            let mark = bell.mark();
            if value.load(Ordering::Acquire) == 2 {
                break;
            }
            bell.wait(mark, Duration::MAX);
        }
        committer.join().expect("the committer");
    });
}
