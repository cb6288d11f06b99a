//! Crash images of the log alone (docs/design/writes.md, "Steps to build it", step 2): a writer
//! appends records through [`LogFile`] on an in-process recorder of its writes and syncs, and a
//! power loss is cut at every point: after each sync returned, with any subset of the writes
//! issued since, each torn at any 512-byte sector of the file (the writes cut into sector pieces:
//! every subset of up to 8 pieces, else the empty and the full set and 254 at random). The scan of every such image must
//! return every record whose sync had returned (acknowledged), in order, and nothing but whole
//! records that were written, in the order written.
//!
//! The recorder stands below the log file (the `LogIo` trait), so the images come from the
//! offsets the file itself computed, as the LD_PRELOAD recorder of tests/crash.rs sees the store
//! file's. It runs inside `cargo test` in a few seconds: the store's recorder needs processes and
//! redb, and the log's writes are this module's own.

use std::cell::RefCell;
use std::io;
use std::path::Path;

use crate::storage::wal::file::{LogFile, LogIo, HEADER_BLOCK};
use crate::storage::wal::record::Record;
use crate::storage::wal::scan::{scan, Bytes};
use crate::storage::wal::Placement;

/// The sector size the images tear writes at.
const SECTOR: u64 = 512;

#[derive(Debug, Clone)]
enum Event {
    Write {
        offset: u64,
        data: Vec<u8>,
    },
    /// `fdatasync` returned.
    Sync,
    /// The checkpoint moved to this position (durably, as redb's commit would make it), after
    /// a sync, before the next write.
    Checkpoint(u64),
}

/// What reached the file, in order, and the file as it is now.
#[derive(Default)]
struct Recorder {
    file: RefCell<Vec<u8>>,
    events: RefCell<Vec<Event>>,
}

fn apply(file: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let offset = usize::try_from(offset).unwrap();
    if file.len() < offset + data.len() {
        file.resize(offset + data.len(), 0);
    }
    file[offset..offset + data.len()].copy_from_slice(data);
}

impl LogIo for Recorder {
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        apply(&mut self.file.borrow_mut(), offset, bytes);
        self.events.borrow_mut().push(Event::Write {
            offset,
            data: bytes.to_vec(),
        });
        Ok(())
    }

    fn read_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()> {
        let file = self.file.borrow();
        let offset = usize::try_from(offset).unwrap();
        let source = file
            .get(offset..offset + bytes.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        bytes.copy_from_slice(source);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.events.borrow_mut().push(Event::Sync);
        Ok(())
    }
}

/// splitmix64: a seeded generator of our own, so that a failure names the seed that repeats it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A record the writer appended: where, what, and the index of its write event.
struct Appended {
    lsn: u64,
    end: u64,
    record: Record,
    event: usize,
}

/// The workload: `count` records of every kind (voids for refused writes among them) in a
/// small ring, many laps, with a sync after every one to four records. Before a record would
/// overwrite what the checkpoint has not passed, the writer syncs and moves the checkpoint, as
/// the design's checkpointer does before the log fills.
fn run(seed: u64, size: u64, count: u64) -> (Vec<u8>, Vec<Event>, Vec<Appended>, u64) {
    let mut rng = Rng(seed);
    let log = LogFile::format(Recorder::default(), Path::new("crash.wal"), 9, size).unwrap();
    let formatted = log.io().file.borrow().clone();
    log.io().events.borrow_mut().clear();
    let start = 8 * rng.below(size / 8);
    let (mut end, mut checkpoint) = (start, start);
    let mut appended: Vec<Appended> = Vec::new();
    let mut synced = 0;
    let mut until_sync = 1 + rng.below(4);
    for i in 0..count {
        let token = i + 1;
        let key = format!("key-{}", rng.below(5)).into_bytes();
        let record = match rng.below(10) {
            0 => Record::Delete {
                key,
                token,
                version: i,
            },
            1 => Record::Fence {
                resource: format!("resource-{}", rng.below(3)),
                token,
                version: i,
            },
            2 => Record::Void {
                len: u32::try_from(8 * rng.below(40)).unwrap(),
            },
            _ => Record::Put {
                key,
                value: vec![
                    u8::try_from(i % 251).unwrap();
                    usize::try_from(rng.below(700)).unwrap()
                ],
                token,
                version: i,
            },
        };
        let placed = Placement::of(size, end, record.encoded_len()).unwrap();
        if placed.end > checkpoint + size {
            if synced < appended.len() {
                log.sync().unwrap();
                synced = appended.len();
            }
            // The first synced record from which the new one fits in one lap.
            checkpoint = appended
                .iter()
                .map(|a| a.lsn)
                .find(|&lsn| lsn + size >= placed.end)
                .unwrap_or(end);
            log.io()
                .events
                .borrow_mut()
                .push(Event::Checkpoint(checkpoint));
        }
        if let Some(filler) = placed.filler_record().unwrap() {
            log.write_at(end, &filler).unwrap();
        }
        log.write_at(placed.lsn, &record.encode(placed.lsn).unwrap())
            .unwrap();
        appended.push(Appended {
            lsn: placed.lsn,
            end: placed.end,
            record,
            event: log.io().events.borrow().len() - 1,
        });
        end = placed.end;
        until_sync -= 1;
        if until_sync == 0 {
            log.sync().unwrap();
            synced = appended.len();
            until_sync = 1 + rng.below(4);
        }
    }
    let events = log.io().events.borrow().clone();
    (formatted, events, appended, start)
}

/// Checks one image: the scan from `checkpoint` returns the records written from there, in
/// order, at least the first `acked` of all, at most the first `written`.
fn check(
    image: &[u8],
    checkpoint: u64,
    appended: &[Appended],
    acked: usize,
    written: usize,
    what: &dyn Fn() -> String,
) {
    let ring = &image[usize::try_from(HEADER_BLOCK).unwrap()..];
    let scanned = scan(&Bytes(ring), checkpoint).unwrap_or_else(|err| panic!("{}: {err}", what()));
    let first = appended
        .iter()
        .position(|a| a.lsn >= checkpoint)
        .unwrap_or(appended.len());
    // How many were taken: the scan's end lies between the last taken record and the next.
    let taken = appended[first..]
        .iter()
        .take_while(|a| a.end <= scanned.end)
        .count();
    let want: Vec<(u64, Record)> = appended[first..first + taken]
        .iter()
        .filter(|a| !matches!(a.record, Record::Void { .. }))
        .map(|a| (a.lsn, a.record.clone()))
        .collect();
    assert_eq!(scanned.records, want, "{}", what());
    assert!(
        first + taken >= acked && first + taken <= written,
        "{}: the scan took records up to {} (end {}); acknowledged {acked}, written {written}",
        what(),
        first + taken,
        scanned.end
    );
    if let Some(next) = appended.get(first + taken) {
        assert!(
            scanned.end <= next.lsn,
            "{}: the scan ended at {}, inside record {} at {}",
            what(),
            scanned.end,
            first + taken,
            next.lsn
        );
    }
    assert!(
        scanned.skipped.is_empty() && scanned.holes == 0,
        "{}",
        what()
    );
}

/// The pieces of the writes `events[from..to]`: each write cut at the file's sector boundaries.
fn pieces(events: &[Event]) -> Vec<(u64, Vec<u8>)> {
    let mut pieces = Vec::new();
    for event in events {
        if let Event::Write { offset, data } = event {
            let mut at = 0;
            while at < data.len() {
                let file_at = offset + at as u64;
                let to_boundary = (SECTOR - file_at % SECTOR) as usize;
                let len = to_boundary.min(data.len() - at);
                pieces.push((file_at, data[at..at + len].to_vec()));
                at += len;
            }
        }
    }
    pieces
}

fn power_loss_images(seed: u64) -> usize {
    let size = 8192;
    let (formatted, events, appended, start) = run(seed, size, 300);
    let syncs: Vec<usize> = (0..events.len())
        .filter(|&i| matches!(events[i], Event::Sync))
        .collect();
    assert!(syncs.len() > 40, "{} syncs", syncs.len());
    assert!(
        appended.last().unwrap().end > start + 3 * size,
        "fewer than 3 laps"
    );
    let mut base = formatted;
    let mut checkpoint = start;
    let mut images = 0;
    // Crash point k: sync k returned (k = 0: none yet), sync k + 1 had not.
    for k in 0..=syncs.len() {
        let from = if k == 0 { 0 } else { syncs[k - 1] + 1 };
        let until = syncs.get(k).copied().unwrap_or(events.len());
        let acked = appended.iter().filter(|a| a.event < from).count();
        let written = appended.iter().filter(|a| a.event < until).count();
        let what = |kind: &str| format!("seed {seed}, crash point {k}, {kind}");
        // The file as of the sync, under the checkpoint in force then.
        check(&base, checkpoint, &appended, acked, written, &|| {
            what("synced, old checkpoint")
        });
        for event in &events[from..until] {
            if let Event::Checkpoint(at) = event {
                checkpoint = *at;
            }
        }
        let pending = pieces(&events[from..until]);
        let subsets: Vec<u64> = if pending.len() <= 8 {
            (0..1u64 << pending.len()).collect()
        } else {
            let mut rng = Rng(seed ^ k as u64);
            let all = (1u64 << pending.len().min(63)) - 1;
            [0, all]
                .into_iter()
                .chain((0..254).map(|_| rng.next() & all))
                .collect()
        };
        for subset in subsets {
            let mut image = base.clone();
            for (i, (offset, data)) in pending.iter().enumerate() {
                if i < 64 && subset & (1 << i) != 0 {
                    apply(&mut image, *offset, data);
                }
            }
            check(&image, checkpoint, &appended, acked, written, &|| {
                what(&format!("pieces {subset:#b} of {}", pending.len()))
            });
            images += 1;
        }
        for event in &events[from..until] {
            if let Event::Write { offset, data } = event {
                apply(&mut base, *offset, data);
            }
        }
    }
    images
}

#[test]
fn every_acknowledged_record_survives_every_power_loss() {
    for seed in [1, 2, 3] {
        let images = power_loss_images(seed);
        assert!(images > 1000, "{images} images");
    }
}
