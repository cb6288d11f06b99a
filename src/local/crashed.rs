//! The redo log a crash left, read by a read-only store (issue 35, docs/design/writes.md).
//!
//! When every process of a store that writes through the log dies (a crash, a power loss, a
//! kill), the writes they acknowledged are in the log, not in the store file. The next process
//! that may write recovers the log into the file before anything else (`log_user.rs`). A
//! read-only store cannot: it writes nothing. Until such a process comes, it reads the log
//! itself, what a recovery would write now ([`pending`]), laid over the store file: a get, a
//! fence read and a key listing answer what was acknowledged, as a writer's would after its
//! recovery (`fencelock get` after a crash reads the last acknowledged value, not an older one
//! from the file, nor a key that the log deleted).
//!
//! - **Only a log nobody writes.** The overlay is read when this store's reads do not go
//!   through a ring whose processes write through the log (`LocalEngine::log_reader` comes
//!   first), and when no live process uses the log: for a store of the ring, its log is not
//!   on; for a user who may not use the ring, no process uses the store's shared memory
//!   (`Liveness::maps_in_use`). A log that live processes write holds records that are not
//!   synced yet, which no read may show. Both are asked again after the scan: a process that
//!   turned the log on meanwhile may have written to it, and the scan is then thrown away.
//! - **Valid while the store file holds the log up to where it did.** What a scan found is
//!   kept with the position the store file held the log up to (`wal_applied`), and laid over a
//!   snapshot of the file only when the snapshot holds the log up to there: a recovery or a
//!   checkpoint moves that position on, in the commit that moves the log's records into the
//!   file, and the next read then scans again. A read is one snapshot: the position, the
//!   file's value and a stored value (over 64 KiB, in `BLOBS` until a recovery moves it into
//!   its key's value) are read together.
//! - **What it cannot.** A user who may not open the log's segments (they are read and
//!   written by the store's writers alone) reads the store file alone, as before. `info` and
//!   `verify` read the store file.

use std::collections::BTreeSet;
use std::sync::Arc;

use redb::ReadTransaction;

use crate::base::error::{Error, Result};
use crate::local::log_user::open_log;
use crate::local::LocalEngine;
use crate::rules::info::Fenced;
use crate::rules::query::{mismatched, Answer, Query};
use crate::rules::tables::{BLOBS, META, WAL_ID_KEY};
use crate::storage::wal::apply::{applied_position, opened, pending, Newer, Pending};

/// What a scan of a crash's log found ([`Pending`]), and the log's id.
#[derive(Debug)]
pub(crate) struct Crashed {
    id: u64,
    pending: Pending,
}

impl Crashed {
    /// Whether it holds for a snapshot whose log state ([`log_state`]) is `state`: the
    /// snapshot holds this log up to where the scan began.
    fn holds(&self, state: Option<(u64, u64)>) -> bool {
        state == Some((self.id, self.pending.from))
    }

    /// What it lays over a snapshot whose log state is `state`: `None` unless it holds there,
    /// or when the log holds nothing the file lacks.
    fn over(&self, state: Option<(u64, u64)>) -> Option<&Pending> {
        let pending = &self.pending;
        let empty = pending.keys.is_empty() && pending.fences.is_empty();
        (self.holds(state) && !empty).then_some(pending)
    }
}

impl LocalEngine {
    /// Runs `read` on a snapshot of the store file, with what the log a crash left lays over
    /// it (`None`: nothing), scanning that log first when the kept scan is not the snapshot's:
    /// for a read-only store. Any other store, and one a server serves, reads through its
    /// router instead (`routed`).
    fn read_over_crash<T>(
        &self,
        read: impl Fn(&ReadTransaction, Option<&Pending>) -> Result<T>,
        routed: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if !self.read_only || self.router.served(self) {
            return routed();
        }
        let kept = self.crashed.lock().clone();
        let first = self.read_within(self.bounded(None), |txn| {
            let state = log_state(txn)?;
            let Some((id, _)) = state else {
                return read(txn, None).map(Ok);
            };
            match kept.as_ref().filter(|kept| kept.holds(state)) {
                Some(kept) => read(txn, kept.over(state)).map(Ok),
                None => Ok(Err(id)),
            }
        });
        let answer = match first {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(id)) => self.scan_crashed(id).and_then(|scanned| {
                self.read_within(self.bounded(None), |txn| {
                    let state = log_state(txn)?;
                    read(
                        txn,
                        scanned.as_deref().and_then(|scanned| scanned.over(state)),
                    )
                })
            }),
            Err(err) => Err(err),
        };
        self.router.make_way(self);
        match answer {
            // A server took the file meanwhile: it answers.
            Err(Error::InUse) if self.router.served(self) => routed(),
            other => other,
        }
    }

    /// Scans the log `id` that a crash left and keeps what it found; `None` (nothing kept)
    /// while live processes may be writing the log, or when this user may not open it.
    fn scan_crashed(&self, id: u64) -> Result<Option<Arc<Crashed>>> {
        if self.log_in_use()? {
            return Ok(None);
        }
        let log = match open_log(&self.path, id) {
            Ok(log) => log,
            Err(Error::Io(err)) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                return Ok(None)
            }
            Err(err) => return Err(err),
        };
        let pending = self.read_within(self.bounded(None), |txn| pending(txn, &log))?;
        // A process that turned the log on meanwhile may have written records not synced yet.
        if self.log_in_use()? {
            return Ok(None);
        }
        let crashed = Arc::new(Crashed { id, pending });
        *self.crashed.lock() = Some(Arc::clone(&crashed));
        Ok(Some(crashed))
    }

    /// Whether live processes may be writing the log now: see the module's note.
    fn log_in_use(&self) -> Result<bool> {
        match self.router.member() {
            Some(member) => Ok(member.ring().log_on()),
            None => Ok(self.mode == redb::ConcurrencyMode::MultiWriter && self.live.maps_in_use()?),
        }
    }

    /// The value of `key`: the store file's, unless the log a crash left writes it (then that
    /// write's value, or `None` for its delete).
    pub(crate) fn value_over_crash(&self, key: &[u8]) -> Result<Option<Fenced>> {
        let read = |txn: &ReadTransaction, pending: Option<&Pending>| {
            Ok(match pending.and_then(|pending| pending.keys.get(key)) {
                None => match Query::Value(key.to_vec()).run(txn)? {
                    Answer::Value(value) => value,
                    other => return Err(mismatched(&other)),
                },
                Some(Newer::Deleted) => None,
                Some(Newer::Put { value, token }) => Some(Fenced {
                    value: value.clone(),
                    token: *token,
                }),
                Some(&Newer::Stored { blob, token }) => {
                    // There in a snapshot that holds the log up to where the scan began, as
                    // when the scan found it there.
                    let value = opened(txn.open_table(BLOBS))?
                        .map(|blobs| blobs.get(blob))
                        .transpose()?
                        .flatten()
                        .ok_or_else(|| {
                            Error::Corrupt(format!(
                                "the redo log's stored put of a key names a value the store \
                                 file does not hold (blob {blob:#x})"
                            ))
                        })?;
                    Some(Fenced {
                        value: value.value().to_vec(),
                        token,
                    })
                }
            })
        };
        self.read_over_crash(read, || self.router.value_of(self, key))
    }

    /// The highest token the fence `resource` accepted: the store file's, or the higher one
    /// the log a crash left raises it to.
    pub(crate) fn fence_over_crash(&self, resource: &str) -> Result<Option<u64>> {
        let read = |txn: &ReadTransaction, pending: Option<&Pending>| {
            if let Some(&token) = pending.and_then(|pending| pending.fences.get(resource)) {
                return Ok(Some(token));
            }
            match Query::Fence(resource.to_owned()).run(txn)? {
                Answer::Fence(token) => Ok(token),
                other => Err(mismatched(&other)),
            }
        };
        self.read_over_crash(read, || {
            self.router.fence_of(self, resource, self.bounded(None))
        })
    }

    /// The keys under `prefix` that hold a value: the store file's, with what the log a crash
    /// left writes laid over them.
    pub(crate) fn keys_over_crash(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let read = |txn: &ReadTransaction, pending: Option<&Pending>| {
            let stored = match Query::Keys(prefix.to_vec()).run(txn)? {
                Answer::Keys(keys) => keys,
                other => return Err(mismatched(&other)),
            };
            let Some(pending) = pending else {
                return Ok(stored);
            };
            let mut keys: BTreeSet<Vec<u8>> = stored.into_iter().collect();
            for (key, newer) in pending.keys.range(prefix.to_vec()..) {
                if !key.starts_with(prefix) {
                    break;
                }
                if matches!(newer, Newer::Deleted) {
                    keys.remove(key);
                } else {
                    keys.insert(key.clone());
                }
            }
            Ok(keys.into_iter().collect())
        };
        self.read_over_crash(read, || self.router.keys_of(self, prefix))
    }
}

/// The store's log id and the position its file holds the log up to, in `txn`: `None` for a
/// store that never had a log.
fn log_state(txn: &ReadTransaction) -> Result<Option<(u64, u64)>> {
    let Some(meta) = opened(txn.open_table(META))? else {
        return Ok(None);
    };
    let Some(id) = meta.get(WAL_ID_KEY)?.map(|id| id.value()) else {
        return Ok(None);
    };
    Ok(Some((id, applied_position(&meta)?)))
}
