//! Limits of names, values and lease times, and the checks of arguments against them: each
//! refuses with [`Error::InvalidArgument`] before anything is read or written.

use std::time::Duration;

use crate::base::error::{Error, Result};

/// Longest lock name, fenced key or fence resource name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;
/// Default limit of a fenced value, in bytes.
pub const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;
/// Hard limit of a fenced value, in bytes (redb stores at most 3 GiB a value).
pub const MAX_VALUE_LEN_LIMIT: usize = 1 << 30;
/// Shortest lease.
pub const MIN_TTL: Duration = Duration::from_millis(1);
/// Shortest lease [`crate::Holder::keep_alive`] renews: it renews every third of the TTL.
pub const MIN_KEEP_ALIVE_TTL: Duration = Duration::from_millis(3);
/// Longest lease.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

pub(crate) fn check_token(token: u64) -> Result<()> {
    if token == 0 {
        return Err(Error::invalid("token 0 is never granted"));
    }
    Ok(())
}

pub(crate) fn check_granted(token: u64, granted: u64) -> Result<()> {
    if token > granted {
        return Err(Error::invalid(format!(
            "token {token} was never granted by this store (the highest granted is {granted})"
        )));
    }
    Ok(())
}

pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} is {} bytes; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if name.contains('\0') {
        return Err(Error::invalid(format!("{what} contains a NUL byte")));
    }
    Ok(())
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key is empty"));
    }
    if key.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "key is {} bytes; the limit is {MAX_NAME_LEN}",
            key.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "ttl {ttl:?} is outside {MIN_TTL:?} to {MAX_TTL:?}"
        )));
    }
    Ok(())
}

pub(crate) fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
