//! The ring's memory layout: every `#[repr(C)]` type laid over the mapping, where it lies, its
//! size, and the compile-time checks that the parts fit, are aligned and do not overlap. The
//! protocols that move these words live in the files named at each type (`slots.rs`,
//! `queue.rs`, `server.rs`, `map.rs`, `flush.rs`; the key map's records: `share/keys.rs`); `view.rs`
//! maps the file and lays these types over it.
//!
//! Every type here is made of atomics (and of reserved words nobody writes), valid for any bit
//! pattern, so that bytes other processes write at any moment are always a valid value.

#[cfg(not(fencelock_loom))]
use super::activity::Activity;
use super::activity::ACTIVITY_SIZE;
use super::sync::{AtomicU32, AtomicU64};

/// Slots in a ring: more than the processes that commit at once on a host of this size.
#[cfg(not(fencelock_loom))]
pub(super) const SLOTS: usize = 64;
/// Bytes per slot, its header included.
#[cfg(not(fencelock_loom))]
pub(super) const SLOT_SIZE: usize = 4096;
// The models' ring (make test-loom) is small: a few slots, waiters, buckets and blocks.
#[cfg(fencelock_loom)]
pub(super) const SLOTS: usize = 2;
#[cfg(fencelock_loom)]
pub(super) const SLOT_SIZE: usize = 64;
pub(super) const HEADER_SIZE: usize = 4096;
/// The store's activity page (`activity.rs`), after the slots.
pub(super) const ACTIVITY_OFFSET: usize = HEADER_SIZE + SLOTS * SLOT_SIZE;
/// The lease map (map.rs), after the activity page.
pub(super) const MAP_OFFSET: usize = ACTIVITY_OFFSET + ACTIVITY_SIZE;
/// The group sync's page and its marks (`flush.rs`), after the lease map.
pub(super) const FLUSH_OFFSET: usize = MAP_OFFSET + MAP_SIZE;
/// The key index's map (`map.rs`, its records `share/keys.rs`), after the group sync's marks.
pub(super) const KEYS_OFFSET: usize = FLUSH_OFFSET + FLUSH_SIZE;
pub(super) const RING_SIZE: usize = KEYS_OFFSET + KEYS_SIZE;
/// Bytes of a slot that carry a request or a reply.
pub(super) const SLOT_HEAD: usize = 32;
pub(crate) const PAYLOAD: usize = SLOT_SIZE - SLOT_HEAD;
pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"fl-ring\x01");

/// The ring's header, at the start of the mapping.
#[repr(C)]
pub(super) struct Header {
    /// Written last when the ring is set up: a ring without it is not used.
    pub(super) magic: AtomicU64,
    /// The wire format's version, and the number of slots.
    pub(super) version: AtomicU32,
    pub(super) slots: AtomicU32,
    pub(super) boot_id: [AtomicU64; 2],
    /// The last ticket handed to a waiter of the queue.
    pub(super) tickets: AtomicU64,
    /// How many requests the last combined batch carried.
    pub(super) last_batch: AtomicU64,
    /// The liveness id of the server that executes every request (`local/serve.rs`), 0 for none; it
    /// serves while it holds that liveness lock.
    pub(super) server: AtomicU64,
    /// The liveness id of a server waiting for the stores open on the file to move over to it.
    pub(super) wanted: AtomicU64,
    /// The server's process id.
    pub(super) server_pid: AtomicU32,
    /// Bumped at every post: the server sleeps on it.
    pub(super) doorbell: AtomicU32,
    /// 1 while the server sleeps on the doorbell (so that a post wakes it only then).
    pub(super) server_sleeps: AtomicU32,
    /// Bumped at a release while waiters without a place in the queue (a full queue) sleep on
    /// it, and how many do.
    pub(super) overflow: AtomicU32,
    pub(super) overflow_sleepers: AtomicU32,
}

/// Where the waiting queue starts in the header page, and how many waiters it holds.
#[cfg(not(fencelock_loom))]
pub(super) const QUEUE_OFFSET: usize = 128;
#[cfg(not(fencelock_loom))]
const _: () = assert!(std::mem::size_of::<Header>() <= QUEUE_OFFSET);
#[cfg(not(fencelock_loom))]
pub(super) const WAITERS: usize = (HEADER_SIZE - QUEUE_OFFSET) / std::mem::size_of::<WaiterEntry>();
#[cfg(fencelock_loom)]
pub(super) const WAITERS: usize = 2;

/// One waiting acquire in the queue.
#[repr(C)]
pub(super) struct WaiterEntry {
    pub(super) state: AtomicU32,
    /// Bumped to wake the waiter (a futex word).
    pub(super) wake: AtomicU32,
    /// Which lock (see `lock_hash`).
    pub(super) lock: AtomicU64,
    pub(super) ticket: AtomicU64,
    /// The waiting store's liveness id.
    pub(super) owner: AtomicU64,
    /// When the waiter last showed it still waits (`CLOCK_BOOTTIME` ns).
    pub(super) seen_ns: AtomicU64,
    /// The waiting process's id, for the views that list waiters (`Ring::waiters_of`); read
    /// by nothing that decides a grant.
    pub(super) pid: AtomicU64,
    /// When the waiter took its place (`CLOCK_BOOTTIME` ns), for the same views.
    pub(super) since_ns: AtomicU64,
    _reserved: [u64; 1],
}

// An entry is a cache line: the queue's size in the header page and every field's offset stay
// as the ring format's version says (`WIRE_VERSION`, bumped when they change). (The models'
// atomics are loom's, of another size.)
#[cfg(not(fencelock_loom))]
const _: () = assert!(std::mem::size_of::<WaiterEntry>() == 64);

/// A slot's header, at the start of each slot.
#[repr(C)]
pub(super) struct SlotHead {
    pub(super) state: AtomicU32,
    /// Length of the request or reply in the slot's payload.
    pub(super) len: AtomicU32,
    /// The requester's liveness id; 0 while nobody owns the slot.
    pub(super) owner: AtomicU64,
    /// The combiner's liveness id while the slot is TAKEN.
    pub(super) combiner: AtomicU64,
}

/// One slot: its head, then its payload.
#[repr(C)]
pub(super) struct Slot {
    pub(super) head: SlotHead,
    _reserved: [u64; SLOT_HEAD.saturating_sub(std::mem::size_of::<SlotHead>()) / 8],
    pub(super) payload: [AtomicU64; PAYLOAD / 8],
}

/// One block of the lease map: its state word, its link and length word, then its payload.
#[repr(C)]
pub(super) struct Block {
    /// FREE, PUBLIC or the liveness id of its writer.
    pub(super) state: AtomicU64,
    /// Next block (index + 1) in the high half, bytes in the low.
    pub(super) link: AtomicU64,
    pub(super) payload: [AtomicU64; BLOCK_PAYLOAD / 8],
}

// The layout the references below are laid over: every part where the offsets say, aligned,
// and inside the mapping. (Not for the models' atomics, which are larger, and never mapped.)
#[cfg(not(fencelock_loom))]
const _: () = {
    assert!(std::mem::size_of::<Slot>() == SLOT_SIZE);
    assert!(std::mem::offset_of!(Slot, payload) == SLOT_HEAD);
    assert!(std::mem::size_of::<Block>() == BLOCK_SIZE);
    assert!(PAYLOAD % 8 == 0 && BLOCK_PAYLOAD % 8 == 0);
    assert!(QUEUE_OFFSET >= std::mem::size_of::<Header>());
    assert!(QUEUE_OFFSET + WAITERS * std::mem::size_of::<WaiterEntry>() <= HEADER_SIZE);
    assert!(HEADER_SIZE + SLOTS * SLOT_SIZE <= ACTIVITY_OFFSET);
    assert!(ACTIVITY_OFFSET + std::mem::size_of::<Activity>() <= MAP_OFFSET);
    assert!(std::mem::size_of::<MapHeader>() <= HEADER_AREA);
    assert!(MAP_OFFSET + HEADER_AREA + 2 * BUCKETS * 8 + BLOCKS * BLOCK_SIZE <= RING_SIZE);
    assert!(QUEUE_OFFSET % std::mem::align_of::<WaiterEntry>() == 0);
    assert!(HEADER_SIZE % std::mem::align_of::<Slot>() == 0);
    assert!(ACTIVITY_OFFSET % std::mem::align_of::<Activity>() == 0);
    assert!(MAP_OFFSET % std::mem::align_of::<MapHeader>() == 0);
    assert!((MAP_OFFSET + HEADER_AREA + 2 * BUCKETS * 8) % std::mem::align_of::<Block>() == 0);
    // The group sync's page starts a page of its own, its marks right after it.
    assert!(FLUSH_OFFSET % 4096 == 0);
    assert!(std::mem::size_of::<FlushHeader>() <= FLUSH_HEADER);
    assert!(FLUSH_OFFSET + FLUSH_HEADER + MARKS * 8 <= RING_SIZE);
    assert!(FLUSH_HEADER % std::mem::align_of::<AtomicU64>() == 0);
    // The key map starts a page of its own after the marks: its header, its buckets' words,
    // its blocks (of the lease map's type).
    assert!(FLUSH_OFFSET + FLUSH_SIZE <= KEYS_OFFSET);
    assert!(KEYS_OFFSET % 4096 == 0);
    assert!(std::mem::size_of::<KeyHeader>() <= HEADER_AREA);
    assert!(KEYS_OFFSET + HEADER_AREA + KEY_BUCKETS * 8 + KEY_BLOCKS * BLOCK_SIZE <= RING_SIZE);
    assert!((KEYS_OFFSET + HEADER_AREA + KEY_BUCKETS * 8) % std::mem::align_of::<Block>() == 0);
    // The mapping is page-aligned: no part needs more.
    assert!(std::mem::align_of::<Header>() <= 4096);
    assert!(std::mem::align_of::<Activity>() <= 4096);
};

/// Buckets of the map: far more than the names held at once, so that names rarely share one.
#[cfg(not(fencelock_loom))]
pub(crate) const BUCKETS: usize = 4096;
/// Blocks of the map, and their size: 4 MiB in all.
#[cfg(not(fencelock_loom))]
pub(crate) const BLOCKS: usize = 16384;
#[cfg(not(fencelock_loom))]
pub(crate) const BLOCK_SIZE: usize = 256;
#[cfg(fencelock_loom)]
pub(crate) const BUCKETS: usize = 2;
#[cfg(fencelock_loom)]
pub(crate) const BLOCKS: usize = 4;
#[cfg(fencelock_loom)]
pub(crate) const BLOCK_SIZE: usize = 128;
/// The header of a block: its state word, the next block of its blob (index + 1, 0 for the
/// last), and the bytes it carries.
pub(super) const BLOCK_HEAD: usize = 16;
pub(crate) const BLOCK_PAYLOAD: usize = BLOCK_SIZE - BLOCK_HEAD;

/// The map's header, at the start of its area.
#[repr(C)]
pub(crate) struct MapHeader {
    /// A random id of this map, drawn when the ring is set up: the id that processes using it
    /// lock in the store file, so that a process that cannot see this map finds it in use.
    pub(crate) table_id: AtomicU64,
    /// The last token handed out (this and the next three: `tokens.rs`).
    pub(super) last_token: AtomicU64,
    /// The highest token the store file has reserved durably: no token above it is handed out.
    pub(super) reserved: AtomicU64,
    /// How many tokens the last reservation took (they grow with the rate of grants).
    pub(super) block: AtomicU64,
    /// The liveness id of the process refilling the reservation now, 0 for none.
    pub(crate) refilling: AtomicU64,
    /// Where the next claim of a block starts looking.
    pub(super) alloc_hint: AtomicU64,
    /// 1 once the map's tokens are set up from the store file (see `local/lease_map.rs`).
    pub(super) ready: AtomicU64,
    /// Ends of leases kept in the map and not yet in the store file's history (about).
    pub(crate) pending_ends: AtomicU64,
    /// The liveness id of the process writing those ends to the file now, 0 for none.
    pub(crate) flushing: AtomicU64,
    /// The bucket the pruning of dead records looks at next.
    pub(crate) prune_cursor: AtomicU64,
}

pub(crate) const HEADER_AREA: usize = 4096;
#[cfg(not(fencelock_loom))]
const _: () = assert!(std::mem::size_of::<MapHeader>() <= HEADER_AREA);
/// The header, the buckets' words, their token floors, the blocks.
pub(crate) const MAP_SIZE: usize = HEADER_AREA + 2 * BUCKETS * 8 + BLOCKS * BLOCK_SIZE;

/// The key index's map: as the lease map, with a header of its own and no token floors (its
/// records hold no lease; `share/keys.rs`). Sized for a checkpoint's worth of keys: an entry
/// takes 38 bytes and its key, so 64K keys of 16 bytes fill about 3.5 MiB of blobs, 16 to a
/// bucket of 4096 (four blocks each, a fifth for about one bucket in five, with the keys spread
/// as a hash spreads them): about 17K blocks of 32K. The other half is room for longer keys,
/// for buckets that draw more keys than the mean, and for the new blobs of writers whose swap
/// has not freed the old ones yet. 8 MiB in all.
#[cfg(not(fencelock_loom))]
pub(crate) const KEY_BUCKETS: usize = 4096;
#[cfg(not(fencelock_loom))]
pub(crate) const KEY_BLOCKS: usize = 32768;
// The models' key map: two buckets, as the lease map, and blocks for two keys' entries (two
// blocks) published by three writers at once.
#[cfg(fencelock_loom)]
pub(crate) const KEY_BUCKETS: usize = 2;
#[cfg(fencelock_loom)]
pub(crate) const KEY_BLOCKS: usize = 8;

/// The key map's header, at the start of its area.
#[repr(C)]
pub(crate) struct KeyHeader {
    /// Where the next claim of a block starts looking.
    pub(super) alloc_hint: AtomicU64,
}

/// The header, the buckets' words, the blocks.
pub(super) const KEYS_SIZE: usize = HEADER_AREA + KEY_BUCKETS * 8 + KEY_BLOCKS * BLOCK_SIZE;

/// The group sync's words (`flush.rs`: their state table and protocol), in a page of their
/// own: the writers of every process touch them at each durable write, and a page apart keeps
/// that traffic off the lease map's header.
#[repr(C)]
pub(super) struct FlushHeader {
    /// The log position (LSN, bytes) reserved so far.
    pub(super) end: AtomicU64,
    /// The LSN below which the log is durable.
    pub(super) flushed: AtomicU64,
    /// The liveness id of the process syncing now (the flusher), 0 for none.
    pub(super) flusher: AtomicU64,
    /// Non-zero once a sync or a write of the log failed: every later reserve fails.
    pub(super) failed: AtomicU64,
    /// Raised at each raise of `flushed` (and at a failure): the futex waiters sleep on.
    pub(super) generation: AtomicU32,
    _reserved: AtomicU32,
    /// The LSN the store's checkpoint has reached: writers reserve only up to `MAX_SEGMENTS`
    /// segments past its segment (`flush.rs`).
    pub(super) checkpointed: AtomicU64,
    /// Whether the processes of this ring write through the log, decided once for the ring's
    /// lifetime (`flush.rs`, `Ring::decide_log`): 0 undecided, `LOG_OFF`, `LOG_ON`, or the
    /// liveness id of the process recovering the log before it is on.
    pub(super) log_state: AtomicU64,
    /// The liveness id of the process skipping the gap at `flushed` now (the skipper), 0 for
    /// none: one skip at a time, and a dead skipper's claim is taken over (`flush.rs`).
    pub(super) skipper: AtomicU64,
    /// Where the log lies (`flush.rs`, `LogPlace`): its directory's device and inode, and a
    /// hash of the store file's name it is named after. Set with the log, before it is on.
    pub(super) log_dir_dev: AtomicU64,
    pub(super) log_dir_ino: AtomicU64,
    pub(super) log_name: AtomicU64,
}

/// Bytes of the group sync's page; its marks follow.
pub(super) const FLUSH_HEADER: usize = 4096;
/// The log's records start on multiples of this; a mark stands for each such granule.
pub(crate) const GRANULE: u64 = 8;
/// The marks of the group sync, one per granule of the window of log in flight (`flush.rs`):
/// 16,384 marks (128 KiB of shared memory) for a window of 128 KiB of log.
#[cfg(not(fencelock_loom))]
pub(crate) const MARKS: usize = 16384;
// The models' window: a few records of a granule or two.
#[cfg(fencelock_loom)]
pub(crate) const MARKS: usize = 8;
pub(super) const FLUSH_SIZE: usize = FLUSH_HEADER + MARKS * 8;

/// The models' ring is made of these, on the heap (`View::heap`): every word zero, as a new
/// ring file's.
#[cfg(fencelock_loom)]
mod zeroed {
    use super::*;

    fn words<const N: usize>() -> [AtomicU64; N] {
        std::array::from_fn(|_| AtomicU64::new(0))
    }

    impl Header {
        pub(in crate::ring) fn zeroed() -> Header {
            Header {
                magic: AtomicU64::new(0),
                version: AtomicU32::new(0),
                slots: AtomicU32::new(0),
                boot_id: words(),
                tickets: AtomicU64::new(0),
                last_batch: AtomicU64::new(0),
                server: AtomicU64::new(0),
                wanted: AtomicU64::new(0),
                server_pid: AtomicU32::new(0),
                doorbell: AtomicU32::new(0),
                server_sleeps: AtomicU32::new(0),
                overflow: AtomicU32::new(0),
                overflow_sleepers: AtomicU32::new(0),
            }
        }
    }

    impl WaiterEntry {
        pub(in crate::ring) fn zeroed() -> WaiterEntry {
            WaiterEntry {
                state: AtomicU32::new(0),
                wake: AtomicU32::new(0),
                lock: AtomicU64::new(0),
                ticket: AtomicU64::new(0),
                owner: AtomicU64::new(0),
                seen_ns: AtomicU64::new(0),
                pid: AtomicU64::new(0),
                since_ns: AtomicU64::new(0),
                _reserved: [0; 1],
            }
        }
    }

    impl Slot {
        pub(in crate::ring) fn zeroed() -> Slot {
            Slot {
                head: SlotHead {
                    state: AtomicU32::new(0),
                    len: AtomicU32::new(0),
                    owner: AtomicU64::new(0),
                    combiner: AtomicU64::new(0),
                },
                _reserved: [0; SLOT_HEAD.saturating_sub(std::mem::size_of::<SlotHead>()) / 8],
                payload: words(),
            }
        }
    }

    impl Block {
        pub(in crate::ring) fn zeroed() -> Block {
            Block {
                state: AtomicU64::new(0),
                link: AtomicU64::new(0),
                payload: words(),
            }
        }
    }

    impl FlushHeader {
        pub(in crate::ring) fn zeroed() -> FlushHeader {
            FlushHeader {
                end: AtomicU64::new(0),
                flushed: AtomicU64::new(0),
                flusher: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                generation: AtomicU32::new(0),
                _reserved: AtomicU32::new(0),
                checkpointed: AtomicU64::new(0),
                log_state: AtomicU64::new(0),
                skipper: AtomicU64::new(0),
                log_dir_dev: AtomicU64::new(0),
                log_dir_ino: AtomicU64::new(0),
                log_name: AtomicU64::new(0),
            }
        }
    }

    impl KeyHeader {
        pub(in crate::ring) fn zeroed() -> KeyHeader {
            KeyHeader {
                alloc_hint: AtomicU64::new(0),
            }
        }
    }

    impl MapHeader {
        pub(in crate::ring) fn zeroed() -> MapHeader {
            MapHeader {
                table_id: AtomicU64::new(0),
                last_token: AtomicU64::new(0),
                reserved: AtomicU64::new(0),
                block: AtomicU64::new(0),
                refilling: AtomicU64::new(0),
                alloc_hint: AtomicU64::new(0),
                ready: AtomicU64::new(0),
                pending_ends: AtomicU64::new(0),
                flushing: AtomicU64::new(0),
                prune_cursor: AtomicU64::new(0),
            }
        }
    }
}
