//! The server's words in the ring's header: which process serves every request
//! (`local/serve.rs`), which one waits to take over, the doorbell a sleeping server is woken by,
//! and the size of the last combined batch.
//!
//! The doorbell is a store-then-load handshake: a requester publishes its slot (`SeqCst` store of
//! POSTED), then bumps the doorbell and loads `server_sleeps`; the server stores `server_sleeps`,
//! then looks for posted slots (`SeqCst` loads). With `SeqCst` on both sides at least one sees the
//! other: the requester wakes the server, or the server finds the request. A weaker order on
//! either side lets both miss, and the request waits for the server's poll.
//!
//! Model: `models/server.rs` (make test-loom): a post beside a server going to sleep.

use std::time::Duration;

use super::layout::SLOTS;
use super::slots::{phase, POSTED};
use super::sync::{fence, futex_wait, futex_wake, Ordering};
use super::Ring;

impl Ring {
    pub(crate) fn last_batch(&self) -> u64 {
        self.header().last_batch.load(Ordering::Relaxed)
    }

    pub(crate) fn set_last_batch(&self, requests: usize) {
        self.header()
            .last_batch
            .store(requests as u64, Ordering::Relaxed);
    }

    /// Tells a sleeping server that a request was posted.
    pub(super) fn ring_doorbell(&self) {
        let header = self.header();
        header.doorbell.fetch_add(1, Ordering::SeqCst);
        // The requester's half of the handshake: its POSTED (stored before this call) and the
        // bump, then this fence, then the look at `server_sleeps`. The fences (here and in
        // `await_posted`) make the handshake hold by the fence rule, which the loom model
        // checks (loom takes SeqCst loads and stores for AcqRel, and would see both miss).
        fence(Ordering::SeqCst);
        if header.server_sleeps.load(Ordering::SeqCst) != 0 {
            futex_wake(&header.doorbell);
        }
    }

    /// Whether any request is posted.
    pub(crate) fn any_posted(&self) -> bool {
        (0..SLOTS).any(|index| phase(self.head(index).state.load(Ordering::SeqCst)) == POSTED)
    }

    /// For the server: sleeps until a request is posted, or `timeout` passes.
    pub(crate) fn await_posted(&self, timeout: Duration) {
        let header = self.header();
        let seen = header.doorbell.load(Ordering::SeqCst);
        header.server_sleeps.store(1, Ordering::SeqCst);
        // The server's half: `server_sleeps`, this fence, then the look at the slots.
        fence(Ordering::SeqCst);
        // A post after this test changes the doorbell, so the wait returns at once; a post
        // before it is seen here.
        if !self.any_posted() {
            futex_wait(&header.doorbell, seen, timeout);
        }
        header.server_sleeps.store(0, Ordering::SeqCst);
    }

    /// The server's liveness id and process id, if one is recorded (it serves while its
    /// liveness lock is held).
    pub(crate) fn server(&self) -> Option<(u64, u32)> {
        let header = self.header();
        match header.server.load(Ordering::SeqCst) {
            0 => None,
            id => Some((id, header.server_pid.load(Ordering::SeqCst))),
        }
    }

    /// Records the server `id` (process `pid`) in place of `previous` (0, or a server that
    /// died). Returns whether it did.
    pub(crate) fn set_server(&self, previous: u64, id: u64, pid: u32) -> bool {
        let header = self.header();
        let set = header
            .server
            .compare_exchange(previous, id, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if set {
            header.server_pid.store(pid, Ordering::SeqCst);
        }
        set
    }

    /// Removes the record of the server `id`, if it is still the recorded one.
    pub(crate) fn clear_server(&self, id: u64) {
        let _ = self
            .header()
            .server
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The liveness id of a server waiting for the stores open on the file to move over to
    /// it; 0 for none.
    pub(crate) fn wanted(&self) -> u64 {
        self.header().wanted.load(Ordering::SeqCst)
    }

    pub(crate) fn set_wanted(&self, id: u64) {
        self.header().wanted.store(id, Ordering::SeqCst);
    }

    pub(crate) fn clear_wanted(&self, id: u64) {
        let _ = self
            .header()
            .wanted
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Wakes the requesters of posted requests, so that one of them takes the write lock next.
    pub(crate) fn wake_posted(&self) {
        for index in 0..SLOTS {
            let head = self.head(index);
            if phase(head.state.load(Ordering::Relaxed)) == POSTED {
                futex_wake(&head.state);
            }
        }
    }
}
