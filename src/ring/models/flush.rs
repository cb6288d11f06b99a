//! The group sync of the redo log (`flush.rs`): writers that reserve, write, mark and await, on
//! a model of the log file whose page cache and disk are words written with no ordering of
//! their own (so that only the protocol's orderings carry a write to the sync that covers it).
//!
//! Checked: an acknowledged record lies below `flushed` and is on the disk when acknowledged;
//! everything below `flushed` at the end is on the disk or voided by a skip record on the disk,
//! and no skip voids an acknowledged record; no lost wake-up (a waiter asleep forever is a
//! deadlock loom reports); a flusher that dies mid-sync is taken over; a writer that dies after
//! reserving stalls nobody (its gap is skipped); a skipper killed at each step of its skip is
//! taken over, its claims with it; a skipper stopped at each step (alive) is passed, and its steps
//! after it resumes, as the window laps, change no mark of a later position and void no
//! acknowledged record. The fate of a record (`GroupSync::fate`) is
//! who won its mark: asked at any moment it is `Pending` or that, asked after `flushed` passed
//! it the mark still tells (the window has not moved on in these models), and a writer stopped
//! past its skip and a lap of the window loses to the later lap's word. In the models a
//! waiter's patience with a gap, and with a live skipper, always runs out, so every
//! interleaving of a skip with the late writer's mark, and of two skippers, is explored.

use std::io;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::{check, Procs};
use crate::base::error::Error;
use crate::ring::flush::{Fate, GroupSync, Log, LogPlace, LogTurn, Written, WINDOW};
use crate::ring::layout::GRANULE;
use crate::ring::Ring;

/// Granules of log most models use.
const CELLS: usize = 6;
/// A skip record's value: this flag, the gap's first granule and its length in granules.
const SKIP: u64 = 1 << 40;
// Their log is shorter than the window: no slot is written for a second position, and a mark
// that `flushed` passed must still tell its record's fate.
const _: () = assert!(CELLS as u64 * GRANULE <= WINDOW);

/// The log file: what the page cache holds, and what the disk holds, a word per granule (the
/// claims model writes its records through it too).
pub(super) struct Disk {
    cache: Vec<AtomicU64>,
    durable: Vec<AtomicU64>,
}

impl Disk {
    pub(super) fn new(cells: usize) -> Disk {
        Disk {
            cache: (0..cells).map(|_| AtomicU64::new(0)).collect(),
            durable: (0..cells).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn cell(lsn: u64) -> usize {
        usize::try_from(lsn / GRANULE).expect("a cell")
    }

    /// Whether the record `value` at `lsn` is on the disk.
    fn durable_at(&self, lsn: u64, value: u64) -> bool {
        self.durable[Disk::cell(lsn)].load(Ordering::Relaxed) == value
    }

    /// The granules that skip records on the disk void.
    fn voided(&self) -> Vec<usize> {
        let mut voided = Vec::new();
        for cell in &self.durable {
            let value = cell.load(Ordering::Relaxed);
            if value & SKIP != 0 {
                let first = usize::try_from((value >> 8) & 0xff).expect("a cell");
                let len = usize::try_from(value & 0xff).expect("a length");
                voided.extend(first..first + len);
            }
        }
        voided
    }
}

impl Log for Disk {
    fn write(&self, lsn: u64, record: &[u8]) -> io::Result<Written> {
        for (at, granule) in record.chunks(8).enumerate() {
            let value = u64::from_le_bytes(granule.try_into().expect("8 bytes"));
            // Relaxed: a write carries no ordering of its own (the kernel's page cache); the
            // protocol's mark must.
            self.cache[Disk::cell(lsn) + at].store(value, Ordering::Relaxed);
        }
        Ok(Written::Done)
    }

    fn sync(&self, from: u64, to: u64) -> io::Result<()> {
        // Only the range asked for, as a log of segment files syncs only the segments it
        // touches: a range that missed a record would leave it off the disk, which the checks
        // see.
        let size = self.cache.len();
        let cells = Disk::cell(from).min(size)..Disk::cell(to).min(size);
        for (cache, durable) in self.cache[cells.clone()].iter().zip(&self.durable[cells]) {
            let value = cache.load(Ordering::Relaxed);
            if value != 0 {
                // A disk never forgets what a sync made durable.
                durable.fetch_max(value, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn write_skip(&self, at: u64, space: u64, gap: u64, len: u64) -> io::Result<Written> {
        assert_eq!(space, GRANULE);
        let value = SKIP | ((gap / GRANULE) << 8) | (len / GRANULE);
        self.cache[Disk::cell(at)].store(value, Ordering::Relaxed);
        Ok(Written::Done)
    }

    fn skipped(&self, lsn: u64, within: u64) -> io::Result<bool> {
        let from = Disk::cell(lsn);
        let to = Disk::cell(lsn + within).min(self.cache.len());
        // Relaxed: what the file holds now, as a read of it returns (the page cache).
        Ok(self.cache[from.min(to)..to].iter().any(|cell| {
            let value = cell.load(Ordering::Relaxed);
            let first = (value >> 8) & 0xff;
            value & SKIP != 0 && (first..first + (value & 0xff)).contains(&(lsn / GRANULE))
        }))
    }

    // One file: the models run over no segment ends (the tests of flush.rs do).
    fn segment_size(&self) -> u64 {
        u64::MAX
    }

    fn fill(&self, _at: u64, _len: u64) -> io::Result<Written> {
        unreachable!("a log without segments has no fillers")
    }
}

/// A writer's record: its value, unique and never zero.
fn record(writer: u64) -> [u8; 8] {
    (writer + 1).to_le_bytes()
}

/// Appends writer `writer`'s record: its position if acknowledged, after checking it durable;
/// `None` if its gap was skipped (`Timeout`, its write not done).
fn append(ring: &Ring, procs: &Procs, disk: &Disk, writer: u64) -> Option<u64> {
    let sync = GroupSync::new(ring, writer, procs, disk);
    match sync.append(&record(writer)) {
        Ok(lsn) => {
            assert!(
                sync.flushed() >= lsn + GRANULE,
                "acknowledged above flushed"
            );
            assert!(
                disk.durable_at(lsn, u64::from_le_bytes(record(writer))),
                "record {writer} at {lsn} acknowledged before it was durable"
            );
            Some(lsn)
        }
        Err(Error::Timeout { .. }) => None,
        Err(err) => panic!("{err}"),
    }
}

/// At the end: everything below `flushed` is on the disk or voided by a skip on the disk, and
/// no acknowledged record is voided.
fn check_end(ring: &Ring, procs: &Procs, disk: &Disk, acknowledged: &[u64]) {
    let flushed = GroupSync::new(ring, 1, procs, disk).flushed();
    let voided = disk.voided();
    for cell in 0..usize::try_from(flushed / GRANULE).expect("cells") {
        assert!(
            disk.durable[cell].load(Ordering::Relaxed) != 0 || voided.contains(&cell),
            "granule {cell} below flushed {flushed} is neither on the disk nor voided"
        );
    }
    for lsn in acknowledged {
        assert!(
            !voided.contains(&Disk::cell(*lsn)),
            "an acknowledged record at {lsn} was voided: disk {:x?}, flushed {flushed}",
            disk.durable
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn writers_share_syncs_and_acknowledge_only_durable_records() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        let disk = Arc::new(Disk::new(CELLS));
        let other = {
            let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
            thread::spawn(move || append(&ring, &procs, &disk, 2))
        };
        let mine = append(&ring, &procs, &disk, 1);
        let theirs = other.join().expect("a writer");
        let acknowledged: Vec<u64> = mine.into_iter().chain(theirs).collect();
        check_end(&ring, &procs, &disk, &acknowledged);
    });
}

#[test]
fn a_flusher_that_dies_mid_sync_is_taken_over() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        let disk = Arc::new(Disk::new(CELLS));
        let dying = {
            let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
            thread::spawn(move || {
                let sync = GroupSync::new(&ring, 1, &*procs, &*disk);
                let lsn = sync.reserve(GRANULE).expect("a reserve");
                assert_eq!(disk.write(lsn, &record(1)).expect("a write"), Written::Done);
                let _ = sync.written(lsn, GRANULE);
                // Becomes the flusher, finds what to sync, and dies before its sync returns.
                if sync.lead(true).expect("liveness") {
                    let _ = sync.written_to(0);
                }
                procs.kill(1);
                ring.flush_timeouts();
            })
        };
        let mine = append(&ring, &procs, &disk, 2);
        dying.join().expect("the dying writer");
        check_end(&ring, &procs, &disk, &mine.into_iter().collect::<Vec<_>>());
    });
}

#[test]
fn a_writer_that_dies_after_reserving_stalls_nobody() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        let disk = Arc::new(Disk::new(CELLS));
        let dying = {
            let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
            thread::spawn(move || {
                let sync = GroupSync::new(&ring, 1, &*procs, &*disk);
                let lsn = sync.reserve(GRANULE).expect("a reserve");
                procs.kill(1);
                ring.flush_timeouts();
                lsn
            })
        };
        let mine = append(&ring, &procs, &disk, 2);
        assert!(
            mine.is_some(),
            "a live writer behind a dead one's gap is acknowledged"
        );
        let theirs = dying.join().expect("the dying writer");
        let sync = GroupSync::new(&ring, 2, &*procs, &*disk);
        assert_eq!(sync.fate(mine.expect("acknowledged")), Fate::Counts);
        // Reserved before this writer's record, it was skipped; after it, nobody passed it.
        let fate = if theirs < sync.flushed() {
            Fate::Void
        } else {
            Fate::Pending
        };
        assert_eq!(
            sync.fate(theirs),
            fate,
            "the dead writer's record at {theirs}"
        );
        check_end(&ring, &procs, &disk, &mine.into_iter().collect::<Vec<_>>());
    });
}

/// How far the skipper of `a_skipper_killed_at_each_step_is_taken_over` gets before it dies,
/// and the one of `a_skipper_stopped_at_each_step_is_passed_and_its_late_steps_change_nothing`
/// before it stops.
#[derive(Clone, Copy, Debug)]
enum SkipperDies {
    /// Right after it became the skipper.
    Led,
    /// After it reserved its skip record's place too.
    Reserved,
    /// After it claimed the gap too.
    Claimed,
    /// After it wrote its skip record's bytes too (not marked).
    WroteUnmarked,
    /// After it wrote its skip record and marked it written (not synced, the gap not
    /// `SKIPPED`).
    WroteMarked,
}

#[test]
fn a_skipper_killed_at_each_step_is_taken_over() {
    use SkipperDies::{Claimed, Led, Reserved, WroteMarked, WroteUnmarked};
    for dies in [Led, Reserved, Claimed, WroteUnmarked, WroteMarked] {
        check(move || {
            let ring = Arc::new(Ring::heap());
            let procs = Arc::new(Procs::new(3));
            let disk = Arc::new(Disk::new(CELLS));
            // Writer 1 reserves the first record and stops there for good: a gap at 0.
            let gap = GroupSync::new(&ring, 1, &*procs, &*disk)
                .reserve(GRANULE)
                .expect("a reserve");
            assert_eq!(gap, 0);
            // Process 2 skips it, and dies on the way.
            let skipper = {
                let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
                thread::spawn(move || {
                    let sync = GroupSync::new(&ring, 2, &*procs, &*disk);
                    // Writer 3 may skip the gap first: then this skip stops where it finds
                    // that, and dies there.
                    let _ = skip_until(&sync, &disk, gap, dies, false);
                    procs.kill(2);
                    ring.flush_timeouts();
                })
            };
            // Writer 3 writes a record, and again if the dying skipper claimed it (the fenced
            // write writes a voided record anew): it is acknowledged, past the gap.
            let mine = (0..2).find_map(|_| append(&ring, &procs, &disk, 3));
            skipper.join().expect("the dying skipper");
            let mine = mine.expect("a live writer behind a dead skipper's claim is acknowledged");
            let sync = GroupSync::new(&ring, 3, &*procs, &*disk);
            assert_eq!(sync.fate(gap), Fate::Void, "the stopped writer's gap");
            assert_eq!(sync.fate(mine), Fate::Counts);
            check_end(&ring, &procs, &disk, &[mine]);
        });
    }
}

/// What a skipper did before it stopped: its place, and its claim's length.
type Skipping = (Option<u64>, Option<u64>);

/// Process 2's skip of the gap at `gap`, from its start up to `stops`. `alone`, every step
/// must succeed. Otherwise (another process may skip the gap first) it goes as far as it gets:
/// `None` when another process holds the skipper's word; its place is `None` when it found no
/// room, and its claim's length `None` when another skipper claimed the gap first; its skip
/// record's mark may find its place skipped since (`Timeout`), and fail with no other error.
fn skip_until(
    sync: &GroupSync<'_>,
    disk: &Disk,
    gap: u64,
    stops: SkipperDies,
    alone: bool,
) -> Option<Skipping> {
    use SkipperDies::{Led, Reserved, WroteMarked, WroteUnmarked};
    let led = sync.lead_skip(false).expect("liveness");
    assert!(led || !alone, "nobody else skips");
    if !led {
        return None;
    }
    if matches!(stops, Led) {
        return Some((None, None));
    }
    let place = sync.reserve_skip().expect("a reserve");
    assert!(place.is_some() || !alone, "room");
    let Some(place) = place else {
        return Some((None, None));
    };
    if matches!(stops, Reserved) {
        return Some((Some(place), None));
    }
    let len = sync.claim_gap(gap, place);
    assert!(len.is_some() || !alone, "the gap, unclaimed");
    let Some(len) = len else {
        return Some((Some(place), None));
    };
    match stops {
        WroteUnmarked => {
            let written = disk.write_skip(place, GRANULE, gap, len).expect("a write");
            assert_eq!(written, Written::Done);
        }
        WroteMarked => match sync.write_skip(place, gap, len) {
            Ok(()) => {}
            Err(Error::Timeout { .. }) if !alone => {}
            Err(err) => panic!("its own place: {err}"),
        },
        _ => {}
    }
    Some((Some(place), Some(len)))
}

/// The rest of process 2's skip, resumed: whatever it finds, it may only fail with `Timeout`
/// (its own place was skipped and retired), never with another error.
fn skip_resumed(sync: &GroupSync<'_>, gap: u64, stops: SkipperDies, (place, len): Skipping) {
    let place = match place {
        Some(place) => Some(place),
        None => sync.reserve_skip().expect("a reserve"),
    };
    let Some(place) = place else {
        return;
    };
    let len = match len {
        Some(len) => Some(len),
        None => sync.claim_gap(gap, place),
    };
    let finished = match len {
        Some(len) if matches!(stops, SkipperDies::WroteMarked) => sync.seal_skip(place, gap, len),
        Some(len) => sync.finish_skip(place, gap, len),
        None => sync.write_skip(place, gap, 0),
    };
    match finished {
        Ok(()) | Err(Error::Timeout { .. }) => {}
        Err(err) => panic!("{err}"),
    }
    sync.unlead_skip();
}

#[test]
fn a_skipper_stopped_at_each_step_is_passed_and_its_late_steps_change_nothing() {
    use SkipperDies::{Claimed, Led, Reserved, WroteMarked, WroteUnmarked};
    for stops in [Led, Reserved, Claimed, WroteUnmarked, WroteMarked] {
        check(move || {
            let ring = Arc::new(Ring::heap());
            let procs = Arc::new(Procs::new(3));
            // A lap and more: writer 3's last record takes the gap's slot again.
            let disk = Arc::new(Disk::new(12));
            // Writer 1 reserves the first record and stops there for good: a gap at 0.
            let gap = GroupSync::new(&ring, 1, &*procs, &*disk)
                .reserve(GRANULE)
                .expect("a reserve");
            assert_eq!(gap, 0);
            // Process 2 starts its skip and stops, alive, holding the skipper's word.
            let sync = GroupSync::new(&ring, 2, &*procs, &*disk);
            let skipping = skip_until(&sync, &disk, gap, stops, true).expect("alone");
            let passed = Arc::new(AtomicU64::new(0));
            // Writer 3 writes behind the gap: acknowledged while process 2 is stopped (its
            // record lies past process 2's place, which bounds process 2's claim). Then it
            // fills the log to the window's next lap and writes a record there, in the gap's
            // slot, as process 2 resumes.
            let writer = {
                let (ring, procs, disk, passed) =
                    (ring.clone(), procs.clone(), disk.clone(), passed.clone());
                thread::spawn(move || {
                    let first = append(&ring, &procs, &disk, 3)
                        .expect("a live writer behind a stopped skipper is acknowledged");
                    passed.store(1, Ordering::Release);
                    let sync = GroupSync::new(&ring, 3, &*procs, &*disk);
                    // Filler records (of bytes that are no skip record to `Disk`).
                    loop {
                        let (end, _) = ring.log_positions();
                        if end >= WINDOW {
                            break;
                        }
                        let len = usize::try_from(WINDOW - end).expect("a length");
                        sync.append(&vec![6; len]).expect("acknowledged");
                    }
                    let second = append(&ring, &procs, &disk, 3).expect("acknowledged");
                    assert!(second >= WINDOW, "the window moved on past the gap");
                    [first, second]
                })
            };
            // Process 2 resumes once it was passed, as writer 3 goes on.
            while passed.load(Ordering::Acquire) == 0 {
                thread::yield_now();
            }
            skip_resumed(&sync, gap, stops, skipping);
            let acknowledged = writer.join().expect("writer 3");
            let sync = GroupSync::new(&ring, 3, &*procs, &*disk);
            assert_eq!(sync.fate_in_log(gap).expect("a fate"), Fate::Void);
            for lsn in acknowledged {
                assert_eq!(sync.fate_in_log(lsn).expect("a fate"), Fate::Counts);
            }
            check_end(&ring, &procs, &disk, &acknowledged);
        });
    }
}

/// The fate who won the mark of a record: its writer (its mark `Ok`) or a skipper.
fn winner(won: bool) -> Fate {
    if won {
        Fate::Counts
    } else {
        Fate::Void
    }
}

#[test]
fn a_reader_learns_who_won_the_mark_of_a_stopped_writer() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(3));
        let disk = Arc::new(Disk::new(CELLS));
        // This writer reserves the first record, then may stop at each step: a writer behind
        // it skips its gap when it waits for it.
        let sync = GroupSync::new(&ring, 1, &*procs, &*disk);
        let lsn = sync.reserve(GRANULE).expect("a reserve");
        let other = {
            let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
            thread::spawn(move || append(&ring, &procs, &disk, 2))
        };
        // A reader that asks once, at any moment.
        let reader = {
            let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
            thread::spawn(move || {
                GroupSync::new(&ring, 3, &*procs, &*disk)
                    .fate_in_log(lsn)
                    .expect("a fate")
            })
        };
        assert_eq!(disk.write(lsn, &record(1)).expect("a write"), Written::Done);
        let won = match sync.written(lsn, GRANULE) {
            Ok(()) => true,
            Err(Error::Timeout { .. }) => false,
            Err(err) => panic!("{err}"),
        };
        let theirs = other
            .join()
            .expect("a writer")
            .expect("acknowledged behind a gap");
        assert!(theirs > lsn);
        // `flushed` passed this record: its mark tells, and it tells who won it.
        assert_eq!(
            sync.fate(lsn),
            winner(won),
            "the fate after `flushed` passed it"
        );
        assert_eq!(
            disk.voided().contains(&Disk::cell(lsn)),
            !won,
            "a skip on the disk voids the record exactly when a skipper won its mark"
        );
        let asked = reader.join().expect("a reader");
        assert!(
            asked == Fate::Pending || asked == winner(won),
            "a reader was told {asked:?} of a record whose mark {} won",
            if won { "its writer" } else { "a skipper" }
        );
        let acknowledged: Vec<u64> = won.then_some(lsn).into_iter().chain([theirs]).collect();
        check_end(&ring, &procs, &disk, &acknowledged);
    });
}

#[test]
fn a_writer_stopped_past_its_skip_and_a_lap_loses_to_the_later_word() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        // Two laps' worth of cells: the other writer's second record reaches the next lap.
        let disk = Arc::new(Disk::new(10));
        let sync = GroupSync::new(&ring, 1, &*procs, &*disk);
        let lsn = sync.reserve(GRANULE).expect("a reserve");
        let other = {
            let (ring, procs, disk) = (ring.clone(), procs.clone(), disk.clone());
            thread::spawn(move || {
                // Five granules, then three: with the skip record between them (or without),
                // the second one's granules after its first fall on this record's slot.
                let sync = GroupSync::new(&ring, 2, &*procs, &*disk);
                let first = sync.append(&[3; 40]).expect("acknowledged behind a gap");
                let second = sync.append(&[4; 24]).expect("acknowledged");
                assert!(second + 24 > lsn + WINDOW, "the window moved on past {lsn}");
                [first, second]
            })
        };
        assert_eq!(disk.write(lsn, &record(1)).expect("a write"), Written::Done);
        let won = match sync.written(lsn, GRANULE) {
            Ok(()) => true,
            Err(Error::Timeout { .. }) => false,
            Err(err) => panic!("{err}"),
        };
        let theirs = other.join().expect("a writer");
        assert_eq!(
            disk.voided().contains(&Disk::cell(lsn)),
            !won,
            "a skip voids the record exactly when a skipper won its mark"
        );
        assert_eq!(sync.fate_in_log(lsn).expect("a fate"), winner(won));
        for lsn in theirs {
            assert_eq!(sync.fate_in_log(lsn).expect("a fate"), Fate::Counts);
        }
        let acknowledged: Vec<u64> = won.then_some(lsn).into_iter().chain(theirs).collect();
        check_end(&ring, &procs, &disk, &acknowledged);
    });
}

/// Where the models' log lies.
const PLACE: LogPlace = LogPlace {
    dir_dev: 1,
    dir_ino: 2,
    name: 3,
};

/// One process's open of the ring, as `LogUser::join` runs it: decide (waiting while another
/// live process sets up); the setter (process 2, which wants the log, or process 3, which does
/// not) "recovers" (a store of record's counter, raised once) and sets up, or dies there when
/// `dies` is its id. What it saw: `Some(on)`, or `None` for a process that died.
fn open_log(ring: &Ring, procs: &Procs, id: u64, recovered: &AtomicU64, dies: u64) -> Option<bool> {
    loop {
        match ring.decide_log(id, procs) {
            LogTurn::On => {
                // A follower checks it finds the log where its setter did (`LogUser::reader`).
                assert_eq!(ring.log_place(), PLACE, "the log on, its place not set");
                return Some(true);
            }
            LogTurn::Off => return Some(false),
            LogTurn::Wait => thread::yield_now(),
            LogTurn::SetUp => {
                if id == dies {
                    procs.kill(id);
                    return None;
                }
                // The recovery: one transaction of the store of record, whoever runs it.
                recovered.fetch_add(1, Ordering::SeqCst);
                let want = id == 2;
                ring.log_set_up(want.then_some((40, PLACE)));
                return Some(want);
            }
        }
    }
}

/// Two processes open a ring at once (one wanting the log, one not), one of them killed while
/// it sets the log up (or neither): every process that goes on saw one decision, the same
/// (made by the first setter to finish); whoever sees the log on sees its positions at the
/// recovered end; the log was recovered before any process went on, whatever was decided.
#[test]
fn processes_opening_at_once_follow_one_decision_made_after_the_recovery() {
    for dies in [0, 2, 3] {
        check(move || {
            let ring = Arc::new(Ring::heap());
            let procs = Arc::new(Procs::new(3));
            let recovered = Arc::new(AtomicU64::new(0));
            let other = {
                let (ring, procs, recovered) = (ring.clone(), procs.clone(), recovered.clone());
                thread::spawn(move || {
                    let seen = open_log(&ring, &procs, 3, &recovered, dies);
                    (seen, recovered.load(Ordering::SeqCst))
                })
            };
            thread::yield_now();
            let mine = open_log(&ring, &procs, 2, &recovered, dies);
            let seen_mine = recovered.load(Ordering::SeqCst);
            let (theirs, seen_theirs) = other.join().expect("an opener");
            for (seen, recovered) in [(mine, seen_mine), (theirs, seen_theirs)] {
                if seen.is_some() {
                    assert!(recovered >= 1, "a process went on before the recovery");
                }
            }
            if let (Some(mine), Some(theirs)) = (mine, theirs) {
                assert_eq!(mine, theirs, "two decisions");
            }
            let on = mine.or(theirs).expect("one process lives");
            assert_eq!(ring.log_on(), on);
            if on {
                let sync = GroupSync::new(&ring, 2, &*procs, &NoLog);
                assert_eq!(sync.flushed(), 40, "the log on, its positions not set up");
            }
        });
    }
}

/// A log no model writes: the decision's model reads positions only.
struct NoLog;

impl Log for NoLog {
    fn write(&self, _: u64, _: &[u8]) -> io::Result<Written> {
        unreachable!("the decision's model writes nothing")
    }

    fn sync(&self, _: u64, _: u64) -> io::Result<()> {
        unreachable!("the decision's model syncs nothing")
    }

    fn write_skip(&self, _: u64, _: u64, _: u64, _: u64) -> io::Result<Written> {
        unreachable!("the decision's model skips nothing")
    }

    fn skipped(&self, _: u64, _: u64) -> io::Result<bool> {
        unreachable!("the decision's model reads no record")
    }

    fn segment_size(&self) -> u64 {
        1 << 20
    }

    fn fill(&self, _: u64, _: u64) -> io::Result<Written> {
        unreachable!("the decision's model fills nothing")
    }
}
