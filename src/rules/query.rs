//! Reads as data: every read the store makes is a `Query`, answered from one read transaction
//! with an `Answer`. As values, reads travel as writes do (`share/wire.rs`), so that a process can
//! answer them for another: a server that holds the store file exclusively (`local/serve.rs`).
//!
//! An answer holds what the file says and nothing that depends on who asks: lease records
//! stay records, and the asking process judges their liveness itself.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};

use crate::base::error::{Error, Result};
use crate::rules::info::Fenced;
use crate::rules::record::{decode_value, Record};
use crate::rules::tables::{FENCES, LEASES, META, SCHEMA_KEY, SEALED_KEY, VALUES};
use crate::rules::tokens::{read_counter, reserved};

/// A read of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Query {
    /// The lease record of one lock.
    Record(String),
    /// Every lease record, in name order.
    Records,
    /// The value under a key.
    Value(Vec<u8>),
    /// The keys holding a value that start with a prefix, in byte order.
    Keys(Vec<u8>),
    /// The highest token an external fence accepted.
    Fence(String),
    /// The counts of `Store::info`.
    Counts,
    /// The store's own invariants (`Store::verify`).
    Verify,
    /// The recorded history entries of one lock (`rules/history.rs`), oldest first.
    History(String),
}

/// The counts a store reports of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub schema_version: u64,
    pub last_token: u64,
    /// The durable reservation of tokens (0 where grants write the counter).
    pub reserved: u64,
    /// The reservation the last user of the store's shared memory sealed (`SEALED_KEY`).
    pub sealed: u64,
    pub lock_records: u64,
    pub keys: u64,
    pub fences: u64,
}

/// The answer to a [`Query`], of the variant of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Record(Option<Record>),
    Records(Vec<(String, Record)>),
    Value(Option<Fenced>),
    Keys(Vec<Vec<u8>>),
    Fence(Option<u64>),
    Counts(Counts),
    Verified,
    /// Tokens and stored entries.
    History(Vec<(u64, Vec<u8>)>),
}

/// The error for an answer of another kind than the query's (a damaged reply).
pub(crate) fn mismatched(answer: &Answer) -> Error {
    Error::Storage(format!("a read got an answer of another kind: {answer:?}"))
}

impl Query {
    /// Answers the query from `txn`.
    pub(crate) fn run(&self, txn: &ReadTransaction) -> Result<Answer> {
        Ok(match self {
            Query::Record(name) => Answer::Record(Record::find(&txn.open_table(LEASES)?, name)?),
            Query::Records => {
                let mut records = Vec::new();
                for entry in txn.open_table(LEASES)?.iter()? {
                    let (name, record) = entry?;
                    records.push((name.value().to_owned(), Record::decode(record.value())?));
                }
                Answer::Records(records)
            }
            Query::Value(key) => {
                let values = txn.open_table(VALUES)?;
                let found = match values.get(key.as_slice())? {
                    Some(record) => {
                        let (token, value) = decode_value(record.value())?;
                        value.map(|value| Fenced {
                            value: value.to_vec(),
                            token,
                        })
                    }
                    None => None,
                };
                Answer::Value(found)
            }
            Query::Keys(prefix) => {
                let values = txn.open_table(VALUES)?;
                let mut keys = Vec::new();
                for entry in values.range::<&[u8]>(prefix.as_slice()..)? {
                    let (key, record) = entry?;
                    if !key.value().starts_with(prefix) {
                        break;
                    }
                    if decode_value(record.value())?.1.is_some() {
                        keys.push(key.value().to_vec());
                    }
                }
                Answer::Keys(keys)
            }
            Query::Fence(resource) => {
                let fences = txn.open_table(FENCES)?;
                Answer::Fence(fences.get(resource.as_str())?.map(|h| h.value()))
            }
            Query::Counts => {
                let meta = txn.open_table(META)?;
                let mut keys = 0;
                for entry in txn.open_table(VALUES)?.iter()? {
                    if decode_value(entry?.1.value())?.1.is_some() {
                        keys += 1;
                    }
                }
                Answer::Counts(Counts {
                    schema_version: meta.get(SCHEMA_KEY)?.map_or(0, |v| v.value()),
                    last_token: read_counter(&meta)?,
                    reserved: reserved(&meta)?,
                    sealed: meta.get(SEALED_KEY)?.map_or(0, |v| v.value()),
                    lock_records: txn.open_table(LEASES)?.len()?,
                    keys,
                    fences: txn.open_table(FENCES)?.len()?,
                })
            }
            Query::Verify => {
                verify(txn)?;
                Answer::Verified
            }
            Query::History(name) => match txn.open_table(crate::rules::tables::HISTORY) {
                Ok(entries) => Answer::History(crate::rules::history::stored(&entries, name)?),
                // No grant has recorded an end yet.
                Err(redb::TableError::TableDoesNotExist(_)) => Answer::History(Vec::new()),
                Err(err) => return Err(err.into()),
            },
        })
    }
}

/// Every record decodes, and no lease, value, fence or history entry carries a token above the
/// counter.
fn verify(txn: &ReadTransaction) -> Result<()> {
    // Where grants do not write the counter (their tokens come from the store's shared
    // memory), the durable reservation bounds them.
    let meta = txn.open_table(META)?;
    let last = read_counter(&meta)?.max(reserved(&meta)?);
    let above = |what: &str, name: String, token: u64| {
        Error::Corrupt(format!(
            "{what} {name} carries token {token} above the counter {last}"
        ))
    };
    for entry in txn.open_table(LEASES)?.iter()? {
        let (name, record) = entry?;
        for lease in Record::decode(record.value())?.holders() {
            if lease.token > last || lease.token == 0 {
                return Err(above("lease", name.value().to_owned(), lease.token));
            }
        }
    }
    for entry in txn.open_table(VALUES)?.iter()? {
        let (key, record) = entry?;
        let (token, _) = decode_value(record.value())?;
        if token > last || token == 0 {
            return Err(above("key", format!("{:?}", key.value()), token));
        }
    }
    for entry in txn.open_table(FENCES)?.iter()? {
        let (resource, token) = entry?;
        if token.value() > last || token.value() == 0 {
            return Err(above("fence", resource.value().to_owned(), token.value()));
        }
    }
    match txn.open_table(crate::rules::tables::HISTORY) {
        Ok(history) => crate::rules::history::verify(&history, last)?,
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(err) => return Err(err.into()),
    }
    Ok(())
}
