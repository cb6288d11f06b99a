//! The recorder's log, read back: what reached the store file, and the workload's marks, in
//! one order.

use std::collections::HashMap;
use std::fmt::Write as _;

/// One change to the store file's contents or size.
#[derive(Debug, Clone)]
pub enum Change {
    Write { offset: u64, data: Vec<u8> },
    Truncate { len: u64 },
    Fallocate { mode: u32, offset: u64, len: u64 },
}

/// What the workload wrote to the marker file, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// `Store::open` returned in this writer.
    Created,
    /// An operation is about to be called.
    Begin { id: String, op: Op },
    /// The operation returned successfully; for a grant, with its token.
    Ack { id: String, op: Op },
}

/// An operation of the workload. `token` is 0 in a begin mark of a grant (not known yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Grant {
        lock: String,
        token: u64,
    },
    GrantPut {
        lock: String,
        key: String,
        token: u64,
    },
    Put {
        key: String,
        token: u64,
    },
    Delete {
        key: String,
        token: u64,
    },
    Fence {
        resource: String,
        token: u64,
    },
}

impl Op {
    /// The mark's text after `begin ID ` / `ack ID `.
    pub fn render(&self) -> String {
        match self {
            Op::Grant { lock, token } => format!("grant {lock} {token}"),
            Op::GrantPut { lock, key, token } => format!("grant-put {lock} {key} {token}"),
            Op::Put { key, token } => format!("put {key} {token}"),
            Op::Delete { key, token } => format!("delete {key} {token}"),
            Op::Fence { resource, token } => format!("fence {resource} {token}"),
        }
    }

    fn parse(words: &[&str]) -> Op {
        let token = |s: &str| s.parse::<u64>().expect("token in a mark");
        match words {
            ["grant", lock, t] => Op::Grant {
                lock: (*lock).into(),
                token: token(t),
            },
            ["grant-put", lock, key, t] => Op::GrantPut {
                lock: (*lock).into(),
                key: (*key).into(),
                token: token(t),
            },
            ["put", key, t] => Op::Put {
                key: (*key).into(),
                token: token(t),
            },
            ["delete", key, t] => Op::Delete {
                key: (*key).into(),
                token: token(t),
            },
            ["fence", resource, t] => Op::Fence {
                resource: (*resource).into(),
                token: token(t),
            },
            other => panic!("unknown mark {other:?}"),
        }
    }

    /// The token it was granted or carried.
    pub fn token(&self) -> u64 {
        match self {
            Op::Grant { token, .. }
            | Op::GrantPut { token, .. }
            | Op::Put { token, .. }
            | Op::Delete { token, .. }
            | Op::Fence { token, .. } => *token,
        }
    }
}

/// One record of the log.
#[derive(Debug, Clone)]
pub enum Event {
    Change(Change),
    /// fsync, fdatasync, sync or syncfs returned: every change logged before it is durable.
    Sync,
    /// `sync_file_range`: logged, but it promises nothing after a power loss.
    SyncRange,
    Mark(Mark),
}

/// A recording: the events in log order, and the process each came from.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub events: Vec<Event>,
    pub pids: Vec<u32>,
}

impl Recording {
    pub fn parse(bytes: &[u8]) -> Recording {
        let mut recording = Recording::default();
        let mut at = 0;
        let u64_at = |p: usize| u64::from_le_bytes(bytes[p..p + 8].try_into().unwrap());
        while at < bytes.len() {
            assert!(at + 29 <= bytes.len(), "a truncated record in the log");
            let kind = bytes[at];
            let pid = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap());
            let (a, b) = (u64_at(at + 5), u64_at(at + 13));
            let len = usize::try_from(u64_at(at + 21)).unwrap();
            let data = &bytes[at + 29..at + 29 + len];
            at += 29 + len;
            let mut push = |event| {
                recording.events.push(event);
                recording.pids.push(pid);
            };
            match kind {
                1 => push(Event::Change(Change::Write {
                    offset: a,
                    data: data.to_vec(),
                })),
                2 => push(Event::Sync),
                3 => push(Event::Change(Change::Truncate { len: a })),
                4 => push(Event::Change(Change::Fallocate {
                    mode: u32::from_le_bytes(data.try_into().unwrap()),
                    offset: a,
                    len: b,
                })),
                5 => {
                    let text = std::str::from_utf8(data).expect("marks are text");
                    for line in text.lines().filter(|l| !l.is_empty()) {
                        push(Event::Mark(parse_mark(line)));
                    }
                }
                6 => push(Event::SyncRange),
                other => panic!("unknown record kind {other} in the log"),
            }
        }
        recording
    }

    /// The file as every change leaves it, in log order.
    pub fn final_file(&self) -> Vec<u8> {
        let mut file = Vec::new();
        for event in &self.events {
            if let Event::Change(change) = event {
                apply(&mut file, change);
            }
        }
        file
    }

    /// One line per event, for reading a recording.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for (at, (event, pid)) in self.events.iter().zip(&self.pids).enumerate() {
            let line = match event {
                Event::Change(Change::Write { offset, data }) => {
                    format!("write {offset} +{}", data.len())
                }
                Event::Change(change) => format!("{change:?}"),
                Event::Sync => "sync".into(),
                Event::SyncRange => "sync_file_range".into(),
                Event::Mark(mark) => format!("{mark:?}"),
            };
            let _ = writeln!(out, "{at:5} pid {pid}: {line}");
        }
        out
    }

    /// Counts of each kind of record, for the report.
    pub fn summary(&self) -> String {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for event in &self.events {
            let name = match event {
                Event::Change(Change::Write { .. }) => "writes",
                Event::Change(Change::Truncate { .. }) => "truncates",
                Event::Change(Change::Fallocate { .. }) => "fallocates",
                Event::Sync => "syncs",
                Event::SyncRange => "sync_file_ranges",
                Event::Mark(Mark::Ack { .. }) => "acks",
                Event::Mark(_) => "other marks",
            };
            *counts.entry(name).or_default() += 1;
        }
        let mut parts: Vec<_> = counts.into_iter().collect();
        parts.sort_unstable();
        parts
            .iter()
            .map(|(name, n)| format!("{n} {name}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn parse_mark(line: &str) -> Mark {
    let words: Vec<&str> = line.split(' ').collect();
    match words.as_slice() {
        ["created", _writer] => Mark::Created,
        ["begin", id, rest @ ..] => Mark::Begin {
            id: (*id).into(),
            op: Op::parse(rest),
        },
        ["ack", id, rest @ ..] => Mark::Ack {
            id: (*id).into(),
            op: Op::parse(rest),
        },
        _ => panic!("unknown mark line {line:?}"),
    }
}

/// Applies one change to an image of the file.
pub fn apply(file: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, data } => {
            let offset = usize::try_from(*offset).unwrap();
            if file.len() < offset + data.len() {
                file.resize(offset + data.len(), 0);
            }
            file[offset..offset + data.len()].copy_from_slice(data);
        }
        Change::Truncate { len } => file.resize(usize::try_from(*len).unwrap(), 0),
        Change::Fallocate { mode, offset, len } => {
            let end = usize::try_from(offset + len).unwrap();
            match *mode {
                // Allocates; extends the size.
                0 => {
                    if file.len() < end {
                        file.resize(end, 0);
                    }
                }
                // FALLOC_FL_KEEP_SIZE: the contents and size stay as they are.
                1 => {}
                // FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: zeroes inside the file.
                3 => {
                    let start = usize::try_from(*offset).unwrap().min(file.len());
                    let end = end.min(file.len());
                    file[start..end].fill(0);
                }
                other => panic!("fallocate mode {other:#x} is not modelled"),
            }
        }
    }
}
