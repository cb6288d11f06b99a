//! The byte form of write operations and their results, as they travel through the shared
//! request ring between processes of one host (and of one library version: the ring's header
//! carries the version of this format). Little-endian; strings and byte strings carry a u32
//! length. Decoding checks every length, so a damaged slot is an error, never a panic.

use std::time::Duration;

use crate::base::clock::ProcessId;
use crate::base::error::{io_error, Error, Result, Status};
use crate::rules::history::Ended;
use crate::rules::kind::Kind;
use crate::rules::ops::{Done, Op};
use crate::rules::query::{Answer, Counts, Query};
use crate::rules::record::Record;

/// The version of this format, and of the ring's layout (13: the group sync's page gains where
/// the log lies, `log_dir_dev`, `log_dir_ino` and `log_name`, which each process that joins the
/// log checks, `ring/flush.rs`: a process of version 12 would join a log it may not find; 12:
/// the group sync's page gains
/// `skipper`, the one process skipping a gap, whose claim is taken over once it is dead,
/// `ring/flush.rs`: a process of version 11 would skip beside it, and two skippers of one gap
/// could each mark it skipped; 11: the group sync's page gains
/// `log_state`, whether the ring's processes write through the log, `ring/flush.rs`: a process of
/// version 10 would commit fenced writes to the store file beside a log it does not read; 10: the
/// group sync's page gains the
/// `checkpointed` word, which bounds the writers' reservations, `ring/flush.rs`: a process of
/// version 9 would reserve past the bound; 9: the ring gains the key index's map
/// after the group sync's marks, `ring/layout.rs`, 8 MiB: a process of version 8 would map a
/// ring of another size; 8: the ring gains the group sync's page
/// and marks after the lease map, `ring/flush.rs`, and the activity page's change bell, which
/// every commit rings and an election's observers sleep on; 7: a waiter's entry records its pid
/// and when it took its place); part of the ring's header, so that a process of another version
/// uses no ring of this one (a process of version 7 would map a ring of 8, never see its writers'
/// marks, and commit without ringing the bell).
pub(crate) const WIRE_VERSION: u32 = 13;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        // Every length here is bounded by the value limit, far below u32::MAX.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
    }
    fn opt_bytes(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.bytes(v);
            }
            None => self.u8(0),
        }
    }
}

struct Reader<'a>(&'a [u8]);

fn malformed() -> Error {
    Error::Storage("a malformed request or reply in the shared request ring".into())
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(malformed());
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }
    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| malformed())
    }
    fn opt_bytes(&mut self) -> Result<Option<Vec<u8>>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.bytes()?)),
            _ => Err(malformed()),
        }
    }
    fn end(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(malformed())
        }
    }
}

fn ns(d: Duration) -> u64 {
    crate::base::limits::duration_ns(d)
}

const ACQUIRE: u8 = 1;
const EXTEND: u8 = 2;
const PUT: u8 = 3;
const FENCE: u8 = 4;
// The lock kinds' operations (version 4); tags from 16 up are reads (decode_request).
const ACQUIRE_KIND: u8 = 5;
const ACQUIRE_ALL: u8 = 6;
// The history's operation (version 5).
const RECORD_RELEASES: u8 = 7;
const RECORD_ENDS: u8 = 8;
const RESERVE: u8 = 9;
const KIND_EXCLUSIVE: u8 = 0;
const KIND_SHARED: u8 = 1;
const KIND_SEMAPHORE: u8 = 2;

pub(crate) fn encode_op(op: &Op) -> Vec<u8> {
    let mut w = Writer::default();
    match op {
        Op::Acquire {
            name,
            ttl,
            write,
            holder,
            live,
            ticket,
        } => {
            w.u8(ACQUIRE);
            w.bytes(name.as_bytes());
            w.u64(ns(*ttl));
            w.u32(holder.pid);
            w.u64(holder.start_time);
            w.u64(*live);
            // Tickets start at 1; 0 is a try-once acquire.
            w.u64(ticket.unwrap_or(0));
            match write {
                Some((key, value)) => {
                    w.u8(1);
                    w.bytes(key);
                    w.bytes(value);
                }
                None => w.u8(0),
            }
        }
        Op::AcquireKind {
            name,
            kind,
            ttl,
            holder,
            live,
            ticket,
        } => {
            w.u8(ACQUIRE_KIND);
            w.bytes(name.as_bytes());
            match kind {
                Kind::Exclusive => w.u8(KIND_EXCLUSIVE),
                Kind::Shared => w.u8(KIND_SHARED),
                Kind::Semaphore(permits) => {
                    w.u8(KIND_SEMAPHORE);
                    w.u32(*permits);
                }
            }
            w.u64(ns(*ttl));
            w.u32(holder.pid);
            w.u64(holder.start_time);
            w.u64(*live);
            w.u64(ticket.unwrap_or(0));
        }
        Op::AcquireAll {
            names,
            ttl,
            holder,
            lives,
        } => {
            w.u8(ACQUIRE_ALL);
            w.u64(ns(*ttl));
            w.u32(holder.pid);
            w.u64(holder.start_time);
            // A request of more names than a slot holds commits directly.
            w.u32(u32::try_from(names.len()).unwrap_or(u32::MAX));
            for (name, live) in names.iter().zip(lives) {
                w.bytes(name.as_bytes());
                w.u64(*live);
            }
        }
        Op::Extend { name, token, ttl } => {
            w.u8(EXTEND);
            w.bytes(name.as_bytes());
            w.u64(*token);
            w.u64(ns(*ttl));
        }
        Op::Put {
            key,
            value,
            token,
            lease,
        } => {
            w.u8(PUT);
            w.bytes(key);
            w.opt_bytes(value.as_deref());
            w.u64(*token);
            w.opt_bytes(lease.as_deref().map(str::as_bytes));
        }
        Op::Fence { resource, token } => {
            w.u8(FENCE);
            w.bytes(resource.as_bytes());
            w.u64(*token);
        }
        Op::RecordEnds { ends, seal } => {
            w.u8(RECORD_ENDS);
            match seal {
                Some((last, seen)) => {
                    w.u8(1);
                    w.u64(*last);
                    w.u64(*seen);
                }
                None => w.u8(0),
            }
            w.u32(u32::try_from(ends.len()).unwrap_or(u32::MAX));
            for (name, token, ended) in ends {
                w.bytes(name.as_bytes());
                w.u64(*token);
                w.bytes(&ended.encode());
            }
        }
        Op::Reserve { at_least } => {
            w.u8(RESERVE);
            w.u64(*at_least);
        }
        Op::RecordReleases { releases } => {
            w.u8(RECORD_RELEASES);
            w.u32(u32::try_from(releases.len()).unwrap_or(u32::MAX));
            for (name, token, at) in releases {
                w.bytes(name.as_bytes());
                w.u64(*token);
                w.u64(*at);
            }
        }
    }
    w.0
}

/// A request in the ring: a write, or a read (for a server, which alone can read the file).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Op(Op),
    Query(Query),
}

const Q_RECORD: u8 = 16;
const Q_RECORDS: u8 = 17;
const Q_VALUE: u8 = 18;
const Q_KEYS: u8 = 19;
const Q_FENCE: u8 = 20;
const Q_COUNTS: u8 = 21;
const Q_VERIFY: u8 = 22;
const Q_HISTORY: u8 = 23;

pub(crate) fn encode_query(query: &Query) -> Vec<u8> {
    let mut w = Writer::default();
    match query {
        Query::Record(name) => {
            w.u8(Q_RECORD);
            w.bytes(name.as_bytes());
        }
        Query::Records => w.u8(Q_RECORDS),
        Query::Value(key) => {
            w.u8(Q_VALUE);
            w.bytes(key);
        }
        Query::Keys(prefix) => {
            w.u8(Q_KEYS);
            w.bytes(prefix);
        }
        Query::Fence(resource) => {
            w.u8(Q_FENCE);
            w.bytes(resource.as_bytes());
        }
        Query::Counts => w.u8(Q_COUNTS),
        Query::Verify => w.u8(Q_VERIFY),
        Query::History(name) => {
            w.u8(Q_HISTORY);
            w.bytes(name.as_bytes());
        }
    }
    w.0
}

/// The request in `bytes`: a write or a read.
pub(crate) fn decode_request(bytes: &[u8]) -> Result<Request> {
    if bytes.first().is_some_and(|&tag| tag >= Q_RECORD) {
        decode_query(bytes).map(Request::Query)
    } else {
        decode_op(bytes).map(Request::Op)
    }
}

fn decode_query(bytes: &[u8]) -> Result<Query> {
    let mut r = Reader(bytes);
    let query = match r.u8()? {
        Q_RECORD => Query::Record(r.string()?),
        Q_RECORDS => Query::Records,
        Q_VALUE => Query::Value(r.bytes()?),
        Q_KEYS => Query::Keys(r.bytes()?),
        Q_FENCE => Query::Fence(r.string()?),
        Q_COUNTS => Query::Counts,
        Q_VERIFY => Query::Verify,
        Q_HISTORY => Query::History(r.string()?),
        _ => return Err(malformed()),
    };
    r.end()?;
    Ok(query)
}

const A_RECORD: u8 = 16;
const A_RECORDS: u8 = 17;
const A_VALUE: u8 = 18;
const A_KEYS: u8 = 19;
const A_FENCE: u8 = 20;
const A_COUNTS: u8 = 21;
const A_VERIFIED: u8 = 22;
const A_HISTORY: u8 = 23;

fn opt_record(w: &mut Writer, record: Option<&Record>) {
    w.opt_bytes(record.map(Record::encode).as_deref());
}

pub(crate) fn encode_answer(answer: &Result<Answer>) -> Vec<u8> {
    let mut w = Writer::default();
    match answer {
        Ok(Answer::Record(record)) => {
            w.u8(A_RECORD);
            opt_record(&mut w, record.as_ref());
        }
        Ok(Answer::Records(records)) => {
            w.u8(A_RECORDS);
            w.u64(records.len() as u64);
            for (name, record) in records {
                w.bytes(name.as_bytes());
                w.bytes(&record.encode());
            }
        }
        Ok(Answer::Value(value)) => {
            w.u8(A_VALUE);
            match value {
                Some(fenced) => {
                    w.u8(1);
                    w.u64(fenced.token);
                    w.bytes(&fenced.value);
                }
                None => w.u8(0),
            }
        }
        Ok(Answer::Keys(keys)) => {
            w.u8(A_KEYS);
            w.u64(keys.len() as u64);
            for key in keys {
                w.bytes(key);
            }
        }
        Ok(Answer::Fence(token)) => {
            w.u8(A_FENCE);
            w.u64(token.unwrap_or(0));
        }
        Ok(Answer::Counts(c)) => {
            w.u8(A_COUNTS);
            for v in [
                c.schema_version,
                c.last_token,
                c.reserved,
                c.sealed,
                c.lock_records,
                c.keys,
                c.fences,
            ] {
                w.u64(v);
            }
        }
        Ok(Answer::Verified) => w.u8(A_VERIFIED),
        Ok(Answer::History(entries)) => {
            w.u8(A_HISTORY);
            w.u64(entries.len() as u64);
            for (token, entry) in entries {
                w.u64(*token);
                w.bytes(entry);
            }
        }
        Err(err) => {
            w.u8(FAILED);
            encode_error(&mut w, err);
        }
    }
    w.0
}

/// The answer in `bytes`; the outer error says the bytes were malformed.
pub(crate) fn decode_answer(bytes: &[u8]) -> Result<Result<Answer>> {
    let mut r = Reader(bytes);
    let record = |bytes: Vec<u8>| Record::decode(&bytes).map_err(|_| malformed());
    let answer = match r.u8()? {
        A_RECORD => Ok(Answer::Record(r.opt_bytes()?.map(record).transpose()?)),
        A_RECORDS => {
            let n = r.u64()?;
            let mut records = Vec::new();
            for _ in 0..n {
                records.push((r.string()?, record(r.bytes()?)?));
            }
            Ok(Answer::Records(records))
        }
        A_VALUE => Ok(Answer::Value(match r.u8()? {
            0 => None,
            1 => {
                let token = r.u64()?;
                Some(crate::rules::info::Fenced {
                    token,
                    value: r.bytes()?,
                })
            }
            _ => return Err(malformed()),
        })),
        A_KEYS => {
            let n = r.u64()?;
            let mut keys = Vec::new();
            for _ in 0..n {
                keys.push(r.bytes()?);
            }
            Ok(Answer::Keys(keys))
        }
        // Tokens start at 1.
        A_FENCE => Ok(Answer::Fence(Some(r.u64()?).filter(|&t| t != 0))),
        A_COUNTS => Ok(Answer::Counts(Counts {
            schema_version: r.u64()?,
            last_token: r.u64()?,
            reserved: r.u64()?,
            sealed: r.u64()?,
            lock_records: r.u64()?,
            keys: r.u64()?,
            fences: r.u64()?,
        })),
        A_VERIFIED => Ok(Answer::Verified),
        A_HISTORY => {
            let n = r.u64()?;
            let mut entries = Vec::new();
            for _ in 0..n {
                entries.push((r.u64()?, r.bytes()?));
            }
            Ok(Answer::History(entries))
        }
        FAILED => Err(decode_error(&mut r)?),
        _ => return Err(malformed()),
    };
    r.end()?;
    Ok(answer)
}

pub(crate) fn decode_op(bytes: &[u8]) -> Result<Op> {
    let mut r = Reader(bytes);
    let op = match r.u8()? {
        ACQUIRE => {
            let name = r.string()?;
            let ttl = Duration::from_nanos(r.u64()?);
            let holder = ProcessId {
                pid: r.u32()?,
                start_time: r.u64()?,
            };
            let live = r.u64()?;
            let ticket = Some(r.u64()?).filter(|&t| t != 0);
            let write = match r.u8()? {
                0 => None,
                1 => Some((r.bytes()?, r.bytes()?)),
                _ => return Err(malformed()),
            };
            Op::Acquire {
                name,
                ttl,
                write,
                holder,
                live,
                ticket,
            }
        }
        ACQUIRE_KIND => {
            let name = r.string()?;
            let kind = match r.u8()? {
                KIND_EXCLUSIVE => Kind::Exclusive,
                KIND_SHARED => Kind::Shared,
                KIND_SEMAPHORE => Kind::Semaphore(r.u32()?),
                _ => return Err(malformed()),
            };
            Op::AcquireKind {
                name,
                kind,
                ttl: Duration::from_nanos(r.u64()?),
                holder: ProcessId {
                    pid: r.u32()?,
                    start_time: r.u64()?,
                },
                live: r.u64()?,
                ticket: Some(r.u64()?).filter(|&t| t != 0),
            }
        }
        ACQUIRE_ALL => {
            let ttl = Duration::from_nanos(r.u64()?);
            let holder = ProcessId {
                pid: r.u32()?,
                start_time: r.u64()?,
            };
            let count = r.u32()? as usize;
            // Each name takes at least 12 bytes: a bound before anything is allocated.
            if count > r.0.len() / 12 {
                return Err(malformed());
            }
            let mut names = Vec::with_capacity(count);
            let mut lives = Vec::with_capacity(count);
            for _ in 0..count {
                names.push(r.string()?);
                lives.push(r.u64()?);
            }
            Op::AcquireAll {
                names,
                ttl,
                holder,
                lives,
            }
        }
        EXTEND => Op::Extend {
            name: r.string()?,
            token: r.u64()?,
            ttl: Duration::from_nanos(r.u64()?),
        },
        PUT => Op::Put {
            key: r.bytes()?,
            value: r.opt_bytes()?,
            token: r.u64()?,
            lease: match r.opt_bytes()? {
                Some(name) => Some(String::from_utf8(name).map_err(|_| malformed())?),
                None => None,
            },
        },
        FENCE => Op::Fence {
            resource: r.string()?,
            token: r.u64()?,
        },
        RECORD_RELEASES => {
            let count = r.u32()? as usize;
            // Each release takes at least 20 bytes: a bound before anything is allocated.
            if count > r.0.len() / 20 {
                return Err(malformed());
            }
            let mut releases = Vec::with_capacity(count);
            for _ in 0..count {
                releases.push((r.string()?, r.u64()?, r.u64()?));
            }
            Op::RecordReleases { releases }
        }
        RECORD_ENDS => {
            let seal = match r.u8()? {
                0 => None,
                1 => Some((r.u64()?, r.u64()?)),
                _ => return Err(malformed()),
            };
            let count = r.u32()? as usize;
            // Each end takes at least 16 bytes: a bound before anything is allocated.
            if count > r.0.len() / 16 {
                return Err(malformed());
            }
            let mut ends = Vec::with_capacity(count);
            for _ in 0..count {
                let name = r.string()?;
                let token = r.u64()?;
                let ended = Ended::decode(&r.bytes()?).map_err(|_| malformed())?;
                ends.push((name, token, ended));
            }
            Op::RecordEnds { ends, seal }
        }
        RESERVE => Op::Reserve { at_least: r.u64()? },
        _ => return Err(malformed()),
    };
    r.end()?;
    within_limits(&op).map_err(|_| malformed())?;
    Ok(op)
}

/// Refuses a request whose arguments the library's own calls never pass: a requester checked
/// them before it posted, so these are damage (or a writer of the ring that is not this
/// library), and the combiner must not compute with them (an expiry of `now + ttl` overflows
/// for a TTL of 2^64 ns).
fn within_limits(op: &Op) -> Result<()> {
    use crate::base::limits::{check_key, check_name, check_ttl};
    match op {
        Op::Acquire {
            name, ttl, write, ..
        } => {
            check_name("lock name", name)?;
            check_ttl(*ttl)?;
            if let Some((key, _)) = write {
                check_key(key)?;
            }
        }
        Op::AcquireKind {
            name, kind, ttl, ..
        } => {
            check_name("lock name", name)?;
            crate::rules::kind::check_kind(*kind)?;
            check_ttl(*ttl)?;
        }
        Op::AcquireAll {
            names, ttl, lives, ..
        } => {
            if names.is_empty() || names.len() != lives.len() {
                return Err(malformed());
            }
            for name in names {
                check_name("lock name", name)?;
            }
            check_ttl(*ttl)?;
        }
        Op::Extend { name, ttl, .. } => {
            check_name("lock name", name)?;
            check_ttl(*ttl)?;
        }
        Op::Put { key, .. } => check_key(key)?,
        Op::Fence { resource, .. } => check_name("fence resource", resource)?,
        Op::RecordReleases { .. } | Op::RecordEnds { .. } | Op::Reserve { .. } => {}
    }
    Ok(())
}

const GRANTED: u8 = 1;
const EXTENDED: u8 = 2;
const WROTE: u8 = 3;
const FENCED: u8 = 4;
const FAILED: u8 = 5;
const GRANTED_ALL: u8 = 6;
const RECORDED: u8 = 7;
const RESERVED: u8 = 8;

pub(crate) fn encode_reply(reply: &Result<Done>) -> Vec<u8> {
    let mut w = Writer::default();
    match reply {
        Ok(Done::Granted { token, expires_ns }) => {
            w.u8(GRANTED);
            w.u64(*token);
            w.u64(*expires_ns);
        }
        Ok(Done::GrantedAll {
            first,
            count,
            expires_ns,
        }) => {
            w.u8(GRANTED_ALL);
            w.u64(*first);
            w.u32(*count);
            w.u64(*expires_ns);
        }
        Ok(Done::Extended { expires_ns }) => {
            w.u8(EXTENDED);
            w.u64(*expires_ns);
        }
        Ok(Done::Put { existed }) => {
            w.u8(WROTE);
            w.u8(u8::from(*existed));
        }
        Ok(Done::Fenced) => w.u8(FENCED),
        Ok(Done::Recorded) => w.u8(RECORDED),
        Ok(Done::Reserved { bound }) => {
            w.u8(RESERVED);
            w.u64(*bound);
        }
        Err(err) => {
            w.u8(FAILED);
            encode_error(&mut w, err);
        }
    }
    w.0
}

/// The reply in `bytes`; the outer error says the bytes were malformed.
pub(crate) fn decode_reply(bytes: &[u8]) -> Result<Result<Done>> {
    let mut r = Reader(bytes);
    let reply = match r.u8()? {
        GRANTED => Ok(Done::Granted {
            token: r.u64()?,
            expires_ns: r.u64()?,
        }),
        GRANTED_ALL => Ok(Done::GrantedAll {
            first: r.u64()?,
            count: r.u32()?,
            expires_ns: r.u64()?,
        }),
        EXTENDED => Ok(Done::Extended {
            expires_ns: r.u64()?,
        }),
        WROTE => Ok(Done::Put {
            existed: r.u8()? != 0,
        }),
        FENCED => Ok(Done::Fenced),
        RECORDED => Ok(Done::Recorded),
        RESERVED => Ok(Done::Reserved { bound: r.u64()? }),
        FAILED => Err(decode_error(&mut r)?),
        _ => return Err(malformed()),
    };
    r.end()?;
    Ok(reply)
}

/// An error as its status, three numbers and a message. An I/O error's numbers are its kind and
/// the system's error number (0 for none).
fn encode_error(w: &mut Writer, err: &Error) {
    let (a, b, c, message) = match err {
        Error::Locked {
            name,
            token,
            pid,
            remaining,
        } => (*token, u64::from(*pid), ns(*remaining), name.clone()),
        Error::StaleToken { token, highest } => (*token, *highest, 0, String::new()),
        Error::LockLost { token, current } => (
            *token,
            current.unwrap_or(0),
            u64::from(current.is_some()),
            String::new(),
        ),
        Error::IncompatibleVersion { found, supported } => (*found, *supported, 0, String::new()),
        Error::PermitsMismatch { permits, requested } => {
            (u64::from(*permits), u64::from(*requested), 0, String::new())
        }
        Error::WouldDeadlock { name, token } => (*token, 0, 0, name.clone()),
        Error::Io(io) => (
            kind_code(io.kind()),
            err.raw_os_error()
                .map_or(0, |code| u64::try_from(code).unwrap_or(0)),
            0,
            io.to_string(),
        ),
        Error::Replaced(m)
        | Error::InvalidArgument(m)
        | Error::NotAStore(m)
        | Error::Corrupt(m)
        | Error::Storage(m) => (0, 0, 0, m.clone()),
        Error::Timeout { .. } | Error::Cancelled | Error::InUse | Error::Forked => {
            (0, 0, 0, String::new())
        }
    };
    w.u32(err.status() as u32);
    w.u64(a);
    w.u64(b);
    w.u64(c);
    w.bytes(message.as_bytes());
}

fn decode_error(r: &mut Reader<'_>) -> Result<Error> {
    let status = r.u32()?;
    let (a, b, c) = (r.u64()?, r.u64()?, r.u64()?);
    let message = r.string()?;
    let err = match status {
        _ if status == Status::Locked as u32 => Error::Locked {
            name: message,
            token: a,
            pid: u32::try_from(b).map_err(|_| malformed())?,
            remaining: Duration::from_nanos(c),
        },
        _ if status == Status::StaleToken as u32 => Error::StaleToken {
            token: a,
            highest: b,
        },
        _ if status == Status::LockLost as u32 => Error::LockLost {
            token: a,
            current: (c != 0).then_some(b),
        },
        _ if status == Status::IncompatibleVersion as u32 => Error::IncompatibleVersion {
            found: a,
            supported: b,
        },
        _ if status == Status::PermitsMismatch as u32 => Error::PermitsMismatch {
            permits: u32::try_from(a).map_err(|_| malformed())?,
            requested: u32::try_from(b).map_err(|_| malformed())?,
        },
        _ if status == Status::WouldDeadlock as u32 => Error::WouldDeadlock {
            name: message,
            token: a,
        },
        _ if status == Status::Io as u32 => {
            let code = i32::try_from(b).map_err(|_| malformed())?;
            Error::Io(io_error(kind_of(a), message, (code != 0).then_some(code)))
        }
        _ if status == Status::Replaced as u32 => Error::Replaced(message),
        _ if status == Status::InvalidArgument as u32 => Error::InvalidArgument(message),
        _ if status == Status::NotAStore as u32 => Error::NotAStore(message),
        _ if status == Status::Corrupt as u32 => Error::Corrupt(message),
        _ if status == Status::Storage as u32 => Error::Storage(message),
        _ if status == Status::Timeout as u32 => Error::timed_out(),
        _ if status == Status::Cancelled as u32 => Error::Cancelled,
        _ if status == Status::InUse as u32 => Error::InUse,
        _ if status == Status::Forked as u32 => Error::Forked,
        _ => return Err(malformed()),
    };
    Ok(err)
}

/// The kinds of I/O error a reply keeps; others arrive as `Other`, their message intact.
const KINDS: [std::io::ErrorKind; 9] = {
    use std::io::ErrorKind::{
        FileTooLarge, InvalidData, NotFound, Other, PermissionDenied, QuotaExceeded,
        ReadOnlyFilesystem, StorageFull, UnexpectedEof,
    };
    [
        Other,
        StorageFull,
        FileTooLarge,
        QuotaExceeded,
        NotFound,
        PermissionDenied,
        ReadOnlyFilesystem,
        InvalidData,
        UnexpectedEof,
    ]
};

fn kind_code(kind: std::io::ErrorKind) -> u64 {
    KINDS.iter().position(|&k| k == kind).unwrap_or(0) as u64
}

fn kind_of(code: u64) -> std::io::ErrorKind {
    usize::try_from(code)
        .ok()
        .and_then(|i| KINDS.get(i).copied())
        .unwrap_or(std::io::ErrorKind::Other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::record::Lease;

    fn ops() -> Vec<Op> {
        vec![
            Op::Acquire {
                name: "payment-export".into(),
                ttl: Duration::from_millis(1500),
                write: None,
                holder: ProcessId {
                    pid: 42,
                    start_time: 7,
                },
                live: 1 << 50,
                ticket: Some(17),
            },
            Op::Acquire {
                name: "n".into(),
                ttl: Duration::from_secs(1),
                write: Some((b"k".to_vec(), Vec::new())),
                holder: ProcessId {
                    pid: 1,
                    start_time: 2,
                },
                live: 3,
                ticket: None,
            },
            Op::Extend {
                name: "n".into(),
                token: 9,
                ttl: Duration::from_secs(3),
            },
            Op::RecordEnds {
                ends: vec![(
                    "payment-export".into(),
                    9,
                    Ended::for_test(Kind::Semaphore(3), crate::rules::history::Ending::TakenOver),
                )],
                seal: Some((41, 2048)),
            },
            Op::RecordEnds {
                ends: Vec::new(),
                seal: None,
            },
            Op::Reserve { at_least: 1 << 40 },
            Op::RecordReleases {
                releases: vec![("a".into(), 4, 5), (String::new(), 6, 7)],
            },
            Op::AcquireKind {
                name: "pool".into(),
                kind: Kind::Semaphore(3),
                ttl: Duration::from_secs(2),
                holder: ProcessId {
                    pid: 5,
                    start_time: 6,
                },
                live: 7,
                ticket: Some(2),
            },
            Op::AcquireKind {
                name: "config".into(),
                kind: Kind::Shared,
                ttl: Duration::from_secs(2),
                holder: ProcessId {
                    pid: 5,
                    start_time: 6,
                },
                live: 8,
                ticket: None,
            },
            Op::AcquireAll {
                names: vec!["a".into(), "b".into()],
                ttl: Duration::from_secs(4),
                holder: ProcessId {
                    pid: 9,
                    start_time: 10,
                },
                lives: vec![11, 12],
            },
            Op::Put {
                key: b"k\0\xff".to_vec(),
                value: Some(b"v".to_vec()),
                token: 4,
                lease: Some("n".into()),
            },
            Op::Put {
                key: b"k".to_vec(),
                value: None,
                token: 4,
                lease: None,
            },
            Op::Fence {
                resource: "bucket".into(),
                token: 12,
            },
        ]
    }

    #[test]
    fn requests_with_arguments_no_call_of_the_library_passes_are_refused_as_damage() {
        let holder = ProcessId {
            pid: 1,
            start_time: 2,
        };
        let acquire = |name: &str, ttl: Duration| Op::Acquire {
            name: name.into(),
            ttl,
            write: None,
            holder,
            live: 3,
            ticket: None,
        };
        let damaged = [
            // An expiry of now + 2^64 - 1 ns overflows in the combiner that runs it.
            acquire("n", Duration::from_nanos(u64::MAX)),
            acquire("n", Duration::ZERO),
            acquire("", Duration::from_secs(1)),
            acquire(&"x".repeat(5000), Duration::from_secs(1)),
            Op::AcquireKind {
                name: "pool".into(),
                kind: Kind::Semaphore(0),
                ttl: Duration::from_secs(1),
                holder,
                live: 3,
                ticket: None,
            },
            Op::AcquireAll {
                names: vec!["a".into(), "b".into()],
                ttl: Duration::from_secs(1),
                holder,
                lives: vec![5],
            },
            Op::Extend {
                name: "n".into(),
                token: 9,
                ttl: Duration::from_nanos(u64::MAX),
            },
            Op::Put {
                key: Vec::new(),
                value: None,
                token: 1,
                lease: None,
            },
        ];
        for op in damaged {
            let err = decode_op(&encode_op(&op)).unwrap_err();
            assert!(matches!(err, Error::Storage(_)), "{op:?}: {err:?}");
        }
    }

    #[test]
    fn operations_round_trip_and_every_cut_is_refused() {
        for op in ops() {
            let bytes = encode_op(&op);
            assert_eq!(decode_op(&bytes).unwrap(), op);
            for cut in 0..bytes.len() {
                assert!(decode_op(&bytes[..cut]).is_err(), "{op:?} cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode_op(&longer).is_err());
        }
    }

    #[test]
    fn reads_and_their_answers_round_trip_and_every_cut_is_refused() {
        let queries = [
            Query::Record("payment-export".into()),
            Query::Records,
            Query::Value(b"k\0ey".to_vec()),
            Query::Keys(Vec::new()),
            Query::Fence("bucket".into()),
            Query::Counts,
            Query::Verify,
            Query::History("payment-export".into()),
        ];
        for query in queries {
            let bytes = encode_query(&query);
            match decode_request(&bytes).unwrap() {
                Request::Query(decoded) => assert_eq!(decoded, query),
                other @ Request::Op(_) => panic!("{other:?}"),
            }
            for cut in 0..bytes.len() {
                assert!(
                    decode_request(&bytes[..cut]).is_err(),
                    "{query:?} cut at {cut}"
                );
            }
        }
        let lease = Lease {
            token: 7,
            holder: ProcessId {
                pid: 42,
                start_time: 9,
            },
            boot_id: [3; 16],
            granted_ns: 1,
            expires_ns: 2,
            live: 1 << 50,
        };
        let answers = [
            Ok(Answer::Record(Some(Record::Exclusive(lease)))),
            Ok(Answer::Record(Some(Record::Group(
                crate::rules::record::Group {
                    kind: Kind::Semaphore(3),
                    holders: vec![lease, lease],
                },
            )))),
            Ok(Answer::Record(None)),
            Ok(Answer::Records(vec![
                ("a".into(), Record::Exclusive(lease)),
                (
                    "b".into(),
                    Record::Group(crate::rules::record::Group {
                        kind: Kind::Shared,
                        holders: vec![lease],
                    }),
                ),
            ])),
            Ok(Answer::Value(Some(crate::rules::info::Fenced {
                value: vec![1, 2, 3],
                token: 4,
            }))),
            Ok(Answer::Value(None)),
            Ok(Answer::Keys(vec![b"x".to_vec(), Vec::new()])),
            Ok(Answer::Fence(Some(12))),
            Ok(Answer::Fence(None)),
            Ok(Answer::Counts(Counts {
                schema_version: 2,
                last_token: 3,
                reserved: 9,
                sealed: 8,
                lock_records: 4,
                keys: 5,
                fences: 6,
            })),
            Ok(Answer::Verified),
            Ok(Answer::History(vec![(7, vec![1, 2, 3]), (9, Vec::new())])),
            Err(Error::Corrupt("bad page".into())),
        ];
        for answer in answers {
            let bytes = encode_answer(&answer);
            let decoded = decode_answer(&bytes).unwrap();
            assert_eq!(format!("{decoded:?}"), format!("{answer:?}"));
            for cut in 0..bytes.len() {
                assert!(
                    decode_answer(&bytes[..cut]).is_err(),
                    "{answer:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn replies_round_trip_with_their_status_and_fields() {
        let replies: Vec<Result<Done>> = vec![
            Ok(Done::Granted {
                token: 5,
                expires_ns: 99,
            }),
            Ok(Done::Extended { expires_ns: 3 }),
            Ok(Done::GrantedAll {
                first: 4,
                count: 2,
                expires_ns: 8,
            }),
            Err(Error::PermitsMismatch {
                permits: 3,
                requested: 4,
            }),
            Ok(Done::Put { existed: true }),
            Ok(Done::Fenced),
            Ok(Done::Recorded),
            Err(Error::Locked {
                name: "payment-export".into(),
                token: 3,
                pid: 77,
                remaining: Duration::from_millis(5),
            }),
            Err(Error::StaleToken {
                token: 1,
                highest: 2,
            }),
            Err(Error::LockLost {
                token: 1,
                current: Some(4),
            }),
            Err(Error::LockLost {
                token: 1,
                current: None,
            }),
            Err(Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC))),
            Err(Error::Io(io_error(
                std::io::ErrorKind::Other,
                "reopening: No such file or directory (os error 2)".into(),
                Some(libc::ENOENT),
            ))),
            Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "too large",
            ))),
            Err(Error::Storage("disk".into())),
            Err(Error::timed_out()),
            Err(Error::Replaced("moved".into())),
        ];
        for reply in replies {
            let back = decode_reply(&encode_reply(&reply)).unwrap();
            match (&reply, &back) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => {
                    assert_eq!(a.status(), b.status());
                    assert_eq!(a.to_string(), b.to_string());
                    assert_eq!(a.raw_os_error(), b.raw_os_error());
                    if let (Error::Io(a), Error::Io(b)) = (a, b) {
                        assert_eq!(a.kind(), b.kind());
                    }
                }
                _ => panic!("{reply:?} came back as {back:?}"),
            }
        }
        assert!(decode_reply(&[9]).is_err());
        assert!(decode_reply(&[]).is_err());
    }
}
