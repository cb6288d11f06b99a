//! A holder's checked write.

use std::sync::Arc;

use crate::base::error::Result;
use crate::base::limits::check_key;
use crate::rules::ops::{unexpected, Done, Op};
use crate::store::Inner;

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
