//! The kinds of lock: exclusive, shared, and a semaphore of N permits, and the bound on how many
//! holders one name has at once.

use crate::base::error::{Error, Result};

/// How a name is held.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{Error, Kind};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let ttl = Duration::from_secs(30);
/// let _a = store.acquire_kind("config", Kind::Shared, ttl)?;
/// let _b = store.acquire_kind("config", Kind::Shared, ttl)?;
/// assert!(matches!(store.acquire("config", ttl), Err(Error::Locked { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// One holder at a time: [`crate::Store::acquire`].
    Exclusive,
    /// Any number of shared holders at once (up to [`MAX_HOLDERS`]), and none while an
    /// exclusive holder holds the name; an exclusive acquire waits until every shared holder let
    /// go. A shared holder reads: its holder-checked writes are refused (see
    /// [`crate::Holder::put`]).
    Shared,
    /// Up to this many holders at once (1 to [`MAX_HOLDERS`]), each with a permit of its own.
    /// The count is stored with the name while permits are live; asking for another count then
    /// is refused with [`Error::PermitsMismatch`].
    Semaphore(u32),
}

impl Kind {
    /// `exclusive`, `shared` or `semaphore(N)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::Kind;
    /// assert_eq!(Kind::Semaphore(4).describe(), "semaphore(4)");
    /// assert_eq!(Kind::Shared.describe(), "shared");
    /// ```
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            Kind::Exclusive => "exclusive".into(),
            Kind::Shared => "shared".into(),
            Kind::Semaphore(permits) => format!("semaphore({permits})"),
        }
    }
}

/// The most holders a name has at once: the largest semaphore, and the most shared holders.
pub const MAX_HOLDERS: u32 = 1024;

pub(crate) fn check_kind(kind: Kind) -> Result<()> {
    match kind {
        Kind::Semaphore(permits) if permits == 0 || permits > MAX_HOLDERS => Err(Error::invalid(
            format!("a semaphore has 1 to {MAX_HOLDERS} permits, not {permits}"),
        )),
        _ => Ok(()),
    }
}
