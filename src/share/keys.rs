//! The key index kept in the ring's key map (`ring/map.rs`, `Ring::keys`): for each key written
//! since the last checkpoint (and, in a namespace of their own, each fence resource), its
//! highest accepted token, its version, the log position of its newest record whose fate is
//! known, and the one claim pending on it, if any (docs/design/writes.md, section 3, and the
//! step 4 design it cites). Each change is one compare-and-swap of the entry's bucket, as the
//! lease map's records are (`share/buckets.rs`): no lock is held, and a process stopped at any
//! instruction delays nobody.
//!
//! Nothing in the store's writes uses it yet: the fenced writes of step 4 will. This is its
//! encoding; its operations follow.
//!
//! Format of a bucket's blob: `[1][count u32]`, then `count` entries of `[namespace u8: 0 a key,
//! 1 a fence resource][key len u32][key][highest u64][version u64][newest u64][pending u8: 0
//! none, 1 a claim][pending lsn u64: 0 when none]`, little-endian; an empty bucket is an empty
//! blob. A value has one encoding: decoding refuses a count of 0, an unknown namespace or
//! pending byte, a position without a claim, a key listed twice and trailing bytes, each as
//! damage (a typed error, never a panic).

use std::collections::HashSet;

use crate::base::error::{Error, Result};

const FORMAT: u8 = 1;

/// The namespaces of the index: keys of the store's values, and fence resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Key = 0,
    Fence = 1,
}

/// What the index holds of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The highest token accepted for the key.
    pub(crate) highest: u64,
    /// The key's version: one more at each write.
    pub(crate) version: u64,
    /// The log position of the key's newest record whose fate is known (below the checkpoint:
    /// redb holds it).
    pub(crate) newest: u64,
    /// The log position of the one write claimed on the key and not settled yet.
    pub(crate) pending: Option<u64>,
}

/// One key of a bucket, with its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keyed {
    pub(crate) space: Space,
    pub(crate) key: Vec<u8>,
    pub(crate) entry: Entry,
}

fn damaged() -> Error {
    Error::Corrupt("a key index entry in the store's shared memory is damaged".into())
}

/// The blob of a bucket holding `entries` (empty for none).
pub(crate) fn encode(entries: &[Keyed]) -> Vec<u8> {
    if entries.is_empty() {
        return Vec::new();
    }
    let mut out = vec![FORMAT];
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for Keyed { space, key, entry } in entries {
        out.push(*space as u8);
        // A key of 4 GiB or more cannot be one: the map holds 8 MiB, and its publish finds too
        // few blocks before anything reads this length.
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        for word in [entry.highest, entry.version, entry.newest] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.push(u8::from(entry.pending.is_some()));
        out.extend_from_slice(&entry.pending.unwrap_or(0).to_le_bytes());
    }
    out
}

/// The entries of a bucket's blob, in their order; damage is refused (see the module's docs).
pub(crate) fn decode(blob: &[u8]) -> Result<Vec<Keyed>> {
    if blob.is_empty() {
        return Ok(Vec::new());
    }
    let mut rest = blob;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            return Err(damaged());
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
    if take(1)? != [FORMAT] {
        return Err(damaged());
    }
    let count = u32_of(take(4)?);
    if count == 0 {
        return Err(damaged());
    }
    // Each entry takes at least 34 bytes: a count beyond what the blob holds is damage, not a
    // reason to reserve memory.
    let mut entries = Vec::with_capacity(count.min(blob.len() / 34));
    for _ in 0..count {
        let space = match take(1)? {
            [0] => Space::Key,
            [1] => Space::Fence,
            _ => return Err(damaged()),
        };
        let len = u32_of(take(4)?);
        let key = take(len)?.to_vec();
        let highest = u64_of(take(8)?);
        let version = u64_of(take(8)?);
        let newest = u64_of(take(8)?);
        let flag = take(1)?[0];
        let at = u64_of(take(8)?);
        let pending = match (flag, at) {
            (0, 0) => None,
            (1, at) => Some(at),
            _ => return Err(damaged()),
        };
        let entry = Entry {
            highest,
            version,
            newest,
            pending,
        };
        entries.push(Keyed { space, key, entry });
    }
    if !rest.is_empty() {
        return Err(damaged());
    }
    let mut seen = HashSet::with_capacity(entries.len());
    if !entries.iter().all(|e| seen.insert((e.space, &e.key[..]))) {
        return Err(damaged());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: u64, newest: u64, pending: Option<u64>) -> Entry {
        Entry {
            highest: 40 + version,
            version,
            newest,
            pending,
        }
    }

    fn sample() -> Vec<Keyed> {
        vec![
            Keyed {
                space: Space::Key,
                key: b"orders/7".to_vec(),
                entry: at(3, 4096, None),
            },
            Keyed {
                space: Space::Fence,
                key: b"orders/7".to_vec(),
                entry: at(1, 0, Some(8192)),
            },
            Keyed {
                space: Space::Key,
                key: b"\0\xff".to_vec(),
                entry: at(9, 24, Some(0)),
            },
        ]
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let entries = sample();
        let blob = encode(&entries);
        assert_eq!(decode(&blob).unwrap(), entries);
        assert!(encode(&[]).is_empty());
        assert!(decode(&[]).unwrap().is_empty());
        for cut in 1..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let damaged = |change: &dyn Fn(&mut Vec<u8>)| {
            let mut bad = blob.clone();
            change(&mut bad);
            let err = decode(&bad).unwrap_err();
            assert!(matches!(err, Error::Corrupt(_)), "{err:?}");
        };
        damaged(&|b| b[0] = 2); // another format
        damaged(&|b| b[1..5].copy_from_slice(&0u32.to_le_bytes())); // a count of none
        damaged(&|b| b[1..5].copy_from_slice(&u32::MAX.to_le_bytes())); // more than it holds
        damaged(&|b| b[5] = 2); // no such namespace
        damaged(&|b| b[6..10].copy_from_slice(&u32::MAX.to_le_bytes())); // a key past the end
        let flag = 5 + 1 + 4 + 8 + 24;
        damaged(&|b| b[flag] = 2); // neither a claim nor none
        damaged(&|b| b[flag + 1] = 1); // a position without a claim
        damaged(&|b| b.push(0)); // trailing bytes
                                 // The same key twice.
        let twice = [entries[0].clone(), entries[0].clone()];
        assert!(matches!(decode(&encode(&twice)), Err(Error::Corrupt(_))));
    }
}
