//! The bug that segments fix (docs/design/writes.md, "Why segments, not a ring in place"): a
//! writer stopped between its reservation and its `pwrite` resumes after the log has moved on
//! past its position, been checkpointed and (in the old ring) written again at the same file
//! offset with newer, acknowledged records. In the ring, its late `pwrite` landed on them and
//! the next sync made the loss durable. With segments, its position's segment is unlinked by
//! then: the late write goes through its still-open descriptor into an inode no one reads, or,
//! through a handle that never opened it, is refused; and while the segment is still linked, it
//! lands only on its own reservation, which a skip record voids.

use std::fs;
use std::path::Path;

use crate::base::error::Error;
use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
use crate::storage::wal::record::Record;
use crate::storage::wal::scan::{scan, Memory, Scanned};
use crate::storage::wal::Placement;

const SIZE: u64 = MIN_SIZE;

/// The live writers' side: places records as `ring/flush.rs` writers do.
struct Writer {
    end: u64,
    acked: Vec<(u64, Record)>,
    /// Every write, in order: to replay them on the old design.
    writes: Vec<(u64, Vec<u8>)>,
}

impl Writer {
    fn append(&mut self, log: &SegmentLog, record: Record) -> u64 {
        let placed = Placement::of(SIZE, self.end, record.encoded_len()).unwrap();
        if let Some(filler) = placed.filler_record().unwrap() {
            log.write_at(self.end, &filler).unwrap();
            self.writes.push((self.end, filler));
        }
        let bytes = record.encode(placed.lsn).unwrap();
        log.write_at(placed.lsn, &bytes).unwrap();
        self.writes.push((placed.lsn, bytes));
        self.end = placed.end;
        if !matches!(record, Record::Skip { .. }) {
            self.acked.push((placed.lsn, record));
        }
        placed.lsn
    }

    /// Reserves room for `record` and writes nothing: the stopped writer's reservation.
    fn reserve(&mut self, record: &Record) -> (u64, u64) {
        let placed = Placement::of(SIZE, self.end, record.encoded_len()).unwrap();
        let gap = (self.end, placed.end - self.end);
        self.end = placed.end;
        (placed.lsn, gap.1)
    }

    /// Syncs what was written: every record so far is acknowledged.
    fn sync(&self, log: &SegmentLog) {
        log.sync(0, self.end).unwrap();
    }
}

fn put(i: u64) -> Record {
    Record::Put {
        key: format!("key-{}", i % 7).into_bytes(),
        value: vec![b'a' + u8::try_from(i % 26).unwrap(); 80],
        token: i + 1,
        version: i,
    }
}

/// The stopped writer's record: bytes found nowhere else.
fn late() -> Record {
    Record::Put {
        key: b"late".to_vec(),
        value: b"LATE-WRITE-".repeat(8),
        token: 1,
        version: 0,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Whether any file of `dir` holds `bytes`.
fn anywhere(dir: &Path, bytes: &[u8]) -> bool {
    fs::read_dir(dir)
        .unwrap()
        .any(|entry| contains(&fs::read(entry.unwrap().path()).unwrap(), bytes))
}

/// The stopped writer's reservation, with records before it and after it, and the skip that
/// another writer wrote after `GAP_PATIENCE` (ring/flush.rs `skip`); all acknowledged.
fn stopped_writer(live: &SegmentLog, writer: &mut Writer) -> (u64, u64) {
    for i in 0..3 {
        writer.append(live, put(i));
    }
    let (lsn, len) = writer.reserve(&late());
    for i in 3..6 {
        writer.append(live, put(i));
    }
    writer.append(live, Record::Skip { lsn, len });
    writer.sync(live);
    (lsn, len)
}

#[test]
fn a_late_write_into_a_linked_segment_lands_on_its_own_reservation_only() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("store.wal");
    let live = SegmentLog::open(&base, 3, SIZE).unwrap();
    let stopped = SegmentLog::open(&base, 3, SIZE).unwrap();
    let mut writer = Writer {
        end: 0,
        acked: Vec::new(),
        writes: Vec::new(),
    };
    let (lsn, _) = stopped_writer(&live, &mut writer);
    // It resumes and writes its record whole at its place, and the next sync makes it durable.
    stopped.write_at(lsn, &late().encode(lsn).unwrap()).unwrap();
    writer.append(&live, put(6));
    writer.sync(&live);
    let scanned = scan(&SegmentLog::open(&base, 3, SIZE).unwrap(), 0).unwrap();
    assert_eq!(scanned.records, writer.acked);
    assert_eq!(
        (scanned.skipped.as_slice(), scanned.end),
        ([lsn].as_slice(), writer.end)
    );
}

/// THE BUG (found in review, 2026-12-05), as a test: in the ring of one file, the stopped
/// writer's late `pwrite` at `lsn % size` landed on a newer acknowledged record there and the
/// scan ended at it (the test replays the same writes on such a ring and sees it lose records).
/// With segments every acknowledged record comes back and the late bytes are nowhere.
#[test]
fn a_late_write_after_the_log_moved_on_never_reaches_a_newer_record() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("store.wal");
    let live = SegmentLog::open(&base, 3, SIZE).unwrap();
    // The stopped writer's process: it had opened the segment of its reservation before it
    // stopped (it wrote there), so its descriptor of it stays open across the retirement.
    let stopped = SegmentLog::open(&base, 3, SIZE).unwrap();
    stopped.prepare(0).unwrap();
    let mut writer = Writer {
        end: 0,
        acked: Vec::new(),
        writes: Vec::new(),
    };
    let (lsn, len) = stopped_writer(&live, &mut writer);

    // The log moves on over several segments, acknowledged; a checkpoint passes the stopped
    // writer's segment and the next, and they are retired.
    let mut i = 6;
    while writer.end < 4 * SIZE {
        writer.append(&live, put(i));
        i += 1;
    }
    writer.sync(&live);
    let checkpoint = writer
        .acked
        .iter()
        .map(|(at, _)| *at)
        .find(|&at| at >= 2 * SIZE + 512)
        .unwrap();
    live.retire_below(checkpoint).unwrap();
    let kept = live.seqs().unwrap();
    assert_eq!(kept[0], 2, "{kept:?}");
    // It resumes: through its open descriptor (an unlinked inode), and through a handle that
    // never opened the segment (refused: the write did not happen).
    let late_bytes = late().encode(lsn).unwrap();
    let late_at = writer.writes.len();
    stopped.write_at(lsn, &late_bytes).unwrap();
    stopped.sync(lsn, lsn + len).unwrap();
    let fresh = SegmentLog::open(&base, 3, SIZE).unwrap();
    let err = fresh.write_at(lsn, &late_bytes).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    // The others write on and sync.
    writer.append(&live, put(i));
    writer.sync(&live);

    // Recovery from the checkpoint: every acknowledged record from there, intact, and the end.
    let scanned = scan(&SegmentLog::open(&base, 3, SIZE).unwrap(), checkpoint).unwrap();
    let want: Vec<(u64, Record)> = writer
        .acked
        .iter()
        .filter(|(at, _)| *at >= checkpoint)
        .cloned()
        .collect();
    assert_eq!(scanned.records, want);
    assert_eq!((scanned.end, scanned.holes), (writer.end, 0));
    // The late bytes are in no file, and the retired names were not made again.
    assert!(!anywhere(dir.path(), &b"LATE-WRITE-".repeat(8)));
    assert_eq!(live.seqs().unwrap()[0], 2);

    // The same writes on the old design: one ring of `SIZE` bytes overwritten in place, its
    // checkpoint within the last lap. Without the late write, recovery finds every acknowledged
    // record; with it, it loses some.
    let ring_checkpoint = writer
        .acked
        .iter()
        .map(|(at, _)| *at)
        .find(|&at| at + SIZE >= writer.end)
        .unwrap();
    let on_a_ring = |late: bool| -> Scanned {
        let mut ring = vec![0u8; usize::try_from(SIZE).unwrap()];
        for (i, (at, bytes)) in writer.writes.iter().enumerate() {
            if late && i == late_at {
                let offset = (lsn % SIZE) as usize;
                ring[offset..offset + late_bytes.len()].copy_from_slice(&late_bytes);
            }
            let offset = (at % SIZE) as usize;
            ring[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
        // A ring is every segment at once.
        let ring = Memory {
            size: SIZE,
            segments: (0..=writer.end / SIZE)
                .map(|seq| (seq, ring.as_slice()))
                .collect(),
        };
        scan(&ring, ring_checkpoint).unwrap()
    };
    let in_last_lap: Vec<(u64, Record)> = writer
        .acked
        .iter()
        .filter(|(at, _)| *at >= ring_checkpoint)
        .cloned()
        .collect();
    assert_eq!(on_a_ring(false).records, in_last_lap);
    let lost = on_a_ring(true);
    assert!(
        lost.records.len() < in_last_lap.len() && lost.end < writer.end,
        "the ring lost nothing: {} of {} records, end {} of {}",
        lost.records.len(),
        in_last_lap.len(),
        lost.end,
        writer.end
    );
}
