//! Layer 6, the local engine: a store in a file of this host, shared by its processes.
//!
//! Imports every layer below it (base, rules, storage, ring, share, engine), never the public
//! types above it.

pub(crate) mod history;
pub(crate) mod route;
