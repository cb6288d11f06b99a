//! Fenced values and external fences, and the one admission rule they share.

use std::sync::Arc;

use redb::{ReadableTable, WriteTransaction};

use crate::clock;
use crate::commit::Applied;
use crate::db::{FENCES, LEASES, VALUES};
use crate::error::{Error, Result};
use crate::limits::{check_granted, check_key};
use crate::record::{decode_value, encode_value};
use crate::store::Inner;

/// The admission rule of every fenced write: a token lower than the highest that the key or
/// resource accepted is refused with [`Error::StaleToken`]; an equal or higher one passes.
pub(crate) fn admit(token: u64, highest: Option<u64>) -> Result<()> {
    match highest {
        Some(highest) if token < highest => Err(Error::StaleToken { token, highest }),
        _ => Ok(()),
    }
}

/// Writes (or, with `None`, deletes) `key` with `token` if no higher token was accepted for it.
/// `granted` is the highest token granted; a token above it is a forgery. Returns whether the key
/// held a value before.
pub(crate) fn put_fenced(
    txn: &WriteTransaction,
    key: &[u8],
    value: Option<&[u8]>,
    token: u64,
    granted: u64,
) -> Result<bool> {
    check_granted(token, granted)?;
    let mut values = txn.open_table(VALUES)?;
    let existed = match values.get(key)? {
        Some(record) => {
            let (highest, value) = decode_value(record.value())?;
            admit(token, Some(highest))?;
            value.is_some()
        }
        None => false,
    };
    values.insert(key, encode_value(token, value).as_slice())?;
    Ok(existed)
}

/// Records `token` as the highest the external fence `resource` has seen, if it passes
/// [`admit`]; an equal token passes without a write. `granted` is the highest token granted.
pub(crate) fn record_fence(
    txn: &WriteTransaction,
    resource: &str,
    token: u64,
    granted: u64,
) -> Result<()> {
    check_granted(token, granted)?;
    let mut fences = txn.open_table(FENCES)?;
    let highest = fences.get(resource)?.map(|h| h.value());
    admit(token, highest)?;
    if highest != Some(token) {
        fences.insert(resource, token)?;
    }
    Ok(())
}

impl Inner {
    /// Writes `value` under `key` with `token`, checking in the same transaction that the lease
    /// `token` of `name` is still current.
    pub(crate) fn holder_put(
        self: &Arc<Self>,
        name: &str,
        token: u64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<bool> {
        check_key(key)?;
        if let Some(value) = value {
            self.check_value(value)?;
        }
        let (name, key, value) = (name.to_owned(), key.to_vec(), value.map(<[u8]>::to_vec));
        let me = Arc::clone(self);
        self.write(None, move |txn| {
            me.check_current(&txn.open_table(LEASES)?, &name, token, clock::now_ns())?;
            let existed = put_fenced(txn, &key, value.as_deref(), token, token)?;
            Ok(Applied::new(existed))
        })
    }
}
