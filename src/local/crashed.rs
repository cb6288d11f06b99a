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
//!   first), and when no live process uses the store's shared memory (`Liveness::maps_in_use`:
//!   the store file's locks, which show the processes of every ring, those of another
//!   `/dev/shm` too), nor this store's ring's log. A log that live processes write holds
//!   records that are not synced yet, which no read may show: while they live, a read-only
//!   store outside their ring reads the store file alone, as before. Both are asked again
//!   after the scan: a process that set the log up meanwhile may have written to it, and the
//!   scan is then thrown away.
//! - **Synced before it is shown.** The records a scan found are synced (`fdatasync` of their
//!   segments, the directory's names too) before a read shows them, as a recovery's commit
//!   would make them durable: those of a writer that died before its sync, which a power loss
//!   could otherwise take back after a read showed them.
//! - **Valid while no process set the log up since.** What a scan found is kept with the log
//!   state of the snapshot it was read in: the file's position in the log (`wal_applied`) and
//!   the recoveries committed (`wal_recoveries`). A process writes the log only after its ring
//!   recovered it, which counts one more recovery, in the commit that moves the log's records
//!   into the file (or none, when there were none), and the next read then scans again. A read
//!   is one snapshot: the log state, the file's value and a stored value (over 64 KiB, in
//!   `BLOBS` until a recovery moves it into its key's value) are read together.
//! - **What it cannot.** A user who may not read the log's segments reads the store file
//!   alone, as before (segments are opened for reading only). `info` and `verify` read the
//!   store file. A log that a scan refuses (a damaged record) fails the read, as it would fail
//!   the recovery.

use std::collections::BTreeSet;
use std::sync::Arc;

use redb::ReadTransaction;

use crate::base::error::{Error, Result};
use crate::local::log_user::open_log_to_read;
use crate::local::LocalEngine;
use crate::rules::info::Fenced;
use crate::rules::query::{mismatched, Answer, Query};
use crate::rules::tables::{BLOBS, META, WAL_ID_KEY};
use crate::storage::wal::apply::{applied_position, opened, pending, recoveries, Newer, Pending};

/// What a scan of a crash's log found ([`Pending`]), and the log's id.
#[derive(Debug)]
pub(crate) struct Crashed {
    id: u64,
    pending: Pending,
}

impl Crashed {
    /// Whether it holds for a snapshot whose log state ([`log_state`]) is `state`: no
    /// recovery was committed since the scan (a process writes the log only after its ring's
    /// recovery, which leaves the file's position in the log where it was when the log held
    /// nothing to recover), and the snapshot holds this log up to where the scan began (which
    /// every recovery and checkpoint with records to move changes, those of a binary that
    /// counts no recoveries among them).
    fn holds(&self, state: Option<LogState>) -> bool {
        state
            == Some(LogState {
                id: self.id,
                applied: self.pending.from,
                recoveries: self.pending.recoveries,
            })
    }

    /// What it lays over a snapshot whose log state is `state`: `None` unless it holds there,
    /// or when the log holds nothing the file lacks.
    fn over(&self, state: Option<LogState>) -> Option<&Pending> {
        (self.holds(state) && !self.pending.is_empty()).then_some(&self.pending)
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
            let Some(LogState { id, .. }) = state else {
                return read(txn, None).map(Ok);
            };
            if let Some(kept) = kept.as_deref().filter(|kept| kept.holds(state)) {
                return read(txn, kept.over(state)).map(Ok);
            }
            if self.log_in_use()? {
                // Live processes: the file alone (see `log_in_use`).
                return read(txn, None).map(Ok);
            }
            Ok(Err(id))
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
    /// while live processes may be writing the log, or when this user may not read it.
    fn scan_crashed(&self, id: u64) -> Result<Option<Arc<Crashed>>> {
        // What was kept no longer holds: gone whatever this finds.
        *self.crashed.lock() = None;
        if self.log_in_use()? {
            return Ok(None);
        }
        let scanned = open_log_to_read(&self.path, id).and_then(|log| {
            let pending = self.read_within(self.bounded(None), |txn| pending(txn, &log))?;
            // What it shows is synced first, as a recovery's commit would make it durable:
            // records of writers that died before their sync, which no crash may take back
            // once a read showed them.
            if !pending.is_empty() {
                log.sync(pending.from, pending.end)?;
            }
            Ok(pending)
        });
        // A process that turned the log on meanwhile may have written records not synced yet,
        // or retired segments from under the scan: the file alone, as while it writes.
        if self.log_in_use()? {
            return Ok(None);
        }
        let pending = match scanned {
            Ok(pending) => pending,
            Err(Error::Io(err)) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                return Ok(None)
            }
            Err(err) => return Err(err),
        };
        let crashed = Arc::new(Crashed { id, pending });
        *self.crashed.lock() = Some(Arc::clone(&crashed));
        Ok(Some(crashed))
    }

    /// Whether live processes may be writing the log now: any process that uses the store's
    /// shared memory, seen in the store file's locks (so in another ring too: another
    /// `/dev/shm`, or a ring file removed from under its processes), or this store's ring's
    /// log turned on.
    fn log_in_use(&self) -> Result<bool> {
        if self.mode != redb::ConcurrencyMode::MultiWriter {
            // A single-process store holds the file alone.
            return Ok(false);
        }
        if self.live.maps_in_use()? {
            return Ok(true);
        }
        Ok(self
            .router
            .member()
            .is_some_and(|member| member.ring().log_on()))
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

/// What says, of a snapshot of the store file, whether a scan of its log holds there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogState {
    /// The log's id.
    id: u64,
    /// The position the file holds the log up to (`wal_applied`).
    applied: u64,
    /// The recoveries committed (`wal_recoveries`).
    recoveries: u64,
}

/// The store's log state in `txn`: `None` for a store that never had a log.
fn log_state(txn: &ReadTransaction) -> Result<Option<LogState>> {
    let Some(meta) = opened(txn.open_table(META))? else {
        return Ok(None);
    };
    let Some(id) = meta.get(WAL_ID_KEY)?.map(|id| id.value()) else {
        return Ok(None);
    };
    Ok(Some(LogState {
        id,
        applied: applied_position(&meta)?,
        recoveries: recoveries(&meta)?,
    }))
}
