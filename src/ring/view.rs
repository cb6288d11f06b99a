//! The ring's mapping as typed shared memory: the one place that maps the ring file, turns its
//! bytes into references to the header, the waiting queue, the slots, the activity page, the
//! lease map, the group sync's page and the key map, and unmaps it. Everything else in the ring reads and writes the mapping through
//! these references, in safe code.
//!
//! Every type laid over the mapping is made of atomics (and of reserved words nobody writes),
//! valid for any bit pattern, so that bytes other processes write at any moment are always a
//! valid value. Payloads are words too: a copy in or out of one is word by word, so that a copy
//! racing a writer of another process reads torn bytes (which the protocol detects and throws
//! away) rather than being a data race.
//!
//! No model of its own: in the models (`make test-loom`) the view is a heap arena of loom's
//! atomics (`Ring::heap`), which every protocol's model runs over.

use super::sync::{AtomicU64, Ordering};
use std::fs::File;
use std::io;

use super::activity::Activity;
use super::layout::{
    Block, FlushHeader, Header, KeyHeader, MapHeader, Slot, WaiterEntry, BLOCKS, BUCKETS,
    KEY_BLOCKS, KEY_BUCKETS, MARKS, RING_SIZE, SLOTS, WAITERS,
};
#[cfg(not(fencelock_loom))]
use super::layout::{
    ACTIVITY_OFFSET, FLUSH_HEADER, FLUSH_OFFSET, HEADER_AREA, HEADER_SIZE, KEYS_OFFSET, MAP_OFFSET,
    QUEUE_OFFSET,
};

/// A shared mapping of a ring file, seen as its parts; unmapped when dropped. The references
/// are valid for as long as the view lives: they are handed out only for the life of a borrow
/// of it, never as `'static`.
pub(super) struct View {
    header: &'static Header,
    queue: &'static [WaiterEntry; WAITERS],
    slots: &'static [Slot; SLOTS],
    activity: &'static Activity,
    map_header: &'static MapHeader,
    buckets: &'static [AtomicU64; BUCKETS],
    floors: &'static [AtomicU64; BUCKETS],
    blocks: &'static [Block; BLOCKS],
    flush: &'static FlushHeader,
    marks: &'static [AtomicU64; MARKS],
    key_header: &'static KeyHeader,
    key_buckets: &'static [AtomicU64; KEY_BUCKETS],
    key_blocks: &'static [Block; KEY_BLOCKS],
}

impl View {
    /// Maps the first `RING_SIZE` bytes of `file`, which the caller found to be `RING_SIZE` bytes
    /// long (a mapping past the end of a file faults).
    #[cfg(not(fencelock_loom))]
    // The mapping is page-aligned, and layout.rs checks at compile time that each part's offset
    // is aligned for its type.
    #[allow(clippy::cast_ptr_alignment)]
    pub(super) fn map(file: &File) -> io::Result<View> {
        // SAFETY: a new shared mapping, at an address the kernel picks, aliases no Rust object.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                RING_SIZE,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                file,
                0,
            )?
        }
        .cast::<u8>();
        // SAFETY: `base` starts a readable and writable mapping of RING_SIZE bytes, page-aligned,
        // that lives until this view is dropped (it unmaps it, and nothing else does). Each
        // reference below covers bytes inside it at an offset aligned for its type (the
        // assertions above), and every type is atomics or words nobody writes, valid for any bit
        // pattern and shared between threads and processes by design. The parts do not
        // overlap, and no `&mut` to any of it is ever made.
        Ok(unsafe {
            View {
                header: &*base.cast::<Header>(),
                queue: &*base.add(QUEUE_OFFSET).cast::<[WaiterEntry; WAITERS]>(),
                slots: &*base.add(HEADER_SIZE).cast::<[Slot; SLOTS]>(),
                activity: &*base.add(ACTIVITY_OFFSET).cast::<Activity>(),
                map_header: &*base.add(MAP_OFFSET).cast::<MapHeader>(),
                buckets: &*base
                    .add(MAP_OFFSET + HEADER_AREA)
                    .cast::<[AtomicU64; BUCKETS]>(),
                floors: &*base
                    .add(MAP_OFFSET + HEADER_AREA + BUCKETS * 8)
                    .cast::<[AtomicU64; BUCKETS]>(),
                blocks: &*base
                    .add(MAP_OFFSET + HEADER_AREA + 2 * BUCKETS * 8)
                    .cast::<[Block; BLOCKS]>(),
                flush: &*base.add(FLUSH_OFFSET).cast::<FlushHeader>(),
                marks: &*base
                    .add(FLUSH_OFFSET + FLUSH_HEADER)
                    .cast::<[AtomicU64; MARKS]>(),
                key_header: &*base.add(KEYS_OFFSET).cast::<KeyHeader>(),
                key_buckets: &*base
                    .add(KEYS_OFFSET + HEADER_AREA)
                    .cast::<[AtomicU64; KEY_BUCKETS]>(),
                key_blocks: &*base
                    .add(KEYS_OFFSET + HEADER_AREA + KEY_BUCKETS * 8)
                    .cast::<[Block; KEY_BLOCKS]>(),
            }
        })
    }

    /// Where the mapping starts, and its length (for the SIGBUS guard).
    pub(super) fn span(&self) -> (*mut u8, usize) {
        (std::ptr::from_ref(self.header).cast_mut().cast(), RING_SIZE)
    }

    pub(super) fn header(&self) -> &Header {
        self.header
    }

    pub(super) fn waiter(&self, index: usize) -> &WaiterEntry {
        &self.queue[index]
    }

    pub(super) fn slot(&self, index: usize) -> &Slot {
        &self.slots[index]
    }

    pub(super) fn activity(&self) -> &Activity {
        self.activity
    }

    pub(super) fn map_header(&self) -> &MapHeader {
        self.map_header
    }

    /// The lease map's buckets' words (`map.rs`).
    pub(super) fn buckets(&self) -> &[AtomicU64] {
        self.buckets
    }

    /// The token floor of bucket `index` (`map.rs`).
    pub(super) fn floor(&self, index: usize) -> &AtomicU64 {
        &self.floors[index]
    }

    /// The lease map's blocks (`map.rs`).
    pub(super) fn blocks(&self) -> &[Block] {
        self.blocks
    }

    /// The group sync's words (`flush.rs`).
    pub(super) fn flush(&self) -> &FlushHeader {
        self.flush
    }

    /// The group sync's mark `index` (`flush.rs`).
    pub(super) fn mark(&self, index: usize) -> &AtomicU64 {
        &self.marks[index]
    }

    /// The key map's header (`map.rs`).
    pub(super) fn key_header(&self) -> &KeyHeader {
        self.key_header
    }

    /// The key map's buckets' words (`map.rs`).
    pub(super) fn key_buckets(&self) -> &[AtomicU64] {
        self.key_buckets
    }

    /// The key map's blocks (`map.rs`).
    pub(super) fn key_blocks(&self) -> &[Block] {
        self.key_blocks
    }
}

/// The models' rings are on the heap (`View::heap`); none is mapped.
#[cfg(fencelock_loom)]
impl View {
    pub(super) fn map(_file: &File) -> io::Result<View> {
        Err(io::Error::other("the loom models map no ring"))
    }

    /// A ring of the models (make test-loom), on the heap: every word zero, as a new ring
    /// file's.
    pub(super) fn heap() -> View {
        fn leak<T>(value: T) -> &'static T {
            Box::leak(Box::new(value))
        }
        View {
            header: leak(Header::zeroed()),
            queue: leak(std::array::from_fn(|_| WaiterEntry::zeroed())),
            slots: leak(std::array::from_fn(|_| Slot::zeroed())),
            activity: Box::leak(Activity::private()),
            map_header: leak(MapHeader::zeroed()),
            buckets: leak(std::array::from_fn(|_| AtomicU64::new(0))),
            floors: leak(std::array::from_fn(|_| AtomicU64::new(0))),
            blocks: leak(std::array::from_fn(|_| Block::zeroed())),
            flush: leak(FlushHeader::zeroed()),
            marks: leak(std::array::from_fn(|_| AtomicU64::new(0))),
            key_header: leak(KeyHeader::zeroed()),
            key_buckets: leak(std::array::from_fn(|_| AtomicU64::new(0))),
            key_blocks: leak(std::array::from_fn(|_| Block::zeroed())),
        }
    }
}

#[cfg(fencelock_loom)]
impl Drop for View {
    fn drop(&mut self) {
        fn free<T>(part: &'static T) {
            // SAFETY: every part was leaked from a box by `View::heap` and is freed once, here,
            // when the view that holds the only references to it is dropped.
            drop(unsafe { Box::from_raw(std::ptr::from_ref(part).cast_mut()) });
        }
        free(self.header);
        free(self.queue);
        free(self.slots);
        free(self.activity);
        free(self.map_header);
        free(self.buckets);
        free(self.floors);
        free(self.blocks);
        free(self.flush);
        free(self.marks);
        free(self.key_header);
        free(self.key_buckets);
        free(self.key_blocks);
    }
}

#[cfg(not(fencelock_loom))]
impl Drop for View {
    fn drop(&mut self) {
        let (base, len) = self.span();
        // SAFETY: the mapping made in `map`, unmapped once; the references into it end with
        // this view, and none outlives a borrow of it.
        let _ = unsafe { rustix::mm::munmap(base.cast(), len) };
    }
}

/// Copies `bytes` into `words`, which hold at least as many; the bytes of the last word past
/// the end of `bytes` become zeros.
pub(super) fn copy_in(words: &[AtomicU64], bytes: &[u8]) {
    debug_assert!(bytes.len() <= words.len() * 8);
    let whole = bytes.chunks_exact(8);
    let tail = whole.remainder();
    let mut words = words.iter();
    // The chunks first: `zip` then stops without taking the word the tail goes to.
    for (chunk, word) in whole.zip(words.by_ref()) {
        let eight: [u8; 8] = chunk.try_into().expect("8 bytes");
        word.store(u64::from_ne_bytes(eight), Ordering::Relaxed);
    }
    if !tail.is_empty() {
        let mut eight = [0u8; 8];
        eight[..tail.len()].copy_from_slice(tail);
        if let Some(word) = words.next() {
            word.store(u64::from_ne_bytes(eight), Ordering::Relaxed);
        }
    }
}

/// Appends the first `len` bytes of `words` (at most all of them) to `out`.
pub(super) fn copy_out(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    let len = len.min(words.len() * 8);
    let start = out.len();
    out.resize(start + len, 0);
    let bytes = &mut out[start..];
    let mut chunks = bytes.chunks_exact_mut(8);
    let mut words = words.iter();
    // The chunks first: `zip` then stops without taking the word the tail comes from.
    for (chunk, word) in chunks.by_ref().zip(words.by_ref()) {
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
    }
    let tail = chunks.into_remainder();
    if let Some(word) = words.next() {
        let n = tail.len();
        tail.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes()[..n]);
    }
}
