//! The recorder's log, read back: what reached the store file, the segment files of its redo
//! log and their names, and the workload's marks, in one order.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// One change to a file's contents or size.
#[derive(Debug, Clone)]
pub enum Change {
    Write { offset: u64, data: Vec<u8> },
    Truncate { len: u64 },
    Fallocate { mode: u32, offset: u64, len: u64 },
}

/// The file a change or a sync is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum File {
    /// The store file (its name is not modelled: it is there from the start).
    Store,
    /// A file of the redo log (a segment, or one being made under its temporary name): an
    /// inode, numbered by the parser in the order they were created, so that an inode number
    /// the system gave again is another file.
    Log(usize),
}

/// A change to the directory's names of log files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameOp {
    /// A new inode made under `name` (an open with `O_CREAT`).
    Create,
    /// An existing inode given the name `name` as well (`link`).
    Link,
    /// The name `name` removed (`unlink`).
    Unlink,
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
    /// A read-only store's read returned this: a read shows nothing a crash could take back.
    Shown(Shown),
}

/// What a read showed, in a `shown` mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// `get(key)` returned the value that operation `id` wrote, with `token`.
    Value { key: String, id: String, token: u64 },
    /// `get(key)` returned nothing.
    Nothing { key: String },
    /// `fence_token(resource)` returned `token`.
    Fence { resource: String, token: u64 },
    /// `fence_token(resource)` returned nothing.
    NoFence { resource: String },
}

impl Shown {
    /// The mark's text after `shown `.
    pub fn render(&self) -> String {
        match self {
            Shown::Value { key, id, token } => format!("value {key} {id} {token}"),
            Shown::Nothing { key } => format!("nothing {key}"),
            Shown::Fence { resource, token } => format!("fence {resource} {token}"),
            Shown::NoFence { resource } => format!("no-fence {resource}"),
        }
    }

    fn parse(words: &[&str]) -> Shown {
        let token = |s: &str| s.parse::<u64>().expect("token in a mark");
        match words {
            ["value", key, id, t] => Shown::Value {
                key: (*key).into(),
                id: (*id).into(),
                token: token(t),
            },
            ["nothing", key] => Shown::Nothing { key: (*key).into() },
            ["no-fence", resource] => Shown::NoFence {
                resource: (*resource).into(),
            },
            ["fence", resource, t] => Shown::Fence {
                resource: (*resource).into(),
                token: token(t),
            },
            other => panic!("unknown shown mark {other:?}"),
        }
    }
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
    Change(File, Change),
    /// `fsync` (`full`) or `fdatasync` of the file returned: every change of it logged before
    /// is durable.
    Sync {
        file: File,
        full: bool,
    },
    /// `sync()` or `syncfs()` returned: every change logged before, of every file and name, is
    /// durable.
    SyncAll,
    /// An `fsync` of the store's directory returned: the names made and removed before it are
    /// durable.
    DirSync,
    /// A log file's name made, linked or removed. `name` is what follows the store's path
    /// (`.wal.0000000000000003`, `.wal.0000000000000003.creating-...`).
    Name {
        op: NameOp,
        file: usize,
        name: String,
    },
    /// An extended attribute of the store file set (its ring's nonce, which the log's segments
    /// carry as the store's id).
    Xattr {
        name: String,
        value: Vec<u8>,
    },
    /// `sync_file_range`: logged, but it promises nothing after a power loss.
    SyncRange,
    Mark(Mark),
}

impl Event {
    /// Whether it is a durability barrier: a crash point lies between two of them.
    pub fn is_sync(&self) -> bool {
        matches!(self, Event::Sync { .. } | Event::SyncAll | Event::DirSync)
    }

    /// Whether a power loss may leave it undone until a sync covers it.
    pub fn is_pending_kind(&self) -> bool {
        matches!(
            self,
            Event::Change(..) | Event::Name { .. } | Event::Xattr { .. }
        )
    }
}

/// What the disk holds: the store file, its extended attributes, and the log's files by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Files {
    pub store: Vec<u8>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// Each log file's name (after the store's path) and contents.
    pub logs: BTreeMap<String, Vec<u8>>,
}

/// The files as a sequence of events leaves them: the store, its attributes, each inode of
/// the log's, and the names of those.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub store: Vec<u8>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    pub inodes: HashMap<usize, Vec<u8>>,
    pub names: BTreeMap<String, usize>,
}

impl Disk {
    /// Applies one change, name or attribute (any other event changes nothing).
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Change(File::Store, change) => apply(&mut self.store, change),
            Event::Change(File::Log(inode), change) => {
                apply(self.inodes.entry(*inode).or_default(), change);
            }
            Event::Name { op, file, name } => self.rename(op, *file, name),
            Event::Xattr { name, value } => {
                self.xattrs.insert(name.clone(), value.clone());
            }
            _ => {}
        }
    }

    /// A name made, linked or removed. Applied out of order (a crash image keeps any subset
    /// of the names changed since the directory's last sync), a removal of a name that is
    /// another inode's, or not there, changes nothing.
    pub fn rename(&mut self, op: &NameOp, file: usize, name: &str) {
        match op {
            NameOp::Create | NameOp::Link => {
                self.names.insert(name.to_owned(), file);
            }
            NameOp::Unlink => {
                if self.names.get(name) == Some(&file) {
                    self.names.remove(name);
                }
            }
        }
    }

    /// What a reader of the directory finds: the store, and each name's inode.
    pub fn files(&self) -> Files {
        Files {
            store: self.store.clone(),
            xattrs: self.xattrs.clone(),
            logs: self
                .names
                .iter()
                .map(|(name, inode)| {
                    (
                        name.clone(),
                        self.inodes.get(inode).cloned().unwrap_or_default(),
                    )
                })
                .collect(),
        }
    }
}

/// A recording: the events in log order, and the process each came from.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub events: Vec<Event>,
    pub pids: Vec<u32>,
}

/// The length of a record's header in the log: kind u8, pid u32, file u64, a u64, b u64, data
/// length u64.
const RECORD_HEADER: usize = 37;

impl Recording {
    pub fn parse(bytes: &[u8]) -> Recording {
        let mut recording = Recording::default();
        // The parser's number of each inode the system numbered, as of now.
        let mut inodes: HashMap<u64, usize> = HashMap::new();
        let mut at = 0;
        let u64_at = |p: usize| u64::from_le_bytes(bytes[p..p + 8].try_into().unwrap());
        while at < bytes.len() {
            assert!(
                at + RECORD_HEADER <= bytes.len(),
                "a truncated record in the log"
            );
            let kind = bytes[at];
            let pid = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap());
            let (ino, a, b) = (u64_at(at + 5), u64_at(at + 13), u64_at(at + 21));
            let len = usize::try_from(u64_at(at + 29)).unwrap();
            let data = &bytes[at + RECORD_HEADER..at + RECORD_HEADER + len];
            at += RECORD_HEADER + len;
            // A record's file: 0 is the store, another number a log file's inode.
            let file = |inodes: &HashMap<u64, usize>| match ino {
                0 => File::Store,
                ino => File::Log(
                    *inodes
                        .get(&ino)
                        .unwrap_or_else(|| panic!("inode {ino} of a log file was never created")),
                ),
            };
            let text = || String::from_utf8(data.to_vec()).expect("a name is text");
            let mut push = |event| {
                recording.events.push(event);
                recording.pids.push(pid);
            };
            match kind {
                1 => push(Event::Change(
                    file(&inodes),
                    Change::Write {
                        offset: a,
                        data: data.to_vec(),
                    },
                )),
                2 => push(Event::Sync {
                    file: file(&inodes),
                    full: a == 1,
                }),
                3 => push(Event::Change(file(&inodes), Change::Truncate { len: a })),
                4 => push(Event::Change(
                    file(&inodes),
                    Change::Fallocate {
                        mode: u32::from_le_bytes(data.try_into().unwrap()),
                        offset: a,
                        len: b,
                    },
                )),
                5 => {
                    let text = std::str::from_utf8(data).expect("marks are text");
                    for line in text.lines().filter(|l| !l.is_empty()) {
                        push(Event::Mark(parse_mark(line)));
                    }
                }
                6 => push(Event::SyncRange),
                7 => push(Event::SyncAll),
                8 => {
                    let fresh = inodes.len();
                    inodes.insert(ino, fresh);
                    push(Event::Name {
                        op: NameOp::Create,
                        file: fresh,
                        name: text(),
                    });
                }
                9 | 10 => {
                    let File::Log(inode) = file(&inodes) else {
                        panic!("a link or unlink of the store in the log")
                    };
                    let op = if kind == 9 {
                        NameOp::Link
                    } else {
                        NameOp::Unlink
                    };
                    push(Event::Name {
                        op,
                        file: inode,
                        name: text(),
                    });
                }
                11 => push(Event::DirSync),
                12 => {
                    let nul = data
                        .iter()
                        .position(|&b| b == 0)
                        .expect("a NUL after the name");
                    push(Event::Xattr {
                        name: String::from_utf8(data[..nul].to_vec()).expect("a name is text"),
                        value: data[nul + 1..].to_vec(),
                    });
                }
                other => panic!("unknown record kind {other} in the log"),
            }
        }
        recording
    }

    /// The files as every change leaves them, in log order.
    pub fn final_files(&self) -> Files {
        let mut disk = Disk::default();
        for event in &self.events {
            disk.apply(event);
        }
        disk.files()
    }

    /// Whether the workload wrote through the log (made a log file).
    pub fn has_log(&self) -> bool {
        self.events
            .iter()
            .any(|event| matches!(event, Event::Name { .. }))
    }

    /// One line per event, for reading a recording.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for (at, (event, pid)) in self.events.iter().zip(&self.pids).enumerate() {
            let line = match event {
                Event::Change(file, Change::Write { offset, data }) => {
                    format!("{file:?} write {offset} +{}", data.len())
                }
                Event::Change(file, change) => format!("{file:?} {change:?}"),
                Event::Sync { file, full } => {
                    format!("{file:?} {}", if *full { "fsync" } else { "fdatasync" })
                }
                Event::Xattr { name, value } => format!("xattr {name} = {value:02x?}"),
                event => format!("{event:?}"),
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
                Event::Change(File::Store, Change::Write { .. }) => "writes",
                Event::Change(File::Log(_), Change::Write { .. }) => "log writes",
                Event::Change(_, Change::Truncate { .. }) => "truncates",
                Event::Change(_, Change::Fallocate { .. }) => "fallocates",
                Event::Sync {
                    file: File::Store, ..
                } => "syncs",
                Event::Sync {
                    file: File::Log(_), ..
                } => "log syncs",
                Event::SyncAll => "syncs of all",
                Event::DirSync => "directory syncs",
                Event::Name {
                    op: NameOp::Create, ..
                } => "log files made",
                Event::Name {
                    op: NameOp::Link, ..
                } => "links",
                Event::Name {
                    op: NameOp::Unlink, ..
                } => "unlinks",
                Event::Xattr { .. } => "attributes set",
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
        ["shown", rest @ ..] => Mark::Shown(Shown::parse(rest)),
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
