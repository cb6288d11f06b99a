//! The redo log (docs/design/writes.md, issue 35): a sequence of segment files beside the store,
//! each created whole and retired by `unlink`, never reused, of checksummed records; and the scan
//! that reads them back after a crash; and the apply of records into the store that checkpoints
//! and recovery share. The shared flush (`ring/flush.rs`) writes it, and the store's fenced
//! writes, checkpoints and recovery use it where `Options::write_log` is on
//! (`local/log_user.rs`).
//!
//! - `record`: a record's bytes, [`Record::encode`](record::Record::encode) beside the decoder.
//! - `file`: the segment files: their header, creation (`prepare`), `write_at`, `sync`,
//!   `retire_below`.
//! - `scan`: the recovery scan, across segments.
//! - `apply`: the step of a checkpoint and of recovery: records into the store's tables, by
//!   version, with the position they reach (`wal_applied`), in one transaction.
//! - `crc`: CRC-32C, the records' and headers' checksum.
//!
//! A position (LSN) is a byte offset into the log that only grows; it lives in segment
//! `LSN / size` at `LSN % size` after the segment's header. A record never spans a segment's
//! end: [`Placement`] tells a writer where its record goes and what filler it puts first. A
//! position maps to one segment forever (no lap), so a late write can only land on its own
//! reservation, or in a segment already unlinked, which no one reads.

pub(crate) mod apply;
mod crc;
pub(crate) mod file;
pub(crate) mod record;
pub(crate) mod scan;

#[cfg(test)]
mod crash;
#[cfg(test)]
mod late;

use crate::base::error::{Error, Result};
use record::{Record, ALIGN, MAX_RECORD, MIN_RECORD};

/// The segments of a log, read by position: the segment files, or bytes in memory
/// (`scan::Bytes`, `scan::Memory`). It lives here, not in `scan`, so that `file` (which
/// implements it) and `scan` (which reads through it) do not import each other.
pub(crate) trait Segments {
    /// The size of each segment (the log bytes after its header), a multiple of
    /// [`ALIGN`](record::ALIGN).
    fn segment_size(&self) -> u64;
    /// Reads `bytes.len()` bytes at position `lsn`; they never run past its segment's end, and
    /// the segment exists.
    fn read(&self, lsn: u64, bytes: &mut [u8]) -> Result<()>;
    /// Whether segment `seq` exists (checking its header, for the files).
    fn exists(&self, seq: u64) -> Result<bool>;
    /// The segments that exist, in order.
    fn seqs(&self) -> Result<Vec<u64>>;
}

/// Where a record of `len` bytes goes when the log's reserved end is `end`: after `filler`
/// bytes that take the rest of the segment when the record would not fit in it.
///
/// A writer reserves `filler + len` bytes at `end` (a compare-and-swap of the shared end from
/// `end` to [`Placement::end`]: a fetch-and-add could not know the filler before it), writes
/// [`Placement::filler_record`] at `end` when there is one, and its record at
/// [`Placement::lsn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Bytes from the reserved end to its segment's end, when the record does not fit before it.
    pub filler: u64,
    /// The record's position.
    pub lsn: u64,
    /// The reserved end after the record.
    pub end: u64,
}

impl Placement {
    /// The placement of a record of `len` bytes (as encoded, a multiple of 8) at the reserved
    /// end `end`, in segments of `size` bytes. Refused when `len` is not a record's length or
    /// does not fit in a segment.
    pub(crate) fn of(size: u64, end: u64, len: u64) -> Result<Placement> {
        if end % ALIGN != 0
            || len % ALIGN != 0
            || !(MIN_RECORD..=MAX_RECORD.min(size)).contains(&len)
        {
            return Err(Error::invalid(format!(
                "a log record of {len} bytes at {end}, in segments of {size}: both must be \
                 multiples of {ALIGN}, the record from {MIN_RECORD} to {} bytes",
                MAX_RECORD.min(size)
            )));
        }
        let space = size - end % size;
        let filler = if len <= space { 0 } else { space };
        let lsn = end + filler;
        Ok(Placement {
            filler,
            lsn,
            end: lsn + len,
        })
    }

    /// The filler's bytes, to write at the reserved end before the record: a `void` to the
    /// segment's end; `None` when there is no filler, or when it is shorter than any record (the
    /// scan jumps over such a tail by itself).
    pub(crate) fn filler_record(&self) -> Result<Option<Vec<u8>>> {
        if self.filler < MIN_RECORD {
            return Ok(None);
        }
        let at = self.lsn - self.filler;
        Record::void_filling(self.filler)?.encode(at).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Status;

    #[test]
    fn a_record_that_fits_goes_at_the_end() {
        let placed = Placement::of(4096, 4096 + 1000, 48).unwrap();
        assert_eq!(
            placed,
            Placement {
                filler: 0,
                lsn: 5096,
                end: 5144
            }
        );
        assert_eq!(placed.filler_record().unwrap(), None);
        // Exactly to the segment's end.
        let placed = Placement::of(4096, 4096 - 48, 48).unwrap();
        assert_eq!((placed.filler, placed.end), (0, 4096));
    }

    #[test]
    fn a_record_that_does_not_fit_is_preceded_by_a_void_to_the_segment_end() {
        let placed = Placement::of(4096, 8192 + 4000, 200).unwrap();
        assert_eq!(
            placed,
            Placement {
                filler: 96,
                lsn: 3 * 4096,
                end: 3 * 4096 + 200
            }
        );
        let filler = placed.filler_record().unwrap().unwrap();
        assert_eq!(filler.len(), 96);
        let (at, record, len) = record::decode(&filler).unwrap();
        assert_eq!(
            (at, record, len),
            (8192 + 4000, Record::Void { len: 76 }, 96)
        );
        // A tail shorter than any record holds none: the scan jumps it.
        let placed = Placement::of(4096, 4096 - 16, 24).unwrap();
        assert_eq!((placed.filler, placed.lsn), (16, 4096));
        assert_eq!(placed.filler_record().unwrap(), None);
    }

    #[test]
    fn records_that_are_not_records_or_do_not_fit_are_refused() {
        for (size, end, len) in [
            (4096, 0, 16),
            (4096, 0, 28),
            (4096, 4, 24),
            (4096, 0, 4104),
            (1 << 20, 0, MAX_RECORD + 8),
        ] {
            let err = Placement::of(size, end, len).unwrap_err();
            assert_eq!(
                err.status(),
                Status::InvalidArgument,
                "{size} {end} {len}: {err}"
            );
        }
        Placement::of(1 << 20, 0, MAX_RECORD).unwrap();
    }
}
