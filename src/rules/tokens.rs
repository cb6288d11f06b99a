//! The token counter: the highest token granted, read and moved in the granting transaction,
//! and in single-process mode the durable reservation that keeps tokens unique across a crash.

use redb::ReadableTable;

use crate::base::error::Result;
use crate::rules::tables::COUNTER_KEY;
use crate::rules::tables::RESERVED_KEY;

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

pub(crate) fn read_counter(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(COUNTER_KEY)?.map_or(0, |v| v.value()))
}
