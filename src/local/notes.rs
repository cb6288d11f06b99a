//! What a local store notes for the history of its locks ([`HistoryNotes`]), beside the file's
//! history table (`rules/history.rs`): a release's note, for the next grant to judge the
//! lease's end by and for this process to record as it closes the store (`history.rs`), and
//! where the history's sweep resumes.

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::base::clock;
use crate::ring::activity::Activity;

/// Releases a process remembers to record as it closes the store, its latest.
const UNRECORDED_LIMIT: usize = 1024;

/// What a store keeps for the history of its locks, beside the file's history table.
pub(crate) struct HistoryNotes {
    /// Whether grants record the ends they learn of (`Options::history`).
    keeps: bool,
    /// Releases this process made, `(name, token, released_ns)`, to record as it closes the
    /// store.
    unrecorded: Mutex<VecDeque<(String, u64, u64)>>,
    /// The last lock name whose history the history's sweep looked at (`rules/history.rs`).
    cursor: Mutex<String>,
}

impl HistoryNotes {
    pub(crate) fn new(keeps: bool) -> HistoryNotes {
        HistoryNotes {
            keeps,
            unrecorded: Mutex::new(VecDeque::new()),
            cursor: Mutex::new(String::new()),
        }
    }

    /// Whether grants record the ends of the leases they replace in the lock's history.
    pub(crate) fn keeps(&self) -> bool {
        self.keeps
    }

    /// Where the history's sweep of too many locks resumes.
    pub(crate) fn cursor(&self) -> &Mutex<String> {
        &self.cursor
    }

    /// Notes the release of the lease `token` of `name` now: in the activity page `activity`,
    /// where the grant that next takes the lock reads it, and for this process to record as it
    /// closes the store.
    pub(crate) fn note_release(&self, activity: &Activity, name: &str, token: u64) {
        let now = clock::now_ns();
        activity.note_release(token, now);
        if !self.keeps {
            return;
        }
        let mut unrecorded = self.unrecorded.lock();
        if unrecorded.len() == UNRECORDED_LIMIT {
            unrecorded.pop_front();
        }
        unrecorded.push_back((name.to_owned(), token, now));
    }

    /// Takes back the note of a release that failed to let the lock go.
    pub(crate) fn unnote_release(&self, activity: &Activity, token: u64) {
        activity.forget_release(token);
        self.unrecorded
            .lock()
            .retain(|(_, noted, _)| *noted != token);
    }

    /// The releases noted and not recorded yet, oldest first; none are left.
    pub(crate) fn take_unrecorded(&self) -> Vec<(String, u64, u64)> {
        std::mem::take(&mut *self.unrecorded.lock()).into()
    }
}
