//! Fenced values and external fences: the one admission rule they share, and a holder's
//! checked write.

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::limits::check_key;
use crate::ops::{unexpected, Done, Op};
use crate::store::Inner;

/// The admission rule of every fenced write: a token lower than the highest that the key or
/// resource accepted is refused with [`Error::StaleToken`]; an equal or higher one passes.
pub(crate) fn admit(token: u64, highest: Option<u64>) -> Result<()> {
    match highest {
        Some(highest) if token < highest => Err(Error::StaleToken { token, highest }),
        _ => Ok(()),
    }
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
        let op = Op::Put {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            token,
            lease: Some(name.to_owned()),
        };
        match self.submit(op, None)? {
            Done::Put { existed } => Ok(existed),
            other => Err(unexpected(&other)),
        }
    }
}
