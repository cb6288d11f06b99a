//! The store on a real etcd: the rules the local store's tests check (tests/fencing.rs,
//! tests/bad_input.rs, the walkthrough of examples/gc_pause.rs), and a three-node cluster
//! whose members are killed and stopped under load. Every test starts its own etcd.

mod bad_input;
mod cluster;
mod failures;
mod prefixes;
mod rules;
