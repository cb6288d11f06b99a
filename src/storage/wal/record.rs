//! The log's records: their bytes, and the decoder of bytes read back from the file.
//!
//! ```text
//! [lsn u64][len u32][kind u8][pad 3][crc32c u32][payload: len bytes][zeros to a multiple of 8]
//! ```
//!
//! Little-endian. `lsn` is the record's own position in the log, so a record left from an
//! earlier lap of the ring (another LSN at the same offset) or zeros are never taken for the
//! record expected there. The checksum covers the first 16 bytes (lsn, len, kind, pad) and the
//! payload; the pad bytes and the padding after the payload are zeros, so every record has one
//! encoding. The payload of each kind:
//!
//! | kind | byte | payload |
//! |---|---|---|
//! | put | 1 | token u64, version u64, key length u32, key, value |
//! | delete | 2 | token u64, version u64, key |
//! | fence | 3 | token u64, version u64, resource (UTF-8) |
//! | void | 4 | zeros: log space whose write was refused, or filler to the ring's end |
//! | skip | 5 | lsn u64, len u64: the reservation `[lsn, lsn + len)` does not count |
//! | stored put | 6 | token u64, version u64, blob u64, key: a put whose value is in the store file |
//!
//! A record is at most [`MAX_RECORD`] bytes: values over [`INLINE_MAX`] do not go into the log.
//! They are committed to the store file first, under a blob id of their own, and a stored put
//! of the log names it (docs/design/writes.md, section 2). The decoder reads only the bytes it
//! is given, allocates no more than their length, and returns [`Error::Corrupt`] for anything
//! malformed.

use crate::base::error::{Error, Result};
use crate::storage::wal::crc;

/// The record's header: lsn, len, kind, pad, checksum.
pub(crate) const HEADER: usize = 20;
/// Records start at multiples of this.
pub(crate) const ALIGN: u64 = 8;
/// [`ALIGN`] as a length in memory.
const ALIGN_BYTES: usize = 8;
/// The shortest record: a header and no payload, padded.
pub(crate) const MIN_RECORD: u64 = padded(HEADER as u64);
/// The largest value a record carries; larger ones take the store's own path.
pub(crate) const INLINE_MAX: usize = 64 << 10;
/// The largest payload: a value of [`INLINE_MAX`], a key or resource of
/// [`crate::MAX_NAME_LEN`] and the fixed fields, with room to spare; 4 more, so that the
/// largest record has no padding and a void fills it exactly.
pub(crate) const MAX_PAYLOAD: usize = INLINE_MAX + (2 << 10) + 4;
/// The largest record.
pub(crate) const MAX_RECORD: u64 = padded((HEADER + MAX_PAYLOAD) as u64);

const PUT: u8 = 1;
const DELETE: u8 = 2;
const FENCE: u8 = 3;
const VOID: u8 = 4;
const SKIP: u8 = 5;
const STORED: u8 = 6;
/// Token and version, before a put's key length or a delete's key.
const FENCED: usize = 16;

/// `len` rounded up to a multiple of [`ALIGN`].
pub(crate) const fn padded(len: u64) -> u64 {
    len.div_ceil(ALIGN) * ALIGN
}

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// A fenced value written to `key` with `token`, as the key's `version`.
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        token: u64,
        version: u64,
    },
    /// `key` deleted with `token`, as the key's `version`.
    Delete {
        key: Vec<u8>,
        token: u64,
        version: u64,
    },
    /// `resource` fenced at `token`, as the resource's `version`.
    Fence {
        resource: String,
        token: u64,
        version: u64,
    },
    /// `len` bytes of zeros that count for nothing: the reservation of a refused write, or the
    /// filler to the ring's end before a record that would not fit.
    Void { len: u32 },
    /// The reservation `[lsn, lsn + len)` does not count, whatever it holds: its writer stopped
    /// before finishing it, and another writer skipped it (docs/design/writes.md, section 8).
    Skip { lsn: u64, len: u64 },
    /// A fenced value written to `key` with `token`, as the key's `version`, whose bytes the
    /// store file holds under `blob` (`BLOBS`, committed before this record was written): a
    /// value over [`INLINE_MAX`].
    PutStored {
        key: Vec<u8>,
        blob: u64,
        token: u64,
        version: u64,
    },
}

impl Record {
    /// The void record that fills exactly `bytes` of log (a multiple of [`ALIGN`], at least
    /// [`MIN_RECORD`], at most [`MAX_RECORD`]).
    pub(crate) fn void_filling(bytes: u64) -> Result<Record> {
        if bytes % ALIGN != 0 || !(MIN_RECORD..=MAX_RECORD).contains(&bytes) {
            return Err(Error::invalid(format!(
                "a void record cannot fill {bytes} bytes of log (a multiple of {ALIGN} from \
                 {MIN_RECORD} to {MAX_RECORD})"
            )));
        }
        let len = u32::try_from(bytes - HEADER as u64).expect("at most MAX_RECORD");
        Ok(Record::Void { len })
    }

    fn kind(&self) -> u8 {
        match self {
            Record::Put { .. } => PUT,
            Record::Delete { .. } => DELETE,
            Record::Fence { .. } => FENCE,
            Record::Void { .. } => VOID,
            Record::Skip { .. } => SKIP,
            Record::PutStored { .. } => STORED,
        }
    }

    fn payload(&self) -> Vec<u8> {
        let fenced = |token: u64, version: u64, capacity: usize| {
            let mut payload = Vec::with_capacity(FENCED + capacity);
            payload.extend_from_slice(&token.to_le_bytes());
            payload.extend_from_slice(&version.to_le_bytes());
            payload
        };
        match self {
            Record::Put {
                key,
                value,
                token,
                version,
            } => {
                let mut payload = fenced(*token, *version, 4 + key.len() + value.len());
                // A key longer than u32::MAX is refused by the length check of `encode`.
                let key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
                payload.extend_from_slice(&key_len.to_le_bytes());
                payload.extend_from_slice(key);
                payload.extend_from_slice(value);
                payload
            }
            Record::Delete {
                key,
                token,
                version,
            } => {
                let mut payload = fenced(*token, *version, key.len());
                payload.extend_from_slice(key);
                payload
            }
            Record::Fence {
                resource,
                token,
                version,
            } => {
                let mut payload = fenced(*token, *version, resource.len());
                payload.extend_from_slice(resource.as_bytes());
                payload
            }
            Record::Void { len } => vec![0; *len as usize],
            Record::Skip { lsn, len } => [lsn.to_le_bytes(), len.to_le_bytes()].concat(),
            Record::PutStored {
                key,
                blob,
                token,
                version,
            } => {
                let mut payload = fenced(*token, *version, 8 + key.len());
                payload.extend_from_slice(&blob.to_le_bytes());
                payload.extend_from_slice(key);
                payload
            }
        }
    }

    /// The record's bytes at position `lsn`, padded to a multiple of [`ALIGN`]. Refused with
    /// [`Error::InvalidArgument`] when the payload is over [`MAX_PAYLOAD`] or `lsn` is not a
    /// multiple of [`ALIGN`].
    pub(crate) fn encode(&self, lsn: u64) -> Result<Vec<u8>> {
        if lsn % ALIGN != 0 {
            return Err(Error::invalid(format!(
                "log position {lsn} is not a multiple of {ALIGN}"
            )));
        }
        let payload = self.payload();
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "a log record's payload is {} bytes; the limit is {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let len = u32::try_from(payload.len()).expect("at most MAX_PAYLOAD");
        let total = HEADER + payload.len();
        let total = total.next_multiple_of(ALIGN_BYTES);
        let mut bytes = Vec::with_capacity(total);
        bytes.extend_from_slice(&lsn.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&[self.kind(), 0, 0, 0]);
        let crc = crc::extend(crc::crc32c(&bytes), &payload);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&payload);
        bytes.resize(total, 0);
        Ok(bytes)
    }

    /// The length of its encoding.
    pub(crate) fn encoded_len(&self) -> u64 {
        let payload = match self {
            Record::Put { key, value, .. } => FENCED + 4 + key.len() + value.len(),
            Record::Delete { key, .. } => FENCED + key.len(),
            Record::Fence { resource, .. } => FENCED + resource.len(),
            Record::Void { len } => *len as usize,
            Record::Skip { .. } => 16,
            Record::PutStored { key, .. } => FENCED + 8 + key.len(),
        };
        padded((HEADER + payload) as u64)
    }
}

/// A record's frame, read from its first [`HEADER`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub lsn: u64,
    /// The payload's length.
    pub len: u32,
    kind: u8,
    crc: u32,
}

impl Frame {
    /// The frame in `header` (at least [`HEADER`] bytes), when its pad bytes are zeros and its
    /// length is at most [`MAX_PAYLOAD`].
    pub(crate) fn read(header: &[u8]) -> Result<Frame> {
        let Some(header) = header.get(..HEADER) else {
            return Err(Error::Corrupt(format!(
                "a log record is cut short: {} bytes, its header alone is {HEADER}",
                header.len()
            )));
        };
        let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4"));
        let frame = Frame {
            lsn: u64::from_le_bytes(header[..8].try_into().expect("8")),
            len: word(8),
            kind: header[12],
            crc: word(16),
        };
        if header[13..16] != [0, 0, 0] {
            return Err(Error::Corrupt(format!(
                "the log record at {} has non-zero pad bytes",
                frame.lsn
            )));
        }
        if frame.len as usize > MAX_PAYLOAD {
            return Err(Error::Corrupt(format!(
                "the log record at {} claims a payload of {} bytes; the limit is {MAX_PAYLOAD}",
                frame.lsn, frame.len
            )));
        }
        Ok(frame)
    }

    /// The whole record's length, padding included.
    pub(crate) fn total(&self) -> u64 {
        padded(HEADER as u64 + u64::from(self.len))
    }

    /// Whether `bytes` (the whole record, header first, [`Frame::total`] bytes) hold the
    /// checksum the header states, and zeros in the padding: the record was written whole.
    pub(crate) fn intact(&self, bytes: &[u8]) -> bool {
        let end = HEADER + self.len as usize;
        bytes.len() as u64 == self.total()
            && crc::extend(crc::crc32c(&bytes[..16]), &bytes[HEADER..end]) == self.crc
            && bytes[end..].iter().all(|&b| b == 0)
    }

    /// The record in `bytes` (as for [`Frame::intact`], which the caller has checked): its
    /// kind and payload read into a [`Record`], or [`Error::Corrupt`] when they are not one.
    pub(crate) fn record(&self, bytes: &[u8]) -> Result<Record> {
        let payload = &bytes[HEADER..HEADER + self.len as usize];
        let corrupt =
            |what: &str| Error::Corrupt(format!("the log record at {}: {what}", self.lsn));
        let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8"));
        let fenced = |kind: &str| {
            if payload.len() < FENCED {
                return Err(corrupt(&format!(
                    "a {kind} of {} bytes, shorter than its token and version",
                    payload.len()
                )));
            }
            Ok((u64_at(0), u64_at(8), &payload[FENCED..]))
        };
        match self.kind {
            PUT => {
                let (token, version, rest) = fenced("put")?;
                let Some(key_len) = rest.get(..4) else {
                    return Err(corrupt("a put without its key's length"));
                };
                let key_len = u32::from_le_bytes(key_len.try_into().expect("4")) as usize;
                let rest = &rest[4..];
                if key_len > rest.len() {
                    return Err(corrupt(&format!(
                        "a put's key of {key_len} bytes runs past its payload"
                    )));
                }
                Ok(Record::Put {
                    key: rest[..key_len].to_vec(),
                    value: rest[key_len..].to_vec(),
                    token,
                    version,
                })
            }
            DELETE => {
                let (token, version, key) = fenced("delete")?;
                Ok(Record::Delete {
                    key: key.to_vec(),
                    token,
                    version,
                })
            }
            FENCE => {
                let (token, version, resource) = fenced("fence")?;
                let resource = std::str::from_utf8(resource)
                    .map_err(|_| corrupt("a fence's resource is not UTF-8"))?;
                Ok(Record::Fence {
                    resource: resource.to_owned(),
                    token,
                    version,
                })
            }
            VOID if payload.iter().all(|&b| b == 0) => Ok(Record::Void { len: self.len }),
            VOID => Err(corrupt("a void record that is not zeros")),
            SKIP if payload.len() == 16 => Ok(Record::Skip {
                lsn: u64_at(0),
                len: u64_at(8),
            }),
            SKIP => Err(corrupt(&format!(
                "a skip record of {} bytes, not 16",
                payload.len()
            ))),
            STORED => {
                let (token, version, rest) = fenced("stored put")?;
                if rest.len() < 8 {
                    return Err(corrupt("a stored put without its blob id"));
                }
                Ok(Record::PutStored {
                    key: rest[8..].to_vec(),
                    blob: u64::from_le_bytes(rest[..8].try_into().expect("8")),
                    token,
                    version,
                })
            }
            other => Err(corrupt(&format!("unknown kind {other}"))),
        }
    }
}

/// The record at the start of `bytes`: its LSN, what it says, and its length with padding.
/// [`Error::Corrupt`] when the bytes are cut short, torn (a checksum that does not match) or
/// not a record.
pub(crate) fn decode(bytes: &[u8]) -> Result<(u64, Record, u64)> {
    let frame = Frame::read(bytes)?;
    let total = frame.total();
    let Some(whole) = usize::try_from(total)
        .ok()
        .and_then(|total| bytes.get(..total))
    else {
        return Err(Error::Corrupt(format!(
            "the log record at {} is cut short: {} of its {total} bytes",
            frame.lsn,
            bytes.len()
        )));
    };
    if !frame.intact(whole) {
        return Err(Error::Corrupt(format!(
            "the log record at {} is torn: its checksum or padding does not match",
            frame.lsn
        )));
    }
    Ok((frame.lsn, frame.record(whole)?, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Status;

    pub(crate) fn every_kind() -> Vec<Record> {
        vec![
            Record::Put {
                key: b"k\0\xff".to_vec(),
                value: b"a value".to_vec(),
                token: 7,
                version: 3,
            },
            Record::Put {
                key: b"empty".to_vec(),
                value: Vec::new(),
                token: u64::MAX,
                version: 1,
            },
            Record::Put {
                key: b"largest".to_vec(),
                value: vec![0xab; INLINE_MAX],
                token: 1,
                version: u64::MAX,
            },
            Record::Delete {
                key: b"gone".to_vec(),
                token: 9,
                version: 4,
            },
            Record::Fence {
                resource: "bucket/\u{e9}".into(),
                token: 12,
                version: 2,
            },
            Record::Void { len: 0 },
            Record::Void { len: 100 },
            Record::Skip { lsn: 64, len: 48 },
            Record::PutStored {
                key: b"big".to_vec(),
                blob: 0x0123_4567_89ab_cdef,
                token: 9,
                version: 4,
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_padded_to_eight() {
        for (i, record) in every_kind().into_iter().enumerate() {
            let lsn = (i as u64 + 1) << 23;
            let bytes = record.encode(lsn).unwrap();
            assert_eq!(bytes.len() as u64 % ALIGN, 0, "{record:?}");
            assert_eq!(bytes.len() as u64, record.encoded_len(), "{record:?}");
            assert!(bytes.len() as u64 <= MAX_RECORD);
            let (at, again, len) = decode(&bytes).unwrap();
            assert_eq!((at, &again, len), (lsn, &record, bytes.len() as u64));
            // Trailing bytes (the next record) are not read.
            let longer = [bytes.as_slice(), &[0xee; 40]].concat();
            assert_eq!(decode(&longer).unwrap().1, record);
        }
    }

    #[test]
    fn void_filling_fills_exactly() {
        for bytes in [MIN_RECORD, 32, 4096, MAX_RECORD] {
            let void = Record::void_filling(bytes).unwrap();
            assert_eq!(void.encode(0).unwrap().len() as u64, bytes);
        }
        for bytes in [0, 8, 16, 25, MAX_RECORD + 8] {
            assert!(Record::void_filling(bytes).is_err(), "{bytes}");
        }
    }

    #[test]
    fn oversized_payloads_and_unaligned_positions_are_refused() {
        let put = Record::Put {
            key: b"k".to_vec(),
            value: vec![0; MAX_PAYLOAD],
            token: 1,
            version: 1,
        };
        let err = put.encode(0).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
        let err = every_kind()[0].encode(12).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
    }

    fn corrupt(bytes: &[u8]) -> String {
        let err = decode(bytes).unwrap_err();
        assert_eq!(err.status(), Status::Corrupt, "{err}");
        err.to_string()
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let bytes = every_kind()[0].encode(4096).unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            // A flipped LSN is a valid record at another position; the scan tells them apart.
            if bit < 64 {
                continue;
            }
            corrupt(&flipped);
        }
        for len in 0..bytes.len() {
            corrupt(&bytes[..len]);
        }
        assert!(corrupt(&[0; 64]).contains("torn"));
    }

    /// Records whose checksum is right but whose payload is not one of their kind.
    #[test]
    fn malformed_payloads_with_good_checksums_are_refused() {
        let forge = |kind: u8, payload: &[u8]| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&8u64.to_le_bytes());
            bytes.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
            bytes.extend_from_slice(&[kind, 0, 0, 0]);
            let crc = crc::extend(crc::crc32c(&bytes), payload);
            bytes.extend_from_slice(&crc.to_le_bytes());
            bytes.extend_from_slice(payload);
            bytes.resize(bytes.len().next_multiple_of(ALIGN_BYTES), 0);
            bytes
        };
        let cases: [(u8, &[u8], &str); 9] = [
            (PUT, &[1; 15], "shorter than its token"),
            (PUT, &[1; 18], "without its key's length"),
            (
                PUT,
                &[[1; 16].as_slice(), &[9, 0, 0, 0], b"short"].concat(),
                "runs past",
            ),
            (DELETE, &[0; 3], "shorter than its token"),
            (
                FENCE,
                &[[1; 16].as_slice(), &[0xff, 0xfe]].concat(),
                "not UTF-8",
            ),
            (VOID, &[0, 0, 1], "not zeros"),
            (SKIP, &[0; 8], "not 16"),
            (STORED, &[1; 23], "without its blob id"),
            (0, &[], "unknown kind 0"),
        ];
        for (kind, payload, what) in cases {
            let message = corrupt(&forge(kind, payload));
            assert!(message.contains(what), "{message}");
        }
        assert!(corrupt(&forge(99, b"x")).contains("unknown kind 99"));
        // Non-zero pad bytes in the header, and non-zero padding after the payload.
        let mut pad = forge(DELETE, &[1; 17]);
        pad[13] = 1;
        assert!(corrupt(&pad).contains("pad bytes"));
        let mut tail = forge(DELETE, &[1; 17]);
        *tail.last_mut().unwrap() = 1;
        assert!(corrupt(&tail).contains("torn"));
        let mut huge = forge(VOID, &[]);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(corrupt(&huge).contains("limit"));
    }
}
