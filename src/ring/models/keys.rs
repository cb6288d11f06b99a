//! The key index (`share/keys.rs` over the key map, `map.rs`): two claimers of one key from the
//! same entry, beside a writer of another key of the same bucket. Exactly one claimer wins (a
//! compare-and-swap of the bucket succeeds only while the key is still what it read), and the
//! other key's update is never lost to a claimer's blob built from an older copy of the bucket.

use loom::sync::Arc;
use loom::thread;

use super::{check, Procs};
use crate::ring::layout::BLOCK_PAYLOAD;
use crate::ring::Ring;
use crate::share::keys::{encode, entry, replace, Entry, Keyed, Space};

/// Two keys of one bucket of the models' key map (two buckets): found, not assumed.
fn keys_of_one_bucket(ring: &Ring) -> (Vec<u8>, Vec<u8>) {
    let bucket = |key: &[u8]| ring.keys().bucket_of(crate::ring::bytes_hash(&[&[0], key]));
    let first = b"a".to_vec();
    let second = (b'b'..=b'z')
        .map(|c| vec![c])
        .find(|key| bucket(key) == bucket(&first))
        .expect("two one-letter keys share one of two buckets");
    (first, second)
}

fn claim(owner: u64) -> Entry {
    Entry {
        highest: owner,
        before: 0,
        version: 1,
        newest: 0,
        pending: Some(owner * 64),
        voided: 0,
    }
}

#[test]
fn two_claimers_of_one_key_never_both_win_and_a_writer_beside_them_loses_nothing() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(4));
        let (key, other) = keys_of_one_bucket(&ring);
        // Liveness ids 2 to 4: a block's state 1 is PUBLIC.
        let claimers: Vec<_> = [2u64, 3]
            .into_iter()
            .map(|owner| {
                let (ring, procs, key) = (ring.clone(), procs.clone(), key.clone());
                thread::spawn(move || {
                    let won = replace(
                        &ring,
                        &*procs,
                        owner,
                        Space::Key,
                        &key,
                        None,
                        Some(claim(owner)),
                    )
                    .expect("a claim");
                    won.then_some(owner)
                })
            })
            .collect();
        let written = Entry {
            highest: 9,
            before: 0,
            version: 1,
            newest: 0,
            pending: None,
            voided: 0,
        };
        assert!(
            replace(&ring, &*procs, 4, Space::Key, &other, None, Some(written)).expect("a write"),
            "nobody else writes the other key"
        );
        let winners: Vec<u64> = claimers
            .into_iter()
            .filter_map(|claimer| claimer.join().expect("a claimer"))
            .collect();
        assert_eq!(winners.len(), 1, "claimers {winners:?} all won");
        assert_eq!(
            entry(&ring, Space::Key, &key).expect("an entry"),
            Some(claim(winners[0]))
        );
        assert_eq!(
            entry(&ring, Space::Key, &other).expect("an entry"),
            Some(written),
            "the other key's update was lost"
        );
        ring.keys().sweep_blocks(4, &*procs);
        // The bucket's one blob, in as many blocks as it takes, and nothing else.
        let keyed = |key, entry| Keyed {
            space: Space::Key,
            key,
            entry,
        };
        let blob = encode(&[keyed(&key, claim(winners[0])), keyed(&other, written)]);
        assert_eq!(
            ring.keys().blocks_in_use(),
            blob.len().div_ceil(BLOCK_PAYLOAD),
            "a block was lost"
        );
    });
}
