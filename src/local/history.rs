//! A local store's side of the grant history (the rules and the format are in
//! `rules/history.rs`): its state ([`History`]: a release's note, for the next grant to judge
//! the lease's end by and for this process to record as it closes the store; where the sweep
//! resumes), the reading of a lock's history, and the recording of the releases at the close.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;

use crate::base::clock;
use crate::base::error::Result;
use crate::local::LocalEngine;
use crate::ring::activity::Activity;
use crate::rules::admit::is_live;
use crate::rules::history::{ending, Ended, Ending, HistoryEntry};

/// Releases a process remembers to record as it closes the store, its latest.
const UNRECORDED_LIMIT: usize = 1024;

/// What a store keeps for the history of its locks, beside the file's history table.
pub(crate) struct History {
    /// Whether grants record the ends they learn of (`Options::history`).
    keeps: bool,
    /// Releases this process made, `(name, token, released_ns)`, to record as it closes the
    /// store.
    unrecorded: Mutex<VecDeque<(String, u64, u64)>>,
    /// The last lock name whose history the history's sweep looked at (`rules/history.rs`).
    cursor: Mutex<String>,
}

impl History {
    pub(crate) fn new(keeps: bool) -> History {
        History {
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
    fn take_unrecorded(&self) -> Vec<(String, u64, u64)> {
        std::mem::take(&mut *self.unrecorded.lock()).into()
    }
}

impl LocalEngine {
    /// The history of the lock `name`, oldest first: the ended grants on record, then the
    /// grants of its current record not recorded yet, with their state now.
    pub(crate) fn read_history(&self, name: &str) -> Result<Vec<HistoryEntry>> {
        let mut entries = Vec::new();
        for (token, bytes) in self.history_of(name)? {
            entries.push(Ended::decode(&bytes)?.entry(name, token));
        }
        // Ends judged in the lease map and not written to the file yet.
        if let Some(member) = self.map() {
            let tail = crate::share::buckets::entry_of(member.ring(), name)?
                .map(|entry| entry.tail)
                .unwrap_or_default();
            for (token, ended) in tail {
                if !entries.iter().any(|entry| entry.token == token) {
                    entries.push(ended.entry(name, token));
                }
            }
        }
        let now = clock::now_ns();
        if let Some(record) = self.lease_of(name)? {
            let mut leases = record.holders().to_vec();
            leases.sort_by_key(|lease| lease.token);
            for lease in leases {
                if entries.iter().any(|entry| entry.token == lease.token) {
                    continue;
                }
                // Judged as the grant that replaces it will judge it.
                let (ending, ended_ns) = if is_live(self, &lease, now)? {
                    (Ending::Held, 0)
                } else {
                    ending(self, &lease, now, false)?
                };
                let mut entry = Ended::new(self, record.kind(), &lease, ending, ended_ns)
                    .entry(name, lease.token);
                entry.recorded = None;
                entries.push(entry);
            }
        }
        entries.sort_by_key(|entry| entry.token);
        Ok(entries)
    }

    /// Records in the history the releases this process made and has not recorded, as the
    /// store closes: a release writes nothing to the file, and once every process has closed
    /// the store its memory of releases is gone. Where the leases are in the lease map, it
    /// writes the ends pending there instead. Bounded by a short wait; a failure leaves the
    /// next grant to judge those ends itself.
    pub(crate) fn record_releases(&self) {
        // A child of fork() leaves the parent's releases (and may not take its locks).
        if self.read_only
            || self.check_fork().is_err()
            || (!self.history.keeps() && self.map().is_none())
        {
            return;
        }
        let wait = self.busy_timeout.min(RECORD_WAIT);
        let releases = self.history.take_unrecorded();
        if let Some(member) = self.map() {
            self.note_released_in_map(member, &releases);
            // The last user of the map seals it (see `SEALED_KEY`): nobody can take it up
            // again until this process lets go of it.
            let last = member.ring().take_alone();
            let waiting = crate::base::cancel::Waiting::new(wait, None);
            let _ = self.flush_ends(member, Some(waiting), last);
            return;
        }
        if releases.is_empty() {
            return;
        }
        let waiting = crate::base::cancel::Waiting::new(wait, None);
        let _ = self.submit(
            crate::rules::ops::Op::RecordReleases { releases },
            Some(waiting),
        );
    }
}

/// How long closing a store waits to record its releases.
const RECORD_WAIT: Duration = Duration::from_millis(500);
