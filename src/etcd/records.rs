//! What fencelock keeps in etcd, under the store's root `P/@/`, where `P` is the prefix of the
//! store string (`etcd://host:port/P`):
//!
//! - `P/@/lock/<name>`: a lock held now, put with the holder's etcd lease (etcd deletes it when
//!   the lease ends). Its create revision is the grant's token. Value: [`LockRecord`]; for a
//!   later lock of an `acquire_all` (kinds.rs) the record carries the token itself.
//! - `P/@/lock/<name>\0permits/<N>/<slot>`: a permit of the semaphore `name` of N permits held
//!   now, N and the slot (0 to N - 1) as four decimal digits, put with its holder's etcd lease;
//!   its create revision is its token. Value: [`LockRecord`].
//! - `P/@/lock/<name>\0shared/<slot>`: a shared holder of `name`, the slot (0 to
//!   [`crate::MAX_HOLDERS`] - 1) as four decimal digits, as a permit's.
//!
//! Every holder key of a name is in `[P/@/lock/<name>, P/@/lock/<name>\1)`: no name holds a
//! NUL (kinds.rs).
//!
//! - `P/@/last`: rewritten by every grant, so its mod revision is the highest token granted.
//! - `P/@/value/<key>`: a fenced value. Value: the token as 8 big-endian bytes, then 1 and the
//!   value, or 0 for a delete (the key keeps the delete's token). Big-endian, so that etcd's
//!   byte-wise value compare orders tokens. [`SAME_REVISION`] in place of the token means "the
//!   token is this write's own revision": the write of an acquire-and-put, whose token is not
//!   known before its transaction commits.
//! - `P/@/fence/<resource>`: the highest token an external fence accepted, 8 big-endian bytes.
//! - `P/@/waiters/<name>\0<lease>`: a waiting acquire of the lock `name` in its queue, put with
//!   the etcd lease (16 hex digits) it will hold the lock with; its create revision is its
//!   place (queue.rs). Value: empty.
//!
//! The segment `@` makes nested prefixes separate stores: `etcd://h/app` and
//! `etcd://h/app/lock` must not share a key, as they did when the keys were `P/lock/<name>`
//! (`app/lock/last` was then both the second store's last grant and the first's lock `last`).
//! No prefix has a segment `@` (url.rs refuses it) or ends in `/`, so in every key the first
//! `/@/` ends its store's prefix: no store's root starts with another's, and a range read under
//! one root never meets another store's key.
//!
//! The first layout, without `@`, is not read: [`first_layout_last`] finds a store of it, which
//! an open refuses rather than grant its locks a second time beside it.

use etcd_client::KeyValue;

use crate::base::error::{Error, Result};

pub(crate) const SAME_REVISION: [u8; 8] = [0xFF; 8];

/// The segment after the prefix in every key.
pub(crate) const MARKER: &str = "@";

/// What every key of the store of `prefix` starts with: `P/@/`.
pub(crate) fn root(prefix: &str) -> Vec<u8> {
    format!("{prefix}/{MARKER}/").into_bytes()
}

/// The last-grant key of the first layout, `P/last`: present when a fencelock of that layout
/// used the prefix (a grant rewrites it; nothing deletes it). No key of this layout is ever it.
pub(crate) fn first_layout_last(prefix: &str) -> Vec<u8> {
    format!("{prefix}/last").into_bytes()
}

/// A revision of etcd as a token: revisions start at 1 and never go back.
pub(crate) fn token(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

/// A token as a revision; tokens above `i64::MAX` are never granted.
pub(crate) fn revision(token: u64) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}

pub(crate) fn encode_value(token: Option<u64>, value: Option<&[u8]>) -> Vec<u8> {
    let mut record = Vec::with_capacity(9 + value.map_or(0, <[u8]>::len));
    record.extend_from_slice(&token.map_or(SAME_REVISION, u64::to_be_bytes));
    match value {
        Some(value) => {
            record.push(1);
            record.extend_from_slice(value);
        }
        None => record.push(0),
    }
    record
}

/// The token of a fenced value's record and its value, `None` after a delete.
pub(crate) fn decode_value(kv: &KeyValue) -> Result<(u64, Option<&[u8]>)> {
    let record = kv.value();
    if record.len() < 9 {
        return Err(corrupt(kv, "a fenced value record"));
    }
    let token = if record[..8] == SAME_REVISION {
        token(kv.mod_revision())
    } else {
        u64::from_be_bytes(record[..8].try_into().expect("8 bytes"))
    };
    match record[8] {
        0 => Ok((token, None)),
        1 => Ok((token, Some(&record[9..]))),
        _ => Err(corrupt(kv, "a fenced value record")),
    }
}

pub(crate) fn decode_fence(kv: &KeyValue) -> Result<u64> {
    kv.value()
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| corrupt(kv, "a fence record"))
}

/// Who holds a lock: the process id and the wall-clock time of the grant, and the token when
/// it is not the key's create revision (a later lock of an `acquire_all`, `mod.rs`).
pub(crate) struct LockRecord {
    pub(crate) pid: u32,
    pub(crate) granted_unix_ns: u64,
    /// `None`: the token is the key's create revision (12 bytes, every other grant's record).
    /// [`SAME_REVISION`] stands for the key's mod revision, as in a value record.
    pub(crate) token: Option<[u8; 8]>,
}

impl LockRecord {
    pub(crate) fn now() -> LockRecord {
        LockRecord {
            pid: std::process::id(),
            granted_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            token: None,
        }
    }

    /// The record of a grant whose token is `token` (its mod revision for `SAME_REVISION`).
    pub(crate) fn with_token(token: [u8; 8]) -> LockRecord {
        LockRecord {
            token: Some(token),
            ..LockRecord::now()
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut record = self.pid.to_le_bytes().to_vec();
        record.extend_from_slice(&self.granted_unix_ns.to_le_bytes());
        if let Some(token) = self.token {
            record.extend_from_slice(&token);
        }
        record
    }

    pub(crate) fn decode(kv: &KeyValue) -> Result<LockRecord> {
        let record = kv.value();
        if record.len() != 12 && record.len() != 20 {
            return Err(corrupt(kv, "a lock record"));
        }
        Ok(LockRecord {
            pid: u32::from_le_bytes(record[..4].try_into().expect("4 bytes")),
            granted_unix_ns: u64::from_le_bytes(record[4..12].try_into().expect("8 bytes")),
            token: record.get(12..).and_then(|t| t.try_into().ok()),
        })
    }
}

/// The token of the grant a lock key records: its create revision, or the record's own.
pub(crate) fn holder_token(kv: &KeyValue) -> u64 {
    match LockRecord::decode(kv).ok().and_then(|record| record.token) {
        None => token(kv.create_revision()),
        Some(SAME_REVISION) => token(kv.mod_revision()),
        Some(explicit) => u64::from_be_bytes(explicit),
    }
}

fn corrupt(kv: &KeyValue, what: &str) -> Error {
    Error::Corrupt(format!(
        "etcd key {:?} does not hold {what}",
        String::from_utf8_lossy(kv.key())
    ))
}

/// An error of the etcd client: deadlines are [`Error::Timeout`], an unreachable cluster
/// [`Error::Io`], the rest [`Error::Storage`].
pub(crate) fn client_error(err: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match err {
        E::GRpcStatus(status) if status.code() == tonic::Code::DeadlineExceeded => {
            Error::timed_out()
        }
        E::GRpcStatus(status) if status.code() == tonic::Code::Unavailable => Error::Io(
            std::io::Error::other(format!("etcd unavailable: {}", status.message())),
        ),
        E::TransportError(err) => Error::Io(std::io::Error::other(format!("etcd: {err}"))),
        E::IoError(err) => Error::Io(err),
        other => Error::Storage(format!("etcd: {other}")),
    }
}
