//! etcd's own tests: a three-node cluster whose members are killed and stopped under load, a
//! node that stops answering a holder, a holder cut off by a proxy, a leader cut off from its
//! followers and slow links between members (members.rs), the lock kinds (kinds.rs), long
//! waits (waits.rs), the leases pooled ahead of grants, and nested prefixes that are separate
//! stores. Every test starts its own etcd. The rules, on etcd as on every other backend, are
//! tests/rules (`cargo test --features etcd --test rules -- ::etcd::`).

mod cluster;
mod failures;
mod kinds;
mod members;
mod partition;
mod peers;
mod pool;
mod prefixes;
mod proxy;
mod waits;
