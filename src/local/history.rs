//! A local store's side of the grant history (the rules and the format are in
//! `rules/history.rs`): the reading of a lock's history, and the recording of this process's
//! releases as it closes the store (what it noted of them is in `notes.rs`).

use std::time::Duration;

use crate::base::clock;
use crate::base::error::Result;
use crate::local::LocalEngine;
use crate::rules::admit::is_live;
use crate::rules::history::{ending, Ended, Ending, HistoryEntry};

impl LocalEngine {
    /// The history of the lock `name`, oldest first: the ended grants on record, then the
    /// grants of its current record not recorded yet, with their state now.
    pub(crate) fn read_history(&self, name: &str) -> Result<Vec<HistoryEntry>> {
        let mut entries = Vec::new();
        for (token, bytes) in self.router.history_of(self, name)? {
            entries.push(Ended::decode(&bytes)?.entry(name, token));
        }
        // Ends judged in the lease map and not written to the file yet.
        if let Some(member) = self.lease_map.member() {
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
            || (!self.history.keeps() && self.lease_map.member().is_none())
        {
            return;
        }
        let wait = self.busy_timeout.min(RECORD_WAIT);
        let releases = self.history.take_unrecorded();
        if let Some(member) = self.lease_map.member() {
            self.lease_map.note_released_in_map(self, member, &releases);
            // The last user of the map seals it (see `SEALED_KEY`): nobody can take it up
            // again until this process lets go of it.
            let last = member.ring().take_alone();
            let waiting = crate::base::cancel::Waiting::new(wait, None);
            // Every process that wrote through the redo log moves it into the store file as it
            // closes, the last one too, which leaves the store one file again (a failure
            // leaves it to a later checkpoint, or to the next ring's recovery). Not only the
            // last: a read-only store keeps the ring open (so the last writer is not alone),
            // cannot checkpoint, and a read-only open that follows reads the store file.
            if let Some(user) = self.log.get() {
                let _ = user.checkpoint(
                    self,
                    crate::base::cancel::Waiting::new(CHECKPOINT_WAIT, None),
                );
            }
            let _ = self.lease_map.flush_ends(self, member, Some(waiting), last);
            return;
        }
        if releases.is_empty() {
            return;
        }
        let waiting = crate::base::cancel::Waiting::new(wait, None);
        let _ = self.router.submit(
            self,
            crate::rules::ops::Op::RecordReleases { releases },
            Some(waiting),
        );
    }
}

/// How long closing a store waits to record its releases.
const RECORD_WAIT: Duration = Duration::from_millis(500);
/// How long a store that writes through the redo log waits, as it closes, for the store file's
/// write lock to checkpoint the log.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(5);
