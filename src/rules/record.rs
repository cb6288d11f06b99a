//! The byte layouts of the records kept in the store's tables. All integers are little-endian.

use crate::base::clock::ProcessId;
use crate::base::error::{Error, Result};
use crate::rules::kind::Kind;

/// A lease as recorded in the `leases` table, keyed by lock name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    pub token: u64,
    pub holder: ProcessId,
    pub boot_id: [u8; 16],
    /// `CLOCK_BOOTTIME` nanoseconds of the boot `boot_id`.
    pub granted_ns: u64,
    pub expires_ns: u64,
    /// The liveness id whose lock the holder holds (see `storage/liveness.rs`): chosen and
    /// locked by the requesting process before its grant, so that the grant's liveness never
    /// depends on the process that commits it. Records of format 1 used the token.
    pub live: u64,
}

/// Format 1 (schema 1) had no liveness id; format 2 appends it.
pub(crate) const LEASE_FORMAT_1: u8 = 1;
const LEASE_FORMAT: u8 = 2;
const LEASE_LEN_1: usize = 1 + 8 + 4 + 8 + 16 + 8 + 8;
const LEASE_LEN: usize = LEASE_LEN_1 + 8;

impl Lease {
    pub(crate) fn encode(&self) -> [u8; LEASE_LEN] {
        let mut out = [0u8; LEASE_LEN];
        out[0] = LEASE_FORMAT;
        out[1..9].copy_from_slice(&self.token.to_le_bytes());
        out[9..13].copy_from_slice(&self.holder.pid.to_le_bytes());
        out[13..21].copy_from_slice(&self.holder.start_time.to_le_bytes());
        out[21..37].copy_from_slice(&self.boot_id);
        out[37..45].copy_from_slice(&self.granted_ns.to_le_bytes());
        out[45..53].copy_from_slice(&self.expires_ns.to_le_bytes());
        out[53..61].copy_from_slice(&self.live.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Lease> {
        let format_1 = match (bytes.first(), bytes.len()) {
            (Some(&LEASE_FORMAT), LEASE_LEN) => false,
            (Some(&LEASE_FORMAT_1), LEASE_LEN_1) => true,
            _ => return Err(Error::Corrupt("malformed lease record".into())),
        };
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Ok(Lease {
            live: if format_1 { u64_at(1) } else { u64_at(53) },
            token: u64_at(1),
            holder: ProcessId {
                pid: u32::from_le_bytes(bytes[9..13].try_into().expect("4 bytes")),
                start_time: u64_at(13),
            },
            boot_id: bytes[21..37].try_into().expect("16 bytes"),
            granted_ns: u64_at(37),
            expires_ns: u64_at(45),
        })
    }
}

/// The record of a lock name in the `leases` table: one exclusive lease (formats 1 and 2, as
/// before schema 3), or the grants of a semaphore or of a shared lock (format 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Exclusive(Lease),
    Group(Group),
}

/// The grants of a name held by several holders at once: the permits of a semaphore, or the
/// shared holders of a lock. Each grant is a lease of its own, with its own token, liveness id
/// and expiry; grants that are no longer live are dropped when the group is next written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// [`Kind::Shared`] or [`Kind::Semaphore`]; never [`Kind::Exclusive`].
    pub kind: Kind,
    pub holders: Vec<Lease>,
}

/// Format 3: `[3][kind: 1 shared, 2 semaphore][permits u32][count u32]`, then `count` leases
/// of format 2 (each with its own format byte).
const GROUP_FORMAT: u8 = 3;
const GROUP_HEADER_LEN: usize = 1 + 1 + 4 + 4;
const KIND_SHARED: u8 = 1;
const KIND_SEMAPHORE: u8 = 2;

impl Record {
    /// The record of the lock `name` in a leases table, if there is one.
    pub(crate) fn find(
        leases: &impl redb::ReadableTable<&'static str, &'static [u8]>,
        name: &str,
    ) -> Result<Option<Record>> {
        match leases.get(name)? {
            Some(record) => Ok(Some(Record::decode(record.value())?)),
            None => Ok(None),
        }
    }

    /// Every grant the record holds (live or not).
    pub(crate) fn holders(&self) -> &[Lease] {
        match self {
            Record::Exclusive(lease) => std::slice::from_ref(lease),
            Record::Group(group) => &group.holders,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Record::Exclusive(_) => Kind::Exclusive,
            Record::Group(group) => group.kind,
        }
    }

    /// The grant with `token`, if the record holds it.
    pub(crate) fn holder(&self, token: u64) -> Option<&Lease> {
        self.holders().iter().find(|lease| lease.token == token)
    }

    /// The highest token the record holds.
    pub(crate) fn latest(&self) -> Option<&Lease> {
        self.holders().iter().max_by_key(|lease| lease.token)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Record::Exclusive(lease) => lease.encode().to_vec(),
            Record::Group(group) => {
                let (kind, permits) = match group.kind {
                    Kind::Semaphore(permits) => (KIND_SEMAPHORE, permits),
                    // A group is never exclusive; it is written as shared.
                    Kind::Shared | Kind::Exclusive => (KIND_SHARED, 0),
                };
                let mut out =
                    Vec::with_capacity(GROUP_HEADER_LEN + group.holders.len() * LEASE_LEN);
                out.push(GROUP_FORMAT);
                out.push(kind);
                out.extend_from_slice(&permits.to_le_bytes());
                // At most MAX_HOLDERS grants, far below u32::MAX.
                let count = u32::try_from(group.holders.len()).unwrap_or(u32::MAX);
                out.extend_from_slice(&count.to_le_bytes());
                for lease in &group.holders {
                    out.extend_from_slice(&lease.encode());
                }
                out
            }
        }
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Record> {
        if bytes.first() != Some(&GROUP_FORMAT) {
            return Lease::decode(bytes).map(Record::Exclusive);
        }
        let malformed = || Error::Corrupt("malformed group lease record".into());
        if bytes.len() < GROUP_HEADER_LEN {
            return Err(malformed());
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let kind = match (bytes[1], u32_at(2)) {
            (KIND_SHARED, 0) => Kind::Shared,
            (KIND_SEMAPHORE, permits) if permits > 0 => Kind::Semaphore(permits),
            _ => return Err(malformed()),
        };
        let count = u32_at(6) as usize;
        let body = &bytes[GROUP_HEADER_LEN..];
        if body.len() != count.checked_mul(LEASE_LEN).ok_or_else(malformed)? {
            return Err(malformed());
        }
        let holders = body
            .chunks_exact(LEASE_LEN)
            .map(|chunk| match chunk[0] {
                LEASE_FORMAT => Lease::decode(chunk),
                _ => Err(malformed()),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Record::Group(Group { kind, holders }))
    }
}

/// Header of a fenced value: the token of the write that stored it, and whether the value is
/// present. A deleted key keeps a tombstone with the delete's token, so that a stale write after
/// the delete is still refused.
pub(crate) const VALUE_HEADER_LEN: usize = 9;
const PRESENT: u8 = 1;

pub(crate) fn encode_value(token: u64, value: Option<&[u8]>) -> Vec<u8> {
    let body = value.unwrap_or_default();
    let mut out = Vec::with_capacity(VALUE_HEADER_LEN + body.len());
    out.extend_from_slice(&token.to_le_bytes());
    out.push(if value.is_some() { PRESENT } else { 0 });
    out.extend_from_slice(body);
    out
}

/// The token and, unless the key was deleted, the value.
pub(crate) fn decode_value(bytes: &[u8]) -> Result<(u64, Option<&[u8]>)> {
    let malformed = || Error::Corrupt("malformed value record".into());
    if bytes.len() < VALUE_HEADER_LEN {
        return Err(malformed());
    }
    let (header, body) = bytes.split_at(VALUE_HEADER_LEN);
    let token = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
    match header[8] {
        PRESENT => Ok((token, Some(body))),
        // A tombstone is its header alone.
        0 if body.is_empty() => Ok((token, None)),
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_round_trips() {
        let lease = Lease {
            token: u64::MAX - 3,
            holder: ProcessId {
                pid: 4242,
                start_time: 99,
            },
            boot_id: [7; 16],
            granted_ns: 10,
            expires_ns: 20,
            live: 1 << 50,
        };
        assert_eq!(Lease::decode(&lease.encode()).unwrap(), lease);
        // A format-1 record (schema 1) names its liveness by its token.
        let mut old = lease.encode()[..LEASE_LEN_1].to_vec();
        old[0] = LEASE_FORMAT_1;
        let decoded = Lease::decode(&old).unwrap();
        assert_eq!(decoded.live, lease.token);
        assert_eq!(decoded.expires_ns, lease.expires_ns);
        assert!(matches!(
            Lease::decode(&lease.encode()[1..]),
            Err(Error::Corrupt(_))
        ));
    }

    #[test]
    fn group_records_round_trip_and_damage_is_refused() {
        let lease = |token| Lease {
            token,
            holder: ProcessId {
                pid: 7,
                start_time: 8,
            },
            boot_id: [3; 16],
            granted_ns: 1,
            expires_ns: 2,
            live: token + 100,
        };
        for kind in [Kind::Shared, Kind::Semaphore(3)] {
            for count in 0..3 {
                let record = Record::Group(Group {
                    kind,
                    holders: (1..=count).map(lease).collect(),
                });
                let bytes = record.encode();
                assert_eq!(Record::decode(&bytes).unwrap(), record);
                for cut in 0..bytes.len() {
                    assert!(
                        Record::decode(&bytes[..cut]).is_err(),
                        "{kind:?} cut at {cut}"
                    );
                }
            }
        }
        let exclusive = Record::Exclusive(lease(5));
        assert_eq!(Record::decode(&exclusive.encode()).unwrap(), exclusive);
        // A semaphore of no permits is not a record this library writes.
        let mut zero = Record::Group(Group {
            kind: Kind::Semaphore(1),
            holders: vec![],
        })
        .encode();
        zero[2] = 0;
        assert!(Record::decode(&zero).is_err());
    }

    #[test]
    fn values_and_tombstones_round_trip() {
        let bytes = encode_value(5, Some(b"abc"));
        assert_eq!(decode_value(&bytes).unwrap(), (5, Some(&b"abc"[..])));
        let bytes = encode_value(6, Some(b""));
        assert_eq!(decode_value(&bytes).unwrap(), (6, Some(&b""[..])));
        let bytes = encode_value(7, None);
        assert_eq!(decode_value(&bytes).unwrap(), (7, None));
        assert!(decode_value(&bytes[..4]).is_err());
    }

    #[test]
    fn a_tombstone_with_a_body_is_refused() {
        // Found by the fuzz target `decoders`: a tombstone followed by bytes was read as a
        // tombstone, the bytes ignored. No version writes one; it is damage.
        let bytes = [2, 0x17, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        assert!(matches!(decode_value(&bytes), Err(Error::Corrupt(_))));
        assert!(decode_value(&encode_value(5, None)).is_ok());
    }
}
