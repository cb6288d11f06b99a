//! The lease map (`map.rs`, and `share/buckets.rs` over it): a reader never trusts a torn or
//! unpublished blob; blocks are never freed while a bucket reaches them, and a sweep frees every
//! one that no bucket reaches; a lock's tokens only grow, even for a grant stopped between
//! taking its token and publishing while the lock was granted again and its record left the
//! bucket (the hostile round's second fencing break).
//!
//! No writer here is process 1: a block's state 1 is PUBLIC, so the blocks that process 1
//! claimed would look published before their writer marked them, and a replacer or a sweep
//! would free them under it (the map's models found "a block was lost" that way at 3
//! preemptions). No real writer is: its id is its map membership's liveness id, drawn from
//! `[2^48, 2^61)` (`share/member.rs`, `Liveness::lock_fresh`).

use loom::sync::Arc;
use loom::thread;

use super::{check, Procs};
use crate::base::clock::ProcessId;
use crate::ring::map::{bucket_of, Publish, Step};
use crate::ring::tokens::Take;
use crate::ring::{lock_hash, Ring};
use crate::rules::history::Ends;
use crate::rules::record::{Lease, Record};
use crate::share::buckets::{update, Change, Entry};

/// Publishes `blob` as bucket 0's, retrying while other writers publish first.
fn publish(ring: &Ring, procs: &Procs, owner: u64, blob: &[u8]) {
    assert!(owner > 1, "process {owner}'s blocks would look PUBLIC");
    loop {
        let read = ring.leases().read_bucket(0);
        match ring.leases().publish_bucket(0, &read, blob, owner, procs) {
            Publish::Done => return,
            Publish::Raced => thread::yield_now(),
            Publish::Full => panic!("the map ran out of blocks"),
        }
    }
}

#[test]
fn readers_see_only_published_blobs_and_no_block_is_lost_or_freed_while_reached() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(4));
        let published: [&[u8]; 3] = [b"first-blob", b"second", b"third-one-here"];
        let writers: Vec<_> = [(2u64, 0usize), (3, 1)]
            .into_iter()
            .map(|(owner, at)| {
                let (ring, procs) = (ring.clone(), procs.clone());
                thread::spawn(move || publish(&ring, &procs, owner, published[at]))
            })
            .collect();
        let reader = {
            let ring = ring.clone();
            thread::spawn(move || ring.leases().read_bucket(0).blob)
        };
        publish(&ring, &procs, 4, published[2]);
        for writer in writers {
            writer.join().expect("a writer");
        }
        let seen = reader.join().expect("the reader");
        assert!(
            seen.is_empty() || published.contains(&seen.as_slice()),
            "a reader trusted a blob nobody published: {seen:?}"
        );
        // Every block of a replaced blob was freed, or is left for the sweep (a replacer that
        // found it claimed by a freer a moment before): after a sweep, only the last blob's.
        ring.leases().sweep_blocks(4, &*procs);
        assert_eq!(ring.leases().blocks_in_use(), 1, "a block was lost");
        let last = ring.leases().read_bucket(0).blob;
        assert!(published.contains(&last.as_slice()), "{last:?}");
    });
}

/// A reader stopped in the middle of its copy while a writer replaces the blob again and
/// again, until a block of the blob it copies is reused at the head of the bucket: the word's
/// generation tells it (with the generation narrowed to nothing, the word repeats).
#[test]
fn a_reader_stopped_while_blocks_are_reused_never_trusts_the_mix() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        let blobs: [&[u8]; 5] = [
            b"aaaaaaaaaaaaaaaa",
            b"bbbbbbbbbbbbbbbb",
            b"cccccccccccccccc",
            b"dddddddddddddddd",
            b"eeeeeeeeeeeeeeee",
        ];
        publish(&ring, &procs, 2, blobs[0]);
        let reader = {
            let ring = ring.clone();
            thread::spawn(move || ring.leases().read_bucket(0).blob)
        };
        for blob in &blobs[1..] {
            publish(&ring, &procs, 2, blob);
        }
        let seen = reader.join().expect("the reader");
        assert!(
            blobs.contains(&seen.as_slice()),
            "a reader trusted a mix of blobs: {:?}",
            String::from_utf8_lossy(&seen)
        );
    });
}

#[test]
fn a_sweep_beside_writers_never_frees_a_block_a_bucket_reaches() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(4));
        publish(&ring, &procs, 4, b"old");
        let writer = {
            let (ring, procs) = (ring.clone(), procs.clone());
            thread::spawn(move || publish(&ring, &procs, 2, b"new-blob"))
        };
        ring.leases().sweep_blocks(3, &*procs);
        assert!(
            ring.leases().reached_blocks_in_use(0),
            "the sweep freed a block the bucket reaches"
        );
        writer.join().expect("the writer");
        // A block freed while reached would be claimed and overwritten by the next writer.
        publish(&ring, &procs, 4, b"x");
        publish(&ring, &procs, 3, b"after");
        assert_eq!(ring.leases().read_bucket(0).blob, b"after");
        ring.leases().sweep_blocks(3, &*procs);
        assert_eq!(ring.leases().blocks_in_use(), 1);
    });
}

const NAME: &str = "a";

fn lease(token: u64, owner: u64) -> Lease {
    Lease {
        token,
        holder: ProcessId {
            pid: u32::try_from(owner).expect("an owner"),
            start_time: 1,
        },
        boot_id: [0; 16],
        granted_ns: 1,
        expires_ns: u64::MAX,
        live: owner,
    }
}

/// An exclusive grant of `NAME`, as `local/lease_map.rs` makes it: refused while a record is
/// there; its token taken after reading the bucket's floor, and kept for a retry only while
/// the floor admits it. Returns the token granted.
fn grant(ring: &Ring, procs: &Procs, owner: u64) -> Option<u64> {
    let mut taken: Option<u64> = None;
    let (granted, _) = update(
        ring,
        procs,
        owner,
        NAME,
        |entry, floor| {
            if entry.and_then(|entry| entry.record.as_ref()).is_some() {
                return Ok((Change::Keep, None));
            }
            let token = match taken {
                Some(token) if floor.admits(token) => token,
                _ => match ring.take_tokens(1)? {
                    Take::Taken { first, .. } => first,
                    Take::Short { .. } => panic!("the model reserves enough tokens"),
                },
            };
            taken = Some(token);
            let entry = Entry {
                name: NAME.into(),
                record: Some(Record::Exclusive(lease(token, owner))),
                tail: Vec::new(),
            };
            Ok((Change::Put(entry), Some(token)))
        },
        |_| Ok(Ends::default()),
    )
    .expect("a grant");
    granted
}

/// Releases the grant `token` of `NAME`: its record leaves the bucket with nothing in its tail
/// (its end already in the file's history), which takes its token out of the blob.
fn release(ring: &Ring, procs: &Procs, owner: u64, token: u64) {
    update(
        ring,
        procs,
        owner,
        NAME,
        |entry, _| {
            let held = entry
                .and_then(|entry| entry.record.as_ref())
                .and_then(Record::latest)
                .is_some_and(|lease| lease.token == token);
            let gone = Entry {
                name: NAME.into(),
                record: None,
                tail: Vec::new(),
            };
            Ok((
                if held {
                    Change::Put(gone)
                } else {
                    Change::Keep
                },
                (),
            ))
        },
        |_| Ok(Ends::default()),
    )
    .expect("a release");
}

#[test]
fn a_grant_stopped_before_publishing_never_publishes_a_token_below_a_later_grant() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(3));
        ring.tokens_start_at(0);
        ring.tokens_reserved(100, 100);
        assert_eq!(bucket_of(lock_hash(NAME)), bucket_of(lock_hash(NAME)));
        let first = {
            let (ring, procs) = (ring.clone(), procs.clone());
            thread::spawn(move || grant(&ring, &procs, 2))
        };
        let second = grant(&ring, &procs, 3);
        if let Some(token) = second {
            release(&ring, &procs, 3, token);
        }
        let first = first.join().expect("the first grant");
        if let (Some(first), Some(second)) = (first, second) {
            // Both granted: the second's record was there until its release, so the first was
            // published after it, and must hold a higher token.
            assert!(
                first > second,
                "token {first} granted after token {second} of the same lock"
            );
        }
    });
}

/// A writer killed at each step of its publish (blocks claimed, written, swapped in, marked,
/// its own blob's replacement checked) while a sweep runs beside it, and again once it died:
/// the sweep never frees a block a bucket reaches, and once the writer died it frees every
/// block no bucket reaches (the dead writer's unpublished blocks, the blob its swap replaced)
/// and keeps the published blob readable. The map has 4 blocks, so a lost one shows at once.
/// (The writer is process 2: a block's state 1 is PUBLIC, which no real liveness id is.)
#[test]
fn a_writer_killed_at_each_step_has_its_blocks_swept_and_no_reached_block_freed() {
    for stop in [
        Step::Claim,
        Step::Write,
        Step::Swap,
        Step::Mark,
        Step::Check,
    ] {
        check(move || {
            let ring = Arc::new(Ring::heap());
            let procs = Arc::new(Procs::new(3));
            publish(&ring, &procs, 3, b"old");
            let writer = {
                let (ring, procs) = (ring.clone(), procs.clone());
                thread::spawn(move || {
                    let read = ring.leases().read_bucket(0);
                    let stopped =
                        ring.leases()
                            .publish_until(0, &read, b"new", 2, &*procs, Some(stop));
                    assert_eq!(stopped, None, "the writer ran to its end");
                    procs.kill(2);
                })
            };
            // The writer first: loom 0.7's DPOR never runs a spawned thread whose first
            // operation is a load (here `read_bucket`'s) before its spawner's next operations
            // (tokio-rs/loom#392), so without this yield it explored this model in one schedule
            // (the writer after the whole sweep) and checked the sweep beside it nowhere.
            thread::yield_now();
            ring.leases().sweep_blocks(3, &*procs);
            assert!(
                ring.leases().reached_blocks_in_use(0),
                "the sweep freed a block the bucket reaches"
            );
            writer.join().expect("the writer");
            ring.leases().sweep_blocks(3, &*procs);
            assert!(
                ring.leases().reached_blocks_in_use(0),
                "the sweep freed a block the bucket reaches"
            );
            let swapped = !matches!(stop, Step::Claim | Step::Write);
            let blob = ring.leases().read_bucket(0).blob;
            assert_eq!(blob, if swapped { b"new".as_slice() } else { b"old" });
            assert_eq!(ring.leases().blocks_in_use(), 1, "a block left behind");
            // The swept blocks serve the next writers.
            publish(&ring, &procs, 3, b"after");
            ring.leases().sweep_blocks(3, &*procs);
            assert_eq!(ring.leases().read_bucket(0).blob, b"after");
            assert_eq!(ring.leases().blocks_in_use(), 1);
        });
    }
}
