//! What a crash image must satisfy, given the marks before the crash point.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

use fencelock::{Error, Options, Store};

use super::images::CrashPoint;
use super::recording::{Event, Mark, Op, Recording, Shown};

/// One operation of the workload: where its begin and ack marks are in the log.
#[derive(Debug, Clone)]
struct Recorded {
    id: String,
    begin: usize,
    ack: Option<usize>,
    /// From the ack when there is one (a grant's token is known only then).
    op: Op,
}

impl Recorded {
    fn acked_before(&self, bound: usize) -> bool {
        self.ack.is_some_and(|ack| ack < bound)
    }

    /// The key it writes and whether it writes a value (`false`: a delete).
    fn key(&self) -> Option<(&str, bool)> {
        match &self.op {
            Op::Put { key, .. } | Op::GrantPut { key, .. } => Some((key, true)),
            Op::Delete { key, .. } => Some((key, false)),
            _ => None,
        }
    }

    /// The token it wrote with, if known (an unacknowledged grant-put's is not).
    fn known_token(&self) -> Option<u64> {
        match self.op {
            Op::GrantPut { token: 0, .. } | Op::Grant { token: 0, .. } => None,
            ref op => Some(op.token()),
        }
    }
}

/// The workload's operations in a recording, and what the checker derives from them.
pub struct History {
    ops: Vec<Recorded>,
    created: Vec<usize>,
    /// What read-only reads showed, and where their marks are in the log.
    shown: Vec<(usize, Shown)>,
}

/// Runs `f`, turning a panic out of it into a violation.
fn caught<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, Violation> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        violation("panic", format!("{what} panicked: {message}"))
    })
}

/// The value an operation writes: its id, and with `pad` > 0, `|` and `pad` bytes of the id
/// over and over (so that a value tells its writer, and whether it is whole).
pub fn value_of(id: &str, pad: usize) -> Vec<u8> {
    let mut value = id.as_bytes().to_vec();
    if pad > 0 {
        value.push(b'|');
        value.extend(id.bytes().cycle().take(pad));
    }
    value
}

/// The id of the operation that wrote `value` ([`value_of`]); `None` when it is not one that an
/// operation writes.
pub fn writer_of(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let id = text.split('|').next()?;
    (value_of(id, value.len().saturating_sub(id.len() + 1)) == value).then(|| id.to_owned())
}

/// Why an image failed.
#[derive(Debug, Clone)]
pub struct Violation {
    /// A short class: `panic`, `open error`, `not a store`, `counter`, `lost write`, ...
    pub class: &'static str,
    pub detail: String,
}

fn violation(class: &'static str, detail: String) -> Violation {
    Violation { class, detail }
}

impl History {
    pub fn new(recording: &Recording) -> History {
        let mut ops: Vec<Recorded> = Vec::new();
        let mut index = BTreeMap::new();
        let mut created = Vec::new();
        let mut shown = Vec::new();
        for (at, event) in recording.events.iter().enumerate() {
            match event {
                Event::Mark(Mark::Created) => created.push(at),
                Event::Mark(Mark::Begin { id, op }) => {
                    index.insert(id.clone(), ops.len());
                    ops.push(Recorded {
                        id: id.clone(),
                        begin: at,
                        ack: None,
                        op: op.clone(),
                    });
                }
                Event::Mark(Mark::Ack { id, op }) => {
                    let recorded = &mut ops[index[id]];
                    recorded.ack = Some(at);
                    recorded.op = op.clone();
                }
                Event::Mark(Mark::Shown(what)) => shown.push((at, what.clone())),
                _ => {}
            }
        }
        History {
            ops,
            created,
            shown,
        }
    }

    /// Where the last process that marked its open did so (the reader, when one ran last).
    pub fn last_created(&self) -> Option<usize> {
        self.created.last().copied()
    }

    /// How many reads showed a write that no acknowledgement before them accounts for: a
    /// value whose write was not acknowledged, nothing where an acknowledged value was, a
    /// fence above every acknowledged one. Such a read shows what only the log held, not
    /// synced by its writer.
    pub fn shown_unacknowledged(&self) -> usize {
        self.shown
            .iter()
            .filter(|(at, what)| match what {
                Shown::Value { id, .. } => !self
                    .ops
                    .iter()
                    .any(|op| op.id == *id && op.acked_before(*at)),
                Shown::Nothing { key } => self
                    .ops
                    .iter()
                    .filter(|op| op.acked_before(*at) && op.key().is_some_and(|k| k.0 == key))
                    .max_by_key(|op| op.begin)
                    .is_some_and(|op| op.key().is_some_and(|k| k.1)),
                Shown::NoFence { .. } => false,
                Shown::Fence { resource, token } => !self.ops.iter().any(|op| {
                    op.acked_before(*at)
                        && matches!(&op.op, Op::Fence { resource: r, token: t }
                            if r == resource && t >= token)
                }),
            })
            .count()
    }

    /// Whether the store had been acknowledged as created before sync k+1 of `point`: if not,
    /// the point is inside store creation.
    pub fn created_before(&self, point: &CrashPoint) -> bool {
        self.created.iter().any(|&at| at < point.next_sync)
    }

    /// How many operations were acknowledged before the crash point's next sync.
    pub fn acks_before(&self, point: &CrashPoint) -> usize {
        self.ops
            .iter()
            .filter(|op| op.acked_before(point.next_sync))
            .count()
    }

    /// The highest token acknowledged (granted, or carried by a write) or shown by a read
    /// before `bound`.
    fn highest_acked(&self, bound: usize) -> u64 {
        let shown = self
            .shown
            .iter()
            .filter(|(at, _)| *at < bound)
            .map(|(_, what)| match what {
                Shown::Value { token, .. } | Shown::Fence { token, .. } => *token,
                Shown::Nothing { .. } | Shown::NoFence { .. } => 0,
            });
        self.ops
            .iter()
            .filter(|op| op.acked_before(bound))
            .map(|op| op.op.token())
            .chain(shown)
            .max()
            .unwrap_or(0)
    }

    /// Opens the image at `path` and checks it against the marks before `point`'s next sync:
    /// the open succeeds; the counter is at or above every acknowledged token; every key holds
    /// the last acknowledged write, or one that may have committed after it; every fence is at
    /// or above its last acknowledged token; what a read showed is still there, unless a later
    /// operation may have changed it; `verify()` passes; a new grant is above every
    /// acknowledged or shown token, and a write with it is accepted.
    pub fn check(
        &self,
        path: &Path,
        options: &Options,
        point: &CrashPoint,
    ) -> Result<(), Violation> {
        let store =
            caught("open", || Store::open_with(path, options))?.map_err(|err| match err {
                Error::NotAStore(_) => violation("not a store", format!("open: {err}")),
                err => violation("open error", format!("open: {err:?}")),
            })?;
        // A store whose operation panicked is leaked, not dropped: a second panic in its drop
        // while the first unwinds would abort the whole test binary.
        let store = ManuallyDrop::new(store);
        let checked = caught("an operation", || self.check_store(&store, point))?;
        caught("dropping the store", || {
            drop(ManuallyDrop::into_inner(store));
        })?;
        checked
    }

    fn check_store(&self, store: &Store, point: &CrashPoint) -> Result<(), Violation> {
        let failed =
            |what: &str, err: Error| violation("operation error", format!("{what}: {err:?}"));
        let bound = point.next_sync;
        let highest = self.highest_acked(bound);
        let info = store.info().map_err(|e| failed("info", e))?;
        if info.last_token < highest {
            return Err(violation(
                "counter",
                format!(
                    "the counter is {} but token {highest} was acknowledged or shown",
                    info.last_token
                ),
            ));
        }
        self.check_values(store, bound)?;
        self.check_fences(store, bound)?;
        self.check_shown(store, bound)?;
        store.verify().map_err(|e| failed("verify", e))?;
        let holder = store
            .acquire("crash-check", Duration::from_secs(3600))
            .map_err(|e| failed("acquire", e))?;
        if holder.token() <= highest {
            return Err(violation(
                "counter",
                format!(
                    "a new grant got token {}, not above the acknowledged or shown {highest}",
                    holder.token()
                ),
            ));
        }
        holder
            .put(b"crash-check", b"after the crash")
            .map_err(|e| failed("put after the crash", e))?;
        Ok(())
    }

    fn check_values(&self, store: &Store, bound: usize) -> Result<(), Violation> {
        let keys: BTreeSet<&str> = self
            .ops
            .iter()
            .filter_map(|op| op.key())
            .map(|k| k.0)
            .collect();
        for key in keys {
            let found = store
                .get(key.as_bytes())
                .map_err(|e| violation("operation error", format!("get {key}: {e:?}")))?;
            let found = found.map(|fenced| {
                let value = writer_of(&fenced.value).unwrap_or_else(|| {
                    format!(
                        "not a value written: {:?}",
                        String::from_utf8_lossy(&fenced.value)
                    )
                });
                (value, fenced.token)
            });
            self.judge_value(key, found, bound)?;
        }
        Ok(())
    }

    /// Whether `found` (the id of the operation whose value it is, and its token; `None`: no
    /// value) is what key `key` may hold given the marks before `bound`: the last acknowledged
    /// write, or one that may have committed after it.
    fn judge_value(
        &self,
        key: &str,
        found: Option<(String, u64)>,
        bound: usize,
    ) -> Result<(), Violation> {
        let on_key: Vec<&Recorded> = self
            .ops
            .iter()
            .filter(|op| op.begin < bound && op.key().is_some_and(|(k, _)| k == key))
            .collect();
        let acked: Vec<&Recorded> = on_key
            .iter()
            .copied()
            .filter(|op| op.acked_before(bound))
            .collect();
        // An operation is certainly overwritten when an acknowledged one on the key began
        // after it returned; any other may be the key's last write.
        let possible: Vec<&Recorded> = on_key
            .iter()
            .copied()
            .filter(|x| {
                !acked
                    .iter()
                    .any(|y| y.id != x.id && x.ack.is_some_and(|a| a < y.begin))
            })
            .collect();
        let describe = || {
            let acked: Vec<String> = acked
                .iter()
                .map(|op| format!("{} {}", op.id, op.op.render()))
                .collect();
            format!(
                "acknowledged before the crash point: [{}]",
                acked.join(", ")
            )
        };
        match found {
            None => {
                if !acked.is_empty() && !possible.iter().any(|op| op.key() == Some((key, false))) {
                    return Err(violation(
                        "lost write",
                        format!("key {key} holds nothing; {}", describe()),
                    ));
                }
            }
            Some((value, token)) => {
                let writer = possible
                    .iter()
                    .find(|op| op.id == value && op.key() == Some((key, true)));
                match writer {
                    Some(op) if op.known_token().is_none_or(|t| t == token) => {}
                    Some(op) => {
                        return Err(violation(
                            "wrong token",
                            format!(
                                "key {key} holds {value} with token {} but {} wrote it with {}",
                                token,
                                op.id,
                                op.op.token()
                            ),
                        ))
                    }
                    None => {
                        return Err(violation(
                            if acked.is_empty() {
                                "phantom write"
                            } else {
                                "lost write"
                            },
                            format!(
                            "key {key} holds {value:?} (token {}), not a possible last write; {}",
                            token,
                            describe()
                        ),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    fn check_fences(&self, store: &Store, bound: usize) -> Result<(), Violation> {
        let resources: BTreeSet<&str> = self
            .ops
            .iter()
            .filter_map(|op| match &op.op {
                Op::Fence { resource, .. } if op.begin < bound => Some(resource.as_str()),
                _ => None,
            })
            .collect();
        for resource in resources {
            let found = store
                .fence_token(resource)
                .map_err(|e| violation("operation error", format!("fence_token: {e:?}")))?;
            self.judge_fence(resource, found, bound)?;
        }
        Ok(())
    }

    /// Whether `found` is what the fence of `resource` may be given the marks before `bound`: at
    /// or above its last acknowledged token, and at most the highest attempted.
    fn judge_fence(
        &self,
        resource: &str,
        found: Option<u64>,
        bound: usize,
    ) -> Result<(), Violation> {
        let tokens = |of: &dyn Fn(&Recorded) -> bool| {
            self.ops
                .iter()
                .filter(|op| of(op))
                .filter_map(|op| match &op.op {
                    Op::Fence { resource: r, token } if r == resource => Some(*token),
                    _ => None,
                })
                .max()
        };
        let most = tokens(&|op| op.begin < bound);
        let least = tokens(&|op| op.acked_before(bound));
        let fine = match (found, least) {
            (None, None) => true,
            (None, Some(_)) => false,
            (Some(t), least) => most.is_some_and(|most| t <= most) && least.is_none_or(|l| t >= l),
        };
        if fine {
            return Ok(());
        }
        Err(violation(
            "lost fence",
            format!(
                "fence {resource} is at {found:?}; acknowledged up to {least:?}, attempted up to {most:?}"
            ),
        ))
    }

    /// What each read showed, against the marks before it: a read shows every write
    /// acknowledged before it began, and nothing that was never written. (A read's mark comes
    /// after the read, so this bound is generous by the read's own duration.)
    pub fn read_violations(&self) -> Vec<Violation> {
        self.shown
            .iter()
            .filter_map(|(at, what)| {
                let judged = match what {
                    Shown::Value { key, id, token } => {
                        self.judge_value(key, Some((id.clone(), *token)), *at)
                    }
                    Shown::Nothing { key } => self.judge_value(key, None, *at),
                    Shown::Fence { resource, token } => {
                        self.judge_fence(resource, Some(*token), *at)
                    }
                    Shown::NoFence { resource } => self.judge_fence(resource, None, *at),
                };
                judged.err().map(|wrong| Violation {
                    class: wrong.class,
                    detail: format!("a read showed {}: {}", what.render(), wrong.detail),
                })
            })
            .collect()
    }

    /// What each read before `bound` showed is what the image holds, unless an operation on
    /// the key began after the read (`check_values` judges those); a fence is at least what a
    /// read showed.
    fn check_shown(&self, store: &Store, bound: usize) -> Result<(), Violation> {
        for (at, what) in self.shown.iter().filter(|(at, _)| *at < bound) {
            let changed_since = |key: &str| {
                self.ops.iter().any(|op| {
                    op.begin > *at && op.begin < bound && op.key().is_some_and(|k| k.0 == key)
                })
            };
            let lost = |found: String| {
                violation(
                    "lost shown write",
                    format!("a read showed {}; the image holds {found}", what.render()),
                )
            };
            match what {
                Shown::Value { key, .. } | Shown::Nothing { key } if !changed_since(key) => {
                    let found = store
                        .get(key.as_bytes())
                        .map_err(|e| violation("operation error", format!("get {key}: {e:?}")))?;
                    let held = match &found {
                        None => Shown::Nothing { key: key.clone() },
                        Some(fenced) => Shown::Value {
                            key: key.clone(),
                            id: writer_of(&fenced.value).unwrap_or_else(|| "?".to_owned()),
                            token: fenced.token,
                        },
                    };
                    if held != *what {
                        return Err(lost(held.render()));
                    }
                }
                Shown::Fence { resource, token } => {
                    let found = store
                        .fence_token(resource)
                        .map_err(|e| violation("operation error", format!("fence_token: {e:?}")))?;
                    if found.is_none_or(|found| found < *token) {
                        return Err(lost(format!("fence {resource} at {found:?}")));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
