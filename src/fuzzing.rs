//! The decoders of bytes that another process or an older version wrote, one check each, for
//! the fuzz target `decoders` (`fuzz/fuzz_targets/decoders.rs`). Built with `--cfg fuzzing`
//! (scripts/fuzz.sh sets it) and in the crate's own tests; never part of the API.
//!
//! Each check decodes `bytes` and returns whether they decoded. What must hold, or the check
//! panics (a finding):
//! - garbage is refused with the decoder's own typed error (`Storage` for a malformed request
//!   or reply of the ring, `Corrupt` for a damaged record), never a panic;
//! - a value that decoded encodes to bytes that decode to the same value: a decoder that
//!   accepted garbage as a value its encoder cannot write fails here;
//! - where a format has one encoding per value (requests, leases of the current format, group
//!   records, history entries and histories, values, log records, key index buckets), those bytes are the input: a decoder that
//!   reads garbage as another value, one its encoder writes otherwise, fails here. Replies and
//!   answers ignore the fields an error does not use, a bucket may hold leases of format 1, and
//!   an empty bucket is also `[1][0 u16]`: their values are checked, not their bytes.

use std::fmt::Debug;

use crate::base::error::{Error, Result, Status};
use crate::rules::history::{self, Ended};
use crate::rules::record::{decode_value, encode_value, Lease, Record, LEASE_FORMAT_1};
use crate::share::wire::{self, Request};
use crate::share::{buckets, keys};
use crate::storage::wal::record::{self as log, ALIGN};
use crate::storage::wal::scan::{self, Memory};
use crate::storage::wal::Segments;

/// A decoder's check: whether `bytes` decoded; panics on a finding.
pub type Check = fn(&[u8]) -> bool;

/// The checks by name; the fuzz target picks one with its input's first byte (modulo their
/// number), and a seed in fuzz/seeds/decoders starts with its check's index here.
pub const DECODERS: [(&str, Check); 12] = [
    ("request", request),
    ("reply", reply),
    ("answer", answer),
    ("bucket", bucket),
    ("record", record),
    ("lease", lease),
    ("ended", ended),
    ("history", history),
    ("value", value),
    ("log-record", log_record),
    ("log-scan", log_scan),
    ("key-bucket", key_bucket),
];

/// A refusal: `false` when `err` is of the decoder's own kind.
fn refused(err: &Error, status: Status, what: &str) -> bool {
    assert_eq!(
        err.status(),
        status,
        "a malformed {what} was refused with an error of another kind: {err:?}"
    );
    false
}

/// `decoded` came back as `again` after an encoding: they must be the same value.
fn same<T: PartialEq + Debug>(decoded: &T, again: &Result<T>, what: &str) {
    assert!(
        again.as_ref().is_ok_and(|again| again == decoded),
        "a decoded {what} did not survive its encoding: {decoded:?} came back as {again:?}"
    );
}

/// The input `bytes` of a format with one encoding per value must be the encoding `again` of
/// the value they decoded to.
fn canonical(bytes: &[u8], again: &[u8], what: &str) {
    assert_eq!(
        bytes, again,
        "a {what} decoded to a value that encodes otherwise"
    );
}

/// `decoded` came back as `again`; an [`Error`] holds an `io::Error`, which has no
/// `PartialEq`, so errors compare by their `Debug` form, which shows every field.
fn same_result<T: PartialEq + Debug>(decoded: &Result<T>, again: &Result<Result<T>>, what: &str) {
    let equal = match (decoded, again) {
        (Ok(a), Ok(Ok(b))) => a == b,
        (Err(a), Ok(Err(b))) => format!("{a:?}") == format!("{b:?}"),
        _ => false,
    };
    assert!(
        equal,
        "a decoded {what} did not survive its encoding: {decoded:?} came back as {again:?}"
    );
}

/// A request in a slot of the ring: a write operation or a read (`share/wire.rs`).
pub fn request(bytes: &[u8]) -> bool {
    match wire::decode_request(bytes) {
        Ok(request) => {
            let again = match &request {
                Request::Op(op) => wire::encode_op(op),
                Request::Query(query) => wire::encode_query(query),
            };
            same(&request, &wire::decode_request(&again), "request");
            canonical(bytes, &again, "request");
            true
        }
        Err(err) => refused(&err, Status::Storage, "request"),
    }
}

/// The reply to a write request in a slot of the ring.
pub fn reply(bytes: &[u8]) -> bool {
    match wire::decode_reply(bytes) {
        Ok(reply) => {
            same_result(
                &reply,
                &wire::decode_reply(&wire::encode_reply(&reply)),
                "reply",
            );
            true
        }
        Err(err) => refused(&err, Status::Storage, "reply"),
    }
}

/// The answer to a read request in a slot of the ring.
pub fn answer(bytes: &[u8]) -> bool {
    match wire::decode_answer(bytes) {
        Ok(answer) => {
            let again = wire::decode_answer(&wire::encode_answer(&answer));
            same_result(&answer, &again, "answer");
            true
        }
        Err(err) => refused(&err, Status::Storage, "answer"),
    }
}

/// The blob of a bucket of the lease map in shared memory (`share/buckets.rs`).
pub fn bucket(bytes: &[u8]) -> bool {
    match buckets::decode(bytes) {
        Ok(entries) => {
            same(
                &entries,
                &buckets::encode(&entries).and_then(|blob| buckets::decode(&blob)),
                "bucket",
            );
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "bucket"),
    }
}

/// The blob of a bucket of the key index in shared memory (`share/keys.rs`): one encoding per
/// value.
pub fn key_bucket(bytes: &[u8]) -> bool {
    match keys::decode(bytes) {
        Ok(entries) => {
            let again = keys::encode(&entries);
            same(&entries, &keys::decode(&again), "key bucket");
            canonical(bytes, &again, "key bucket");
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "key bucket"),
    }
}

/// A lock's record in the leases table or a bucket: a lease of format 1 or 2, or a group.
pub fn record(bytes: &[u8]) -> bool {
    match Record::decode(bytes) {
        Ok(record) => {
            let again = record.encode();
            same(&record, &Record::decode(&again), "lease record");
            // A lease of format 1 (an older version's) is written again as format 2.
            if bytes[0] != LEASE_FORMAT_1 {
                canonical(bytes, &again, "lease record");
            }
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "lease record"),
    }
}

/// One lease, of format 1 (schema 1) or 2.
pub fn lease(bytes: &[u8]) -> bool {
    match Lease::decode(bytes) {
        Ok(lease) => {
            let again = lease.encode();
            same(&lease, &Lease::decode(&again), "lease");
            if bytes[0] != LEASE_FORMAT_1 {
                canonical(bytes, &again, "lease");
            }
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "lease"),
    }
}

/// One ended lease of a lock's history, as a bucket's tail, the history table and a
/// `RecordEnds` request carry it.
pub fn ended(bytes: &[u8]) -> bool {
    match Ended::decode(bytes) {
        Ok(ended) => {
            let again = ended.encode();
            same(&ended, &Ended::decode(&again), "history entry");
            canonical(bytes, &again, "history entry");
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "history entry"),
    }
}

/// A lock's stored history in the history table: its slots, and the entry of each (whose
/// bytes [`ended`] checks; the rest of the blob is its format byte and the slots' tokens).
pub fn history(bytes: &[u8]) -> bool {
    let slots = match history::slots(bytes) {
        Ok(slots) => slots,
        Err(err) => return refused(&err, Status::Corrupt, "lock history"),
    };
    for (_, entry) in slots {
        if !ended(entry) {
            return false;
        }
    }
    true
}

/// A fenced value or tombstone in the values table.
pub fn value(bytes: &[u8]) -> bool {
    match decode_value(bytes) {
        Ok((token, value)) => {
            let again = encode_value(token, value);
            same(&(token, value), &decode_value(&again), "value record");
            canonical(bytes, &again, "value record");
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "value record"),
    }
}

/// A record of the redo log (`storage/wal/record.rs`): its LSN, kind and payload.
pub fn log_record(bytes: &[u8]) -> bool {
    match log::decode(bytes) {
        Ok((lsn, record, len)) => {
            let again = record.encode(lsn).expect("a decoded log record encodes");
            same(&(lsn, record, len), &log::decode(&again), "log record");
            let whole = &bytes[..usize::try_from(len).expect("a record's length")];
            canonical(whole, &again, "log record");
            true
        }
        Err(err) => refused(&err, Status::Corrupt, "log record"),
    }
}

/// The recovery scan (`storage/wal/scan.rs`) over arbitrary log segments: the first 8 bytes
/// are the position to scan from (aligned), the next 2 the segment size in units of 8 bytes,
/// the next one a mask of the first 8 segments left missing, and the rest the segments, in
/// order from the one holding that position (a partial last one is left out). A clean end or a
/// typed error; every record it returns is whole at its own position, and the end follows
/// them.
pub fn log_scan(bytes: &[u8]) -> bool {
    let Some((from, rest)) = bytes.split_first_chunk::<8>() else {
        return false;
    };
    let Some((size, rest)) = rest.split_first_chunk::<2>() else {
        return false;
    };
    let Some((&missing, segments)) = rest.split_first() else {
        return false;
    };
    let size = u64::from(u16::from_le_bytes(*size)).max(1) * ALIGN;
    let from = u64::from_le_bytes(*from) / ALIGN * ALIGN;
    let first = from / size;
    let ring = Memory {
        size,
        segments: segments
            .chunks_exact(usize::try_from(size).expect("at most 512 KiB"))
            .enumerate()
            .filter(|(i, _)| *i >= 8 || missing & (1 << i) == 0)
            .map(|(i, segment)| (first + i as u64, segment))
            .collect(),
    };
    match scan::scan(&ring, from) {
        Ok(scanned) => {
            let mut last = from;
            for (lsn, record) in &scanned.records {
                assert!(
                    *lsn >= last && *lsn < scanned.end,
                    "a scan from {from} returned a record at {lsn}, out of order or past its \
                     end {}",
                    scanned.end
                );
                let encoded = record.encode(*lsn).expect("a scanned record encodes");
                let mut there = vec![0u8; encoded.len()];
                ring.read(*lsn, &mut there)
                    .expect("a scanned record is in the log");
                assert_eq!(
                    there, encoded,
                    "a scanned record is not the log's bytes at {lsn}"
                );
                last = lsn + encoded.len() as u64;
            }
            assert!(
                scanned.end >= last,
                "the scan's end is before its last record"
            );
            true
        }
        Err(err) => {
            let status = err.status();
            assert!(
                status == Status::Corrupt
                    || (status == Status::InvalidArgument && size < log::MIN_RECORD)
                    || status == Status::InvalidArgument && from > u64::MAX / 2,
                "a scan failed with an error of another kind: {err:?}"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::base::clock::ProcessId;
    use crate::base::error::io_error;
    use crate::rules::history::Ending;
    use crate::rules::info::Fenced;
    use crate::rules::kind::Kind;
    use crate::rules::ops::{Done, Op};
    use crate::rules::query::{Answer, Counts, Query};
    use crate::rules::record::Group;
    use crate::share::buckets::Entry;

    fn lease_of(token: u64) -> Lease {
        Lease {
            token,
            holder: ProcessId {
                pid: 4242,
                start_time: 99,
            },
            boot_id: [7; 16],
            granted_ns: 10,
            expires_ns: 20,
            live: 1 << 50,
        }
    }

    /// A lease of format 1 (schema 1): no liveness id.
    fn format_1(lease: &Lease) -> Vec<u8> {
        let mut old = lease.encode()[..53].to_vec();
        old[0] = LEASE_FORMAT_1;
        old
    }

    /// Valid encodings of each decoder's input: (check, bytes). The seeds of the fuzz target.
    fn samples() -> Vec<(&'static str, Vec<u8>)> {
        let holder = ProcessId {
            pid: 42,
            start_time: 7,
        };
        let ended_of = |kind, ending| Ended::for_test(kind, ending);
        let group = Record::Group(Group {
            kind: Kind::Semaphore(3),
            holders: vec![lease_of(5), lease_of(6)],
        });
        let ops = [
            Op::Acquire {
                name: "payment-export".into(),
                ttl: Duration::from_secs(30),
                write: Some((b"k".to_vec(), b"v".to_vec())),
                holder,
                live: 3,
                ticket: Some(2),
            },
            Op::AcquireKind {
                name: "pool".into(),
                kind: Kind::Semaphore(3),
                ttl: Duration::from_secs(2),
                holder,
                live: 4,
                ticket: None,
            },
            Op::AcquireAll {
                names: vec!["a".into(), "b".into()],
                ttl: Duration::from_secs(4),
                holder,
                lives: vec![5, 6],
            },
            Op::Extend {
                name: "n".into(),
                token: 9,
                ttl: Duration::from_secs(3),
            },
            Op::Put {
                key: b"k\0\xff".to_vec(),
                value: Some(b"v".to_vec()),
                token: 4,
                lease: Some("n".into()),
            },
            Op::Fence {
                resource: "bucket".into(),
                token: 12,
            },
            Op::RecordReleases {
                releases: vec![("a".into(), 4, 5)],
            },
            Op::RecordEnds {
                ends: vec![("a".into(), 9, ended_of(Kind::Shared, Ending::Expired))],
                seal: Some((41, 2048)),
            },
            Op::Reserve { at_least: 1 << 40 },
        ];
        let queries = [
            Query::Record("payment-export".into()),
            Query::Records,
            Query::Keys(b"pre".to_vec()),
            Query::History("payment-export".into()),
        ];
        let replies = [
            Ok(Done::Granted {
                token: 5,
                expires_ns: 99,
            }),
            Ok(Done::Put { existed: true }),
            Err(Error::Locked {
                name: "payment-export".into(),
                token: 3,
                pid: 77,
                remaining: Duration::from_millis(5),
            }),
            // Not the system's own message, which differs between C libraries.
            Err(Error::Io(io_error(
                std::io::ErrorKind::StorageFull,
                "writing: disk full".into(),
                Some(libc::ENOSPC),
            ))),
        ];
        let answers = [
            Ok(Answer::Record(Some(group.clone()))),
            Ok(Answer::Records(vec![(
                "a".into(),
                Record::Exclusive(lease_of(4)),
            )])),
            Ok(Answer::Value(Some(Fenced {
                value: b"v".to_vec(),
                token: 4,
            }))),
            Ok(Answer::Keys(vec![b"x".to_vec(), Vec::new()])),
            Ok(Answer::Counts(Counts::default())),
            Ok(Answer::History(vec![(
                7,
                ended_of(Kind::Exclusive, Ending::Released)
                    .encode()
                    .to_vec(),
            )])),
            Err(Error::Corrupt("bad page".into())),
        ];
        let entries = vec![
            Entry {
                name: "payment-export".into(),
                record: Some(Record::Exclusive(lease_of(5))),
                tail: vec![(4, ended_of(Kind::Exclusive, Ending::TakenOver))],
            },
            Entry {
                name: "gpu".into(),
                record: Some(group.clone()),
                tail: Vec::new(),
            },
            Entry {
                name: "gone".into(),
                record: None,
                tail: vec![(1, ended_of(Kind::Semaphore(2), Ending::HolderDied))],
            },
        ];
        // A lock's stored history: its format (1), then slots of a token and an entry.
        let mut stored = vec![1];
        for (token, ending) in [(3u64, Ending::Released), (4, Ending::Expired)] {
            stored.extend_from_slice(&token.to_le_bytes());
            stored.extend_from_slice(&ended_of(Kind::Exclusive, ending).encode());
        }

        let mut samples = Vec::new();
        samples.extend(ops.iter().map(|op| ("request", wire::encode_op(op))));
        samples.extend(queries.iter().map(|q| ("request", wire::encode_query(q))));
        samples.extend(replies.iter().map(|r| ("reply", wire::encode_reply(r))));
        samples.extend(answers.iter().map(|a| ("answer", wire::encode_answer(a))));
        samples.push(("bucket", buckets::encode(&entries).unwrap()));
        samples.push(("record", Record::Exclusive(lease_of(5)).encode()));
        samples.push(("record", group.encode()));
        samples.push(("record", format_1(&lease_of(8))));
        samples.push(("lease", lease_of(5).encode().to_vec()));
        samples.push(("lease", format_1(&lease_of(8))));
        for kind in [Kind::Exclusive, Kind::Shared, Kind::Semaphore(4)] {
            let ended = ended_of(kind, Ending::Released);
            samples.push(("ended", ended.encode().to_vec()));
        }
        samples.push(("history", stored));
        samples.push(("value", encode_value(5, Some(b"abc"))));
        samples.push(("value", encode_value(7, None)));
        let log_records = [
            log::Record::Put {
                key: b"k\0\xff".to_vec(),
                value: b"a value".to_vec(),
                token: 7,
                version: 3,
            },
            log::Record::Delete {
                key: b"gone".to_vec(),
                token: 9,
                version: 4,
            },
            log::Record::Fence {
                resource: "bucket".into(),
                token: 12,
                version: 2,
            },
            log::Record::Void { len: 12 },
            log::Record::Skip { lsn: 64, len: 48 },
        ];
        for (i, record) in log_records.iter().enumerate() {
            samples.push(("log-record", record.encode(4096 + 8 * i as u64).unwrap()));
        }
        // Segments of 512 bytes, scanned from 888 (in segment 1): records to a segment's end,
        // a void filler, records in the next segments, a stopped writer's hole and the skip
        // that covers it.
        let size: u64 = 512;
        let mut segments = vec![0u8; 3 * 512];
        let mut end = 888;
        let mut append = |segments: &mut Vec<u8>, record: Option<&log::Record>, len: u64| {
            let placed = crate::storage::wal::Placement::of(size, end, len).unwrap();
            let mut write = |at: u64, bytes: &[u8]| {
                let at = usize::try_from(at - size).unwrap();
                segments[at..at + bytes.len()].copy_from_slice(bytes);
            };
            if let Some(filler) = placed.filler_record().unwrap() {
                write(end, &filler);
            }
            if let Some(record) = record {
                write(placed.lsn, &record.encode(placed.lsn).unwrap());
            }
            let reserved = (end, placed.end - end);
            end = placed.end;
            reserved
        };
        for record in &log_records[..4] {
            append(&mut segments, Some(record), record.encoded_len());
        }
        let (hole, len) = append(&mut segments, None, 64);
        append(
            &mut segments,
            Some(&log_records[0]),
            log_records[0].encoded_len(),
        );
        let skip = log::Record::Skip { lsn: hole, len };
        append(&mut segments, Some(&skip), skip.encoded_len());
        samples.push((
            "log-scan",
            [
                888u64.to_le_bytes().as_slice(),
                &u16::try_from(size / ALIGN).unwrap().to_le_bytes(),
                &[0],
                &segments,
            ]
            .concat(),
        ));
        let keyed = |space, key, pending| keys::Keyed {
            space,
            key,
            entry: keys::Entry {
                highest: 12,
                before: 12,
                version: 3,
                newest: 4096,
                pending,
                voided: 0,
            },
        };
        samples.push((
            "key-bucket",
            keys::encode(&[
                keyed(keys::Space::Key, b"orders/7", None),
                keyed(keys::Space::Fence, b"orders/7", Some(8192)),
                keyed(keys::Space::Key, b"\0\xff", Some(0)),
            ]),
        ));
        samples
    }

    fn check(name: &str) -> Check {
        DECODERS
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a check")
            .1
    }

    #[test]
    fn valid_encodings_decode_and_garbage_is_refused() {
        for (name, bytes) in samples() {
            assert!(check(name)(&bytes), "{name}: {bytes:?}");
        }
        for (name, check) in DECODERS {
            assert!(!check(&[0xff; 7]), "{name}");
        }
    }

    /// The scan's seed reaches every branch a log holds: a filler, a segment's end, a covered
    /// hole; and with a segment left missing, the typed error.
    #[test]
    fn the_log_scan_seed_crosses_segments_and_a_hole() {
        let (_, bytes) = samples()
            .into_iter()
            .find(|(n, _)| *n == "log-scan")
            .unwrap();
        let log = Memory {
            size: 512,
            segments: bytes[11..]
                .chunks_exact(512)
                .zip(1..)
                .map(|(s, seq)| (seq, s))
                .collect(),
        };
        let scanned = scan::scan(&log, 888).unwrap();
        assert_eq!((scanned.records.len(), scanned.holes), (4, 1));
        // The fence went to the next segment, after a void filler.
        assert_eq!(scanned.records[2].0, 1024);
        assert!(scanned.end > 1100, "{}", scanned.end);
        assert!(log_scan(&bytes));
        let mut missing = bytes.clone();
        missing[10] = 0b10;
        assert!(!log_scan(&missing));
    }

    /// The seeds of the fuzz target are these samples, each after its check's index; with
    /// `FENCELOCK_WRITE_SEEDS=1` this writes them (after a format changed).
    #[test]
    fn the_fuzz_seeds_are_the_samples() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/decoders");
        let write = std::env::var_os("FENCELOCK_WRITE_SEEDS").is_some();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (i, (name, bytes)) in samples().into_iter().enumerate() {
            let index = DECODERS.iter().position(|(n, _)| *n == name).unwrap();
            let seed = [&[u8::try_from(index).unwrap()], bytes.as_slice()].concat();
            let path = dir.join(format!("{i:02}-{name}"));
            if write {
                std::fs::write(&path, &seed).unwrap();
            } else {
                assert_eq!(
                    std::fs::read(&path).ok(),
                    Some(seed),
                    "{} is missing or stale: run FENCELOCK_WRITE_SEEDS=1 cargo test --lib fuzzing",
                    path.display()
                );
            }
        }
    }
}
