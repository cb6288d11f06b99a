//! The store's tables, as every layer names them, and the keys of the meta table.

use redb::TableDefinition;

/// Schema version, token counter, token reservation, the served mark.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("fencelock.meta");
pub(crate) const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("fencelock.leases");
pub(crate) const VALUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("fencelock.values");
pub(crate) const FENCES: TableDefinition<&str, u64> = TableDefinition::new("fencelock.fences");
/// The key of the schema version in the meta table.
pub(crate) const SCHEMA_KEY: &str = "schema_version";

/// The key of the token counter in the meta table: the highest token granted.
pub(crate) const COUNTER_KEY: &str = "last_token";
/// A durable bound on the tokens handed out where grants do not write the counter at once
/// (single-process mode, and the shared memory of multi-process mode: see `reservation`).
pub(crate) const RESERVED_KEY: &str = "reserved_token";
/// The reservation that the last user of a store's shared memory saw when it closed it, having
/// written the last token it handed out into the counter: while the reservation is still that,
/// no token above the counter was handed out, and the next shared memory goes on from the
/// counter rather than from the reservation. The next shared memory's first reservation breaks
/// the seal (writes 0) before that memory hands out a token (`Op::Reserve`): a seal describes
/// one closed map, never the one after it.
pub(crate) const SEALED_KEY: &str = "sealed_reservation";

/// The history of each lock, keyed by lock name: one value holding its latest entries, so
/// that recording an end is one read and one write of one key.
pub(crate) const HISTORY: TableDefinition<&str, &[u8]> = TableDefinition::new("fencelock.history");
