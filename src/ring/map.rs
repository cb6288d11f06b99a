//! The lease map: the part of the ring's mapping that holds the store's lease records, so that a
//! grant, an extend or a wait needs no commit of the store file.
//!
//! The map knows bytes, not records: a name hashes to one of [`BUCKETS`] buckets, and a bucket
//! holds one blob (the records of the names that hash to it, in the form `share/buckets.rs`
//! gives them). A blob is a chain of [`BLOCK_SIZE`]-byte blocks. A bucket's word holds the first
//! block of its blob and a generation; a writer builds a new blob in blocks of its own and
//! publishes it with one compare-and-swap of the word, so:
//!
//! - No lock is ever held: a process stopped at any instruction delays nobody; a writer whose
//!   swap fails (another published first) reads again and retries.
//! - A reader copies the blob and reads the word again: an unchanged word means an unchanged
//!   blob (blocks are freed only after the word moved on, and the generation never repeats), so
//!   a torn copy is thrown away, never trusted.
//!
//! A block's state word says who may change it:
//!
//! | state | meaning | who moves it on |
//! |---|---|---|
//! | `BLOCK_FREE` | nobody's | a writer claims it (`BLOCK_FREE` -> its id) |
//! | a liveness id | its writer's: being written, or published by a swap a moment ago, or being freed | that process; a sweep once it died |
//! | PUBLIC | in a blob that was published | the writer that replaced that blob, or a sweep, once no bucket reaches it |
//!
//! A writer marks its blocks PUBLIC only *after* its swap, so a PUBLIC block was in a bucket,
//! and one that no bucket reaches any more is garbage: its blob was replaced. The writer that
//! replaced it frees it; a writer killed before it did leaves it to the sweep. A writer that
//! replaced a blob before that blob's writer marked it finds its blocks not PUBLIC and leaves
//! them: the blob's writer, which looks at its bucket's word after its marking, sees that its
//! blob was replaced and frees them itself (a `SeqCst` handshake: at least one of the two sees
//! the other). Each block's link
//! word carries a generation that its writer raises: whoever frees a PUBLIC block claims it
//! first (PUBLIC -> its id), checks that its generation is still the one seen in the replaced
//! blob (else the block was freed and published again since, and goes back to PUBLIC), and only
//! then frees it. So a writer stopped between its swap and its freeing, or a sweep that saw a
//! block unreachable a while ago, can never free a block that is published now.
//!
//! The sweep, run when too few blocks are free: (1) notes the PUBLIC blocks and those of dead
//! writers, with their generations, and which writers are dead (before anything else: a dead
//! writer swaps nothing later); (2) walks every bucket's chain; (3) frees the noted PUBLIC blocks
//! no bucket reached (claim, check, free), and the dead writers' blocks no bucket reached, and
//! marks PUBLIC the dead writers' blocks a bucket reaches (killed between swap and marking).
//! Nothing a kill leaves behind is lost for good.
//!
//! Each bucket has a *token floor* beside its word: the highest token of any record ever
//! published in the bucket in this map's life. A record that leaves the bucket (its grants
//! ended, its history flushed) leaves its tokens in the floor, which is how a grant that read
//! the bucket knows them: it publishes only a token at or above the floor it read after its
//! copy of the bucket (equal only where the floor is its own failed attempt's; `Floor` in
//! `share/buckets.rs`). Why that is enough: a writer raises the floor
//! *before* its swap, so a reader whose copy saw the swap (Acquire on the word) sees the floor
//! raised; a swap its copy did not see makes its own swap fail. So a lock's tokens only grow,
//! even for a grant stopped between taking its token and publishing it while the lock was
//! granted again, and its record ended and left the bucket.
//!
//! Tokens are handed out from the map's header: a counter that only grows, bounded by a
//! reservation that the store file holds durably (`local/lease_map.rs` refills it ahead of need).
//!
//! The key index (`share/keys.rs`) is a second map of the same kind, with buckets and blocks of
//! its own and no token floors: this code runs over a [`Region`] (a map's buckets, blocks and
//! claim hint), `Ring::leases` or `Ring::keys`, so that both are one protocol and one proof.
//!
//! Models: `models/map.rs` (make test-loom): readers, writers, block reuse, the sweep, and a
//! grant stopped before publishing beside a later grant of its lock, a writer killed at each step
//! of its publish beside the sweep.

use super::layout::{Block, BLOCKS, BLOCK_PAYLOAD, KEY_BLOCKS};
pub(crate) use super::layout::{MapHeader, BUCKETS};
use super::sync::{fence, AtomicU64, Live, Ordering};
use super::Ring;

const BLOCK_FREE: u64 = 0;
const PUBLIC: u64 = 1;

/// A block's link word: its generation (raised by each writer of the block) in the high half,
/// the next block of its blob (index + 1, 0 for the last) in bits 16-31, its bytes in the low
/// 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link(u64);

impl Link {
    fn new(generation: u32, next: usize, len: usize) -> Link {
        Link(u64::from(generation) << 32 | (next as u64 & 0xffff) << 16 | (len as u64 & 0xffff))
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    fn next(self) -> usize {
        ((self.0 >> 16) & 0xffff) as usize
    }

    fn len(self) -> usize {
        ((self.0 & 0xffff) as usize).min(BLOCK_PAYLOAD)
    }
}

const _: () = assert!(BLOCKS < 0xffff && KEY_BLOCKS < 0xffff && BLOCK_PAYLOAD < 0xffff);

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

/// A consistent copy of a bucket: its word and its blob (empty for an empty bucket), and the
/// blob's blocks with their generations (what a writer that replaces the blob frees).
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) word: Word,
    pub(crate) blob: Vec<u8>,
    chain: Vec<(usize, u32)>,
}

/// The steps of a publish, after each of which a writer may be killed (see
/// [`Region::publish_until`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(fencelock_loom), allow(dead_code))]
pub(super) enum Step {
    /// Its blocks claimed (its liveness id in their state).
    Claim,
    /// Its blob written into them.
    Write,
    /// Its swap made: a bucket reaches its blocks, which are still its own.
    Swap,
    /// Its blocks marked PUBLIC.
    Mark,
    /// Its own blob's replacement looked for (and its blocks freed if so); the blob it
    /// replaced not freed yet.
    Check,
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
    #[allow(clippy::cast_possible_truncation)] // A remainder below BUCKETS.
    let bucket = (hash % BUCKETS as u64) as usize;
    bucket
}

/// One map of the ring, as the code below sees it: its buckets' words, its blocks (each a state
/// word, a link word and a payload) and the hint where a claim of blocks starts looking. The
/// lease map is one (`Ring::leases`), the key index another (`Ring::keys`); both run this code,
/// and the models of `models/map.rs` hold for both.
#[derive(Clone, Copy)]
pub(crate) struct Region<'a> {
    buckets: &'a [AtomicU64],
    blocks: &'a [Block],
    alloc_hint: &'a AtomicU64,
}

impl Ring {
    pub(crate) fn map_header(&self) -> &MapHeader {
        self.view.map_header()
    }

    /// The lease map (`share/buckets.rs` gives its blobs' records).
    pub(crate) fn leases(&self) -> Region<'_> {
        Region {
            buckets: self.view.buckets(),
            blocks: self.view.blocks(),
            alloc_hint: &self.view.map_header().alloc_hint,
        }
    }

    /// The key index's map (`share/keys.rs` gives its blobs' entries).
    pub(crate) fn keys(&self) -> Region<'_> {
        Region {
            buckets: self.view.key_buckets(),
            blocks: self.view.key_blocks(),
            alloc_hint: &self.view.key_header().alloc_hint,
        }
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

    /// Whether bucket `index` of the lease map holds nothing (one load).
    pub(crate) fn bucket_is_empty(&self, index: usize) -> bool {
        self.leases().bucket_is_empty(index)
    }
}

impl Region<'_> {
    fn bucket(&self, index: usize) -> &AtomicU64 {
        &self.buckets[index]
    }

    /// The state word of block `index`: `BLOCK_FREE`, `PUBLIC` or the liveness id of its writer.
    fn block_state(&self, index: usize) -> &AtomicU64 {
        &self.blocks[index].state
    }

    /// The block's link and length word (`Link`).
    fn block_link(&self, index: usize) -> &AtomicU64 {
        &self.blocks[index].link
    }

    /// The longest blob: the whole map. A bucket is bounded only by the map's blocks, so a
    /// bucket that many names share is refused only when the map is full; a longer chain is a
    /// torn read.
    fn max_blob(&self) -> usize {
        self.blocks.len() * BLOCK_PAYLOAD
    }

    /// How many buckets the map has.
    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The bucket of a name's hash.
    pub(crate) fn bucket_of(&self, hash: u64) -> usize {
        #[allow(clippy::cast_possible_truncation)] // below the bucket count
        let bucket = (hash % self.buckets.len() as u64) as usize;
        bucket
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
            if let Some((blob, chain)) = self.copy_blob(word.head()) {
                // A seqlock's read: the copy's Relaxed loads, then this Acquire fence, then the
                // word again. If the copy read any byte of a writer that reused a block of this
                // blob, that writer's Release fence (`write_blocks`) pairs with this one, and
                // everything before it (the swap that moved the word on, before the blob's blocks
                // were freed) is seen by the load below: a torn copy is never accepted. Without
                // the fences the load may still return the old word (the loom model of the map
                // found such a copy trusted).
                fence(Ordering::Acquire);
                if self.bucket(index).load(Ordering::Acquire) == word.0 {
                    return Snapshot { word, blob, chain };
                }
            }
            super::sync::spin();
        }
    }

    /// The bytes of the blob starting at block `head` (index + 1), and its blocks with their
    /// generations, or `None` when the chain does not hold together (a block being reused
    /// under this read).
    #[allow(clippy::type_complexity)]
    fn copy_blob(&self, head: usize) -> Option<(Vec<u8>, Vec<(usize, u32)>)> {
        let mut blob = Vec::new();
        let mut chain = Vec::new();
        let mut next = head;
        while next != 0 {
            let index = next - 1;
            if index >= self.blocks.len() || blob.len() > self.max_blob() {
                return None;
            }
            let link = Link(self.block_link(index).load(Ordering::Acquire));
            // A concurrent writer may change the payload under this copy, which the caller's
            // second look at the word detects.
            super::view::copy_out(&self.blocks[index].payload, link.len(), &mut blob);
            chain.push((index, link.generation()));
            next = link.next();
        }
        Some((blob, chain))
    }

    /// Publishes `blob` as bucket `index`'s, if its word is still the one `read` saw; `owner`
    /// is the writer's liveness id (its blocks are its own until after the swap). An empty blob
    /// empties the bucket. On success the blocks of the blob it replaced are freed.
    pub(crate) fn publish_bucket(
        &self,
        index: usize,
        read: &Snapshot,
        blob: &[u8],
        owner: u64,
        live: &impl Live,
    ) -> Publish {
        self.publish_until(index, read, blob, owner, live, None)
            .unwrap_or(Publish::Done)
    }

    /// As [`Region::publish_bucket`], for a writer killed right after step `stop` (`None`: one
    /// that is not): `None` when it stopped there. The map's model kills a writer at each step.
    pub(super) fn publish_until(
        &self,
        index: usize,
        read: &Snapshot,
        blob: &[u8],
        owner: u64,
        live: &impl Live,
        stop: Option<Step>,
    ) -> Option<Publish> {
        let Some(blocks) = self.claim_blocks(blob.len().div_ceil(BLOCK_PAYLOAD), owner, live)
        else {
            return Some(Publish::Full);
        };
        if stop == Some(Step::Claim) {
            return None;
        }
        let generations = self.write_blocks(&blocks, blob);
        if stop == Some(Step::Write) {
            return None;
        }
        let head = blocks.first().map_or(0, |&b| b + 1);
        if self.swap_bucket(index, read.word, head) {
            match stop {
                Some(Step::Swap) => return None,
                Some(Step::Mark) => {
                    self.mark_public(&blocks);
                    return None;
                }
                _ => {}
            }
            self.after_swap(index, read.word.next(head), &blocks, &generations, owner);
            if stop == Some(Step::Check) {
                return None;
            }
            self.free_replaced(&read.chain, owner);
            Some(Publish::Done)
        } else {
            // Still this writer's alone: nobody else moves a live writer's blocks.
            for &block in &blocks {
                self.block_state(block).store(BLOCK_FREE, Ordering::Release);
            }
            Some(Publish::Raced)
        }
    }

    /// Writes `blob` into `blocks` (this writer's), chained in order, each with a generation
    /// above its last: the generations.
    fn write_blocks(&self, blocks: &[usize], blob: &[u8]) -> Vec<u32> {
        // The writer's half of `read_bucket`'s seqlock: the claims of these blocks (which came
        // after the swaps that freed them) before any byte written into them.
        fence(Ordering::Release);
        let mut generations = Vec::with_capacity(blocks.len());
        for (i, (&block, chunk)) in blocks.iter().zip(blob.chunks(BLOCK_PAYLOAD)).enumerate() {
            let next = blocks.get(i + 1).map_or(0, |&b| b + 1);
            let link = self.block_link(block);
            // Relaxed: the block is this writer's, so the last store to its link was made
            // before it was claimed, which the claim's Acquire ordered.
            let generation = Link(link.load(Ordering::Relaxed))
                .generation()
                .wrapping_add(1);
            super::view::copy_in(&self.blocks[block].payload, chunk);
            // Release, and the swap's Release after it: a reader that sees the new word sees
            // the payload and link.
            link.store(
                Link::new(generation, next, chunk.len()).0,
                Ordering::Release,
            );
            generations.push(generation);
        }
        generations
    }

    /// Swaps bucket `index`'s word from `expected` to a new generation heading at `head`:
    /// whether it was still `expected`. Release publishes the blocks written before it (and the
    /// floor raised before it); Acquire orders the freeing of the replaced blob after every
    /// read of it that the swap's predecessors made; `SeqCst` for the handshake with the marking
    /// of the replaced blob's blocks (`publish_bucket`).
    fn swap_bucket(&self, index: usize, expected: Word, head: usize) -> bool {
        self.bucket(index)
            .compare_exchange(
                expected.0,
                expected.next(head).0,
                Ordering::SeqCst,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// What a writer does right after its swap published `blocks` (of `generations`) as bucket
    /// `index`'s word `word`: marks them PUBLIC, then frees them itself if its blob was replaced
    /// already. A writer that replaced it before the marking found the blocks still this
    /// writer's and left them. `SeqCst` on both sides (the marking and the load of the word
    /// here; the swap and the claim in `release_garbage` there): of the two, at least one sees
    /// the other's store, so a block is never left behind.
    fn after_swap(
        &self,
        index: usize,
        word: Word,
        blocks: &[usize],
        generations: &[u32],
        owner: u64,
    ) {
        self.mark_public(blocks);
        if self.bucket(index).load(Ordering::SeqCst) != word.0 {
            for (&block, &generation) in blocks.iter().zip(generations) {
                self.release_garbage(block, generation, owner);
            }
        }
    }

    /// Marks a just-published blob's blocks PUBLIC. Until then they are their writer's, which a
    /// sweep leaves alone while it lives, and marks PUBLIC itself once it died (they are
    /// reachable). `SeqCst`: the handshake of `publish_bucket`.
    fn mark_public(&self, blocks: &[usize]) {
        for &block in blocks {
            self.block_state(block).store(PUBLIC, Ordering::SeqCst);
        }
    }

    /// Frees the blocks of a replaced blob, `chain` as the replacing writer read it: each one
    /// still PUBLIC and of the generation seen then (see `release_garbage`). A block that is not
    /// PUBLIC is another's to deal with: a sweep's (the blob's writer died before marking it),
    /// or freed already.
    fn free_replaced(&self, chain: &[(usize, u32)], owner: u64) {
        for &(block, generation) in chain {
            self.release_garbage(block, generation, owner);
        }
    }

    /// Frees `block` if it is PUBLIC and still of `generation`, a blob that no bucket reaches
    /// any more: claimed for `owner` first (Acquire: its link is read after the claim), its
    /// generation checked, then freed, or given back as PUBLIC when it was freed and published
    /// again since (a writer stopped before freeing what it replaced, a sweep's old look).
    fn release_garbage(&self, block: usize, generation: u32, owner: u64) {
        let state = self.block_state(block);
        // SeqCst: the handshake of `publish_bucket` (a replacer's claim after its swap).
        if state
            .compare_exchange(PUBLIC, owner, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let now = Link(self.block_link(block).load(Ordering::Acquire)).generation();
        // Release: a claim of the freed block (Acquire) comes after this writer's last look.
        state.store(
            if now == generation {
                BLOCK_FREE
            } else {
                PUBLIC
            },
            Ordering::Release,
        );
    }

    /// Claims `count` free blocks for `owner`; sweeps and tries again when too few are free,
    /// and gives back what it claimed when that is not enough.
    fn claim_blocks(&self, count: usize, owner: u64, live: &impl Live) -> Option<Vec<usize>> {
        for pass in 0..2 {
            let mut blocks = Vec::with_capacity(count);
            // A hint that any writer may have moved: only its remainder modulo the blocks is used.
            #[allow(clippy::cast_possible_truncation)]
            let start = self.alloc_hint.fetch_add(count as u64, Ordering::Relaxed) as usize;
            for offset in 0..self.blocks.len() {
                if blocks.len() == count {
                    break;
                }
                let index = (start + offset) % self.blocks.len();
                let state = self.block_state(index);
                // AcqRel: Acquire orders this writer's use after the freeing writer's last
                // look (its Release).
                if state.load(Ordering::Relaxed) == BLOCK_FREE
                    && state
                        .compare_exchange(BLOCK_FREE, owner, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    blocks.push(index);
                }
            }
            if blocks.len() == count {
                return Some(blocks);
            }
            for &block in &blocks {
                self.block_state(block).store(BLOCK_FREE, Ordering::Release);
            }
            if pass == 0 {
                self.sweep_blocks(owner, live);
            }
        }
        None
    }

    /// Recovers every block that no bucket reaches and nobody alive is writing: the PUBLIC
    /// blocks of replaced blobs whose writer was killed before freeing them, and the blocks of
    /// dead writers; marks PUBLIC the dead writers' blocks that a bucket reaches. `owner` (the
    /// sweeping process) claims a PUBLIC block before freeing it. See the module's docs.
    pub(crate) fn sweep_blocks(&self, owner: u64, live: &impl Live) {
        // (1) Before the walk, so that nothing noted can become reachable unseen: a dead
        // writer swaps no more, and a PUBLIC block is never published again under the
        // generation noted (the generation is read before the state, so it is at most that of
        // the blob the block was PUBLIC in).
        let mut noted = Vec::new();
        for index in 0..self.blocks.len() {
            let generation = Link(self.block_link(index).load(Ordering::Acquire)).generation();
            let state = self.block_state(index).load(Ordering::Acquire);
            if state == PUBLIC || (state > PUBLIC && !live.is_held(state).unwrap_or(true)) {
                noted.push((index, state, generation));
            }
        }
        if noted.is_empty() {
            return;
        }
        // (2)
        let reached = self.reachable();
        // (3)
        for (index, state, generation) in noted {
            match (state, reached[index]) {
                (PUBLIC, true) => {}
                (PUBLIC, false) => self.release_garbage(index, generation, owner),
                (dead, reachable) => {
                    let now = if reachable { PUBLIC } else { BLOCK_FREE };
                    let _ = self.block_state(index).compare_exchange(
                        dead,
                        now,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                }
            }
        }
    }

    /// Which blocks a bucket reaches now: each bucket's chain, read between two equal loads of
    /// its word (a reachable blob's links never change).
    fn reachable(&self) -> Vec<bool> {
        let mut reached = vec![false; self.blocks.len()];
        let mut chain = Vec::new();
        for bucket in 0..self.buckets.len() {
            loop {
                let word = Word(self.bucket(bucket).load(Ordering::Acquire));
                chain.clear();
                let mut next = word.head();
                while next != 0 && next <= self.blocks.len() && chain.len() <= self.blocks.len() {
                    chain.push(next - 1);
                    next = Link(self.block_link(next - 1).load(Ordering::Acquire)).next();
                }
                if self.bucket(bucket).load(Ordering::Acquire) == word.0 {
                    break;
                }
            }
            for &block in &chain {
                reached[block] = true;
            }
        }
        reached
    }

    /// Whether every block that bucket `index` reaches is in use (never `BLOCK_FREE`): what a
    /// sweep or a freer must never break. Read between two equal loads of the word, as
    /// `reachable`.
    #[cfg(all(test, fencelock_loom))]
    pub(crate) fn reached_blocks_in_use(&self, index: usize) -> bool {
        loop {
            let word = Word(self.bucket(index).load(Ordering::SeqCst));
            let mut in_use = true;
            let mut next = word.head();
            while next != 0 && next <= self.blocks.len() {
                in_use &= self.block_state(next - 1).load(Ordering::SeqCst) != BLOCK_FREE;
                next = Link(self.block_link(next - 1).load(Ordering::SeqCst)).next();
            }
            if self.bucket(index).load(Ordering::SeqCst) == word.0 {
                return in_use;
            }
        }
    }

    /// How many blocks are not free (for tests and the metrics).
    #[cfg(test)]
    pub(crate) fn blocks_in_use(&self) -> usize {
        (0..self.blocks.len())
            .filter(|&i| self.block_state(i).load(Ordering::Relaxed) != BLOCK_FREE)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Stamp;
    use crate::storage::liveness::Liveness;

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
        for map in [ring.leases(), ring.keys()] {
            let empty = map.read_bucket(7);
            assert!(empty.blob.is_empty());
            let big: Vec<u8> = (0..1000u32).map(|i| (i & 0xff) as u8).collect();
            assert_eq!(
                map.publish_bucket(7, &empty, &big, 1 << 50, &live),
                Publish::Done
            );
            let read = map.read_bucket(7);
            assert_eq!(read.blob, big);
            assert_eq!(map.blocks_in_use(), big.len().div_ceil(BLOCK_PAYLOAD));
            // A writer that read the old word loses, and leaves nothing claimed.
            assert_eq!(
                map.publish_bucket(7, &empty, b"late", 1 << 50, &live),
                Publish::Raced
            );
            assert_eq!(map.read_bucket(7).blob, big);
            assert_eq!(
                map.publish_bucket(7, &read, b"small", 1 << 50, &live),
                Publish::Done
            );
            assert_eq!(map.read_bucket(7).blob, b"small");
            assert_eq!(map.blocks_in_use(), 1);
            let again = map.read_bucket(7);
            assert_eq!(
                map.publish_bucket(7, &again, b"", 1 << 50, &live),
                Publish::Done
            );
            assert!(map.read_bucket(7).blob.is_empty());
            assert_eq!(map.blocks_in_use(), 0);
        }
    }

    #[test]
    fn writers_of_one_bucket_never_lose_an_update() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        for map in [ring.leases(), ring.keys()] {
            // Each thread adds one to a counter kept in the blob, a thousand times.
            std::thread::scope(|scope| {
                for _ in 0..4 {
                    scope.spawn(|| {
                        for _ in 0..1000 {
                            loop {
                                let read = map.read_bucket(1);
                                let n = if read.blob.is_empty() {
                                    0
                                } else {
                                    u64::from_le_bytes(read.blob[..8].try_into().unwrap())
                                };
                                let mut blob = (n + 1).to_le_bytes().to_vec();
                                blob.resize(300, 0); // two blocks
                                match map.publish_bucket(1, &read, &blob, 1 << 50, &live) {
                                    Publish::Done => break,
                                    // Another writer published first: read again.
                                    Publish::Raced => {}
                                    Publish::Full => panic!("the map is full"),
                                }
                            }
                        }
                    });
                }
            });
            let blob = map.read_bucket(1).blob;
            assert_eq!(u64::from_le_bytes(blob[..8].try_into().unwrap()), 4000);
            assert_eq!(map.blocks_in_use(), 2, "every replaced blob was freed");
        }
    }

    /// A liveness id nobody holds: a writer that was killed.
    const DEAD: u64 = 1 << 52;
    const ALIVE: u64 = 1 << 50;

    /// What a writer does up to its swap, and the swap: its blocks, their generations and the
    /// word it published, or `None` when it lost.
    fn write_and_swap(
        map: Region<'_>,
        live: &Liveness,
        bucket: usize,
        owner: u64,
        blob: &[u8],
    ) -> Option<(Vec<usize>, Vec<u32>, Word)> {
        let read = map.read_bucket(bucket);
        let blocks = map
            .claim_blocks(blob.len().div_ceil(BLOCK_PAYLOAD), owner, live)
            .unwrap();
        let generations = map.write_blocks(&blocks, blob);
        map.swap_bucket(bucket, read.word, blocks[0] + 1)
            .then(|| (blocks.clone(), generations, read.word.next(blocks[0] + 1)))
    }

    fn states(map: Region<'_>, blocks: &[usize]) -> Vec<u64> {
        blocks
            .iter()
            .map(|&b| map.block_state(b).load(Ordering::Relaxed))
            .collect()
    }

    #[test]
    fn a_sweep_recovers_every_block_a_kill_left_behind_and_keeps_every_published_one() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        for map in [ring.leases(), ring.keys()] {
            let blob = |n: u8| vec![n; 1000]; // five blocks
                                              // Killed between its swap and freeing the blob it replaced: that blob's blocks are
                                              // PUBLIC, and no bucket reaches them.
            let empty = map.read_bucket(3);
            assert_eq!(
                map.publish_bucket(3, &empty, &blob(1), ALIVE, &live),
                Publish::Done
            );
            let replaced = map.read_bucket(3);
            let (y, _, _) = write_and_swap(map, &live, 3, DEAD, &blob(2)).unwrap();
            map.mark_public(&y);
            // Killed between its swap and marking its blocks: a bucket reaches them.
            let (z, _, _) = write_and_swap(map, &live, 4, DEAD, &blob(3)).unwrap();
            // Killed before its swap: nothing reaches them.
            let lost = map.claim_blocks(2, DEAD, &live).unwrap();
            map.write_blocks(&lost, &[9; 300]);
            let leaked: Vec<usize> = replaced.chain.iter().map(|&(b, _)| b).collect();
            assert_eq!(states(map, &leaked), vec![PUBLIC; 5]);
            assert_eq!(map.blocks_in_use(), 5 + 5 + 5 + 2);

            map.sweep_blocks(ALIVE, &live);
            assert_eq!(
                map.blocks_in_use(),
                10,
                "only the two published blobs' blocks are in use"
            );
            assert_eq!(states(map, &y), vec![PUBLIC; 5]);
            assert_eq!(
                states(map, &z),
                vec![PUBLIC; 5],
                "the dead writer's published blocks"
            );
            assert_eq!(map.read_bucket(3).blob, blob(2));
            assert_eq!(map.read_bucket(4).blob, blob(3));
            // And they are freed as any PUBLIC blocks when their blobs are replaced.
            for bucket in [3, 4] {
                let read = map.read_bucket(bucket);
                assert_eq!(
                    map.publish_bucket(bucket, &read, b"", ALIVE, &live),
                    Publish::Done
                );
            }
            assert_eq!(map.blocks_in_use(), 0);
        }
    }

    #[test]
    fn a_writer_stopped_before_freeing_what_it_replaced_never_frees_a_block_published_since() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        for map in [ring.leases(), ring.keys()] {
            let empty = map.read_bucket(3);
            assert_eq!(
                map.publish_bucket(3, &empty, &[1; 1000], ALIVE, &live),
                Publish::Done
            );
            // The writer replaces the blob, marks its own blocks, and is stopped before it frees
            // the blob it replaced.
            let replaced = map.read_bucket(3);
            let stopped = 1 << 51;
            assert!(live.lock(stopped).unwrap());
            let (y, _, _) = write_and_swap(map, &live, 3, stopped, &[2; 1000]).unwrap();
            map.mark_public(&y);
            // Meanwhile a sweep frees the replaced blob, and another writer publishes a blob of
            // its own in those very blocks.
            map.sweep_blocks(ALIVE, &live);
            let first = replaced.chain[0].0;
            map.alloc_hint.store(first as u64, Ordering::Relaxed);
            let empty = map.read_bucket(5);
            assert_eq!(
                map.publish_bucket(5, &empty, &[3; 1000], ALIVE, &live),
                Publish::Done
            );
            let z: Vec<usize> = map.read_bucket(5).chain.iter().map(|&(b, _)| b).collect();
            assert_eq!(z[0], first, "the other writer reuses the freed blocks");
            // The stopped writer resumes and frees what it replaced, as it read it.
            map.free_replaced(&replaced.chain, stopped);
            assert_eq!(
                states(map, &z),
                vec![PUBLIC; 5],
                "a published block was freed"
            );
            assert_eq!(map.read_bucket(5).blob, vec![3; 1000]);
            assert_eq!(map.read_bucket(3).blob, vec![2; 1000]);
            assert_eq!(map.blocks_in_use(), 10);
        }
    }

    #[test]
    fn a_blob_replaced_before_its_writer_marked_it_is_freed_by_that_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        for map in [ring.leases(), ring.keys()] {
            // The first writer swaps, and is preempted before it marks its blocks.
            let (first, generations, word) =
                write_and_swap(map, &live, 6, ALIVE, &[1; 500]).unwrap();
            // Another replaces its blob meanwhile: the first writer's blocks are not PUBLIC yet,
            // so it leaves them.
            let read = map.read_bucket(6);
            assert_eq!(
                map.publish_bucket(6, &read, &[2; 500], ALIVE, &live),
                Publish::Done
            );
            assert_eq!(states(map, &first), vec![ALIVE; 3]);
            // The first writer goes on: it marks, sees its blob replaced, and frees its blocks.
            map.after_swap(6, word, &first, &generations, ALIVE);
            assert_eq!(
                states(map, &first),
                vec![BLOCK_FREE; 3],
                "blocks left behind"
            );
            assert_eq!(map.blocks_in_use(), 3);
            assert_eq!(map.read_bucket(6).blob, vec![2; 500]);
        }
    }

    #[test]
    fn the_private_blocks_of_a_dead_writer_are_swept_when_the_map_runs_full() {
        let dir = tempfile::tempdir().unwrap();
        let (ring, live) = ring(dir.path());
        for map in [ring.leases(), ring.keys()] {
            // A writer that died holding every block (its liveness id is not held).
            for index in 0..map.blocks.len() {
                map.block_state(index).store(1 << 52, Ordering::Relaxed);
            }
            let empty = map.read_bucket(0);
            assert_eq!(
                map.publish_bucket(0, &empty, b"x", 1 << 50, &live),
                Publish::Done
            );
            assert_eq!(map.blocks_in_use(), 1);
            // A live writer's blocks are not taken.
            for index in 0..map.blocks.len() {
                let _ = map.block_state(index).compare_exchange(
                    BLOCK_FREE,
                    1 << 50,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            let read = map.read_bucket(0);
            assert_eq!(
                map.publish_bucket(0, &read, b"y", 1 << 50, &live),
                Publish::Full
            );
        }
    }
}
