//! Which engine a [`crate::Store`] or [`crate::Holder`] runs on: the local file's, or (with
//! the `etcd` feature) an etcd cluster's. Each public method of the two types starts with
//! [`on_etcd!`], which hands an etcd store's call to `src/etcd/`; what follows it is the local
//! engine's code, reached through `Deref` as before.

use std::ops::Deref;

#[cfg(feature = "etcd")]
pub(crate) type Remote = std::sync::Arc<crate::etcd::Remote>;
#[cfg(feature = "etcd")]
pub(crate) type RemoteLease = std::sync::Arc<crate::etcd::EtcdLease>;
#[cfg(not(feature = "etcd"))]
pub(crate) type Remote = std::convert::Infallible;
#[cfg(not(feature = "etcd"))]
pub(crate) type RemoteLease = std::convert::Infallible;

#[derive(Clone)]
pub(crate) enum Backend<L, R> {
    Local(L),
    /// Never built without the `etcd` feature (`R` is then uninhabited).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Etcd(R),
}

impl<L, R> Deref for Backend<L, R> {
    type Target = L;

    fn deref(&self) -> &L {
        match self {
            Backend::Local(local) => local,
            // Every public method dispatches an etcd store first (`on_etcd!`).
            Backend::Etcd(_) => unreachable!("an etcd store reached the local engine"),
        }
    }
}

/// `on_etcd!(self.inner, remote => remote.call(..))`: returns the etcd backend's answer when
/// the store or holder is on etcd; does nothing otherwise (and nothing at all without the
/// feature).
macro_rules! on_etcd {
    ($backend:expr, $remote:ident => $call:expr) => {
        #[cfg(feature = "etcd")]
        if let $crate::backend::Backend::Etcd($remote) = &$backend {
            return $call;
        }
    };
}
pub(crate) use on_etcd;

/// The scheme that names an etcd store instead of a file.
pub(crate) const ETCD_SCHEME: &str = "etcd://";

/// The etcd store string `path` is, if it is one.
pub(crate) fn etcd_string(path: &std::path::Path) -> Option<&str> {
    path.to_str().filter(|text| text.starts_with(ETCD_SCHEME))
}

#[cfg(feature = "etcd")]
pub(crate) fn open_etcd(text: &str, options: &crate::Options) -> crate::Result<crate::Store> {
    crate::etcd::Remote::open(text, options).map(|remote| crate::Store {
        inner: Backend::Etcd(remote),
    })
}

#[cfg(not(feature = "etcd"))]
pub(crate) fn open_etcd(text: &str, _options: &crate::Options) -> crate::Result<crate::Store> {
    Err(crate::Error::invalid(format!(
        "{text}: this fencelock was built without etcd support (cargo feature `etcd`)"
    )))
}
