//! Layer 4, sharing: what the processes of one store exchange through its ring. The byte form
//! of operations, reads and their results (wire), a process's seat in the ring (member), and
//! the lease records kept in the buckets of the ring's lease map (buckets).
//!
//! Imports the base, the rules, the storage and the ring.

pub(crate) mod buckets;
pub(crate) mod member;
pub(crate) mod wire;
