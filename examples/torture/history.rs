//! The operation log: what workers write, one line when an operation begins and one when it
//! ends, and what the checker reads back.
//!
//! A begin line is written (one `write(2)`, so it survives a SIGKILL) before the operation
//! starts and an end line after it completes. An operation with a begin line and no end line
//! was cut short by a kill: its outcome is unknown, and the checker treats it as possibly
//! applied at any moment up to the death of its process.
//!
//! ```text
//! B <seq> <thread> <kind> <start_ns> <lock> <key> <token> <ttl_ms> <value>
//! E <seq> <end_ns> <outcome...>
//! ```
//! A grant's outcome is `granted <token> [<granted_ns>]`: a moment at or before the store's
//! moment of grant, from the lease's expiry less its TTL (0 or absent when not known).
//! Fields are tab-separated; `-` stands for an absent field. Values are short ASCII strings
//! naming the write that made them (`w<worker>.<thread>.<seq>`), so every value is unique.

use std::collections::HashMap;
use std::fmt;

/// One kind of operation a worker performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Open,
    Acquire,
    AcquireWait,
    AcquireAndPut,
    Extend,
    Release,
    HolderPut,
    Put,
    Delete,
    Get,
    Fence,
    /// `Store::locks()`: every lock record's token.
    Locks,
    /// `Store::info()`: the last token granted.
    Info,
    /// One permit of a semaphore of [`crate::worker::PERMITS`], tried once / waited for.
    AcquirePermit,
    AcquirePermitWait,
    /// A shared grant of a lock, tried once / waited for.
    AcquireShared,
    AcquireSharedWait,
}

const KINDS: [(Kind, &str); 17] = [
    (Kind::Open, "open"),
    (Kind::Acquire, "acquire"),
    (Kind::AcquireWait, "acquire-wait"),
    (Kind::AcquireAndPut, "acquire-and-put"),
    (Kind::Extend, "extend"),
    (Kind::Release, "release"),
    (Kind::HolderPut, "holder-put"),
    (Kind::Put, "put"),
    (Kind::Delete, "delete"),
    (Kind::Get, "get"),
    (Kind::Fence, "fence"),
    (Kind::Locks, "locks"),
    (Kind::Info, "info"),
    (Kind::AcquirePermit, "acquire-permit"),
    (Kind::AcquirePermitWait, "acquire-permit-wait"),
    (Kind::AcquireShared, "acquire-shared"),
    (Kind::AcquireSharedWait, "acquire-shared-wait"),
];

impl Kind {
    pub fn as_str(self) -> &'static str {
        KINDS
            .iter()
            .find(|(k, _)| *k == self)
            .expect("every kind")
            .1
    }

    fn parse(text: &str) -> Option<Kind> {
        KINDS.iter().find(|(_, s)| *s == text).map(|(k, _)| *k)
    }

    /// Whether a successful operation of this kind grants a lease.
    pub fn grants(self) -> bool {
        matches!(
            self,
            Kind::Acquire
                | Kind::AcquireWait
                | Kind::AcquireAndPut
                | Kind::AcquirePermit
                | Kind::AcquirePermitWait
                | Kind::AcquireShared
                | Kind::AcquireSharedWait
        )
    }

    /// How a grant of this kind holds its lock.
    pub fn mode(self) -> Mode {
        match self {
            Kind::AcquirePermit | Kind::AcquirePermitWait => Mode::Permit(crate::worker::PERMITS),
            Kind::AcquireShared | Kind::AcquireSharedWait => Mode::Shared,
            _ => Mode::Exclusive,
        }
    }

    /// Whether an operation of this kind writes a fenced key.
    pub fn writes_key(self) -> bool {
        matches!(
            self,
            Kind::AcquireAndPut | Kind::HolderPut | Kind::Put | Kind::Delete
        )
    }
}

/// How a lease holds its lock, for the rules of who may hold it at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Exclusive,
    Shared,
    /// One of this many permits.
    Permit(u32),
}

impl Mode {
    /// Whether a live lease of this mode excludes a grant of `other` on the same lock (a
    /// semaphore's permits count rather than exclude).
    pub fn excludes(self, other: Mode) -> bool {
        !matches!(
            (self, other),
            (Mode::Shared, Mode::Shared) | (Mode::Permit(_), Mode::Permit(_))
        )
    }
}

/// How a completed operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Success without a value to report.
    Ok,
    /// A lease was granted with this token.
    Granted(u64),
    /// A get found this value, written with this token.
    Value(u64, String),
    /// A get found no value.
    NotFound,
    /// `locks()` listed these lock names with the tokens of their last grants.
    Locks(Vec<(String, u64)>),
    /// `info()` reported this last token granted.
    Info(u64),
    /// Refused: the lock is held by the lease with this token.
    Locked(u64),
    /// A waiting acquire timed out.
    Timeout,
    /// Refused: the token is lower than the highest accepted.
    Stale { token: u64, highest: u64 },
    /// Refused: the holder's lease is lost.
    Lost,
    /// Refused as an invalid argument (a token never granted).
    Invalid,
    /// Anything else: an error the workload never provokes (status and message).
    Error(String),
}

impl Outcome {
    /// A short class name for the summary.
    pub fn class(&self) -> &'static str {
        match self {
            Outcome::Ok
            | Outcome::Granted(_)
            | Outcome::Value(..)
            | Outcome::Locks(_)
            | Outcome::Info(_) => "ok",
            Outcome::NotFound => "not-found",
            Outcome::Locked(_) => "locked",
            Outcome::Timeout => "timeout",
            Outcome::Stale { .. } => "stale",
            Outcome::Lost => "lost",
            Outcome::Invalid => "invalid",
            Outcome::Error(_) => "error",
        }
    }

    pub fn from_error(err: &fencelock::Error) -> Outcome {
        use fencelock::Error;
        match err {
            Error::Locked { token, .. } => Outcome::Locked(*token),
            Error::Timeout { .. } => Outcome::Timeout,
            Error::StaleToken { token, highest } => Outcome::Stale {
                token: *token,
                highest: *highest,
            },
            Error::LockLost { .. } => Outcome::Lost,
            Error::InvalidArgument(_) => Outcome::Invalid,
            other => Outcome::Error(format!("{:?}: {other}", other.status())),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => write!(f, "ok"),
            Outcome::Granted(token) => write!(f, "granted\t{token}"),
            Outcome::Value(token, value) => write!(f, "value\t{token}\t{value}"),
            Outcome::NotFound => write!(f, "notfound"),
            Outcome::Locks(locks) if locks.is_empty() => write!(f, "locks\t-"),
            Outcome::Locks(locks) => {
                let listed: Vec<String> = locks.iter().map(|(n, t)| format!("{n}={t}")).collect();
                write!(f, "locks\t{}", listed.join(","))
            }
            Outcome::Info(last_token) => write!(f, "info\t{last_token}"),
            Outcome::Locked(token) => write!(f, "locked\t{token}"),
            Outcome::Timeout => write!(f, "timeout"),
            Outcome::Stale { token, highest } => write!(f, "stale\t{token}\t{highest}"),
            Outcome::Lost => write!(f, "lost"),
            Outcome::Invalid => write!(f, "invalid"),
            Outcome::Error(message) => write!(f, "error\t{}", message.replace(['\t', '\n'], " ")),
        }
    }
}

/// One operation as logged, with its outcome if it completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub thread: u32,
    pub seq: u64,
    pub kind: Kind,
    pub start: u64,
    /// `None` when the process died during the operation.
    pub end: Option<u64>,
    pub outcome: Option<Outcome>,
    pub lock: Option<String>,
    pub key: Option<String>,
    /// The token the operation carried (0 when none).
    pub token: u64,
    pub ttl_ms: u64,
    pub value: Option<String>,
    /// For a grant, a moment at or before the store's moment of grant; 0 when not known.
    pub granted_ns: u64,
}

impl Op {
    pub fn new(thread: u32, seq: u64, kind: Kind, start: u64) -> Op {
        Op {
            thread,
            seq,
            kind,
            start,
            end: None,
            outcome: None,
            lock: None,
            key: None,
            token: 0,
            ttl_ms: 0,
            value: None,
            granted_ns: 0,
        }
    }

    pub fn begin_line(&self) -> String {
        let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".into());
        format!(
            "B\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.seq,
            self.thread,
            self.kind.as_str(),
            self.start,
            opt(&self.lock),
            opt(&self.key),
            self.token,
            self.ttl_ms,
            opt(&self.value)
        )
    }

    pub fn end_line(seq: u64, end: u64, outcome: &Outcome) -> String {
        format!("E\t{seq}\t{end}\t{outcome}\n")
    }
}

/// Parses a worker's log. A torn last line (the process died inside `write`) is ignored.
pub fn parse_log(text: &str) -> Result<Vec<Op>, String> {
    let mut ops: Vec<Op> = Vec::new();
    let mut by_seq: HashMap<u64, usize> = HashMap::new();
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    for (number, line) in complete.lines().enumerate() {
        let bad = || format!("line {}: malformed: {line:?}", number + 1);
        let fields: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| -> Result<u64, String> {
            fields.get(i).and_then(|f| f.parse().ok()).ok_or_else(bad)
        };
        let opt = |i: usize| -> Result<Option<String>, String> {
            let field = fields.get(i).ok_or_else(bad)?;
            Ok((*field != "-").then(|| (*field).to_owned()))
        };
        match fields.first() {
            Some(&"B") => {
                let kind = fields.get(3).and_then(|k| Kind::parse(k)).ok_or_else(bad)?;
                let seq = num(1)?;
                let mut op = Op::new(
                    u32::try_from(num(2)?).map_err(|_| bad())?,
                    seq,
                    kind,
                    num(4)?,
                );
                op.lock = opt(5)?;
                op.key = opt(6)?;
                op.token = num(7)?;
                op.ttl_ms = num(8)?;
                op.value = opt(9)?;
                by_seq.insert(seq, ops.len());
                ops.push(op);
            }
            Some(&"E") => {
                let index = *by_seq.get(&num(1)?).ok_or_else(bad)?;
                let text = |i: usize| fields.get(i).map(|s| (*s).to_owned()).ok_or_else(bad);
                let outcome = match fields.get(3) {
                    Some(&"ok") => Outcome::Ok,
                    Some(&"granted") => Outcome::Granted(num(4)?),
                    Some(&"value") => Outcome::Value(num(4)?, text(5)?),
                    Some(&"notfound") => Outcome::NotFound,
                    Some(&"locks") => Outcome::Locks(parse_locks(&text(4)?).ok_or_else(bad)?),
                    Some(&"info") => Outcome::Info(num(4)?),
                    Some(&"locked") => Outcome::Locked(num(4)?),
                    Some(&"timeout") => Outcome::Timeout,
                    Some(&"stale") => Outcome::Stale {
                        token: num(4)?,
                        highest: num(5)?,
                    },
                    Some(&"lost") => Outcome::Lost,
                    Some(&"invalid") => Outcome::Invalid,
                    Some(&"error") => Outcome::Error(fields[4..].join(" ")),
                    _ => return Err(bad()),
                };
                if matches!(outcome, Outcome::Granted(_)) {
                    ops[index].granted_ns = fields.get(5).and_then(|f| f.parse().ok()).unwrap_or(0);
                }
                ops[index].end = Some(num(2)?);
                ops[index].outcome = Some(outcome);
            }
            _ => return Err(bad()),
        }
    }
    Ok(ops)
}

/// `lock-a=5,lock-b=7` (or `-` for none) as written by `Outcome::Locks`.
fn parse_locks(text: &str) -> Option<Vec<(String, u64)>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|item| {
            let (name, token) = item.rsplit_once('=')?;
            Some((name.to_owned(), token.parse().ok()?))
        })
        .collect()
}

/// One worker or opener process: its operations and when it ended.
#[derive(Clone, Debug, Default)]
pub struct Worker {
    pub index: usize,
    pub pid: u32,
    /// A short-lived opener (see `opener.rs`) rather than a worker.
    pub opener: bool,
    /// When the controller sent SIGKILL (before the `kill` call), if it did.
    pub killed_at: Option<u64>,
    /// When the controller reaped the process: it was dead by then.
    pub gone_at: u64,
    pub ops: Vec<Op>,
}

/// What the checker reads from the store after the run.
#[derive(Clone, Debug)]
pub struct FinalState {
    /// `Store::verify()`'s verdict.
    pub verify: Result<(), String>,
    /// `Store::get` of every key the workload uses.
    pub values: Vec<(String, Option<(u64, String)>)>,
    /// `Store::keys(b"")`.
    pub listed: Vec<String>,
    /// `Store::history` of every lock of the workload: (lock, token, pid, how it ended).
    pub grants: Vec<(String, u64, u32, String)>,
}

/// A whole run.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub workers: Vec<Worker>,
    pub final_state: Option<FinalState>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_an_unfinished_op_stays_unknown() {
        let mut put = Op::new(2, 7, Kind::Put, 100);
        put.key = Some("k1".into());
        put.token = 5;
        put.value = Some("w1.2.7".into());
        let mut get = Op::new(2, 8, Kind::Get, 300);
        get.key = Some("k1".into());
        let stale = Outcome::Stale {
            token: 5,
            highest: 9,
        };
        let log = put.begin_line() + &Op::end_line(7, 200, &stale) + &get.begin_line() + "E\t8\t40"; // torn: the process died inside write
        let ops = parse_log(&log).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].end, Some(200));
        assert_eq!(ops[0].outcome, Some(stale));
        assert_eq!(ops[0].value.as_deref(), Some("w1.2.7"));
        assert_eq!(ops[0].lock, None);
        assert_eq!(ops[1].outcome, None, "no end line: unknown outcome");
        assert!(parse_log("X\t1\n").is_err());
        let listed = Outcome::Locks(vec![("lock-a".into(), 5), ("lock-b".into(), 7)]);
        for outcome in [listed, Outcome::Locks(Vec::new()), Outcome::Info(12)] {
            let log = get.begin_line() + &Op::end_line(8, 400, &outcome);
            assert_eq!(parse_log(&log).unwrap()[0].outcome, Some(outcome));
        }
    }
}
