//! Layer 2, the storage: the store file and what the kernel does with it. Opening the redb
//! database (writable, read-only, exclusive for a server), telling what is at the path, and the
//! open-file-description locks that make a holder's liveness. The redo log beside the store file
//! (`wal/`): its records, its file, the recovery scan and the apply of records into the store.
//!
//! Imports the base and the rules only.

pub(crate) mod carved;
pub(crate) mod commit;
pub(crate) mod db;
pub(crate) mod file;
pub(crate) mod liveness;
pub(crate) mod mode;
// The redo log is built ahead of the writes that use it (issue 35, steps 3 and 4); until then
// only its tests and (in part) the fuzz target call it.
#[cfg_attr(not(test), allow(dead_code, unused_imports))]
pub(crate) mod wal;
