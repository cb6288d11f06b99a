//! The lease map: the part of the ring's mapping that holds the store's lease records, so that a
//! grant, an extend or a wait needs no commit of the store file.
//!
//! The map knows bytes, not records: a name hashes to one of [`BUCKETS`] buckets, and a bucket
//! holds one blob (the records of the names that hash to it, in the form `share/leases.rs`
//! gives them). A blob is a chain of [`BLOCK_SIZE`]-byte blocks. A bucket's word holds the first
//! block of its blob and a generation; a writer builds a new blob in blocks of its own and
//! publishes it with one compare-and-swap of the word, so:
//!
//! - No lock is ever held: a process stopped at any instruction delays nobody; a writer whose
//!   swap fails (another published first) reads again and retries.
//! - A reader copies the blob and reads the word again: an unchanged word means an unchanged
//!   blob (blocks are freed only after the word moved on, and the generation never repeats), so
//!   a torn copy is thrown away, never trusted.
//! - A block is FREE, PRIVATE (claimed by the process with that liveness id, being written) or
//!   PUBLIC (the writer marks it so just before its swap; a PRIVATE block is therefore never in a
//!   bucket). A failed swap frees the writer's blocks; a successful one frees the blob it
//!   replaced. The PRIVATE blocks of a process that died are free again at the next sweep. A
//!   process killed between its swap and freeing the blob it replaced leaks that blob's blocks
//!   until the ring is set up anew (once nobody uses it): the window is a few instructions.
//!
//! Each bucket has a *token floor* beside its word: the highest token of any record ever
//! published in the bucket in this map's life. A record that leaves the bucket (its grants
//! ended, its history flushed) leaves its tokens in the floor, which is how a grant that read
//! the bucket knows them: it publishes only a token above the floor it read after its copy of
//! the bucket (`share/leases.rs`, `Floor`). Why that is enough: a writer raises the floor
//! *before* its swap, so a reader whose copy saw the swap (Acquire on the word) sees the floor
//! raised; a swap its copy did not see makes its own swap fail. So a lock's tokens only grow,
//! even for a grant stopped between taking its token and publishing it while the lock was
//! granted again, and its record ended and left the bucket.
//!
//! Tokens are handed out from the map's header: a counter that only grows, bounded by a
//! reservation that the store file holds durably (`local/leases.rs` refills it ahead of need).

use std::sync::atomic::{AtomicU64, Ordering};

use super::Ring;
use crate::storage::liveness::Liveness;

/// Buckets of the map: far more than the names held at once, so that names rarely share one.
pub(crate) const BUCKETS: usize = 4096;
/// Blocks of the map, and their size: 4 MiB in all.
pub(crate) const BLOCKS: usize = 16384;
pub(crate) const BLOCK_SIZE: usize = 256;
/// The header of a block: its state word, the next block of its blob (index + 1, 0 for the
/// last), and the bytes it carries.
const BLOCK_HEAD: usize = 16;
pub(crate) const BLOCK_PAYLOAD: usize = BLOCK_SIZE - BLOCK_HEAD;
/// The longest blob: the record of a name with the most holders fits with room to spare.
pub(crate) const MAX_BLOB: usize = 192 * 1024;

/// The map's header, at the start of its area.
#[repr(C)]
pub(crate) struct MapHeader {
    /// A random id of this map, drawn when the ring is set up: the id that processes using it
    /// lock in the store file, so that a process that cannot see this map finds it in use.
    pub(crate) table_id: AtomicU64,
    /// The last token handed out.
    pub(crate) last_token: AtomicU64,
    /// The highest token the store file has reserved durably: no token above it is handed out.
    pub(crate) reserved: AtomicU64,
    /// How many tokens the last reservation took (they grow with the rate of grants).
    pub(crate) block: AtomicU64,
    /// The liveness id of the process refilling the reservation now, 0 for none.
    pub(crate) refilling: AtomicU64,
    /// Where the next claim of a block starts looking.
    alloc_hint: AtomicU64,
    /// 1 once the map's tokens are set up from the store file (see `local/leases.rs`).
    pub(crate) ready: AtomicU64,
    /// Ends of leases kept in the map and not yet in the store file's history (about).
    pub(crate) pending_ends: AtomicU64,
    /// The liveness id of the process writing those ends to the file now, 0 for none.
    pub(crate) flushing: AtomicU64,
    /// The bucket the pruning of dead records looks at next.
    pub(crate) prune_cursor: AtomicU64,
}

pub(crate) const HEADER_AREA: usize = 4096;
const _: () = assert!(std::mem::size_of::<MapHeader>() <= HEADER_AREA);
/// The header, the buckets' words, their token floors, the blocks.
pub(crate) const MAP_SIZE: usize = HEADER_AREA + 2 * BUCKETS * 8 + BLOCKS * BLOCK_SIZE;

const FREE: u64 = 0;
const PUBLIC: u64 = 1;

const GEN_SHIFT: u32 = 24;
const HEAD_MASK: u64 = (1 << GEN_SHIFT) - 1;

/// A bucket's word: the first block of its blob (index + 1; 0 when empty) and a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(u64);

impl Word {
    fn head(self) -> usize {
        (self.0 & HEAD_MASK) as usize
    }

    fn next(self, head: usize) -> Word {
        Word((((self.0 >> GEN_SHIFT) + 1) << GEN_SHIFT) | head as u64)
    }
}

/// A consistent copy of a bucket: its word and its blob (empty for an empty bucket).
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) word: Word,
    pub(crate) blob: Vec<u8>,
}

/// Why a blob could not be published.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// Published: the bucket holds it now.
    Done,
    /// Another writer published first: read again.
    Raced,
    /// No free block is left (after freeing those of dead processes).
    Full,
}

/// The home bucket of a name's hash.
pub(crate) fn bucket_of(hash: u64) -> usize {
    (hash % BUCKETS as u64) as usize
}

impl Ring {
    pub(crate) fn map_header(&self) -> &MapHeader {
        self.view.map_header()
    }

    fn bucket(&self, index: usize) -> &AtomicU64 {
        self.view.bucket(index)
    }

    /// The state word of block `index`: FREE, PUBLIC or the liveness id of its writer.
    fn block_state(&self, index: usize) -> &AtomicU64 {
        &self.view.block(index).state
    }

    /// The block's link and length word: next (index + 1) in the high half, bytes in the low.
    fn block_link(&self, index: usize) -> &AtomicU64 {
        &self.view.block(index).link
    }

    /// The token floor of bucket `index`: at least every token of a record published there in
    /// this map's life. Read after a copy of the bucket: Acquire, pairing with the Release of
    /// `raise_floor`, although the copy's Acquire of the word already orders it after every
    /// raise made before a swap the copy saw; this load says so on its own.
    pub(crate) fn floor(&self, index: usize) -> u64 {
        self.view.floor(index).load(Ordering::Acquire)
    }

    /// Raises the token floor of bucket `index` to `token`, before a swap that publishes a
    /// record holding it: the swap's Release then carries the raise to every reader that sees
    /// the swap. A raise whose swap then fails is harmless (the token was taken, so every token
    /// taken later is above it anyway).
    pub(crate) fn raise_floor(&self, index: usize, token: u64) {
        self.view.floor(index).fetch_max(token, Ordering::Release);
    }

    /// Whether bucket `index` holds nothing (one load).
    pub(crate) fn bucket_is_empty(&self, index: usize) -> bool {
        Word(self.bucket(index).load(Ordering::Acquire)).head() == 0
    }

    /// A consistent copy of bucket `index`. Retries while writers publish; a blob that does not
    /// hold together (which a torn copy may not) is read again.
    pub(crate) fn read_bucket(&self, index: usize) -> Snapshot {
        loop {
            let word = Word(self.bucket(index).load(Ordering::Acquire));
            if let Some(blob) = self.copy_blob(word.head()) {
                if self.bucket(index).load(Ordering::Acquire) == word.0 {
                    return Snapshot { word, blob };
                }
            }
            std::hint::spin_loop();
        }
    }

    /// The bytes of the blob starting at block `head` (index + 1), or `None` when the chain
    /// does not hold together (a block being reused under this read).
    fn copy_blob(&self, head: usize) -> Option<Vec<u8>> {
        let mut blob = Vec::new();
        let mut next = head;
        while next != 0 {
            let index = next - 1;
            if index >= BLOCKS || blob.len() > MAX_BLOB {
                return None;
            }
            let link = self.block_link(index).load(Ordering::Acquire);
            let len = ((link & 0xffff) as usize).min(BLOCK_PAYLOAD);
            // A concurrent writer may change the payload under this copy, which the caller's
            // second look at the word detects.
            super::view::copy_out(&self.view.block(index).payload, len, &mut blob);
            next = (link >> 32) as usize;
        }
        Some(blob)
    }

    /// Publishes `blob` as bucket `index`'s, if its word is still `expected`; `owner` is the
    /// writer's liveness id (its blocks are PRIVATE to it until published). An empty blob
    /// empties the bucket. On success the blocks of the blob it replaced are freed.
    pub(crate) fn publish_bucket(
        &self,
        index: usize,
        expected: Word,
        blob: &[u8],
        owner: u64,
        live: &Liveness,
    ) -> Publish {
        let Some(blocks) = self.claim_blocks(blob.len().div_ceil(BLOCK_PAYLOAD), owner, live)
        else {
            return Publish::Full;
        };
        for (i, (&block, chunk)) in blocks.iter().zip(blob.chunks(BLOCK_PAYLOAD)).enumerate() {
            let next = blocks.get(i + 1).map_or(0, |&b| b as u64 + 1);
            // The block is this writer's (PRIVATE); the chunk fits the payload.
            super::view::copy_in(&self.view.block(block).payload, chunk);
            self.block_link(block)
                .store((next << 32) | chunk.len() as u64, Ordering::Release);
        }
        // Marked before the swap, so that a block reachable from a bucket is never PRIVATE (a
        // sweep frees the PRIVATE blocks of dead processes).
        for &block in &blocks {
            self.block_state(block).store(PUBLIC, Ordering::Release);
        }
        let head = blocks.first().map_or(0, |&b| b + 1);
        let new = expected.next(head);
        match self.bucket(index).compare_exchange(
            expected.0,
            new.0,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                self.free_chain(expected.head());
                Publish::Done
            }
            Err(_) => {
                self.free_chain(head);
                Publish::Raced
            }
        }
    }

    /// Frees the blocks of the chain starting at `head` (index + 1), all PUBLIC and reachable
    /// from no bucket any more.
    fn free_chain(&self, head: usize) {
        let mut next = head;
        let mut count = 0;
        while next != 0 && next <= BLOCKS && count <= BLOCKS {
            let index = next - 1;
            next = (self.block_link(index).load(Ordering::Acquire) >> 32) as usize;
            let _ = self.block_state(index).compare_exchange(
                PUBLIC,
                FREE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            count += 1;
        }
    }

    /// Claims `count` free blocks for `owner`; sweeps the blocks of dead writers and tries
    /// again when too few are free, and gives back what it claimed when that is not enough.
    fn claim_blocks(&self, count: usize, owner: u64, live: &Liveness) -> Option<Vec<usize>> {
        for pass in 0..2 {
            let mut blocks = Vec::with_capacity(count);
            let header = self.map_header();
            let start = header.alloc_hint.fetch_add(count as u64, Ordering::Relaxed) as usize;
            for offset in 0..BLOCKS {
                if blocks.len() == count {
                    break;
                }
                let index = (start + offset) % BLOCKS;
                let state = self.block_state(index);
                if state.load(Ordering::Relaxed) == FREE
                    && state
                        .compare_exchange(FREE, owner, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    blocks.push(index);
                }
            }
            if blocks.len() == count {
                return Some(blocks);
            }
            for &block in &blocks {
                self.block_state(block).store(FREE, Ordering::Release);
            }
            if pass == 0 {
                self.sweep_blocks(live);
            }
        }
        None
    }

    /// Frees the PRIVATE blocks of writers that died before they published them.
    fn sweep_blocks(&self, live: &Liveness) {
        for index in 0..BLOCKS {
            let state = self.block_state(index).load(Ordering::Acquire);
            if state > PUBLIC && !live.is_held(state).unwrap_or(true) {
                let _ = self.block_state(index).compare_exchange(
                    state,
                    FREE,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// How many blocks are not free (for tests and the metrics).
    #[cfg(test)]
    pub(crate) fn blocks_in_use(&self) -> usize {
        (0..BLOCKS)
            .filter(|&i| self.block_state(i).load(Ordering::Relaxed) != FREE)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Stamp;

    const STAMP: Stamp = Stamp {
        boot_id: [3; 16],
        version: 1,
    };

    fn ring(dir: &std::path::Path) -> (Ring, Liveness) {
        let path = dir.join("store");
        std::fs::write(&path, b"").unwrap();
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let meta = std::fs::metadata(&path).unwrap();
        (Ring::open(dir, &meta, None, STAMP).unwrap(), live)
    }

    #[test]
    fn a_published_blob_is_read_back_and_replacing_it_frees_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        let empty = ring.read_bucket(7);
        assert!(empty.blob.is_empty());
        let big: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        assert_eq!(
            ring.publish_bucket(7, empty.word, &big, 1 << 50, &live),
            Publish::Done
        );
        let read = ring.read_bucket(7);
        assert_eq!(read.blob, big);
        assert_eq!(ring.blocks_in_use(), big.len().div_ceil(BLOCK_PAYLOAD));
        // A writer that read the old word loses, and leaves nothing claimed.
        assert_eq!(
            ring.publish_bucket(7, empty.word, b"late", 1 << 50, &live),
            Publish::Raced
        );
        assert_eq!(ring.read_bucket(7).blob, big);
        assert_eq!(
            ring.publish_bucket(7, read.word, b"small", 1 << 50, &live),
            Publish::Done
        );
        assert_eq!(ring.read_bucket(7).blob, b"small");
        assert_eq!(ring.blocks_in_use(), 1);
        let again = ring.read_bucket(7);
        assert_eq!(
            ring.publish_bucket(7, again.word, b"", 1 << 50, &live),
            Publish::Done
        );
        assert!(ring.read_bucket(7).blob.is_empty());
        assert_eq!(ring.blocks_in_use(), 0);
    }

    #[test]
    fn writers_of_one_bucket_never_lose_an_update() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        // Each thread adds one to a counter kept in the blob, a thousand times.
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        loop {
                            let read = ring.read_bucket(1);
                            let n = if read.blob.is_empty() {
                                0
                            } else {
                                u64::from_le_bytes(read.blob[..8].try_into().unwrap())
                            };
                            let mut blob = (n + 1).to_le_bytes().to_vec();
                            blob.resize(300, 0); // two blocks
                            match ring.publish_bucket(1, read.word, &blob, 1 << 50, &live) {
                                Publish::Done => break,
                                Publish::Raced => continue,
                                Publish::Full => panic!("the map is full"),
                            }
                        }
                    }
                });
            }
        });
        let blob = ring.read_bucket(1).blob;
        assert_eq!(u64::from_le_bytes(blob[..8].try_into().unwrap()), 4000);
        assert_eq!(ring.blocks_in_use(), 2, "every replaced blob was freed");
    }

    #[test]
    fn the_private_blocks_of_a_dead_writer_are_swept_when_the_map_runs_full() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        // A writer that died holding every block (its liveness id is not held).
        for index in 0..BLOCKS {
            ring.block_state(index).store(1 << 52, Ordering::Relaxed);
        }
        let empty = ring.read_bucket(0);
        assert_eq!(
            ring.publish_bucket(0, empty.word, b"x", 1 << 50, &live),
            Publish::Done
        );
        assert_eq!(ring.blocks_in_use(), 1);
        // A live writer's blocks are not taken.
        for index in 0..BLOCKS {
            let _ = ring.block_state(index).compare_exchange(
                FREE,
                1 << 50,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        let read = ring.read_bucket(0);
        assert_eq!(
            ring.publish_bucket(0, read.word, b"y", 1 << 50, &live),
            Publish::Full
        );
    }
}
