//! Crash images built from a recording: what the file may hold after a power loss.
//!
//! A crash point is "sync k was the last to return" (k = 0: none yet). The file then holds every
//! change logged before sync k, plus any part of the changes logged between sync k and sync k+1
//! (the page cache may have written back some of them, in any order, and a write may be torn at
//! a sector boundary). Changes after sync k+1 cannot be there: sync k+1 had not returned, and a
//! change logged after it began only after it returned.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::recording::{apply, Change, Event, Recording};

pub use crate::rng::Rng;

/// Where a power loss may strike: after sync `k` returned, before sync `k + 1` did.
#[derive(Debug, Clone)]
pub struct CrashPoint {
    /// How many syncs had returned.
    pub k: usize,
    /// Event index up to which (exclusive) every change is in the file.
    pub base_end: usize,
    /// Event index of sync k+1 (or the end of the log): marks before it are the checker's past.
    pub next_sync: usize,
    /// Event indices of the changes between the two, any part of which may be in the file.
    pub pending: Vec<usize>,
}

/// The crash points of a recording. With `lost_sync = Some(d)`, the planted bug: the builder
/// treats sync `d` as not having happened, so the images of crash point `d` start from the file
/// as of sync `d - 1`, and the changes before sync `d` may be lost. The checker is not told.
pub fn crash_points(recording: &Recording, lost_sync: Option<usize>) -> Vec<CrashPoint> {
    let syncs: Vec<usize> = (0..recording.events.len())
        .filter(|&i| matches!(recording.events[i], Event::Sync))
        .collect();
    let sync_end = |k: usize| if k == 0 { 0 } else { syncs[k - 1] };
    (0..=syncs.len())
        .map(|k| {
            let base_end = if lost_sync == Some(k) && k > 0 {
                sync_end(k - 1)
            } else {
                sync_end(k)
            };
            let next_sync = syncs.get(k).copied().unwrap_or(recording.events.len());
            let pending = (base_end..next_sync)
                .filter(|&i| matches!(recording.events[i], Event::Change(_)))
                .collect();
            CrashPoint {
                k,
                base_end,
                next_sync,
                pending,
            }
        })
        .collect()
}

/// One change of an image, maybe torn: only its first `torn` bytes reached the disk.
#[derive(Debug, Clone, Copy)]
struct Piece {
    event: usize,
    torn: Option<usize>,
}

/// One crash image: how it was made, and its bytes.
pub struct Image {
    pub kind: &'static str,
    pub description: String,
    pub bytes: Vec<u8>,
}

/// Builds the images of crash points in order, keeping the file as of the last sync.
pub struct Builder<'a> {
    recording: &'a Recording,
    base: Vec<u8>,
    base_at: usize,
}

impl<'a> Builder<'a> {
    pub fn new(recording: &'a Recording) -> Builder<'a> {
        Builder {
            recording,
            base: Vec::new(),
            base_at: 0,
        }
    }

    fn change(&self, event: usize) -> &'a Change {
        match &self.recording.events[event] {
            Event::Change(change) => change,
            other => panic!("event {event} is not a change: {other:?}"),
        }
    }

    /// The file with every change before `end`.
    fn base_at(&mut self, end: usize) -> Vec<u8> {
        if end < self.base_at {
            self.base = Vec::new();
            self.base_at = 0;
        }
        for event in self.base_at..end {
            if let Event::Change(change) = &self.recording.events[event] {
                apply(&mut self.base, change);
            }
        }
        self.base_at = end;
        self.base.clone()
    }

    fn build(&self, base: &[u8], pieces: &[Piece]) -> Vec<u8> {
        let mut file = base.to_vec();
        for piece in pieces {
            match (self.change(piece.event), piece.torn) {
                (Change::Write { offset, data }, Some(len)) => apply(
                    &mut file,
                    &Change::Write {
                        offset: *offset,
                        data: data[..len].to_vec(),
                    },
                ),
                (change, _) => apply(&mut file, change),
            }
        }
        file
    }

    /// Lengths at which a write may be torn: where its bytes cross a `granularity` boundary of
    /// the file.
    fn tears(&self, event: usize, granularity: u64) -> Vec<usize> {
        match self.change(event) {
            Change::Write { offset, data } => {
                let end = offset + data.len() as u64;
                let first = (offset / granularity + 1) * granularity;
                (first..end)
                    .step_by(usize::try_from(granularity).unwrap())
                    .map(|cut| usize::try_from(cut - offset).unwrap())
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// Up to `budget` distinct images of `point`: the file as of the sync; then in-order
    /// prefixes of the pending changes (a process that stopped with a perfect disk: all of them
    /// first, then others at random, for up to half the budget); then, at random, subsets in
    /// order, subsets in a random order, and torn writes (cut at a 512 B or 4 KiB boundary of the file, after a random subset of
    /// the changes before them).
    pub fn images(&mut self, point: &CrashPoint, budget: usize, rng: &mut Rng) -> Vec<Image> {
        let base = self.base_at(point.base_end);
        let pending = &point.pending;
        let whole = |events: &[usize]| -> Vec<Piece> {
            events
                .iter()
                .map(|&event| Piece { event, torn: None })
                .collect()
        };
        let mut seen = HashSet::new();
        let mut images = Vec::new();
        let mut offer =
            |images: &mut Vec<Image>, kind: &'static str, description: String, bytes: Vec<u8>| {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut hasher);
                if seen.insert(hasher.finish()) {
                    images.push(Image {
                        kind,
                        description,
                        bytes,
                    });
                }
            };
        offer(
            &mut images,
            "synced",
            "nothing after the sync".into(),
            base.clone(),
        );
        // All pending changes first, then other prefixes in a random order, for up to half the
        // budget; the rest goes to the random kinds.
        let mut lengths: Vec<usize> = (1..pending.len()).collect();
        rng.shuffle(&mut lengths);
        lengths.insert(0, pending.len());
        for n in lengths.into_iter().filter(|&n| n > 0) {
            if images.len() >= budget.div_ceil(2).max(2) {
                break;
            }
            let bytes = self.build(&base, &whole(&pending[..n]));
            offer(
                &mut images,
                "prefix",
                format!("the first {n} of {} pending changes", pending.len()),
                bytes,
            );
        }
        let writes: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|&e| matches!(self.change(e), Change::Write { .. }))
            .collect();
        // Random tries; identical images are skipped, so stop after a while if few differ.
        let mut tries = 0;
        while images.len() < budget && tries < budget * 8 && !pending.is_empty() {
            tries += 1;
            let subset: Vec<usize> = pending.iter().copied().filter(|_| rng.chance(50)).collect();
            match rng.below(3) {
                0 => {
                    let bytes = self.build(&base, &whole(&subset));
                    offer(
                        &mut images,
                        "subset",
                        format!("pending changes {subset:?} in order"),
                        bytes,
                    );
                }
                1 => {
                    let mut order = subset;
                    rng.shuffle(&mut order);
                    let bytes = self.build(&base, &whole(&order));
                    offer(
                        &mut images,
                        "reordered",
                        format!("pending changes {order:?} in this order"),
                        bytes,
                    );
                }
                _ => {
                    if writes.is_empty() {
                        continue;
                    }
                    let victim = writes[rng.below(writes.len())];
                    let granularity = if rng.chance(50) { 512 } else { 4096 };
                    let tears = self.tears(victim, granularity);
                    if tears.is_empty() {
                        continue;
                    }
                    let torn = tears[rng.below(tears.len())];
                    let mut pieces: Vec<Piece> = whole(
                        &subset
                            .iter()
                            .copied()
                            .filter(|&e| e < victim)
                            .collect::<Vec<_>>(),
                    );
                    pieces.push(Piece {
                        event: victim,
                        torn: Some(torn),
                    });
                    let bytes = self.build(&base, &pieces);
                    offer(
                        &mut images,
                        "torn",
                        format!(
                            "pending changes {:?} in order, then change {victim} torn after {torn} bytes ({granularity} B sectors)",
                            pieces[..pieces.len() - 1].iter().map(|p| p.event).collect::<Vec<_>>()
                        ),
                        bytes,
                    );
                }
            }
        }
        images
    }
}
