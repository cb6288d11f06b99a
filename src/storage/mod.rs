//! Layer 2, the storage: the store file and what the kernel does with it. Opening the redb
//! database (writable, read-only, exclusive for a server), telling what is at the path, and the
//! open-file-description locks that make a holder's liveness.
//!
//! Imports the base and the rules only.

pub(crate) mod carved;
pub(crate) mod commit;
pub(crate) mod db;
pub(crate) mod file;
pub(crate) mod liveness;
pub(crate) mod mode;
