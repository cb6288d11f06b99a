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
//!   kept with the position the store file held the log up to (`wal_applied`), and read only
//!   while it still does: a recovery or a checkpoint moves that position on, in the commit
//!   that moves the log's records into the file, and the next read then reads again.
//! - **Stored values** (over 64 KiB) are read from `BLOBS` at each get, in a snapshot that
//!   still holds the log up to the scan's position (a recovery removes them in the commit that
//!   moves them into the key's value; the file then holds it).
//! - **What it cannot.** A user who may not open the log's segments (they are read and
//!   written by the store's writers alone) reads the store file alone, as before. `info` and
//!   `verify` read the store file.

use std::sync::Arc;

use redb::ReadTransaction;

use crate::base::error::{Error, Result};
use crate::local::log_user::open_log;
use crate::local::LocalEngine;
use crate::rules::info::Fenced;
use crate::rules::tables::{BLOBS, META, WAL_ID_KEY};
use crate::storage::wal::apply::{applied_position, opened, pending, Newer, Pending};

/// What a scan of a crash's log found ([`Pending`]), and the log's id.
#[derive(Debug)]
pub(crate) struct Crashed {
    id: u64,
    pending: Pending,
}

impl LocalEngine {
    /// The log a crash left, as a read of this store lays it over the store file: `None` when
    /// there is none to read (not a read-only store, a store without a log, a log live
    /// processes write, a user who may not open it), or the log holds nothing the file lacks.
    fn crashed(&self) -> Result<Option<Arc<Crashed>>> {
        if !self.read_only || self.router.served(self) {
            return Ok(None);
        }
        let Some((id, from)) = self.read_within(self.bounded(None), log_state)? else {
            return Ok(None);
        };
        if let Some(kept) = self.crashed.lock().as_ref() {
            if kept.id == id && kept.pending.from == from {
                return Ok(Some(Arc::clone(kept)).filter(|kept| !kept.is_empty()));
            }
        }
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
        if self.log_in_use()? {
            return Ok(None);
        }
        let crashed = Arc::new(Crashed { id, pending });
        *self.crashed.lock() = Some(Arc::clone(&crashed));
        Ok(Some(crashed).filter(|crashed| !crashed.is_empty()))
    }

    /// Whether live processes may be writing the log now: see the module's note.
    fn log_in_use(&self) -> Result<bool> {
        match self.router.member() {
            Some(member) => Ok(member.ring().log_on()),
            None => Ok(self.mode == redb::ConcurrencyMode::MultiWriter && self.live.maps_in_use()?),
        }
    }

    /// The value of `key` read from the store file (its router's), unless the log a crash
    /// left writes it: then that write's value, or `None` for its delete.
    pub(crate) fn value_over_crash(&self, key: &[u8]) -> Result<Option<Fenced>> {
        if let Some(crashed) = self.crashed()? {
            match crashed.pending.keys.get(key) {
                None => {}
                Some(Newer::Deleted) => return Ok(None),
                Some(Newer::Put { value, token }) => {
                    return Ok(Some(Fenced {
                        value: value.clone(),
                        token: *token,
                    }))
                }
                Some(&Newer::Stored { blob, token }) => {
                    if let Some(value) = self.stored_value(&crashed, blob)? {
                        return Ok(Some(Fenced { value, token }));
                    }
                }
            }
        }
        self.router.value_of(self, key)
    }

    /// The stored value `blob` that `crashed` names, read in a snapshot that still holds the
    /// log up to where `crashed` was read from; `None` once a recovery moved the log on (it
    /// removed the value in the commit that made it the key's, which the file then holds).
    fn stored_value(&self, crashed: &Crashed, blob: u64) -> Result<Option<Vec<u8>>> {
        self.read_within(self.bounded(None), |txn| {
            if log_state(txn)?.is_none_or(|(_, now)| now != crashed.pending.from) {
                return Ok(None);
            }
            let Some(blobs) = opened(txn.open_table(BLOBS))? else {
                return Ok(None);
            };
            Ok(blobs.get(blob)?.map(|value| value.value().to_vec()))
        })
    }

    /// The highest token the fence `resource` accepted: the store file's, or the higher one
    /// the log a crash left raises it to.
    pub(crate) fn fence_over_crash(&self, resource: &str) -> Result<Option<u64>> {
        let crashed = self.crashed()?;
        if let Some(&token) = crashed
            .as_ref()
            .and_then(|crashed| crashed.pending.fences.get(resource))
        {
            return Ok(Some(token));
        }
        self.router.fence_of(self, resource, self.bounded(None))
    }

    /// The keys under `prefix` that hold a value, `stored` (the store file's) with what the log
    /// a crash left writes laid over them.
    pub(crate) fn crashed_keys(&self, prefix: &[u8], stored: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        let Some(crashed) = self.crashed()? else {
            return Ok(stored);
        };
        let mut keys: std::collections::BTreeSet<Vec<u8>> = stored.into_iter().collect();
        for (key, newer) in &crashed.pending.keys {
            if !key.starts_with(prefix) {
                continue;
            }
            if matches!(newer, Newer::Deleted) {
                keys.remove(key);
            } else {
                keys.insert(key.clone());
            }
        }
        Ok(keys.into_iter().collect())
    }
}

impl Crashed {
    fn is_empty(&self) -> bool {
        self.pending.keys.is_empty() && self.pending.fences.is_empty()
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
