//! Crash images built from a recording: what the files may hold after a power loss.
//!
//! A crash point is "sync k was the last to return" (k = 0: none yet), where a sync is an
//! `fsync` or `fdatasync` of the store file or of a log file, an `fsync` of their directory, or
//! `sync()`. Each file then holds every change of it logged before its own last sync, plus any
//! part of its changes logged after that and before sync k+1 (the page cache may have written
//! back some of them, in any order, and a write may be torn at a sector boundary). The directory
//! holds every name made or removed before its last sync, and any subset of those made or
//! removed after it (a link or unlink not followed by a directory sync may or may not have
//! happened). Changes after sync k+1 cannot be there: sync k+1 had not returned, and a change
//! logged after it began only after it returned.
//!
//! The store file's extended attribute (its ring's nonce, which the log's segments carry as the
//! store's id) is durable after the next sync of anything: journaling file systems (ext4, XFS)
//! commit metadata in order, and every sync here commits the journal.
//! `FENCELOCK_CRASH_STRICT_XATTR=1` takes POSIX at its word instead: only an `fsync` of the
//! store file itself (redb only calls `fdatasync`) or `sync()` covers it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use super::recording::{apply, Change, Disk, Event, File, Files, Recording};

pub use crate::rng::Rng;

/// Up to where each part of the disk is durable: the changes logged before these event indices
/// are on the disk.
#[derive(Debug, Clone, Default)]
struct Bounds {
    /// Per file, from its last `fsync`/`fdatasync` (0: never synced).
    files: HashMap<File, usize>,
    /// From the last `sync()`: every file.
    all: usize,
    /// From the directory's last sync: the names.
    names: usize,
    /// The store's extended attributes.
    xattrs: usize,
}

impl Bounds {
    fn of(&self, event: &Event) -> usize {
        match event {
            Event::Change(file, _) => self.files.get(file).copied().unwrap_or(0).max(self.all),
            Event::Name { .. } => self.names,
            Event::Xattr { .. } => self.xattrs,
            _ => usize::MAX,
        }
    }

    fn file(&self, file: File) -> usize {
        self.files.get(&file).copied().unwrap_or(0).max(self.all)
    }
}

/// Whether only an `fsync` of the store or `sync()` makes its extended attribute durable.
fn strict_xattrs() -> bool {
    std::env::var_os("FENCELOCK_CRASH_STRICT_XATTR").is_some_and(|v| v != "0")
}

/// Where a power loss may strike: after sync `k` returned, before sync `k + 1` did.
#[derive(Debug, Clone)]
pub struct CrashPoint {
    /// How many syncs had returned.
    pub k: usize,
    /// Event index of sync k+1 (or the end of the log): marks before it are the checker's past.
    pub next_sync: usize,
    bounds: Bounds,
    /// Event indices of the changes, names and attributes logged after what synced them and
    /// before sync k+1, any part of which may be on the disk (changes of log files that no name
    /// can reach left out).
    pub pending: Vec<usize>,
}

/// The crash points of a recording. With `lost_sync = Some(d)`, the planted bug: the builder
/// treats sync `d` as not having happened, so the images of crash point `d` start from the files
/// as of the syncs before it, and the changes sync `d` covered may be lost. The checker is not
/// told.
pub fn crash_points(recording: &Recording, lost_sync: Option<usize>) -> Vec<CrashPoint> {
    let events = &recording.events;
    let syncs: Vec<usize> = (0..events.len()).filter(|&i| events[i].is_sync()).collect();
    let strict = strict_xattrs();
    (0..=syncs.len())
        .map(|k| {
            let mut bounds = Bounds::default();
            for (n, &at) in syncs[..k].iter().enumerate() {
                if lost_sync == Some(k) && n + 1 == k {
                    continue;
                }
                match &events[at] {
                    Event::Sync { file, full } => {
                        bounds.files.insert(*file, at);
                        if !strict || (*file == File::Store && *full) {
                            bounds.xattrs = at;
                        }
                    }
                    Event::SyncAll => {
                        bounds.all = at;
                        bounds.names = at;
                        bounds.xattrs = at;
                    }
                    Event::DirSync => {
                        bounds.names = at;
                        if !strict {
                            bounds.xattrs = at;
                        }
                    }
                    _ => unreachable!("not a sync"),
                }
            }
            let next_sync = syncs.get(k).copied().unwrap_or(events.len());
            // The log files a name may reach: those the durable names hold, and those a name
            // change since then is about.
            let mut names = Disk::default();
            let mut reachable = HashSet::new();
            for (at, event) in events[..next_sync].iter().enumerate() {
                if let Event::Name { op, file, name } = event {
                    if at < bounds.names {
                        names.rename(op, *file, name);
                    } else {
                        reachable.insert(*file);
                    }
                }
            }
            reachable.extend(names.names.values().copied());
            let pending = (0..next_sync)
                .filter(|&i| events[i].is_pending_kind() && i >= bounds.of(&events[i]))
                .filter(|&i| match &events[i] {
                    Event::Change(File::Log(inode), _) => reachable.contains(inode),
                    _ => true,
                })
                .collect();
            CrashPoint {
                k,
                next_sync,
                bounds,
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

/// One crash image: how it was made, and its files.
pub struct Image {
    pub kind: &'static str,
    pub description: String,
    pub files: Files,
}

/// A file's contents as of some event index, kept to build the next crash point's from.
#[derive(Default)]
struct Cached {
    bytes: Vec<u8>,
    /// How many of the file's changes (in `Builder::changes`) are in `bytes`.
    applied: usize,
}

/// Builds the images of crash points in order, keeping each file as of its last sync.
pub struct Builder<'a> {
    recording: &'a Recording,
    /// Each file's changes, as event indices in log order.
    changes: HashMap<File, Vec<usize>>,
    cache: HashMap<File, Cached>,
}

impl<'a> Builder<'a> {
    pub fn new(recording: &'a Recording) -> Builder<'a> {
        let mut changes: HashMap<File, Vec<usize>> = HashMap::new();
        for (at, event) in recording.events.iter().enumerate() {
            if let Event::Change(file, _) = event {
                changes.entry(*file).or_default().push(at);
            }
        }
        Builder {
            recording,
            changes,
            cache: HashMap::new(),
        }
    }

    fn change(&self, event: usize) -> &'a Change {
        match &self.recording.events[event] {
            Event::Change(_, change) => change,
            other => panic!("event {event} is not a change: {other:?}"),
        }
    }

    /// The contents of `file` with every change of it before event `end`.
    fn file_at(&mut self, file: File, end: usize) -> Vec<u8> {
        let changes = self.changes.get(&file).map_or(&[][..], Vec::as_slice);
        let cached = self.cache.entry(file).or_default();
        let upto = changes.partition_point(|&at| at < end);
        if upto < cached.applied {
            *cached = Cached::default();
        }
        for &at in &changes[cached.applied..upto] {
            if let Event::Change(_, change) = &self.recording.events[at] {
                apply(&mut cached.bytes, change);
            }
        }
        cached.applied = upto;
        cached.bytes.clone()
    }

    /// The disk as of `point`'s syncs: every durable change, name and attribute, and the
    /// durable contents of each log file a name may reach.
    fn base(&mut self, point: &CrashPoint) -> Disk {
        let events = &self.recording.events;
        let mut disk = Disk::default();
        let mut inodes = BTreeSet::new();
        for (at, event) in events[..point.next_sync].iter().enumerate() {
            match event {
                Event::Name { op, file, name } => {
                    if at < point.bounds.names {
                        disk.rename(op, *file, name);
                    }
                    inodes.insert(*file);
                }
                Event::Xattr { .. } if at < point.bounds.xattrs => disk.apply(event),
                _ => {}
            }
        }
        disk.store = self.file_at(File::Store, point.bounds.file(File::Store));
        for inode in inodes {
            let bytes = self.file_at(File::Log(inode), point.bounds.file(File::Log(inode)));
            disk.inodes.insert(inode, bytes);
        }
        disk
    }

    fn build(&self, base: &Disk, pieces: &[Piece]) -> Files {
        let mut disk = base.clone();
        for piece in pieces {
            let event = &self.recording.events[piece.event];
            match (event, piece.torn) {
                (Event::Change(file, Change::Write { offset, data }), Some(len)) => {
                    disk.apply(&Event::Change(
                        *file,
                        Change::Write {
                            offset: *offset,
                            data: data[..len].to_vec(),
                        },
                    ));
                }
                (event, _) => disk.apply(event),
            }
        }
        disk.files()
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

    /// Up to `budget` distinct images of `point`: the files as of the syncs; then in-order
    /// prefixes of the pending changes (a process that stopped with a perfect disk: all of them
    /// first, then others at random, for up to half the budget); then, at random, subsets in
    /// order, subsets in a random order, and torn writes (cut at a 512 B or 4 KiB boundary of the file, after a random subset of
    /// the changes before them).
    pub fn images(&mut self, point: &CrashPoint, budget: usize, rng: &mut Rng) -> Vec<Image> {
        let base = self.base(point);
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
            |images: &mut Vec<Image>, kind: &'static str, description: String, files: Files| {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                files.hash(&mut hasher);
                if seen.insert(hasher.finish()) {
                    images.push(Image {
                        kind,
                        description,
                        files,
                    });
                }
            };
        offer(
            &mut images,
            "synced",
            "nothing after the syncs".into(),
            base.files(),
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
            .filter(|&e| {
                matches!(
                    self.recording.events[e],
                    Event::Change(_, Change::Write { .. })
                )
            })
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
