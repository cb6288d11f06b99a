//! The recovery scan: the records of the log from a given position, in LSN order, as far as the
//! log holds them whole (docs/design/writes.md, sections 7 and 8).
//!
//! From `from`, the scan reads the record at each position in turn. It takes a record when its
//! header names that very position (a record of an earlier lap names another, zeros name 0 and
//! fail their checksum) and its checksum matches; a position too close to the ring's end for
//! the shortest record is jumped over to the next lap, as writers leave it empty. `void` records
//! are passed over. `skip(lsn, len)` says that the reservation `[lsn, lsn + len)` does not count.
//!
//! A position that holds no such record is a *hole*: the end of what was written, a torn
//! record, or the reservation of a writer that stopped before writing it. The scan looks past it
//! for the next record (a record at its own position, within the longest reservation, a filler
//! and a record, [`MAX_RECORD`] twice). What follows a hole counts only once a later `skip`
//! covers the hole, as section 8 has another writer do before its sync covers the records after
//! a stopped one; without it the scan ends at the hole. So the scan ends at the end of the last
//! record before which every hole is skipped, and returns every record up to there that no skip
//! covers.
//!
//! A record that is whole (its checksum matches at its own position) but does not decode as
//! one of its kind, or a skip that points forward, is [`Error::Corrupt`]: it was written so, and
//! the scan does not guess what else the log holds. Nothing else ends it with an error but a
//! failed read.

use crate::base::error::{Error, Result};
use crate::storage::wal::record::{Frame, Record, ALIGN, HEADER, MAX_RECORD, MIN_RECORD};

/// The ring of a log, read by position: the log file, or bytes in memory.
pub(crate) trait Ring {
    /// The ring's size, a multiple of [`ALIGN`].
    fn size(&self) -> u64;
    /// Reads `bytes.len()` bytes at position `lsn`; they never run past the ring's end.
    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()>;
}

/// A ring in memory: the bytes after a log's header block (crash images, the fuzz target).
/// Its size is their length rounded down to a multiple of [`ALIGN`].
pub(crate) struct Bytes<'a>(pub &'a [u8]);

impl Ring for Bytes<'_> {
    fn size(&self) -> u64 {
        self.0.len() as u64 / ALIGN * ALIGN
    }

    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()> {
        let size = self.size();
        let at = (lsn % size) as usize;
        let Some(source) = self.0.get(at..at + bytes.len()) else {
            return Err(Error::invalid(format!(
                "{} bytes at log position {lsn} run past the end of a ring of {size}",
                bytes.len()
            )));
        };
        bytes.copy_from_slice(source);
        Ok(())
    }
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// The records that count (puts, deletes, fences), with their positions, in LSN order.
    pub records: Vec<(u64, Record)>,
    /// The positions of whole records that a skip said not to count, in LSN order.
    pub skipped: Vec<u64>,
    /// How many holes a skip covered.
    pub holes: usize,
    /// The end of the last record the scan took: where the log's next record goes.
    pub end: u64,
}

/// `pos`, or the next lap's start when the ring's end is too close for a record.
pub(crate) fn normalize(size: u64, pos: u64) -> u64 {
    let space = size - pos % size;
    if space < MIN_RECORD {
        pos + space
    } else {
        pos
    }
}

struct Scan<'a, R: Ring + ?Sized> {
    ring: &'a R,
    size: u64,
    /// One lap from the start: the scan never reads a position twice.
    limit: u64,
}

impl<R: Ring + ?Sized> Scan<'_, R> {
    /// The whole record at `pos`, with its length, or `None` when there is none.
    fn record_at(&self, pos: u64) -> Result<Option<(Record, u64)>> {
        let room = (self.size - pos % self.size).min(self.limit - pos);
        if room < MIN_RECORD {
            return Ok(None);
        }
        let mut header = [0u8; HEADER];
        self.ring.read(pos, &mut header)?;
        let Ok(frame) = Frame::read(&header) else {
            return Ok(None);
        };
        let total = frame.total();
        if frame.lsn != pos || total > room {
            return Ok(None);
        }
        let mut bytes = vec![0u8; usize::try_from(total).expect("at most MAX_RECORD")];
        self.ring.read(pos, &mut bytes)?;
        if !frame.intact(&bytes) {
            return Ok(None);
        }
        Ok(Some((frame.record(&bytes)?, total)))
    }

    /// The first position after the hole at `pos` that holds a record, within the longest
    /// reservation. The rest of each lap is read at once: a record's first word is its own
    /// position, so only those positions are read again as records.
    fn past_hole(&self, pos: u64) -> Result<Option<u64>> {
        let last = self.limit.min(pos + 2 * MAX_RECORD);
        let mut at = normalize(self.size, pos + ALIGN);
        while at < last {
            let until = (at - at % self.size + self.size).min(last);
            let mut window = vec![0u8; usize::try_from(until - at).expect("at most a lap")];
            self.ring.read(at, &mut window)?;
            for (i, word) in window.chunks_exact(8).enumerate() {
                let candidate = at + 8 * i as u64;
                if u64::from_le_bytes(word.try_into().expect("8")) == candidate
                    && normalize(self.size, candidate) == candidate
                    && self.record_at(candidate)?.is_some()
                {
                    return Ok(Some(candidate));
                }
            }
            at = normalize(self.size, until);
        }
        Ok(None)
    }
}

/// Scans `ring` from position `from` (a multiple of [`ALIGN`]).
pub(crate) fn scan<R: Ring + ?Sized>(ring: &R, from: u64) -> Result<Scanned> {
    let size = ring.size();
    if from % ALIGN != 0 || size < MIN_RECORD || size % ALIGN != 0 {
        return Err(Error::invalid(format!(
            "a scan of a ring of {size} bytes from position {from}: both must be multiples of \
             {ALIGN}, the ring at least {MIN_RECORD} bytes"
        )));
    }
    // Positions this far are never reached (2^64 bytes of log); refusing them keeps every sum
    // below from overflowing.
    if from.checked_add(2 * size + 2 * MAX_RECORD).is_none() {
        return Err(Error::invalid(format!(
            "a scan from position {from}, beyond any log"
        )));
    }
    let scan = Scan {
        ring,
        size,
        limit: from + size,
    };
    // Records and skips in order; voids are not kept.
    let mut seen: Vec<(u64, Record)> = Vec::new();
    // Holes `[start, end)` that no skip has covered yet.
    let mut holes: Vec<(u64, u64)> = Vec::new();
    // The start of every hole crossed.
    let mut crossed: Vec<u64> = Vec::new();
    // How many of `seen` count, and where they end: the last point with no open hole.
    let (mut kept, mut end) = (0, from);
    let mut pos = from;
    loop {
        pos = normalize(size, pos);
        if pos >= scan.limit {
            break;
        }
        let Some((record, total)) = scan.record_at(pos)? else {
            match scan.past_hole(pos)? {
                Some(next) => {
                    holes.push((pos, next));
                    crossed.push(pos);
                    pos = next;
                    continue;
                }
                None => break,
            }
        };
        if let Record::Skip { lsn, len } = record {
            let covers = lsn
                .checked_add(len)
                .filter(|&until| lsn % ALIGN == 0 && len % ALIGN == 0 && len > 0 && until <= pos);
            let Some(until) = covers else {
                return Err(Error::Corrupt(format!(
                    "the log record at {pos} skips {len} bytes at {lsn}, which is not a \
                     reservation before it"
                )));
            };
            let until = normalize(size, until);
            holes.retain(|&(start, end)| !(lsn <= start && end <= until));
        }
        if !matches!(record, Record::Void { .. }) {
            seen.push((pos, record));
        }
        pos += total;
        if holes.is_empty() {
            (kept, end) = (seen.len(), pos);
        }
    }
    seen.truncate(kept);
    let skips: Vec<(u64, u64)> = seen
        .iter()
        .filter_map(|(_, record)| match record {
            Record::Skip { lsn, len } => Some((*lsn, lsn + len)),
            _ => None,
        })
        .collect();
    let mut scanned = Scanned {
        records: Vec::new(),
        skipped: Vec::new(),
        holes: crossed.iter().filter(|&&start| start < end).count(),
        end,
    };
    for (at, record) in seen {
        if matches!(record, Record::Skip { .. }) {
            continue;
        }
        if skips.iter().any(|&(lsn, until)| (lsn..until).contains(&at)) {
            scanned.skipped.push(at);
        } else {
            scanned.records.push((at, record));
        }
    }
    Ok(scanned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Status;
    use crate::storage::wal::file::{LogFile, HEADER_BLOCK, MIN_SIZE};
    use crate::storage::wal::{record, Placement};

    /// A log in memory and a writer that places its records as a writer of the file does.
    struct Log {
        ring: Vec<u8>,
        end: u64,
    }

    impl Log {
        fn new(size: usize, end: u64) -> Log {
            Log {
                ring: vec![0; size],
                end,
            }
        }

        fn write(&mut self, lsn: u64, bytes: &[u8]) {
            let at = (lsn % self.ring.len() as u64) as usize;
            self.ring[at..at + bytes.len()].copy_from_slice(bytes);
        }

        /// Appends `record`; its position.
        fn append(&mut self, record: &Record) -> u64 {
            let placed =
                Placement::of(self.ring.len() as u64, self.end, record.encoded_len()).unwrap();
            if let Some(filler) = placed.filler_record().unwrap() {
                self.write(self.end, &filler);
            }
            self.write(placed.lsn, &record.encode(placed.lsn).unwrap());
            self.end = placed.end;
            placed.lsn
        }

        /// Reserves `len` bytes and writes nothing there: a writer that stopped.
        fn reserve(&mut self, len: u64) -> (u64, u64) {
            let placed = Placement::of(self.ring.len() as u64, self.end, len).unwrap();
            let reserved = (self.end, placed.end - self.end);
            self.end = placed.end;
            reserved
        }

        fn scan(&self, from: u64) -> Scanned {
            scan(&Bytes(&self.ring), from).unwrap()
        }
    }

    fn put(i: u64, value_len: usize) -> Record {
        Record::Put {
            key: format!("key-{i:04}").into_bytes(),
            value: vec![u8::try_from(i % 251).unwrap(); value_len],
            token: i + 1,
            version: i,
        }
    }

    fn records(scanned: &Scanned) -> Vec<Record> {
        scanned.records.iter().map(|(_, r)| r.clone()).collect()
    }

    #[test]
    fn every_kind_comes_back_in_order_and_voids_are_passed_over() {
        let mut log = Log::new(8192, 0);
        let kinds = [
            put(1, 10),
            Record::Void { len: 40 },
            Record::Delete {
                key: b"k".to_vec(),
                token: 4,
                version: 2,
            },
            Record::Fence {
                resource: "r".into(),
                token: 5,
                version: 1,
            },
            put(2, 0),
        ];
        let at: Vec<u64> = kinds.iter().map(|r| log.append(r)).collect();
        let scanned = log.scan(0);
        let want: Vec<(u64, Record)> = [0, 2, 3, 4]
            .into_iter()
            .map(|i| (at[i], kinds[i].clone()))
            .collect();
        assert_eq!(scanned.records, want);
        assert_eq!((scanned.end, scanned.skipped.len()), (log.end, 0));
        // From a later record: only what follows it.
        assert_eq!(log.scan(at[3]).records, want[2..]);
        // An empty log, and a scan from its end.
        assert_eq!(Log::new(4096, 0).scan(0).end, 0);
        assert_eq!(log.scan(log.end).records, []);
    }

    #[test]
    fn wrap_around_with_void_fillers_over_many_laps() {
        let size = 4096;
        let mut log = Log::new(size, 0);
        let mut written = Vec::new();
        // Record lengths that leave every kind of tail, fillers of voids and of nothing among them.
        for i in 0..600 {
            let record = put(i, (i as usize * 37) % 300);
            let lsn = log.append(&record);
            written.push((lsn, record));
        }
        assert!(log.end > 20 * size as u64);
        // The records of the last lap are there, each after the void or tail before it.
        let from = written
            .iter()
            .map(|(lsn, _)| *lsn)
            .find(|&lsn| lsn + size as u64 >= log.end)
            .unwrap();
        let first = written.iter().position(|(lsn, _)| *lsn == from).unwrap();
        let scanned = log.scan(from);
        assert_eq!(scanned.records, written[first..]);
        assert_eq!(scanned.end, log.end);
    }

    #[test]
    fn the_scan_ends_at_an_earlier_laps_record() {
        let size = 4096;
        let mut log = Log::new(size, 0);
        let mut lap = Vec::new();
        while log.end + 100 < size as u64 {
            lap.push(log.append(&put(lap.len() as u64, 40)));
        }
        let new_start = log.end;
        let new: Vec<u64> = (0..3).map(|i| log.append(&put(100 + i, 40))).collect();
        let scanned = log.scan(new_start);
        assert_eq!(scanned.records.len(), 3);
        assert_eq!(scanned.end, log.end);
        // After them, the same offset holds a whole record of the earlier lap: another LSN.
        let at = (log.end % size as u64) as usize;
        let (lsn, _, _) = record::decode(&log.ring[at..]).unwrap();
        assert_eq!(lsn, log.end - size as u64);
        assert!(lap.contains(&lsn));
        assert_eq!(new[0], size as u64);
    }

    #[test]
    fn the_scan_ends_at_a_torn_record_at_a_bad_checksum_and_at_zeros() {
        let mut log = Log::new(8192, 4096);
        let at: Vec<u64> = (0..6).map(|i| log.append(&put(i, 100))).collect();
        let full = log.scan(4096);
        assert_eq!(full.records.len(), 6);

        // Torn: the record's second half is still the zeros it overwrote.
        let mut torn = Log {
            ring: log.ring.clone(),
            end: log.end,
        };
        let cut = (at[3] % 8192) as usize + 64;
        torn.ring[cut..(at[4] % 8192) as usize].fill(0);
        let scanned = torn.scan(4096);
        assert_eq!(records(&scanned), records(&full)[..3]);
        assert_eq!((scanned.end, scanned.holes), (at[3], 0));

        // A bad checksum: one flipped bit in a value.
        let mut flipped = Log {
            ring: log.ring.clone(),
            end: log.end,
        };
        flipped.ring[(at[2] % 8192) as usize + 50] ^= 4;
        let scanned = flipped.scan(4096);
        assert_eq!(records(&scanned), records(&full)[..2]);
        assert_eq!(scanned.end, at[2]);

        // Zeros after the last record.
        assert_eq!(full.end, log.end);
        let mut fresh = Log::new(8192, 0);
        assert_eq!(fresh.scan(0).records, []);
        fresh.append(&put(0, 3));
        assert_eq!(fresh.scan(0).records.len(), 1);
    }

    #[test]
    fn a_skip_takes_back_a_whole_record() {
        let mut log = Log::new(8192, 0);
        let a = log.append(&put(1, 10));
        let b = log.append(&put(2, 10));
        log.append(&Record::Skip {
            lsn: b,
            len: put(2, 10).encoded_len(),
        });
        let c = log.append(&put(3, 10));
        let scanned = log.scan(0);
        assert_eq!(scanned.records, [(a, put(1, 10)), (c, put(3, 10))]);
        assert_eq!(scanned.skipped, [b]);
        assert_eq!(scanned.end, log.end);
    }

    #[test]
    fn records_past_a_stopped_writers_hole_count_once_a_skip_covers_it() {
        let mut log = Log::new(8192, 0);
        let a = log.append(&put(1, 10));
        let (hole, len) = log.reserve(put(2, 300).encoded_len());
        let b = log.append(&put(3, 10));
        let c = log.append(&put(4, 10));
        // Without a skip, the hole ends the scan.
        let scanned = log.scan(0);
        assert_eq!(scanned.records, [(a, put(1, 10))]);
        assert_eq!(scanned.end, hole);
        // With it, what follows counts.
        log.append(&Record::Skip { lsn: hole, len });
        let d = log.append(&put(5, 10));
        let scanned = log.scan(0);
        let want = [
            (a, put(1, 10)),
            (b, put(3, 10)),
            (c, put(4, 10)),
            (d, put(5, 10)),
        ];
        assert_eq!(scanned.records, want);
        assert_eq!((scanned.end, scanned.holes), (log.end, 1));
        // The stopped writer, resumed, writes its record late (whole, or torn): it does not count.
        let late = put(2, 300).encode(hole).unwrap();
        let mut whole = Log {
            ring: log.ring.clone(),
            end: log.end,
        };
        whole.write(hole, &late);
        let scanned = whole.scan(0);
        assert_eq!(
            (scanned.records.as_slice(), scanned.skipped.as_slice()),
            (want.as_slice(), [hole].as_slice())
        );
        let mut torn = Log {
            ring: log.ring.clone(),
            end: log.end,
        };
        torn.write(hole, &late[..100]);
        assert_eq!(torn.scan(0).records, want);
        // A second hole, not covered, ends the scan there, though the first one was.
        let (second, _) = log.reserve(64);
        log.append(&put(6, 10));
        let scanned = log.scan(0);
        assert_eq!((scanned.records, scanned.end), (want.to_vec(), second));
    }

    #[test]
    fn a_hole_over_a_filler_and_the_ring_end_is_covered_by_its_skip() {
        let size = 4096;
        let from = 2048;
        let mut log = Log::new(size, from);
        while log.end + 200 < size as u64 {
            log.append(&put(log.end, 100));
        }
        let before = log.scan(from).records.len();
        // A reservation of a filler to the ring's end and a record in the next lap, never
        // written.
        let (hole, len) = log.reserve(put(0, 300).encoded_len());
        assert!(hole + len > size as u64 && hole < size as u64);
        let after = log.append(&put(9, 10));
        assert_eq!(log.scan(from).end, hole);
        log.append(&Record::Skip { lsn: hole, len });
        let scanned = log.scan(from);
        assert_eq!(scanned.records.len(), before + 1);
        assert_eq!(scanned.records.last(), Some(&(after, put(9, 10))));
        assert_eq!((scanned.end, scanned.holes), (log.end, 1));
    }

    #[test]
    fn a_skip_that_points_forward_is_corrupt() {
        for (lsn, len) in [(0, 100), (0, 0), (4, 8), (8, 4), (u64::MAX - 7, 16)] {
            let mut log = Log::new(4096, 0);
            log.append(&put(1, 10));
            let at = log.append(&Record::Skip {
                lsn,
                len: len.max(24),
            });
            // A skip of a reservation after itself, or not one at all.
            let mut bad = Log {
                ring: log.ring.clone(),
                end: log.end,
            };
            bad.write(at, &Record::Skip { lsn, len }.encode(at).unwrap());
            let err = scan(&Bytes(&bad.ring), 0).unwrap_err();
            assert_eq!(err.status(), Status::Corrupt, "{lsn} {len}: {err}");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        let ring = [0u8; 4096];
        for (bytes, from) in [(&ring[..], 4), (&ring[..16], 0), (&ring[..], u64::MAX - 7)] {
            let err = scan(&Bytes(bytes), from).unwrap_err();
            assert_eq!(err.status(), Status::InvalidArgument, "{err}");
        }
    }

    #[test]
    fn the_scan_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.wal");
        let file = LogFile::create(&path, 7, 2 * MIN_SIZE).unwrap();
        let mut log = Log::new(2 * MIN_SIZE as usize, 0);
        for i in 0..100 {
            let before = log.end;
            let lsn = log.append(&put(i, 50));
            if lsn != before {
                file.write_at(
                    before,
                    &Placement::of(file.size(), before, put(i, 50).encoded_len())
                        .unwrap()
                        .filler_record()
                        .unwrap()
                        .unwrap_or_default(),
                )
                .unwrap();
            }
            file.write_at(lsn, &put(i, 50).encode(lsn).unwrap())
                .unwrap();
        }
        file.sync().unwrap();
        let ring = std::fs::read(&path).unwrap();
        assert_eq!(&ring[HEADER_BLOCK as usize..], log.ring.as_slice());
        let reopened = LogFile::open(&path, 7, None).unwrap();
        let start = log.end - log.end % (2 * MIN_SIZE);
        assert_eq!(scan(&reopened, start).unwrap(), log.scan(start));
        assert_eq!(scan(&reopened, start).unwrap().end, log.end);
    }

    proptest::proptest! {
        /// Garbage, anywhere, from any position: a clean end or a typed error, never a panic,
        /// and never a record that is not at its own position.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), from in 0u64..1 << 20) {
            match scan(&Bytes(&bytes), from * 8) {
                Ok(scanned) => {
                    for (lsn, record) in &scanned.records {
                        proptest::prop_assert!(*lsn >= from * 8 && *lsn < scanned.end);
                        let counted = !matches!(record, Record::Void { .. } | Record::Skip { .. });
                        proptest::prop_assert!(counted, "{:?}", record);
                    }
                }
                Err(err) => proptest::prop_assert!(matches!(err.status(), Status::Corrupt | Status::InvalidArgument), "{err}"),
            }
        }
    }
}
