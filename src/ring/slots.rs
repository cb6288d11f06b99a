//! The request slots: how a process posts a write operation for whichever process holds the
//! store's write lock (the combiner) to run, and gets its reply.
//!
//! Each slot moves through phases, kept with a generation in one 32-bit word that is also the
//! futex the requester sleeps on:
//!
//! ```text
//! FREE --claim--> CLAIMED --post--> POSTED --take--> TAKEN --publish--> DONE --read--> FREE
//!                                   |  ^               |
//!                          withdraw |  | combiner died |--abandon--> ABANDONED --publish--> FREEING --> FREE
//!                                   v  +---------------+
//!                                  FREE
//!
//! any phase of a dead requester (ABANDONED: of a dead combiner) --reclaim--> FREEING --> FREE
//! ```
//!
//! Whoever moves a slot to CLAIMED, TAKEN, DONE or FREEING owns it for the next step; only the
//! owner writes its payload. Every such move is a compare-and-swap that changes the word, so that
//! exactly one process wins it: CLAIMED is the requester's alone (it posts or withdraws), and a
//! slot freed for someone else (a dead requester's, one given up on) goes through FREEING, which
//! nobody else touches. A slot returns to FREE with its owner field cleared, and with its
//! generation bumped, so a combiner that took a slot can never publish into its next use. Every
//! requester and combiner is named by a liveness id whose lock it holds on the store file (see
//! `storage/liveness.rs`): a POSTED slot of a dead requester is dropped instead of run, and a TAKEN
//! slot of a dead combiner is posted again.
//!
//! Model: `models/slots.rs` (make test-loom): requests and replies, wake-ups, withdraw against take,
//! a combiner killed at each step of its round (reposted, abandoned and reclaimed requests).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use super::layout::{PAYLOAD, SLOTS};
use super::sync::{futex_wait, futex_wake, Live, Ordering};
use super::{view, Ring};

pub(super) const FREE: u32 = 0;
const CLAIMED: u32 = 1;
pub(super) const POSTED: u32 = 2;
const TAKEN: u32 = 3;
const DONE: u32 = 4;
const ABANDONED: u32 = 5;
/// Being freed by whoever moved it here: the slot of a dead requester, or one given up on.
const FREEING: u32 = 6;
const PHASE_BITS: u32 = 3;

pub(super) fn phase(word: u32) -> u32 {
    word & ((1 << PHASE_BITS) - 1)
}

pub(super) fn generation(word: u32) -> u32 {
    word >> PHASE_BITS
}

fn word(generation: u32, phase: u32) -> u32 {
    (generation << PHASE_BITS) | phase
}

/// What a requester finds its slot doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for a combiner; the word to sleep on.
    Posted(u32),
    /// In a combiner's transaction: that combiner's liveness id, and the word to sleep on.
    Taken(u64, u32),
    /// The reply is there.
    Done,
    /// The slot is no longer this request's (it cannot happen while the requester lives).
    Lost,
}

/// A request posted by this process.
#[derive(Debug)]
pub(crate) struct Posted {
    pub(super) index: usize,
    generation: u32,
    /// Whether the request is in a bulk file (too large for the slot).
    bulk: bool,
}

/// The `len` of a slot whose request or reply is in a bulk file instead (see `bulk_path`).
const BULK: u32 = u32::MAX;

/// A request a combiner took: its slot and its bytes.
pub(crate) struct Taken {
    /// Run before, by a combiner that died before it published the reply.
    pub(crate) rerun: bool,
    index: usize,
    generation: u32,
    pub(crate) request: Vec<u8>,
}

impl Ring {
    /// Frees a slot this process owns (its phase is CLAIMED or DONE as its requester's, or
    /// FREEING as the one that moved it there): clears its owner, then bumps its generation.
    fn free(&self, index: usize, generation: u32) {
        let head = self.head(index);
        head.owner.store(0, Ordering::Relaxed);
        head.state.store(
            word(generation.wrapping_add(1) & (u32::MAX >> PHASE_BITS), FREE),
            Ordering::Release,
        );
    }

    /// Moves a slot from `from` to CLAIMED (owned by the caller, its requester), if it is still
    /// in `from`.
    pub(super) fn own(&self, index: usize, from: u32) -> bool {
        self.move_to(index, from, CLAIMED)
    }

    /// Moves a slot from `from` to FREEING (to be freed by the caller), if it is still in
    /// `from`. `from` is never FREEING: one that another process frees is left to it.
    pub(super) fn seize(&self, index: usize, from: u32) -> bool {
        phase(from) != FREEING && self.move_to(index, from, FREEING)
    }

    fn move_to(&self, index: usize, from: u32, to: u32) -> bool {
        debug_assert_ne!(
            phase(from),
            to,
            "a move that leaves the word as it was owns nothing"
        );
        self.head(index)
            .state
            .compare_exchange(
                from,
                word(generation(from), to),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// As [`Ring::try_post`], with a bulk file that cannot be written taken as no slot.
    #[cfg(test)]
    pub(crate) fn post(&self, owner: u64, request: &[u8], live: &impl Live) -> Option<Posted> {
        self.try_post(owner, request, live).ok().flatten()
    }

    /// Posts `request` for the requester with liveness id `owner`. `None` when every slot is in
    /// use (the caller commits directly, or waits for a slot); the error of a request too large
    /// for a slot whose bulk file cannot be written (no descriptor left, a full /dev/shm), so
    /// that the caller says so at once, nothing having been posted.
    pub(crate) fn try_post(
        &self,
        owner: u64,
        request: &[u8],
        live: &impl Live,
    ) -> io::Result<Option<Posted>> {
        for pass in 0..2 {
            for index in 0..SLOTS {
                let head = self.head(index);
                let current = head.state.load(Ordering::Acquire);
                if phase(current) != FREE || !self.own(index, current) {
                    continue;
                }
                let generation = generation(current);
                let bulk = request.len() > PAYLOAD;
                if bulk {
                    if let Err(err) = self.write_bulk(index, generation, "req", request) {
                        self.free(index, generation);
                        return Err(err);
                    }
                    head.len.store(BULK, Ordering::Relaxed);
                } else {
                    // The slot is this process's (CLAIMED); the request fits its payload.
                    view::copy_in(&self.view.slot(index).payload, request);
                    #[allow(clippy::cast_possible_truncation)] // At most PAYLOAD: not bulk.
                    head.len.store(request.len() as u32, Ordering::Relaxed);
                }
                head.owner.store(owner, Ordering::Relaxed);
                // No combiner yet: one that takes it finds it a first run.
                head.combiner.store(0, Ordering::Relaxed);
                // Release publishes the payload, length and owner to the combiner that sees
                // POSTED; SeqCst because it is also the requester's half of the doorbell's
                // store-then-load handshake with a sleeping server (`server.rs`): this store,
                // then the load of `server_sleeps` in `ring_doorbell`.
                head.state.store(word(generation, POSTED), Ordering::SeqCst);
                self.ring_doorbell();
                return Ok(Some(Posted {
                    index,
                    generation,
                    bulk,
                }));
            }
            if pass == 0 {
                self.reclaim(live);
            }
        }
        Ok(None)
    }

    /// Frees the slots of requesters that died, unless a live combiner has them.
    pub(super) fn reclaim(&self, live: &impl Live) {
        for index in 0..SLOTS {
            let head = self.head(index);
            let current = head.state.load(Ordering::Acquire);
            let owner = head.owner.load(Ordering::Relaxed);
            let combiner_lives = || {
                live.is_held(head.combiner.load(Ordering::Relaxed))
                    .unwrap_or(true)
            };
            match phase(current) {
                // Free, or being freed by another process.
                FREE | FREEING => continue,
                // Given up on by its requester (dead or alive): its combiner frees it when it
                // publishes (until then it may still write the reply into the payload); nobody
                // will if the combiner died.
                ABANDONED => {
                    if combiner_lives() {
                        continue;
                    }
                }
                // A CLAIMED slot with no owner is being claimed right now; one with a dead
                // owner is of a requester that died inside its post or its withdraw.
                phase => {
                    if owner == 0
                        || live.is_held(owner).unwrap_or(true)
                        || (phase == TAKEN && combiner_lives())
                    {
                        continue;
                    }
                }
            }
            if self.seize(index, current) {
                self.free_dead(index, generation(current));
            }
        }
    }

    /// What the request `posted` is doing.
    pub(crate) fn phase(&self, posted: &Posted) -> Phase {
        let head = self.head(posted.index);
        let current = head.state.load(Ordering::Acquire);
        if generation(current) != posted.generation {
            return Phase::Lost;
        }
        match phase(current) {
            POSTED => Phase::Posted(current),
            TAKEN => Phase::Taken(head.combiner.load(Ordering::Relaxed), current),
            DONE => Phase::Done,
            _ => Phase::Lost,
        }
    }

    /// Takes the request back before any combiner took it. Returns whether it did.
    pub(crate) fn withdraw(&self, posted: &Posted) -> bool {
        if self.own(posted.index, word(posted.generation, POSTED)) {
            self.done_with(posted);
            self.free(posted.index, posted.generation);
            true
        } else {
            false
        }
    }

    /// Posts again a request whose combiner died before publishing its reply.
    pub(crate) fn repost(&self, posted: &Posted) -> bool {
        self.transition(posted, TAKEN, POSTED)
    }

    /// Gives up waiting for a taken request: its combiner frees the slot when it publishes.
    /// Returns `false` if the reply came meanwhile (then read it with [`Ring::reply`]).
    pub(crate) fn abandon(&self, posted: &Posted) -> bool {
        self.transition(posted, TAKEN, ABANDONED)
    }

    /// Moves the slot of `posted` from phase `from` to `to`, if it is still there.
    fn transition(&self, posted: &Posted, from: u32, to: u32) -> bool {
        self.head(posted.index)
            .state
            .compare_exchange(
                word(posted.generation, from),
                word(posted.generation, to),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The reply to `posted`, once its phase is DONE; frees the slot.
    #[allow(clippy::needless_pass_by_value)] // Takes the request: its slot is freed.
    pub(crate) fn reply(&self, posted: Posted) -> Vec<u8> {
        let reply = self.read_slot(posted.index, posted.generation, "rep");
        // A reply read from a bulk file has no further use for it.
        if self.head(posted.index).len.load(Ordering::Relaxed) == BULK {
            let _ = std::fs::remove_file(self.bulk_path(posted.index, posted.generation, "rep"));
        }
        self.done_with(&posted);
        self.free(posted.index, posted.generation);
        reply
    }

    /// Removes the bulk file of the request `posted`, once nobody will read it again.
    pub(crate) fn done_with(&self, posted: &Posted) {
        if posted.bulk {
            let _ = std::fs::remove_file(self.bulk_path(posted.index, posted.generation, "req"));
        }
    }

    /// The request or reply in slot `index`: from its payload, or from its bulk file (empty if
    /// that cannot be read: it then fails to decode, as a damaged slot does).
    fn read_slot(&self, index: usize, generation: u32, kind: &str) -> Vec<u8> {
        let len = self.head(index).len.load(Ordering::Relaxed);
        if len == BULK {
            return std::fs::read(self.bulk_path(index, generation, kind)).unwrap_or_default();
        }
        let len = (len as usize).min(PAYLOAD);
        // The caller owns the slot (DONE for its requester, TAKEN for its combiner).
        let mut bytes = Vec::new();
        view::copy_out(&self.view.slot(index).payload, len, &mut bytes);
        bytes
    }

    /// The bulk file of slot `index` at `generation`: `req` for its request, `rep` for its
    /// reply. Beside the ring, named after it; the last user of the ring removes what is left.
    fn bulk_path(&self, index: usize, generation: u32, kind: &str) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{index}.{generation}.{kind}"));
        PathBuf::from(name)
    }

    /// Writes a bulk file, readable and writable only by those who may use the ring.
    fn write_bulk(
        &self,
        index: usize,
        generation: u32,
        kind: &str,
        bytes: &[u8],
    ) -> io::Result<()> {
        use std::io::Write;
        let path = self.bulk_path(index, generation, kind);
        let ring = self.file.metadata()?;
        let mode = ring.mode() & 0o666;
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
        };
        // One left by a process that died is stale: the slot has been reused since.
        let mut file = match create() {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&path)?;
                create()?
            }
            other => other?,
        };
        // The umask may have narrowed the mode, and the file has this user's group rather
        // than the ring's: the other side, of the store's group, must read it.
        if file.metadata()?.gid() != ring.gid() {
            std::os::unix::fs::fchown(&file, None, Some(ring.gid()))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)
    }

    /// Frees a slot of a requester or combiner that died, with any bulk files it left.
    pub(super) fn free_dead(&self, index: usize, generation: u32) {
        for kind in ["req", "rep"] {
            let _ = std::fs::remove_file(self.bulk_path(index, generation, kind));
        }
        self.free(index, generation);
    }

    /// Sleeps until the slot's word is no longer `seen`, or `timeout` passes.
    pub(crate) fn wait(&self, posted: &Posted, seen: u32, timeout: Duration) {
        futex_wait(&self.head(posted.index).state, seen, timeout);
    }

    /// Takes every posted request of a live requester, for the combiner with liveness id
    /// `combiner`, which holds the store's write lock. Requests of dead requesters are dropped.
    pub(crate) fn take_posted(&self, combiner: u64, live: &impl Live) -> Vec<Taken> {
        let mut taken = Vec::new();
        for index in 0..SLOTS {
            let head = self.head(index);
            let current = head.state.load(Ordering::Acquire);
            if phase(current) != POSTED {
                continue;
            }
            let owner = head.owner.load(Ordering::Relaxed);
            if !live.is_held(owner).unwrap_or(true) {
                // Its requester died: nobody waits for it, and its grant would be dead.
                if self.seize(index, current) {
                    self.free_dead(index, generation(current));
                }
                continue;
            }
            // A combiner before this one took it, and died before publishing (its requester
            // posted it again).
            let rerun = head.combiner.load(Ordering::Relaxed) != 0;
            // A store into a slot this combiner does not own yet (the swap below takes it):
            // safe because only the holder of the store's write lock takes posted requests, so
            // no other combiner writes this word meanwhile, and the requester reads it only
            // once it sees TAKEN (after the swap's Release).
            head.combiner.store(combiner, Ordering::Relaxed);
            if head
                .state
                .compare_exchange(
                    current,
                    word(generation(current), TAKEN),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            let request = self.read_slot(index, generation(current), "req");
            taken.push(Taken {
                rerun,
                index,
                generation: generation(current),
                request,
            });
        }
        taken
    }

    /// Publishes the reply to a taken request and wakes its requester; frees the slot of a
    /// request given up on. A reply larger than a slot whose bulk file cannot be written is
    /// not published: the error says why, and the caller publishes a reply that fits instead.
    pub(crate) fn publish(&self, taken: &Taken, reply: &[u8]) -> io::Result<()> {
        let head = self.head(taken.index);
        let bulk = reply.len() > PAYLOAD;
        if bulk {
            self.write_bulk(taken.index, taken.generation, "rep", reply)?;
            head.len.store(BULK, Ordering::Relaxed);
        } else {
            // The slot is this combiner's while TAKEN or ABANDONED at its generation.
            view::copy_in(&self.view.slot(taken.index).payload, reply);
            #[allow(clippy::cast_possible_truncation)] // At most PAYLOAD: not bulk.
            head.len.store(reply.len() as u32, Ordering::Relaxed);
        }
        // AcqRel: its Release half publishes the reply's payload and length to the requester,
        // whose look at the word (Acquire, `phase`) comes before it reads them. (A Release fence
        // stood here too; the swap's own Release makes it redundant.)
        match head.state.compare_exchange(
            word(taken.generation, TAKEN),
            word(taken.generation, DONE),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => futex_wake(&head.state),
            Err(now) => {
                if bulk {
                    let _ =
                        std::fs::remove_file(self.bulk_path(taken.index, taken.generation, "rep"));
                }
                // Given up on: nobody reads the reply. Otherwise posted again because this
                // combiner was taken for dead; the next combiner runs it again (the rules make
                // a re-run give the same result).
                if now == word(taken.generation, ABANDONED) && self.seize(taken.index, now) {
                    self.free(taken.index, taken.generation);
                }
            }
        }
        Ok(())
    }
}
