//! The store's tables, as every layer names them, and the keys of the meta table.

use redb::TableDefinition;

/// Schema version, token counter, token reservation, the served mark, the redo log's applied
/// position.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("fencelock.meta");
pub(crate) const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("fencelock.leases");
pub(crate) const VALUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("fencelock.values");
pub(crate) const FENCES: TableDefinition<&str, u64> = TableDefinition::new("fencelock.fences");
/// The version of the newest redo-log record applied to each key (`storage/wal/apply.rs`,
/// docs/design/writes.md section 6): a checkpoint writes a key's record only above it, so that a
/// record that claimed a lower version but reached the log after a checkpoint passed a higher
/// one never overwrites it. Created by the first checkpoint; a key written only by a direct
/// commit has none.
pub(crate) const VERSIONS: TableDefinition<&[u8], u64> = TableDefinition::new("fencelock.versions");
/// Values over the redo log's inline limit, written by a store that writes through the log
/// (`local/log_user.rs`): committed here under a random id before the log's stored put that
/// names it; a checkpoint moves each into `VALUES` and removes it, and a recovery removes
/// those that no record named (a writer that died or was refused in between).
pub(crate) const BLOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("fencelock.blobs");
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
/// The position in the redo log up to which the store holds its records (`storage/wal/apply.rs`):
/// the end of the last checkpoint, where the next record not yet applied lies. Written in the
/// checkpoint's own transaction, so that the records and their position commit as one unit;
/// absent (0) in a store that never had a log.
pub(crate) const WAL_APPLIED_KEY: &str = "wal_applied";
/// The redo log's id, written in its segments' headers (`storage/wal/file.rs`): random, made by
/// the first process that sets a log up. In the store file, so that it is as durable as the
/// store and travels with a copy of it.
pub(crate) const WAL_ID_KEY: &str = "wal_id";
/// How many recoveries of the redo log the store has committed (`storage/wal/apply.rs`): one
/// each time a ring, or a single-process open, set the log up anew. A process writes the log
/// only after its ring's recovery, so a reader that scanned the log a crash left knows from
/// this count, with `wal_applied`, that nothing was written there since (`local/crashed.rs`).
/// Absent (0) in a store whose log was never recovered.
pub(crate) const WAL_RECOVERIES_KEY: &str = "wal_recoveries";

/// The history of each lock, keyed by lock name: one value holding its latest entries, so
/// that recording an end is one read and one write of one key.
pub(crate) const HISTORY: TableDefinition<&str, &[u8]> = TableDefinition::new("fencelock.history");
