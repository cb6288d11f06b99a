//! The token counter: the highest token granted, read and moved in the granting transaction,
//! and in single-process mode the durable reservation that keeps tokens unique across a crash.

use redb::{Database, ReadableDatabase, ReadableTable};

use crate::db::META;
use crate::error::Result;

/// The key of the token counter in the meta table: the highest token granted.
pub(crate) const COUNTER_KEY: &str = "last_token";
/// Single-process mode: a durable bound on the tokens handed out (see `reservation`).
pub(crate) const RESERVED_KEY: &str = "reserved_token";
/// How many tokens one durable reservation covers.
const TOKEN_BLOCK: u64 = 4096;

/// The new durable bound on tokens when `token` passes the last reservation: a block beyond
/// `token`. A transaction that records one must be durable.
pub(crate) fn reservation(
    meta: &impl ReadableTable<&'static str, u64>,
    token: u64,
) -> Result<Option<u64>> {
    let reserved = meta.get(RESERVED_KEY)?.map_or(0, |v| v.value());
    Ok((token > reserved).then(|| token.saturating_add(TOKEN_BLOCK)))
}

/// After a crash in single-process mode the counter may be older than tokens handed out; they
/// are all at most the durable reservation, so the counter moves up to it.
pub(crate) fn restore_counter(db: &Database) -> Result<()> {
    {
        let txn = db.begin_read()?;
        let meta = txn.open_table(META)?;
        if meta.get(RESERVED_KEY)?.map_or(0, |v| v.value()) <= read_counter(&meta)? {
            return Ok(());
        }
    }
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        let reserved = meta.get(RESERVED_KEY)?.map_or(0, |v| v.value());
        if reserved <= read_counter(&meta)? {
            drop(meta);
            txn.abort()?;
            return Ok(());
        }
        meta.insert(COUNTER_KEY, reserved)?;
    }
    txn.commit()?;
    Ok(())
}

pub(crate) fn read_counter(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(COUNTER_KEY)?.map_or(0, |v| v.value()))
}
