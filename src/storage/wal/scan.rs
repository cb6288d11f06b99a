//! The recovery scan: the records of the log from a given position, in LSN order, as far as the
//! log holds them whole (docs/design/writes.md, sections 7 and 8), across its segments.
//!
//! From `from`, the scan reads the record at each position in turn. It takes a record when its
//! header names that very position (zeros name 0 and fail their checksum; a segment is never
//! reused, so no record of another position is found there but garbage) and its checksum
//! matches; a position too close to its segment's end for the shortest record is jumped over to
//! the next segment's start, as writers leave it empty. `void` records are passed over.
//! `skip(lsn, len)` says that the reservation `[lsn, lsn + len)` does not count.
//!
//! The segments: every one from the start's to the newest must exist; a missing one among them
//! is [`Error::Corrupt`] naming it (log that was acknowledged may have been in it). A segment
//! after the newest does not exist: the log ends there.
//!
//! A position that holds no such record is a *hole*: the end of what was written, a torn
//! record, or the reservation of a writer that stopped before writing it. The scan looks past it
//! for the next record (a record at its own position, within the longest reservation, a filler
//! and a record, [`MAX_RECORD`] twice, in the segments that exist). What follows a hole counts
//! only once a later `skip` covers the hole, as section 8 has another writer do before its sync
//! covers the records after a stopped one; without it the scan ends at the hole. So the scan
//! ends at the end of the last record before which every hole is skipped, and returns every
//! record up to there that no skip covers.
//!
//! A record that is whole (its checksum matches at its own position) but does not decode as
//! one of its kind, or a skip that points forward, is [`Error::Corrupt`]: it was written so, and
//! the scan does not guess what else the log holds. Nothing else ends it with an error but a
//! failed read or a segment whose header is not this log's.

use std::collections::BTreeMap;

use crate::base::error::{Error, Result};
use crate::storage::wal::record::{Frame, Record, ALIGN, HEADER, MAX_RECORD, MIN_RECORD};
use crate::storage::wal::Segments;

/// A log of one segment in memory, segment 0: the bytes after a segment's header block. Its
/// size is their length rounded down to a multiple of [`ALIGN`].
pub(crate) struct Bytes<'a>(pub &'a [u8]);

impl Segments for Bytes<'_> {
    fn segment_size(&self) -> u64 {
        self.0.len() as u64 / ALIGN * ALIGN
    }

    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()> {
        read_in(self.0, self.segment_size(), lsn, bytes)
    }

    fn exists(&self, seq: u64) -> Result<bool> {
        Ok(seq == 0)
    }

    fn seqs(&self) -> Result<Vec<u64>> {
        Ok(vec![0])
    }
}

/// A log of several segments in memory (crash images, the fuzz target): each segment's bytes
/// after its header block, by `seq`, each at least `size` bytes.
pub(crate) struct Memory<'a> {
    pub size: u64,
    pub segments: BTreeMap<u64, &'a [u8]>,
}

impl Segments for Memory<'_> {
    fn segment_size(&self) -> u64 {
        self.size
    }

    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()> {
        let Some(segment) = self.segments.get(&(lsn / self.size)) else {
            return Err(Error::invalid(format!(
                "log position {lsn} is in a segment that does not exist"
            )));
        };
        read_in(segment, self.size, lsn, bytes)
    }

    fn exists(&self, seq: u64) -> Result<bool> {
        Ok(self.segments.contains_key(&seq))
    }

    fn seqs(&self) -> Result<Vec<u64>> {
        Ok(self.segments.keys().copied().collect())
    }
}

/// Reads position `lsn` from `segment`, its segment's bytes, of segments of `size`.
fn read_in(segment: &[u8], size: u64, lsn: u64, bytes: &mut [u8]) -> Result<()> {
    let at = lsn % size;
    let within = at + bytes.len() as u64 <= size;
    let Some(source) = usize::try_from(at)
        .ok()
        .filter(|_| within)
        .and_then(|at| segment.get(at..at + bytes.len()))
    else {
        return Err(Error::invalid(format!(
            "{} bytes at log position {lsn} run past the end of a segment of {size}",
            bytes.len()
        )));
    };
    bytes.copy_from_slice(source);
    Ok(())
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

/// `pos`, or the next segment's start when its segment's end is too close for a record.
pub(crate) fn normalize(size: u64, pos: u64) -> u64 {
    let space = size - pos % size;
    if space < MIN_RECORD {
        pos + space
    } else {
        pos
    }
}

/// How much of a segment a scan reads at once, ahead of the record it needs: a record read on
/// its own took two reads (its header, then the whole), about 1.5 us per record of a
/// checkpoint.
const READ_AHEAD: u64 = 1 << 20;

struct Scan<'a, S: Segments + ?Sized> {
    log: &'a S,
    size: u64,
    /// The log read ahead: `.1` holds the bytes from position `.0`, within one segment. A
    /// checkpoint scans a log that writers append to: what it reads ahead past `flushed` may
    /// be older than the file by the time the scan gets there, and it applies nothing past
    /// `flushed` (whose records, and the skip records of its gaps, were written before it read
    /// `flushed`), so the scan may end earlier there, never otherwise.
    ahead: std::cell::RefCell<(u64, Vec<u8>)>,
}

impl<S: Segments + ?Sized> Scan<'_, S> {
    /// Reads `bytes.len()` bytes at `pos` (within its segment) through the read-ahead.
    fn read(&self, pos: u64, bytes: &mut [u8]) -> Result<()> {
        let len = bytes.len() as u64;
        let mut ahead = self.ahead.borrow_mut();
        let (at, held) = &mut *ahead;
        if pos < *at || pos + len > *at + held.len() as u64 {
            // Saturating: a scan refuses only positions within two segments and two records of
            // the end of the positions, and a read-ahead reaches further.
            let segment_end = (pos - pos % self.size).saturating_add(self.size);
            let until = segment_end.min(pos.saturating_add(READ_AHEAD.max(len)));
            held.resize(usize::try_from(until - pos).expect("at most a segment"), 0);
            self.log.read(pos, held)?;
            *at = pos;
        }
        let start = usize::try_from(pos - *at).expect("within the read-ahead");
        bytes.copy_from_slice(&held[start..start + bytes.len()]);
        Ok(())
    }

    /// The whole record at `pos`, with its length, or `None` when there is none.
    fn record_at(&self, pos: u64) -> Result<Option<(Record, u64)>> {
        let room = self.size - pos % self.size;
        if room < MIN_RECORD || !self.log.exists(pos / self.size)? {
            return Ok(None);
        }
        let mut header = [0u8; HEADER];
        self.read(pos, &mut header)?;
        let Ok(frame) = Frame::read(&header) else {
            return Ok(None);
        };
        let total = frame.total();
        if frame.lsn != pos || total > room {
            return Ok(None);
        }
        let mut bytes = vec![0u8; usize::try_from(total).expect("at most MAX_RECORD")];
        self.read(pos, &mut bytes)?;
        if !frame.intact(&bytes) {
            return Ok(None);
        }
        Ok(Some((frame.record(&bytes)?, total)))
    }

    /// The first position after the hole at `pos` that holds a record, within the longest
    /// reservation. The rest of each segment is read at once: a record's first word is its own
    /// position, so only those positions are read again as records.
    fn past_hole(&self, pos: u64) -> Result<Option<u64>> {
        let last = pos + 2 * MAX_RECORD;
        let mut at = normalize(self.size, pos + ALIGN);
        while at < last {
            if !self.log.exists(at / self.size)? {
                return Ok(None);
            }
            let until = (at - at % self.size + self.size).min(last);
            let mut window = vec![0u8; usize::try_from(until - at).expect("at most a segment")];
            self.log.read(at, &mut window)?;
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

/// Scans `log` from position `from` (a multiple of [`ALIGN`]).
pub(crate) fn scan<S: Segments + ?Sized>(log: &S, from: u64) -> Result<Scanned> {
    let size = log.segment_size();
    if from % ALIGN != 0 || size < MIN_RECORD || size % ALIGN != 0 {
        return Err(Error::invalid(format!(
            "a scan of segments of {size} bytes from position {from}: both must be multiples \
             of {ALIGN}, a segment at least {MIN_RECORD} bytes"
        )));
    }
    let seqs = log.seqs()?;
    // Positions this far are never reached (2^64 bytes of log); refusing them keeps every sum
    // below from overflowing.
    let beyond = |at: u64| at.checked_add(2 * size + 2 * MAX_RECORD).is_none();
    let newest_end = seqs
        .last()
        .map_or(Some(0), |&newest| newest.checked_add(1)?.checked_mul(size));
    if beyond(from) {
        return Err(Error::invalid(format!(
            "a scan from position {from}, beyond any log"
        )));
    }
    if newest_end.is_none_or(beyond) {
        return Err(Error::Corrupt(format!(
            "log segment {:#x} is numbered beyond any log",
            seqs.last().copied().unwrap_or_default()
        )));
    }
    // Every segment from the start's to the newest exists: a missing one lost log.
    let start = normalize(size, from) / size;
    let present = seqs.iter().copied().filter(|&seq| seq >= start);
    if let Some((expected, seq)) = (start..)
        .zip(present)
        .find(|(expected, seq)| expected != seq)
    {
        return Err(Error::Corrupt(format!(
            "log segment {expected:#x} is missing, before segment {seq:#x} (log from position \
             {} to {} is lost)",
            expected * size,
            seq * size
        )));
    }
    let scan = Scan {
        log,
        size,
        ahead: std::cell::RefCell::new((0, Vec::new())),
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
pub(super) mod tests {
    use super::*;
    use crate::base::error::Status;
    use crate::storage::wal::Placement;

    /// A log in memory and a writer that places its records as a writer of the files does.
    #[derive(Clone)]
    pub(in crate::storage::wal) struct Log {
        size: u64,
        pub(in crate::storage::wal) segments: BTreeMap<u64, Vec<u8>>,
        pub(in crate::storage::wal) end: u64,
    }

    impl Log {
        pub(in crate::storage::wal) fn new(size: usize, end: u64) -> Log {
            Log {
                size: size as u64,
                segments: BTreeMap::new(),
                end,
            }
        }

        /// The bytes of the log from `lsn` to its segment's end, the segment made (with those
        /// between the newest and it) when missing, as `SegmentLog::write_at` does.
        fn at(&mut self, lsn: u64) -> &mut [u8] {
            let seq = lsn / self.size;
            let first = self
                .segments
                .keys()
                .last()
                .map_or(seq, |&newest| newest + 1);
            for each in first..=seq {
                self.segments
                    .insert(each, vec![0; usize::try_from(self.size).unwrap()]);
            }
            let at = usize::try_from(lsn % self.size).unwrap();
            &mut self.segments.get_mut(&seq).unwrap()[at..]
        }

        fn write(&mut self, lsn: u64, bytes: &[u8]) {
            self.at(lsn)[..bytes.len()].copy_from_slice(bytes);
        }

        /// Appends `record`; its position.
        pub(in crate::storage::wal) fn append(&mut self, record: &Record) -> u64 {
            let placed = Placement::of(self.size, self.end, record.encoded_len()).unwrap();
            if let Some(filler) = placed.filler_record().unwrap() {
                self.write(self.end, &filler);
            }
            self.write(placed.lsn, &record.encode(placed.lsn).unwrap());
            self.end = placed.end;
            placed.lsn
        }

        /// Reserves `len` bytes and writes nothing there: a writer that stopped.
        fn reserve(&mut self, len: u64) -> (u64, u64) {
            let placed = Placement::of(self.size, self.end, len).unwrap();
            let reserved = (self.end, placed.end - self.end);
            self.end = placed.end;
            reserved
        }

        fn memory(&self) -> Memory<'_> {
            Memory {
                size: self.size,
                segments: self
                    .segments
                    .iter()
                    .map(|(&seq, bytes)| (seq, bytes.as_slice()))
                    .collect(),
            }
        }

        fn try_scan(&self, from: u64) -> Result<Scanned> {
            scan(&self.memory(), from)
        }

        pub(in crate::storage::wal) fn scan(&self, from: u64) -> Scanned {
            self.try_scan(from).unwrap()
        }
    }

    pub(in crate::storage::wal) fn put(i: u64, value_len: usize) -> Record {
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
    fn records_run_on_across_many_segments_after_void_fillers() {
        let size = 4096;
        let mut log = Log::new(size, 0);
        let mut written = Vec::new();
        // Record lengths that leave every kind of tail, fillers of voids and of nothing among them.
        for i in 0..600 {
            let record = put(i, usize::try_from(i * 37 % 300).unwrap());
            let lsn = log.append(&record);
            written.push((lsn, record));
        }
        assert!(log.end > 20 * size as u64);
        let scanned = log.scan(0);
        assert_eq!(scanned.records, written);
        assert_eq!(scanned.end, log.end);
        // From a record in the middle, with the segments before its own retired.
        let (from, _) = written[300];
        let first = from / size as u64;
        let mut retired = log.clone();
        retired.segments.retain(|&seq, _| seq >= first);
        assert_eq!(retired.scan(from).records, written[300..]);
    }

    #[test]
    fn a_missing_segment_among_them_is_corrupt_and_after_them_the_end() {
        let size = 4096;
        let mut log = Log::new(size, 0);
        let at: Vec<u64> = (0..200).map(|i| log.append(&put(i, 100))).collect();
        let newest = *log.segments.keys().last().unwrap();
        assert!(newest >= 4, "{newest}");
        // The middle one gone: the log from there is lost, and the scan says which.
        for missing in [0, 1, newest - 1] {
            let mut lost = log.clone();
            lost.segments.remove(&missing);
            let err = lost.try_scan(0).unwrap_err();
            assert_eq!(err.status(), Status::Corrupt, "{err}");
            assert!(
                err.to_string()
                    .contains(&format!("segment {missing:#x} is missing")),
                "{err}"
            );
        }
        // Below the scan's start it does not matter.
        let mut old = log.clone();
        old.segments.remove(&0);
        let from = at
            .iter()
            .copied()
            .find(|&lsn| lsn >= 2 * size as u64)
            .unwrap();
        assert_eq!(old.scan(from).end, log.end);
        // The newest gone: the log ends before it, at its last whole record.
        let mut last = log.clone();
        last.segments.remove(&newest);
        let scanned = last.scan(0);
        let kept = at.iter().filter(|&&lsn| lsn < newest * size as u64).count();
        assert_eq!(scanned.records.len(), kept);
        assert!(scanned.end <= newest * size as u64 && scanned.end > (newest - 1) * size as u64);
        // A segment made ahead and never written: zeros, the end.
        let mut ahead = log.clone();
        ahead.at((newest + 1) * size as u64);
        assert_eq!(ahead.scan(0), log.scan(0));
        // A segment at the end of the numbers: not one this log made, and not an overflow.
        let mut far = log.clone();
        far.segments.insert(u64::MAX, vec![0; size]);
        let err = far.try_scan(0).unwrap_err();
        assert_eq!(err.status(), Status::Corrupt, "{err}");
        assert!(err.to_string().contains("0xffffffffffffffff"), "{err}");
        // A scan from a segment that does not exist yet: nothing, ending where it started.
        let beyond = (newest + 3) * size as u64;
        let scanned = log.scan(beyond);
        assert_eq!((scanned.records.len(), scanned.end), (0, beyond));
    }

    #[test]
    fn the_scan_ends_at_a_torn_record_at_a_bad_checksum_and_at_zeros() {
        let mut log = Log::new(8192, 4096);
        let at: Vec<u64> = (0..6).map(|i| log.append(&put(i, 100))).collect();
        let full = log.scan(4096);
        assert_eq!(full.records.len(), 6);

        // Torn: the record's second half is still the zeros it overwrote.
        let mut torn = log.clone();
        torn.at(at[3])[64..usize::try_from(at[4] - at[3]).unwrap()].fill(0);
        let scanned = torn.scan(4096);
        assert_eq!(records(&scanned), records(&full)[..3]);
        assert_eq!((scanned.end, scanned.holes), (at[3], 0));

        // A bad checksum: one flipped bit in a value.
        let mut flipped = log.clone();
        flipped.at(at[2])[50] ^= 4;
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
        let mut whole = log.clone();
        whole.write(hole, &late);
        let scanned = whole.scan(0);
        assert_eq!(
            (scanned.records.as_slice(), scanned.skipped.as_slice()),
            (want.as_slice(), [hole].as_slice())
        );
        let mut torn = log.clone();
        torn.write(hole, &late[..100]);
        assert_eq!(torn.scan(0).records, want);
        // A second hole, not covered, ends the scan there, though the first one was.
        let (second, _) = log.reserve(64);
        log.append(&put(6, 10));
        let scanned = log.scan(0);
        assert_eq!((scanned.records, scanned.end), (want.to_vec(), second));
    }

    #[test]
    fn a_hole_over_a_filler_and_a_segment_end_is_covered_by_its_skip() {
        let size = 4096;
        let from = 2048;
        let mut log = Log::new(size, from);
        while log.end + 200 < size as u64 {
            log.append(&put(log.end, 100));
        }
        let before = log.scan(from).records.len();
        // A reservation of a filler to the segment's end and a record in the next segment,
        // never written.
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
            let mut bad = log.clone();
            bad.write(at, &Record::Skip { lsn, len }.encode(at).unwrap());
            let err = bad.try_scan(0).unwrap_err();
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

    proptest::proptest! {
        /// Garbage, in segments of any size, some missing, from any position: a clean end or a
        /// typed error, never a panic, and never a record that is not at its own position.
        #[test]
        fn garbage_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            size in 3u64..80,
            missing in proptest::prelude::any::<u8>(),
            from in 0u64..1 << 20,
        ) {
            let size = size * ALIGN;
            let from = from * ALIGN;
            let first = from / size;
            let log = Memory {
                size,
                segments: bytes
                    .chunks_exact(usize::try_from(size).unwrap())
                    .enumerate()
                    .filter(|(i, _)| *i >= 8 || missing & (1 << i) == 0)
                    .map(|(i, chunk)| (first + i as u64, chunk))
                    .collect(),
            };
            for result in [scan(&log, from), scan(&Bytes(&bytes), from)] {
                match result {
                    Ok(scanned) => {
                        for (lsn, record) in &scanned.records {
                            proptest::prop_assert!(*lsn >= from && *lsn < scanned.end);
                            let counted = !matches!(record, Record::Void { .. } | Record::Skip { .. });
                            proptest::prop_assert!(counted, "{:?}", record);
                        }
                    }
                    Err(err) => proptest::prop_assert!(matches!(err.status(), Status::Corrupt | Status::InvalidArgument), "{err}"),
                }
            }
        }
    }
}
