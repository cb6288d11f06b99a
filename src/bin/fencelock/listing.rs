//! What `status`, `top` and the per-lock metrics show of each lock: its grants (holders) and
//! the acquires queued waiting for it, oldest first, as lslocks(8) and `pg_locks` show holders
//! and waiters side by side.

use std::collections::BTreeMap;

use fencelock::{LockInfo, Store, WaiterInfo};

use crate::commands::is_etcd;
use crate::Failure;

/// One lock: its grants, latest first, and its waiters, oldest first.
pub struct LockView {
    pub name: String,
    pub grants: Vec<LockInfo>,
    pub waiters: Vec<WaiterInfo>,
}

/// Every lock the store records, in name order, or only `only`; an etcd store lists no
/// waiters (etcd keeps its waiters as keys of its own).
pub fn gather(store: &Store, only: Option<&str>) -> Result<Vec<LockView>, Failure> {
    let grants = match only {
        Some(name) => store.lock_holders(name),
        None => store.locks(),
    }
    .map_err(|err| Failure::from_lib(&err))?;
    let mut by_name: BTreeMap<String, Vec<LockInfo>> = BTreeMap::new();
    if let Some(name) = only {
        by_name.entry(name.to_owned()).or_default();
    }
    for grant in grants {
        by_name.entry(grant.name.clone()).or_default().push(grant);
    }
    let etcd = is_etcd(store.path());
    let mut views = Vec::with_capacity(by_name.len());
    for (name, grants) in by_name {
        let waiters = if etcd {
            Vec::new()
        } else {
            store
                .waiters(&name)
                .map_err(|err| Failure::from_lib(&err))?
        };
        if grants.is_empty() && waiters.is_empty() {
            continue;
        }
        views.push(LockView {
            name,
            grants,
            waiters,
        });
    }
    Ok(views)
}
