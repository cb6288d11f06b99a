//! Tokens: the counter (the highest token granted, read and moved in the granting transaction),
//! the durable reservation that keeps tokens unique across a crash where grants commit without
//! an fsync, and the admission rule of every fenced write.

use redb::ReadableTable;

use crate::base::error::{Error, Result};
use crate::rules::tables::COUNTER_KEY;
use crate::rules::tables::{RESERVED_KEY, SEALED_KEY};

/// How many tokens one durable reservation covers.
const TOKEN_BLOCK: u64 = 4096;

/// The new durable bound on tokens when `token` passes the last reservation: a block beyond
/// `token`. A transaction that records one must be durable.
pub(crate) fn reservation(
    meta: &impl ReadableTable<&'static str, u64>,
    token: u64,
) -> Result<Option<u64>> {
    let reserved = reserved(meta)?;
    Ok((token > reserved).then(|| token.saturating_add(TOKEN_BLOCK)))
}

/// The durable bound on the tokens handed out where grants do not write the counter (0 for
/// none yet).
pub(crate) fn reserved(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(RESERVED_KEY)?.map_or(0, |v| v.value()))
}

/// The reservation the last user of a store's shared memory sealed, 0 for none (`SEALED_KEY`).
pub(crate) fn sealed(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(SEALED_KEY)?.map_or(0, |v| v.value()))
}

pub(crate) fn read_counter(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(COUNTER_KEY)?.map_or(0, |v| v.value()))
}

/// The admission rule of every fenced write: a token lower than the highest that the key or
/// resource accepted is refused with [`Error::StaleToken`]; an equal or higher one passes.
pub(crate) fn admit(token: u64, highest: Option<u64>) -> Result<()> {
    match highest {
        Some(highest) if token < highest => Err(Error::StaleToken { token, highest }),
        _ => Ok(()),
    }
}
