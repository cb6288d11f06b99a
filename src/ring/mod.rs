//! The shared request ring: a small memory-mapped area in `/dev/shm` through which the processes
//! that open one store file post their write operations, so that whichever of them holds the
//! write lock commits everyone's in one transaction.
//!
//! The ring is named after the store file's device and inode, so every path to the file finds
//! it. It is never fsynced and holds nothing that must survive: correctness never depends on it.
//! A process that cannot use it (another user's ring, a damaged header, another version) cannot
//! open the store to write, as the ring holds the leases: its open fails, saying why; a
//! read-only open goes on without it.
//!
//! Files, one protocol each, with its state table at its word: `layout.rs` (every type over the
//! mapping), `activity.rs` (the counters and recent releases), `sync.rs` (atomics and futexes), `view.rs` (the mapping), `file.rs` (setting up,
//! permissions, removal), `slots.rs` (posting requests and replies), `queue.rs` (waiting
//! acquires), `server.rs` (the server and doorbell words), `map.rs` (the lease map), `tokens.rs`
//! (the token counter and its reservation), `flush.rs` (group sync of the redo log across
//! processes) and `guard.rs` (SIGBUS).
//!
//! Layer 3: the ring owns the mapping and its bytes (the slots, the waiting queue, the server
//! words, the activity page, the lease map) and the futexes; what the bytes mean it leaves to
//! its users. Imports the base, the rules (the activity page) and the storage (liveness).

use std::fs::File;
use std::path::PathBuf;

use layout::{Header, SlotHead};

pub(crate) mod activity;
mod file;
pub(crate) mod flush;
mod guard;
mod layout;
pub(crate) mod map;
#[cfg(all(test, fencelock_loom))]
mod models;
mod queue;
mod server;
mod slots;
mod sync;
pub(crate) mod tokens;
mod view;

pub(crate) use layout::PAYLOAD;
pub(crate) use queue::{bytes_hash, lock_hash, Waiter};
pub(crate) use slots::{Phase, Posted, Taken};
pub(crate) use sync::Live;

/// A word of the lease map's header that a layer above moves on its own (the refill and flush
/// jobs' owner words, the count of pending ends): std's atomic, or loom's in the models.
pub(crate) type SharedWord = sync::AtomicU64;

/// What a ring must have been set up with to be used: this boot (a ring of an earlier one is
/// set up again) and the version of the format of what travels through it (a ring of another
/// version is not used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub boot_id: [u8; 16],
    pub version: u32,
}

pub(crate) struct Ring {
    /// The mapping, unmapped when the ring is dropped (after `Drop for Ring` unregistered it).
    view: view::View,
    /// The mapping's record with the SIGBUS guard, which marks it cut if its file is cut short.
    guarded: guard::Guarded,
    /// Held with a shared `flock` while the ring is mapped, so that a process sets it up, or
    /// removes it, only when nobody else uses it.
    file: File,
    path: PathBuf,
    /// The process that opened it. A child of `fork()` shares its open file, and with it the
    /// lock: it must neither convert the lock nor remove the ring.
    opener: u32,
}

impl Ring {
    /// A ring of the models (make test-loom): on the heap, with no file behind it.
    #[cfg(fencelock_loom)]
    pub(crate) fn heap() -> Ring {
        Ring {
            view: view::View::heap(),
            guarded: guard::Guarded::unmapped(),
            file: File::open("/dev/null").expect("/dev/null"),
            path: PathBuf::new(),
            opener: std::process::id(),
        }
    }

    fn header(&self) -> &Header {
        self.view.header()
    }

    fn head(&self, index: usize) -> &SlotHead {
        &self.view.slot(index).head
    }

    /// The store's activity page: its counters and recent releases.
    pub(crate) fn activity(&self) -> &activity::Activity {
        self.view.activity()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::time::Duration;

    use rustix::fs::FlockOperation as Flock;

    use super::file::flock;
    use super::queue::WAITER_STALE_NS;
    use super::slots::{generation, phase, FREE};
    use super::sync::Ordering;
    use super::*;
    use crate::storage::liveness::Liveness;

    const BOOT: Stamp = Stamp {
        boot_id: [7; 16],
        version: 1,
    };
    const NEXT_BOOT: Stamp = Stamp {
        boot_id: [8; 16],
        version: 1,
    };

    fn store(dir: &Path) -> (std::path::PathBuf, std::fs::Metadata) {
        let path = dir.join("store");
        std::fs::write(&path, b"").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        (path, meta)
    }

    fn ring_path(dir: &Path, meta: &std::fs::Metadata) -> std::path::PathBuf {
        dir.join(format!("fencelock-{:x}-{:x}.ring", meta.dev(), meta.ino()))
    }

    #[test]
    fn processes_racing_to_create_the_ring_share_one() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let rings: Vec<Ring> = std::thread::scope(|scope| {
            let opening: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| Ring::open(dir.path(), &meta, None, BOOT).unwrap()))
                .collect();
            opening.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let inode = rings[0].file().metadata().unwrap().ino();
        assert!(rings
            .iter()
            .all(|r| r.file().metadata().unwrap().ino() == inode));
        // What one posts, another takes.
        let posted = rings[3].post(1 << 50, b"request", &live).unwrap();
        let taken = rings[5].take_posted(1 << 51, &live);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].request, b"request");
        rings[6].publish(&taken[0], b"reply").unwrap();
        assert_eq!(rings[3].phase(&posted), Phase::Done);
        assert_eq!(rings[3].reply(posted), b"reply");
        // The last user removes it.
        let ring_file = ring_path(dir.path(), &meta);
        assert!(ring_file.exists());
        drop(rings);
        assert!(!ring_file.exists());
    }

    #[test]
    fn a_ring_of_an_earlier_boot_is_set_up_again_and_a_foreign_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_, meta) = store(dir.path());
        let ring_file = ring_path(dir.path(), &meta);
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let old = std::fs::read(&ring_file).unwrap();
        // Used by a process of this boot, it cannot be taken for another boot's.
        assert!(Ring::open(dir.path(), &meta, None, NEXT_BOOT).is_err());
        drop(ring);
        std::fs::write(&ring_file, &old).unwrap();
        let ring = Ring::open(dir.path(), &meta, None, NEXT_BOOT).unwrap();
        assert!(ring.valid(NEXT_BOOT));
        drop(ring);
        // Another program's file of that name is set up again too (nobody uses it).
        std::fs::write(&ring_file, b"something else").unwrap();
        assert!(Ring::open(dir.path(), &meta, None, BOOT)
            .unwrap()
            .valid(BOOT));
    }

    #[test]
    fn a_ring_not_set_up_yet_and_swept_meanwhile_is_opened_again_not_mapped_empty() {
        // A ring's maker links it at its name empty and then locks it; in between, another
        // store's set-up (`sweep`) may lock it for a moment and remove it as unused. An open
        // that found the empty file then got its shared lock once the sweep let go.
        let dir = tempfile::tempdir().unwrap();
        let (_, meta) = store(dir.path());
        let ring_file = ring_path(dir.path(), &meta);
        let made = File::create(&ring_file).unwrap();
        let sweeper = File::open(&ring_file).unwrap();
        flock(&sweeper, Flock::LockExclusive).unwrap();
        let opening = std::thread::spawn({
            let (dir, meta) = (dir.path().to_owned(), meta.clone());
            move || Ring::open(&dir, &meta, None, BOOT)
        });
        // The open has found the empty file (a bound for its thread to start, not a timing
        // limit: later, it finds no file and makes one, as after the sweep too).
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::remove_file(&ring_file).unwrap();
        drop(sweeper);
        let ring = opening
            .join()
            .unwrap()
            .unwrap_or_else(|err| panic!("the open failed: {err}"));
        assert!(ring.valid(BOOT));
        assert_eq!(
            ring.file().metadata().unwrap().ino(),
            std::fs::metadata(&ring_file).unwrap().ino(),
            "the ring at its name"
        );
        drop(made);
    }

    #[test]
    fn setting_up_a_ring_removes_the_rings_nobody_uses() {
        let dir = tempfile::tempdir().unwrap();
        let (_, meta) = store(dir.path());
        let left = dir.path().join("fencelock-1-2.ring");
        std::fs::write(&left, b"left by a killed process").unwrap();
        let used = dir.path().join("fencelock-3-4.ring");
        let user = File::create(&used).unwrap();
        flock(&user, Flock::LockShared).unwrap();
        let other = dir.path().join("unrelated");
        std::fs::write(&other, b"").unwrap();
        let _ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        assert!(!left.exists());
        assert!(used.exists(), "a ring in use stays");
        assert!(other.exists());
    }

    #[test]
    fn the_queue_orders_waiters_and_passes_over_dead_and_paused_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let other = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(other.lock(1 << 51).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let lock = lock_hash("hot");
        let now = 1_000_000_000_000;
        let first = ring.enqueue(lock, 1 << 50, now, &live).unwrap();
        let second = ring.enqueue(lock, 1 << 51, now, &live).unwrap();
        assert!(first.ticket < second.ticket);
        assert!(ring.waits_before(lock, Some(second.ticket), now, &live));
        assert!(!ring.waits_before(lock, Some(first.ticket), now, &live));
        assert!(
            ring.waits_before(lock, None, now, &live),
            "a newcomer waits its turn"
        );
        assert!(!ring.waits_before(lock_hash("cold"), None, now, &live));
        // A waiter that stopped showing it waits (paused) is passed over...
        let later = now + WAITER_STALE_NS + 1;
        ring.still_waiting(&second, later);
        assert!(!ring.waits_before(lock, Some(second.ticket), later, &live));
        // ...and so is one whose process died.
        ring.still_waiting(&first, later);
        drop(other);
        assert!(!ring.waits_before(lock, Some(first.ticket), later, &live));
        ring.dequeue(first);
        ring.dequeue(second);
        assert_eq!(ring.queued(lock), 0);
    }

    #[test]
    fn a_taken_request_given_up_on_is_freed_when_its_reply_comes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let posted = ring.post(1 << 50, b"request", &live).unwrap();
        let taken = ring.take_posted(1 << 51, &live);
        assert!(matches!(ring.phase(&posted), Phase::Taken(id, _) if id == 1 << 51));
        assert!(
            !ring.withdraw(&posted),
            "a taken request cannot be withdrawn"
        );
        assert!(ring.abandon(&posted));
        ring.publish(&taken[0], b"late").unwrap();
        assert_eq!(
            ring.phase(&posted),
            Phase::Lost,
            "freed for the next request"
        );
        assert!(ring.post(1 << 50, b"next", &live).is_some());
    }

    #[test]
    fn requests_and_replies_of_any_length_up_to_a_slot_come_back_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let bytes = |len: usize, seed: u8| -> Vec<u8> {
            (0..=u8::MAX)
                .cycle()
                .take(len)
                .map(|i| i.wrapping_mul(31).wrapping_add(seed) | 1)
                .collect()
        };
        // Longest first, then shorter ones in the same slots: a short request or reply never
        // carries bytes of the longer one before it.
        let lengths = [
            PAYLOAD,
            PAYLOAD - 1,
            4000,
            17,
            16,
            15,
            9,
            8,
            7,
            1,
            0,
            12,
            PAYLOAD,
        ];
        for (round, &len) in lengths.iter().enumerate() {
            let round = u8::try_from(round).unwrap();
            let request = bytes(len, round);
            let posted = ring.post(1 << 50, &request, &live).unwrap();
            let taken = ring.take_posted(1 << 51, &live);
            assert_eq!(taken.len(), 1);
            assert_eq!(taken[0].request, request, "request of {len} bytes");
            let reply = bytes(len, round ^ 0x80);
            ring.publish(&taken[0], &reply).unwrap();
            assert_eq!(ring.phase(&posted), Phase::Done);
            assert_eq!(ring.reply(posted), reply, "reply of {len} bytes");
        }
    }

    /// A paused freer: what `take_posted` or `reclaim` does with the slot of a dead requester,
    /// stopped between taking the slot and freeing it.
    fn begin_freeing(ring: &Ring, index: usize) -> u32 {
        let current = ring.head(index).state.load(Ordering::Acquire);
        assert!(ring.seize(index, current));
        generation(current)
    }

    #[test]
    fn a_dead_requesters_slot_is_freed_once_however_many_reclaim_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let dead = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(dead.lock(1 << 52).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let posted = ring
            .post(1 << 52, b"of a requester that dies", &live)
            .unwrap();
        drop(dead);
        // A combiner finds its requester dead and takes the slot to free it, and is paused
        // (SIGSTOP, or preempted) before it frees it...
        let generation = begin_freeing(&ring, posted.index);
        // ...while another process, its post finding the ring full, reclaims the slots of
        // dead requesters; a live requester then posts into the slot that freed...
        ring.reclaim(&live);
        let next = ring.post(1 << 50, b"of a live requester", &live).unwrap();
        // ...and the paused combiner resumes and frees what it took.
        ring.free_dead(posted.index, generation);
        assert!(
            matches!(ring.phase(&next), Phase::Posted(_)),
            "the live requester's request keeps its slot: {:?}",
            ring.phase(&next)
        );
    }

    #[test]
    fn a_request_given_up_on_stays_its_combiners_until_it_publishes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let opener = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(live.lock(1 << 51).unwrap());
        assert!(opener.lock(1 << 52).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        // A short-lived process posts, a combiner takes it and is paused inside its commit; the
        // requester times out, gives up and exits.
        let posted = ring.post(1 << 52, b"of an opener", &live).unwrap();
        let taken = ring.take_posted(1 << 51, &live);
        assert!(ring.abandon(&posted));
        drop(opener);
        // The ring runs full: dead requesters' slots are reclaimed. A live requester posts.
        ring.reclaim(&live);
        let next = ring.post(1 << 50, b"of a live requester", &live).unwrap();
        // The combiner resumes and publishes its late reply.
        ring.publish(&taken[0], b"late reply to the opener")
            .unwrap();
        assert!(matches!(ring.phase(&next), Phase::Posted(_)));
        let again = ring.take_posted(1 << 51, &live);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].request, b"of a live requester");
    }

    #[test]
    fn the_slot_of_a_requester_that_died_inside_its_post_is_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let dead = Liveness::shared(&path).unwrap();
        assert!(live.lock(1 << 50).unwrap());
        assert!(dead.lock(1 << 52).unwrap());
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        // Claimed, its owner written, killed before it showed the request POSTED.
        let current = ring.head(0).state.load(Ordering::Acquire);
        assert!(ring.own(0, current));
        ring.head(0).owner.store(1 << 52, Ordering::Relaxed);
        drop(dead);
        ring.reclaim(&live);
        assert_eq!(phase(ring.head(0).state.load(Ordering::Acquire)), FREE);
        assert_eq!(
            generation(ring.head(0).state.load(Ordering::Acquire)),
            generation(current) + 1
        );
    }

    #[test]
    fn live_requests_keep_their_slots_while_processes_reclaim_dead_ones_at_once() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = store(dir.path());
        let live = Liveness::shared(&path).unwrap();
        let ring = Ring::open(dir.path(), &meta, None, BOOT).unwrap();
        let stop = AtomicBool::new(false);
        let lost = AtomicUsize::new(0);
        let posts = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            // Requesters that die at once (ids nobody holds) keep the ring full, so that every
            // post reclaims.
            for _ in 0..2 {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = ring.post(1 << 55, b"of a dead requester", &live);
                    }
                });
            }
            for thread in 0..4u64 {
                let (live, ring, stop, lost, posts) = (&live, &ring, &stop, &lost, &posts);
                scope.spawn(move || {
                    let id = (1 << 50) + thread;
                    assert!(live.lock(id).unwrap());
                    while !stop.load(Ordering::Relaxed) {
                        let Some(posted) = ring.post(id, b"of a live requester", live) else {
                            continue;
                        };
                        posts.fetch_add(1, Ordering::Relaxed);
                        for _ in 0..20 {
                            std::thread::yield_now();
                        }
                        // Nobody takes requests here: only a lost slot cannot be withdrawn.
                        if !ring.withdraw(&posted) {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_secs(3));
            stop.store(true, Ordering::Relaxed);
        });
        assert!(
            posts.load(Ordering::Relaxed) > 10,
            "the live requesters posted"
        );
        assert_eq!(
            lost.load(Ordering::Relaxed),
            0,
            "of {} live posts",
            posts.load(Ordering::Relaxed)
        );
    }
}
