//! Layer 1, the rules: what a lock, a lease, a token and a fenced value are, and how they are
//! kept, independent of where (a redb file, shared memory, etcd) and of who commits. The lock
//! kinds, the record formats, the table definitions, the token counter's rules, the public
//! data types a store reports, and the store's counters.
//!
//! Imports the base (`crate::base`) only.

pub(crate) mod admit;
pub(crate) mod context;
pub(crate) mod history;
pub(crate) mod info;
pub(crate) mod kind;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod query;
pub(crate) mod record;
pub(crate) mod tables;
pub(crate) mod tokens;
