//! Group sync across processes (PostgreSQL's `XLogFlush`; docs/design/writes.md sections 3, 4
//! steps 3-4, 8 and 9): the processes that append records to one redo log share each
//! `fdatasync` of it. A writer reserves log space, writes its record there, marks it written,
//! and waits until the log is durable past it; one process at a time (the flusher) finds how far
//! the log is written without a gap (waiting up to `GATHER` for the writers that reserved past
//! it to mark their records), syncs, and raises `flushed` to there, covering every process's
//! records; the others sleep on `generation`.
//!
//! The protocol knows nothing of the log file: writing a record's bytes and syncing the file are
//! the caller's [`Log`] (the log of `storage/wal/`, or a plain file in the tests and the bench).
//!
//! The words, in `FlushHeader` (`layout.rs`), a page of their own:
//!
//! | word | meaning | who changes it, and how |
//! |---|---|---|
//! | `end` | the LSN reserved so far | a writer, by a compare-and-swap from the value it read to that plus its record's length, only while the result stays inside the window (below) and within `MAX_SEGMENTS` segments past the checkpoint's; a record that would cross a segment's end is preceded by a filler to it, reserved and marked on its own by the same writer |
//! | `checkpointed` | the LSN the checkpoint has reached | the checkpointer, by `fetch_max`, then a wake of the waiters (not built yet: only a test raises it) |
//! | `flushed` | the LSN below which the log is durable | whoever synced, by `fetch_max` to the written prefix it found *before* its sync |
//! | `flusher` | the liveness id of the process syncing now, 0 for none | a waiter, by a compare-and-swap from 0 (or from a dead process's id: taken over); the flusher, back to 0 |
//! | `skipper` | the liveness id of the process skipping the gap at `flushed` now, 0 for none | a waiter whose patience with the gap ran out, by a compare-and-swap from 0, from a dead process's id, or from any once its patience with the skipper ran out too (`SKIPPER_PATIENCE`): passed, with the gap's claims; the skipper, back to 0 once the gap is `SKIPPED` (or was no gap), unless it was passed |
//! | `generation` | bumped after each raise of `flushed`, and at a failure; a futex | whoever raised `flushed`, then a wake of every sleeper |
//! | `failed` | non-zero once a write or a sync of the log failed | whoever saw the error; only a new set-up of the ring clears it |
//!
//! **The marks, and how they map to records.** Records have any length (a multiple of
//! [`GRANULE`]), so a mark per fixed-size record (the prototype's) does not fit, and a record
//! sequence number cannot be taken in the same atomic step as a byte position. Instead each
//! granule of the log has a mark, `marks[(lsn / GRANULE) % MARKS]`, and a record's mark is the
//! one of its first granule. The marks are a window over the log: a reserve never takes space
//! past `flushed + WINDOW`, so no two granules in flight share a mark (bounded records in
//! flight: `WINDOW` bytes, 128 KiB). A mark word is `tag << 18 | granules << 2 | state`, where
//! the tag is `lsn / GRANULE + 1` (46 bits: a position, not just a slot, so that a mark left
//! from an earlier lap of the window is never taken for a new one) and `granules` the record's
//! (or the gap's) length, so that the flusher learns a record's length in the same load that
//! tells it the record is written: no side table that a late writer could overwrite. States:
//!
//! | state | set by | meaning |
//! |---|---|---|
//! | none (0) | the record's writer, on each granule of its record after the first, by a compare-and-swap from a word of an earlier position, before its mark (*cleared*: the word keeps the granule's tag) | no mark of this position |
//! | `WRITTEN` | the record's writer, by a compare-and-swap from a word of an earlier position, after its write | the record is in the file; the flusher may cover it; the record counts |
//! | `SKIPPING` | a skipper, by a compare-and-swap from a word of an earlier position | a gap being skipped: the first granule of a stopped writer's record, and the granules after it up to the next written record; its writer's own mark then loses and its write fails with `Timeout`; the record is void |
//! | `SKIPPED` | a skipper of the gap, by a compare-and-swap from the gap's `SKIPPING`, once its `skip` record is written and synced | the flusher may step over the gap's `granules`; the record is void |
//!
//! **A mark's lifetime: it keeps the record's fate.** The one decision of a record's fate is
//! the compare-and-swap on its first granule's mark: `WRITTEN` by its writer or `SKIPPING` by a
//! skipper, exactly one wins. Nobody clears a mark once it is covered: it stays until its slot
//! is written for a later position (a later lap of the window), so that whoever finds `flushed`
//! past a position reads there whether its record counts ([`GroupSync::fate`]), and once the
//! slot moved on, the log's `skip` records tell it. The rule that makes this safe: **a word is
//! only ever replaced by a word of a later position** (the tags compared modulo 2^46, word 0
//! being older than any), except a gap's own `SKIPPING` by its `SKIPPED` and a cleared inner
//! granule by a skipper's `SKIPPING` of the same position. So:
//! - a mark of a position, once there, is never taken back: a late writer (stopped past its
//!   skip) or a late skipper (stopped past a covered gap) finds its position's mark or a later
//!   one, and loses, instead of writing over a later lap's mark;
//! - every slot is written for some position in each lap of the window before `flushed`
//!   passes that lap: a record's first granule by its mark, the granules after it cleared by
//!   its writer before its mark, a skipped gap's granules by its skipper's claims. So a slot's
//!   tag is never more than a window behind `flushed`, and no mark is ever taken for a
//!   position of the same tag 2^49 bytes later (without the writers' clearing, a mark in a
//!   slot that only granules after a record's first used afterwards would stay that long). The
//!   one actor too far behind for the tags' comparison: a writer stopped between its reserve
//!   and its mark while 2^48 bytes of log (2^45 granules) pass.
//!
//! Why an acknowledged record is durable: its writer acknowledges once `flushed` passes it;
//! `flushed` is only raised (`fetch_max`) to a prefix found written without a gap (marks of the
//! right position, `WRITTEN` or `SKIPPED`, chained by their lengths) before a sync that
//! returned success; every mark was stored after its record's write. A mark kept from an
//! earlier lap never passes for one: its tag is another position's (`marks` compares the tag).
//!
//! Why a stopped or dead process stalls nobody for long: a stopped flusher is passed after
//! `FLUSH_PATIENCE` by any waiter, which syncs itself; a dead one is taken over at once (its
//! liveness lock is gone). A gap (a record reserved and never marked, its writer stopped or
//! dead) is skipped by the first waiter that sees the gap at `flushed` for `GAP_PATIENCE`: it
//! becomes the one skipper (`skipper`, as the flusher), claims the gap's marks, appends a
//! `skip(lsn, len)` record through [`Log::write_skip`] and syncs it, then marks the gap
//! `SKIPPED`. Recovery (`storage/wal/scan.rs`) takes a record at
//! `lsn` as void when a later `skip(lsn, len)` record covers it (the stopped writer may still
//! write its bytes there when it resumes: only there, as the log's segments are never reused,
//! `storage/wal/file.rs`), and the skip record is durable before any sync covers a byte past the
//! gap. A dead skipper is taken over at once, and a live one that has not passed the gap
//! `SKIPPER_PATIENCE` after the waiter's patience with the gap ran out (stopped, or very slow) is
//! passed: its claims become the next skipper's, which writes and syncs a skip record of its
//! own. Two skippers of one gap are safe: each claim is a compare-and-swap over a word of an
//! earlier position (or the gap's inner granules' cleared words), each skipper's `SKIPPED` is a
//! compare-and-swap from the gap's `SKIPPING` that only one wins (a store could land on a
//! later lap's word), and the winner's skip record, durable before its swap, covers the claims
//! of both (the later skipper took the earlier one's claims, and its own place). A skipper passed
//! while stopped resumes into swaps that lose, and at worst writes one more skip record of a
//! gap already void.
//!
//! A failed write or sync (section 9) sets `failed`: the failing call, every await not yet
//! covered and every later reserve fail with a storage error until the ring is set up anew. A
//! write into a segment that is gone is no failure of the log: its writer was skipped and then
//! passed by a checkpoint that retired the segment, and the log says so apart from any I/O
//! error ([`Written::Gone`]), so it fails that writer alone with `Timeout`, as its lost mark
//! would (a record's write, a filler's, a skip record's).
//!
//! Segments are made ahead: the reservation that holds the first byte of a segment's second
//! half (one per segment: reservations tile the log) asks the log to make the next one in the
//! background ([`Log::prepare_ahead`]), so that a write rarely makes a segment itself.
//!
//! Model: `models/flush.rs` (make test-loom): writers reserving, writing and awaiting, a flusher
//! that dies mid-sync, a writer that dies after reserving, a reader asking a record's fate while
//! its writer stops at each step and a skipper runs, a writer stopped past a lap of the window.

use std::io;
use std::time::Duration;

use super::layout::{FlushHeader, GRANULE, MARKS};
use super::sync::{futex_wait, futex_wake, spin, AtomicU64, Live, Ordering};
use super::Ring;
use crate::base::error::{Error, Result};

/// [`GRANULE`] as a step over positions.
#[allow(clippy::cast_possible_truncation)] // 8
const GRANULE_STEP: usize = GRANULE as usize;
/// Bytes of log in flight at most: from `flushed` to `end`.
pub(crate) const WINDOW: u64 = MARKS as u64 * GRANULE;
/// Bytes a `skip` record takes.
#[cfg(not(fencelock_loom))]
pub(crate) const SKIP_SPACE: u64 = 64;
#[cfg(fencelock_loom)]
pub(crate) const SKIP_SPACE: u64 = GRANULE;
/// Skips in flight at once that the window keeps room for (a stopped or dead writer each):
/// writers leave `SKIP_ROOM * SKIP_SPACE` bytes free at the window's end.
#[cfg(not(fencelock_loom))]
pub(crate) const SKIP_ROOM: u64 = 16;
#[cfg(fencelock_loom)]
pub(crate) const SKIP_ROOM: u64 = 2;
/// Segments of log a writer may reserve past the checkpoint's segment (docs/design/writes.md
/// section 1, "the one bound"): a record ends at most at the start of segment
/// `checkpointed / size + MAX_SEGMENTS`. Past it, the writer waits for a checkpoint up to its
/// deadline, then fails with `Timeout`, having reserved nothing.
pub(crate) const MAX_SEGMENTS: u64 = 4;
/// The longest record: it fits a window beside a skip record, and its granules a mark's field.
pub(crate) const MAX_RECORD: u64 = {
    let by_window = WINDOW - SKIP_ROOM * SKIP_SPACE;
    let by_mark = LEN_MASK * GRANULE;
    if by_window < by_mark {
        by_window
    } else {
        by_mark
    }
};
/// A waiter that sees `flushed` stand still this long syncs itself (the flusher is stopped or
/// slow). (The models have no clock, and so no use for either patience.)
#[cfg_attr(fencelock_loom, allow(dead_code))]
pub(crate) const FLUSH_PATIENCE: Duration = Duration::from_millis(2);
/// How long the flusher waits at most for the writers that reserved past the records it found
/// written, before its sync (`GroupSync::gathered`): about one sync of the project's disk. The
/// compare bench's 4, 8 and 16 processes wrote 15-30% more with it than with none, and about as
/// much as with 30-50 us (2 cores: a writer waited for is often descheduled, not slow).
#[cfg(not(fencelock_loom))]
const GATHER: Duration = Duration::from_micros(100);
/// A gap at `flushed` that stays this long is skipped (its writer is stopped or dead).
#[cfg_attr(fencelock_loom, allow(dead_code))]
pub(crate) const GAP_PATIENCE: Duration = Duration::from_millis(20);
/// A skip that has not passed its gap this long after `GAP_PATIENCE` is skipped again by
/// another waiter, its skipper alive or not (stopped between its claim and its `SKIPPED`,
/// or on a machine so loaded that one write and one sync took this long): the skipper's word
/// keeps a second skipper off only while the first one makes progress. More than two thousand
/// times one write and one `fdatasync` on the project's disk (about 100 us), and far below
/// the busy timeout that a write behind a stopped skipper must finish within.
#[cfg(not(fencelock_loom))]
const SKIPPER_PATIENCE: Duration = Duration::from_millis(250);

const WRITTEN: u64 = 1;
const SKIPPING: u64 = 2;
const SKIPPED: u64 = 3;
const STATE_MASK: u64 = 3;
const LEN_SHIFT: u32 = 2;
const LEN_MASK: u64 = (1 << 16) - 1;
const TAG_SHIFT: u32 = 18;
const TAG_MASK: u64 = (1 << 46) - 1;

/// What became of a write that returned without an I/O error: made, or refused because the
/// position's segment is gone.
///
/// Why an outcome in the `Ok` side, not an `io::Error` of its own kind: a write into a retired
/// segment is no failure of the log (the log is whole; this writer came too late, after its gap
/// was skipped and a checkpoint passed it), and it must fail its writer alone, while every
/// `io::Error` fails the log (`failed`). An `io::ErrorKind` chosen for it (`NotFound`, say)
/// would be one that a real failure can also carry, such as the directory's own `ENOENT`, and
/// would then pass for a late write; a value of this type can only be made on purpose, and
/// `#[must_use]` makes every caller decide what a `Gone` means for it.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// The bytes are in the file (in the page cache: a sync makes them durable).
    Done,
    /// The position's segment was retired: the write did not happen, and never will. Only a
    /// writer whose gap was skipped meets it (the checkpoint, below `flushed`, retires only
    /// segments that `flushed` passed, and `flushed` passes a reservation only through its
    /// mark: the skipper's).
    // The models' log has no segments to retire.
    #[cfg_attr(fencelock_loom, allow(dead_code))]
    Gone,
}

/// What the protocol needs of the log file.
pub(crate) trait Log {
    /// Writes `record` at `lsn` (its place in the file is the log's business); [`Written::Gone`]
    /// when `lsn`'s segment is gone.
    fn write(&self, lsn: u64, record: &[u8]) -> io::Result<Written>;
    /// Makes durable every write that returned before this call at the positions
    /// `[from, to)`, whichever process made it (`fdatasync`). The range is what a log of
    /// segment files (`storage/wal/file.rs`) needs to know which to sync: usually one, two when
    /// the range crosses a segment's end. A handle cannot know it from the writes it made
    /// itself, since the records a flusher covers are mostly other processes'. A log in one
    /// file syncs it whole.
    fn sync(&self, from: u64, to: u64) -> io::Result<()>;
    /// Writes at `at`, in `space` bytes, a record saying that the `len` bytes at `gap` do not
    /// count, whatever they hold.
    /// [`Written::Gone`] as [`Log::write`].
    fn write_skip(&self, at: u64, space: u64, gap: u64, len: u64) -> io::Result<Written>;
    /// Whether a skip record written by [`Log::write_skip`] within `[lsn, lsn + within)` says
    /// that a gap holding `lsn` does not count (for [`GroupSync::fate_in_log`]).
    #[cfg_attr(not(any(test, fencelock_loom)), allow(dead_code))]
    fn skipped(&self, lsn: u64, within: u64) -> io::Result<bool>;
    /// The size of the log's segments, a multiple of [`GRANULE`]: no record (nor a skip
    /// record's space) crosses a multiple of it. A log in one file has none: `u64::MAX`.
    fn segment_size(&self) -> u64;
    /// Fills the `len` bytes at `at`, which run to a segment's end, with what the log's
    /// readers step over (a void record, or nothing in a tail too short for any record);
    /// [`Written::Gone`] as [`Log::write`].
    fn fill(&self, at: u64, len: u64) -> io::Result<Written>;
    /// Makes the segment that holds `lsn` ready ahead of its first write, in the background:
    /// returns at once, and a failure there is nobody's (the first write into a segment that
    /// does not exist makes it). A log without segments has nothing to make.
    fn prepare_ahead(&self, _lsn: u64) {}
}

/// What became of the record at a position (its first granule's mark decided it). Step 4's key
/// index settles a stopped writer's claim by it (issue 35); until then only the tests and the
/// models ask.
#[cfg_attr(not(any(test, fencelock_loom)), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// `flushed` has not passed the position: not decided yet, or not durable yet.
    Pending,
    /// Its writer marked it written: it is in the log, durable, and counts.
    Counts,
    /// A skipper won its mark: whatever the log holds there does not count.
    Void,
    /// `flushed` passed it, but its slot has moved on to a later position: the log's skip
    /// records tell ([`GroupSync::fate_in_log`]).
    Unknown,
}

fn tag(lsn: u64) -> u64 {
    (lsn / GRANULE + 1) & TAG_MASK
}

fn mark(lsn: u64, len: u64, state: u64) -> u64 {
    (tag(lsn) << TAG_SHIFT) | ((len / GRANULE) << LEN_SHIFT) | state
}

/// The word of a granule after a record's first, as of position `lsn`: no mark (state 0),
/// `lsn`'s tag, and a length of one granule so that it is never 0 (the word of a slot never
/// written, older than any).
fn cleared(lsn: u64) -> u64 {
    (tag(lsn) << TAG_SHIFT) | (1 << LEN_SHIFT)
}

/// Whether `word` is a mark of position `lsn` (of any state).
fn marks(word: u64, lsn: u64) -> bool {
    word & STATE_MASK != 0 && word >> TAG_SHIFT == tag(lsn)
}

/// Whether `word` was written for a position before `lsn` (an earlier lap of the window), or
/// never: the words a writer or a skipper of `lsn` may replace. Tags are compared modulo 2^46:
/// a word at most 2^45 granules ahead is a later one (the opening comment bounds how far apart
/// the compared positions are).
fn before(word: u64, lsn: u64) -> bool {
    let ahead = (word >> TAG_SHIFT).wrapping_sub(tag(lsn)) & TAG_MASK;
    word == 0 || ahead >= 1 << 45
}

/// What a reservation of `len` bytes at the reserved end `end` takes, in segments of `size`
/// bytes: `len` when the record fits before its segment's end, else the rest of the segment (a
/// filler; the record is then reserved at the next segment's start). One reservation, not the
/// filler and the record in one swap: a filler is shorter than the record after it, and both
/// in one could pass the window (`MAX_RECORD` is nearly all of it) and wait for a `flushed`
/// that never comes.
fn take(size: u64, end: u64, len: u64) -> u64 {
    let space = size - end % size;
    if len <= space {
        len
    } else {
        space
    }
}

/// Where a reservation may end at most, in segments of `size` bytes, when the checkpoint is at
/// `checkpointed`: the start of segment `checkpointed / size + MAX_SEGMENTS` (a log of one file
/// has no bound).
fn bound(size: u64, checkpointed: u64) -> u64 {
    (checkpointed / size)
        .saturating_add(MAX_SEGMENTS)
        .saturating_mul(size)
}

/// Whether `word` is a skipper's claim of the gap at `lsn` (its first granule, or one after).
fn claimed_by_a_skipper(word: u64, lsn: u64) -> bool {
    marks(word, lsn) && word & STATE_MASK == SKIPPING
}

fn span(word: u64) -> u64 {
    ((word >> LEN_SHIFT) & LEN_MASK) * GRANULE
}

fn failure() -> Error {
    Error::Storage(
        "a write or sync of the redo log failed: nothing since is durable; reopen the store".into(),
    )
}

/// One process's side of the protocol: its liveness id, how it learns whether others live, and
/// its log.
pub(crate) struct GroupSync<'a> {
    ring: &'a Ring,
    id: u64,
    live: &'a dyn Live,
    log: &'a dyn Log,
    /// How long a reserve waits for a checkpoint past `MAX_SEGMENTS` (none: without end).
    deadline: Option<std::time::Instant>,
    /// Ends this process's waits with `Cancelled` when it fires: given only to the waits before
    /// a write reserves its place (`GroupSync::cancellable`).
    cancel: Option<&'a crate::base::cancel::Cancel>,
}

/// This process's turn as the skipper, given back when dropped.
struct Skipper<'s, 'a>(&'s GroupSync<'a>);

impl Drop for Skipper<'_, '_> {
    fn drop(&mut self) {
        self.0.unlead_skip();
    }
}

/// How long this waiter has seen `flushed` stand still, and a gap at it.
struct Patience {
    flushed: u64,
    #[cfg(not(fencelock_loom))]
    since: std::time::Instant,
}

impl Patience {
    fn new(flushed: u64) -> Patience {
        Patience {
            flushed,
            #[cfg(not(fencelock_loom))]
            since: std::time::Instant::now(),
        }
    }

    /// Notes the `flushed` seen now; a move starts the wait anew.
    fn saw(&mut self, flushed: u64) {
        if flushed != self.flushed {
            *self = Patience::new(flushed);
        }
    }

    // The models have no clock: a waiter's patience with the flusher never runs out (a dead
    // flusher is found by its liveness lock; a lost wake-up is a deadlock loom reports), and its
    // patience with a gap always has (every interleaving of a skip with the late writer's mark
    // is explored).
    #[cfg(not(fencelock_loom))]
    fn flusher_over(&self) -> bool {
        self.since.elapsed() >= FLUSH_PATIENCE
    }
    #[cfg(fencelock_loom)]
    #[allow(clippy::unused_self)]
    fn flusher_over(&self) -> bool {
        false
    }

    /// Whether to ask if the flusher's process is alive (a system call, `fcntl`, that every
    /// waiter would otherwise make at every write while another process syncs): only once the
    /// flusher has not moved `flushed` for `FLUSH_PATIENCE`, when this waiter syncs anyway. A
    /// dead flusher is so taken over one patience after its death, not at once.
    #[cfg(not(fencelock_loom))]
    fn ask_flusher(&self) -> bool {
        self.flusher_over()
    }
    // The models ask at every look: a dead flusher is found by its liveness lock, as their
    // patience with the flusher never runs out.
    #[cfg(fencelock_loom)]
    #[allow(clippy::unused_self)]
    fn ask_flusher(&self) -> bool {
        true
    }

    #[cfg(not(fencelock_loom))]
    fn gap_over(&self) -> bool {
        self.since.elapsed() >= GAP_PATIENCE
    }
    #[cfg(fencelock_loom)]
    #[allow(clippy::unused_self)]
    fn gap_over(&self) -> bool {
        true
    }

    #[cfg(not(fencelock_loom))]
    fn skipper_over(&self) -> bool {
        self.since.elapsed() >= GAP_PATIENCE + SKIPPER_PATIENCE
    }
    // The models pass a live skipper whenever they look, so that every interleaving of two
    // skippers of one gap (one stopped anywhere, then resumed) is explored.
    #[cfg(fencelock_loom)]
    #[allow(clippy::unused_self)]
    fn skipper_over(&self) -> bool {
        true
    }

    #[cfg(not(fencelock_loom))]
    fn left(&self) -> Duration {
        FLUSH_PATIENCE.saturating_sub(self.since.elapsed())
    }
    #[cfg(fencelock_loom)]
    #[allow(clippy::unused_self)]
    fn left(&self) -> Duration {
        Duration::MAX
    }
}

impl<'a> GroupSync<'a> {
    /// The group sync of `ring` for the process with liveness id `id`.
    pub(crate) fn new(ring: &'a Ring, id: u64, live: &'a dyn Live, log: &'a dyn Log) -> Self {
        GroupSync {
            ring,
            id,
            live,
            log,
            deadline: None,
            cancel: None,
        }
    }

    /// The same, its reserves waiting for a checkpoint, and its awaits for a sync, until
    /// `deadline` at most.
    #[cfg_attr(any(not(test), fencelock_loom), allow(dead_code))]
    pub(crate) fn until(self, deadline: std::time::Instant) -> Self {
        GroupSync {
            deadline: Some(deadline),
            ..self
        }
    }

    /// The same, its waits ended with `Cancelled` once `cancel` fires (within
    /// `FLUSH_PATIENCE`, or `cancel::POLL` at the checkpoint's bound). Only for waits after
    /// which nothing of the caller's is in the log yet: a wait for its own record's sync may
    /// not end so, as the record may still become durable.
    pub(crate) fn cancellable(self, cancel: Option<&'a crate::base::cancel::Cancel>) -> Self {
        GroupSync { cancel, ..self }
    }

    fn words(&self) -> &FlushHeader {
        self.ring.view.flush()
    }

    fn mark_of(&self, lsn: u64) -> &AtomicU64 {
        self.ring
            .view
            .mark(usize::try_from((lsn / GRANULE) % MARKS as u64).expect("an index"))
    }

    fn check_failed(&self) -> Result<()> {
        self.ring.intact()?;
        // Acquire: pairs with the Release of `fail`; nothing hangs on it but the refusal.
        if self.words().failed.load(Ordering::Acquire) != 0 {
            return Err(failure());
        }
        Ok(())
    }

    /// Appends `record` (a multiple of [`GRANULE`] bytes long) and returns its LSN once it is
    /// durable: reserve, write, mark, await.
    pub(crate) fn append(&self, record: &[u8]) -> Result<u64> {
        let len = record.len() as u64;
        let lsn = self.reserve(len)?;
        self.write(lsn, record)?;
        self.await_durable(lsn + len)?;
        Ok(lsn)
    }

    /// Writes `record` at `lsn`, which this process reserved, and marks it written. Fails with
    /// `Timeout`, this writer alone, when its gap was skipped meanwhile (the write does not
    /// count) or its segment is gone since (the write did not happen); with a storage error,
    /// and the log failed, when the write fails.
    pub(crate) fn write(&self, lsn: u64, record: &[u8]) -> Result<()> {
        self.write_unmarked(lsn, record)?;
        self.written(lsn, record.len() as u64)
    }

    /// Writes `record` at `lsn`, which this process reserved, and leaves it for the caller to
    /// mark ([`GroupSync::written`]; the fenced write claims its key in between). Fails as
    /// [`GroupSync::write`] does, but for the mark.
    pub(crate) fn write_unmarked(&self, lsn: u64, record: &[u8]) -> Result<()> {
        match self.log.write(lsn, record) {
            Ok(Written::Done) => Ok(()),
            // Its segment was retired: `flushed` passed `lsn`, which it does only through a
            // mark, and this writer made none, so a skipper's claim voided the record already.
            // Its mark is not even tried: nothing of it is in the log.
            Ok(Written::Gone) => Err(Error::timed_out()),
            Err(err) => Err(self.failed_by(&err)),
        }
    }

    /// Voids this process's reservation `[lsn, lsn + len)`: a void record there, marked
    /// written so that the flusher passes it. Its gap skipped meanwhile, or its segment gone
    /// since, is void all the same; a failed write fails the log, as any write of it does.
    pub(crate) fn void(&self, lsn: u64, len: u64) -> Result<()> {
        let wrote = self.log.write_skip(lsn, len, lsn, 0);
        self.mark_void(lsn, len, wrote)
    }

    /// Marks the void this process wrote over its reservation `[at, at + len)` (a filler, or a
    /// reservation given up), given how its write went: skipped meanwhile or its segment gone
    /// since is void all the same, nobody's error; a failed write fails the log.
    fn mark_void(&self, at: u64, len: u64, wrote: io::Result<Written>) -> Result<()> {
        match wrote {
            Ok(Written::Done) => match self.written(at, len) {
                Ok(()) | Err(Error::Timeout { .. }) => Ok(()),
                Err(err) => Err(err),
            },
            Ok(Written::Gone) => Ok(()),
            Err(err) => Err(self.failed_by(&err)),
        }
    }

    /// Reserves `len` bytes of log (a multiple of [`GRANULE`], at most [`MAX_RECORD`] and the
    /// log's segment size): the record's LSN. Waits (helping to sync) while the window is full.
    pub(crate) fn reserve(&self, len: u64) -> Result<u64> {
        let most = MAX_RECORD.min(self.log.segment_size());
        if len == 0 || len % GRANULE != 0 || len > most {
            return Err(Error::InvalidArgument(format!(
                "a log record is a multiple of {GRANULE} bytes, from {GRANULE} to {most}, not \
                 {len}"
            )));
        }
        self.reserve_within(len, WINDOW - SKIP_ROOM * SKIP_SPACE)
    }

    /// Reserves `len` bytes, the end staying within `window` of `flushed`.
    fn reserve_within(&self, len: u64, window: u64) -> Result<u64> {
        let words = self.words();
        loop {
            self.check_failed()?;
            // Acquire on both: the window is judged on a `flushed` at least as new as the
            // reservations below `end` it is compared with (`flushed` <= `end` always).
            let end = words.end.load(Ordering::Acquire);
            let flushed = words.flushed.load(Ordering::Acquire);
            let size = self.log.segment_size();
            let take = take(size, end, len);
            if end + take > bound(size, words.checkpointed.load(Ordering::Acquire)) {
                // The log is `MAX_SEGMENTS` past the checkpoint: a checkpoint must come first.
                self.await_checkpoint(size, end + take)?;
                continue;
            }
            if end + take > flushed + window {
                // The window is full: what is in it must become durable first.
                self.await_durable(end + take - window)?;
                continue;
            }
            // The one step that hands out log space: only the swap from `end` owns
            // `end..end + len`. `flushed` only grows, so the window holds at the swap too.
            // AcqRel: a flusher that reads the new `end` (Acquire) reads the marks it bounds
            // as they were after it, and this writer's later mark is ordered after.
            if words
                .end
                .compare_exchange(end, end + take, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.ahead(size, end, take);
                if take == len {
                    return Ok(end);
                }
                // The record does not fit before its segment's end: this writer took the rest
                // of the segment, a filler of its own, and reserves its record anew.
                self.filled(end, take)?;
            }
        }
    }

    /// After this process's reservation of `[at, at + len)` in segments of `size` bytes: when it
    /// holds the first byte of its segment's second half, the next segment is made ahead
    /// ([`Log::prepare_ahead`]), so that the writes that reach it find it made. Reservations
    /// tile the log, so exactly one holds that byte: one request per segment, from whichever
    /// process made that reservation, and none from the other reservations.
    fn ahead(&self, size: u64, at: u64, len: u64) {
        let half = at - at % size + size / 2;
        if at <= half && half < at + len {
            if let Some(next) = (at / size + 1).checked_mul(size) {
                self.log.prepare_ahead(next);
            }
        }
    }

    /// Waits until the checkpoint lets a reservation end at `to`, or fails with `Timeout` at
    /// the deadline.
    fn await_checkpoint(&self, size: u64, to: u64) -> Result<()> {
        let words = self.words();
        loop {
            self.ring.intact()?;
            // Acquire, the generation before `checkpointed`: a raise after these loads bumps
            // the generation after it, so the wait below returns at once or is woken.
            let generation = words.generation.load(Ordering::Acquire);
            // Acquire: pairs with the raise's Release; nothing hangs on it but the bound.
            if to <= bound(size, words.checkpointed.load(Ordering::Acquire)) {
                return Ok(());
            }
            self.check_failed()?;
            crate::base::cancel::check(self.cancel)?;
            let left = match self.deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(Error::timed_out());
                    }
                    left
                }
                None => Duration::MAX,
            };
            // A cancel handle is looked at once a `cancel::POLL`.
            let left = match self.cancel {
                Some(_) => left.min(crate::base::cancel::POLL),
                None => left,
            };
            futex_wait(&words.generation, generation, left);
        }
    }

    /// Raises `checkpointed` to `lsn` (the checkpoint has moved every record below it into
    /// the store) and wakes the writers waiting at the bound.
    #[cfg_attr(any(not(test), fencelock_loom), allow(dead_code))]
    pub(crate) fn checkpointed(&self, lsn: u64) {
        // Release: pairs with the Acquire of the reserve's bound.
        self.words().checkpointed.fetch_max(lsn, Ordering::Release);
        self.bump();
    }

    /// Writes and marks the filler `[at, at + len)`, which this process reserved up to a
    /// segment's end. The filler is a reservation of its own, with its own mark, so the
    /// flusher's walk chains over it as over any record (its length is the mark's), a skipper
    /// voids it as any gap when this process stops before its mark, and the writer's record
    /// after it keeps a mark of its own position (its fate is asked there). A filler lost to
    /// a skipper is void all the same: its `Timeout` is nobody's error.
    fn filled(&self, at: u64, len: u64) -> Result<()> {
        let wrote = self.log.fill(at, len);
        self.mark_void(at, len, wrote)
    }

    /// Marks the record at `lsn`, `len` bytes, written (its bytes are in the file). Fails with
    /// `Timeout` when its gap was skipped meanwhile: the write then does not count.
    pub(crate) fn written(&self, lsn: u64, len: u64) -> Result<()> {
        // The granules after the first are cleared for this lap first (the opening comment:
        // every slot is written in each lap), each only over a word of an earlier position: a
        // skipper's claim of one stays, and so does a later lap's word, which only a writer
        // stopped past its skip and the window's move finds (its mark below then loses).
        // Relaxed: nobody reads a cleared word for what it orders, only for its tag, and a
        // compare-and-swap reads the newest word whatever its order.
        for inner in (lsn + GRANULE..lsn + len).step_by(GRANULE_STEP) {
            let cell = self.mark_of(inner);
            let mut seen = cell.load(Ordering::Relaxed);
            while before(seen, inner) {
                match cell.compare_exchange(
                    seen,
                    cleared(inner),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => seen = now,
                }
            }
        }
        let cell = self.mark_of(lsn);
        let mut seen = cell.load(Ordering::Acquire);
        loop {
            if !before(seen, lsn) {
                // A skipper claimed this record's granule (it waited too long for this mark),
                // or the window has moved on since (a later lap's word): the record is void.
                return Err(Error::timed_out());
            }
            // Release: the record's write (before this) is seen by whoever reads the mark
            // (the flusher's Acquire), so its sync covers the write. A weaker order lets a
            // flusher sync before the write and acknowledge a record the file lacks. (The
            // Acquire half orders nothing: the word replaced is an earlier position's.)
            match cell.compare_exchange(
                seen,
                mark(lsn, len, WRITTEN),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        // The swap won over a word of an earlier position, and a mark of this one is never
        // replaced by an earlier word: no skipper claimed the record before, none can after,
        // and `flushed` cannot have passed it (a sync covers a position only through its
        // mark). The record counts.
        Ok(())
    }

    /// How far the log is written without a gap from `from` (a record's start): each record's
    /// mark, and each skipped gap's, chained by their lengths, up to `end`.
    pub(super) fn written_to(&self, from: u64) -> u64 {
        // Acquire: pairs with the reserve's AcqRel; nothing past it is read.
        let end = self.words().end.load(Ordering::Acquire);
        let mut at = from;
        while at < end {
            // Acquire: pairs with the writer's Release in `written` (its write came first) and
            // the skipper's in `skip` (its skip record was synced first). A mark kept from an
            // earlier lap (covered marks are not cleared) has another position's tag and stops
            // the walk as no mark does: `marks` compares the tag.
            let word = self.mark_of(at).load(Ordering::Acquire);
            if !marks(word, at) || word & STATE_MASK == SKIPPING {
                break;
            }
            at += span(word);
        }
        at
    }

    /// Becomes the flusher if nobody is, or, when it may `ask` its liveness lock, if the
    /// flusher's process is gone.
    pub(super) fn lead(&self, ask: bool) -> Result<bool> {
        let flusher = &self.words().flusher;
        // Acquire, on success and failure: the previous flusher's raise is seen before this
        // one walks from `flushed`.
        let held = flusher.load(Ordering::Acquire);
        if held != 0 && held != self.id && (!ask || self.live.is_held(held)?) {
            return Ok(false);
        }
        Ok(flusher
            .compare_exchange(held, self.id, Ordering::Acquire, Ordering::Relaxed)
            .is_ok())
    }

    fn unlead(&self) {
        // Release: this flusher's raise is seen by the next one (its Acquire in `lead`).
        let _ =
            self.words()
                .flusher
                .compare_exchange(self.id, 0, Ordering::Release, Ordering::Relaxed);
    }

    /// Syncs the log up to the prefix written now from `flushed`, and raises `flushed` to it.
    /// Returns whether it moved (the caller then wakes the waiters: `bump`).
    fn sync_from(&self, flushed: u64) -> Result<bool> {
        let to = self.written_to(flushed);
        if to <= flushed {
            return Ok(false);
        }
        let to = self.gathered(to);
        if let Err(err) = self.log.sync(flushed, to) {
            return Err(self.failed_by(&err));
        }
        let words = self.words();
        // AcqRel: the sync (before this) is seen by whoever reads the new `flushed` (Acquire)
        // and acknowledges; fetch_max so that two syncs racing leave the higher prefix.
        // The marks covered stay: they keep the records' fate (`fate`).
        words.flushed.fetch_max(to, Ordering::AcqRel);
        Ok(true)
    }

    /// How far the log is written from `to` once the writers that reserved past it have
    /// marked their records, waiting for them up to [`GATHER`]: they are between their
    /// reservation and their mark, a `pwrite` into the page cache, and a sync that covers them
    /// saves each a wait for the next one (group commit, as `RocksDB`'s leader takes the writers
    /// queued behind it). A lone writer finds nobody past its record and waits for nothing.
    #[cfg(not(fencelock_loom))]
    fn gathered(&self, to: u64) -> u64 {
        let mut to = to;
        let since = std::time::Instant::now();
        // Acquire: as in `written_to`.
        while to < self.words().end.load(Ordering::Acquire) && since.elapsed() < GATHER {
            // On a machine with fewer cores than writers, the writer waited for may need this
            // core to finish its write.
            std::thread::yield_now();
            to = self.written_to(to);
        }
        to
    }
    // The models sync the prefix written when they look: the wait above changes how much a
    // sync covers, never what it may cover.
    #[cfg(fencelock_loom)]
    #[allow(clippy::unused_self)]
    fn gathered(&self, to: u64) -> u64 {
        to
    }

    /// Wakes every waiter: `flushed` moved, or the log failed.
    fn bump(&self) {
        let words = self.words();
        // Release, after the raise or the failure: a waiter that loads the new generation
        // (Acquire) sees them; the futex compares the word, so a waiter that loaded the old one
        // before this either sleeps and is woken below or finds it changed and does not sleep.
        words.generation.fetch_add(1, Ordering::Release);
        futex_wake(&words.generation);
    }

    /// Marks the log failed by `err` (a write's or a sync's): the storage error the failing
    /// call returns.
    fn failed_by(&self, err: &io::Error) -> Error {
        self.fail();
        Error::Storage(format!(
            "a write or sync of the redo log failed ({err}): nothing since is durable; reopen \
             the store"
        ))
    }

    fn fail(&self) {
        // Release: pairs with the Acquire of `check_failed`.
        self.words().failed.store(1, Ordering::Release);
        self.bump();
    }

    /// Waits until the log is durable up to `target`, syncing it when this process is the
    /// flusher, when the flusher does not move for `FLUSH_PATIENCE`, and skipping a gap that
    /// stands at `flushed` for `GAP_PATIENCE`.
    pub(crate) fn await_durable(&self, target: u64) -> Result<()> {
        let words = self.words();
        let mut patience = Patience::new(words.flushed.load(Ordering::Acquire));
        loop {
            self.ring.intact()?;
            // Acquire, the generation before `flushed`: a raise after these loads bumps the
            // generation after it, so the futex wait below returns at once or is woken.
            let generation = words.generation.load(Ordering::Acquire);
            // Acquire: pairs with the raise's AcqRel; the sync it followed is done.
            let flushed = words.flushed.load(Ordering::Acquire);
            if flushed >= target {
                return Ok(());
            }
            self.check_failed()?;
            crate::base::cancel::check(self.cancel)?;
            // A deadline (`until`): a wait that outlasts the caller's busy timeout (a log
            // that failed to be synced in time, a machine too loaded to skip) ends at it, as
            // the timeout promises; the record may still become durable (its outcome is
            // unknown, as a timed-out commit's).
            if self
                .deadline
                .is_some_and(|deadline| std::time::Instant::now() >= deadline)
            {
                return Err(Error::timed_out());
            }
            patience.saw(flushed);
            let lead = self.lead(patience.ask_flusher())?;
            if lead || patience.flusher_over() {
                let moved = match self.sync_from(flushed) {
                    Ok(false) if patience.gap_over() => self.skip(flushed, patience.skipper_over()),
                    moved => moved,
                };
                // The flusher steps down before the wake-up: a waiter that went to sleep because
                // it saw this process lead (`lead` false) loaded the generation before the
                // bump, so the bump wakes it, and it leads the next sync (a bump before the
                // step-down would let it sleep through, with its record marked and nobody to
                // sync it).
                if lead {
                    self.unlead();
                }
                let moved = moved?;
                if moved {
                    self.bump();
                } else {
                    // A gap at `flushed`: a writer between its reserve and its mark, a few
                    // microseconds, or a skip in progress.
                    spin();
                    #[cfg(not(fencelock_loom))]
                    std::thread::yield_now();
                }
            } else {
                futex_wait(&words.generation, generation, patience.left());
            }
        }
    }

    /// Skips the gap at `flushed`, `at`, as the one skipper of the moment (`skipper`): reserves
    /// the skip record's place (at the window's end, kept free for it), claims the gap's first
    /// granule and the granules after it up to the next record marked written, writes and syncs
    /// the skip record, then lets the flusher step over the gap. A live skipper is passed once
    /// `pass_live` (this waiter's patience with it ran out). Returns whether it skipped.
    fn skip(&self, at: u64, pass_live: bool) -> Result<bool> {
        if !self.lead_skip(pass_live)? {
            // Another skip is in progress (its skipper alive): wait for it, as for a writer.
            return Ok(false);
        }
        // Given back however the skip ends (an error, or a panic that unwinds): a live process
        // that kept the word would hold every other skipper off.
        let _skipper = Skipper(self);
        self.skip_as_skipper(at)
    }

    /// Becomes the skipper if nobody is, if the skipper's process is gone, or, with
    /// `pass_live`, whoever it is (stopped, or too slow): its claim of the gap is then this
    /// one's too (`claim_gap`). The word only keeps skippers from doing the same work at once:
    /// two skippers of one gap are safe (each claims by compare-and-swap, writes and syncs a
    /// skip record of its own, and marks the gap `SKIPPED` by a compare-and-swap from its
    /// claim, which only one wins), and a skipper passed while stopped resumes as one of two.
    pub(super) fn lead_skip(&self, pass_live: bool) -> Result<bool> {
        let skipper = &self.words().skipper;
        // Acquire: a dead skipper's claims (made after it took the word) are read by the
        // compare-and-swaps of `claim_gap`, which see the newest words whatever the order;
        // this orders the taking over after the death the liveness lock told.
        let held = skipper.load(Ordering::Acquire);
        if held != 0 && !pass_live && (held == self.id || self.live.is_held(held)?) {
            return Ok(false);
        }
        Ok(skipper
            .compare_exchange(held, self.id, Ordering::AcqRel, Ordering::Acquire)
            .is_ok())
    }

    pub(super) fn unlead_skip(&self) {
        // Release: this skipper's `SKIPPED` (before this) is seen by the next skipper, which
        // then finds the gap marked and claims nothing of it.
        let _ =
            self.words()
                .skipper
                .compare_exchange(self.id, 0, Ordering::Release, Ordering::Relaxed);
    }

    /// The skip itself, by the skipper (`lead_skip`).
    fn skip_as_skipper(&self, at: u64) -> Result<bool> {
        let Some(place) = self.reserve_skip()? else {
            // More skips in flight than the window keeps room for: wait for a writer to resume.
            return Ok(false);
        };
        let Some(len) = self.claim_gap(at, place) else {
            // The place is the log's all the same: a void record fills it (or, if this
            // process was so slow that its place was skipped too, another skip record does).
            match self.write_skip(place, at, 0) {
                Ok(()) | Err(Error::Timeout { .. }) => return Ok(false),
                Err(err) => return Err(err),
            }
        };
        self.finish_skip(place, at, len)?;
        Ok(true)
    }

    /// Claims the gap at `at` for a skip record at `place`: its first granule, then the
    /// granules after it up to the next record marked written, at most to `place`. Another
    /// skipper's claim (one that died, or was passed, `lead_skip`) is taken as this skipper's
    /// own: the gap's claims only ever become `SKIPPED` through a skip record that covers
    /// them, whoever's it is. Returns the gap's length, or `None` when `at` is no gap (any
    /// more).
    pub(super) fn claim_gap(&self, at: u64, place: u64) -> Option<u64> {
        let first = self.mark_of(at);
        let seen = first.load(Ordering::Acquire);
        // AcqRel: ordered against the late writer's mark (one of the two swaps wins). Only
        // over a word of an earlier position: a mark of `at` (written meanwhile) or a later
        // lap's word (this skipper was stopped while `flushed` passed `at` and the window
        // moved on) means the gap was not one, or is no longer. A claim that wins was the first
        // word of `at`, so `flushed` has not passed `at` (a sync covers a position only
        // through its mark).
        let claimed = if before(seen, at) {
            match first.compare_exchange(
                seen,
                mark(at, 0, SKIPPING),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => true,
                Err(now) => claimed_by_a_skipper(now, at),
            }
        } else {
            claimed_by_a_skipper(seen, at)
        };
        if !claimed {
            return None;
        }
        // The gap runs to the next record marked written, at most to the skip record's place
        // (every record before it was reserved before it); granules a dead skipper claimed
        // are part of it.
        let limit = place.min(at + LEN_MASK * GRANULE);
        let mut next = at + GRANULE;
        while next < limit {
            let cell = self.mark_of(next);
            let word = cell.load(Ordering::Acquire);
            if claimed_by_a_skipper(word, next) {
                next += GRANULE;
                continue;
            }
            // A record marked there ends the gap; so does a later lap's word: this skipper was
            // stopped while another skipped the gap and the window moved on (a claim over that
            // word would take a later position's mark).
            if marks(word, next) || !(before(word, next) || word == cleared(next)) {
                break;
            }
            // AcqRel: as the first granule's claim.
            if cell
                .compare_exchange(
                    word,
                    mark(next, 0, SKIPPING),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                next += GRANULE;
            }
        }
        Some(next - at)
    }

    /// Writes the skip record of the claimed gap (`len` bytes at `at`) at `place`, syncs it,
    /// and marks the gap `SKIPPED`, unless another skipper did first.
    pub(super) fn finish_skip(&self, place: u64, at: u64, len: u64) -> Result<()> {
        let claim = mark(at, 0, SKIPPING);
        let mut place = place;
        loop {
            match self.write_skip(place, at, len) {
                Ok(()) => break,
                // This process stopped so long that its own skip record was skipped: the gap
                // is still claimed, and another place says so, unless another skipper
                // finished the gap meanwhile (Acquire: its skip record came first).
                Err(Error::Timeout { .. }) => loop {
                    if self.mark_of(at).load(Ordering::Acquire) != claim {
                        return Ok(());
                    }
                    if let Some(another) = self.reserve_skip()? {
                        place = another;
                        break;
                    }
                    spin();
                },
                Err(err) => return Err(err),
            }
        }
        self.seal_skip(place, at, len)
    }

    /// Syncs the skip record written and marked at `place` for the claimed gap (`len` bytes
    /// at `at`), then marks the gap `SKIPPED`, unless another skipper did first.
    pub(super) fn seal_skip(&self, place: u64, at: u64, len: u64) -> Result<()> {
        let claim = mark(at, 0, SKIPPING);
        if let Err(err) = self.log.sync(place, place + SKIP_SPACE) {
            return Err(self.failed_by(&err));
        }
        // Release: the skip record's write and sync (before this) are seen by the flusher that
        // steps over the gap (its Acquire in `written_to`), so no sync covers the gap without
        // the record that voids it. A compare-and-swap from the claim: a skipper passed while
        // stopped finds the gap `SKIPPED` by the one that passed it (whose record covers
        // this one's gap: it took this one's claims), or a later lap's word, and changes
        // nothing (a store there would take a later position's mark).
        let _ = self.mark_of(at).compare_exchange(
            claim,
            mark(at, len, SKIPPED),
            Ordering::Release,
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// Reserves a skip record's place, in the room the writers leave at the window's end;
    /// `None` when that room is taken (by other skips in flight). A place that would cross a
    /// segment's end is preceded by a filler of the skipper's, as a writer's record is.
    pub(super) fn reserve_skip(&self) -> Result<Option<u64>> {
        let words = self.words();
        loop {
            self.check_failed()?;
            // Acquire on both, as in `reserve_within`.
            let end = words.end.load(Ordering::Acquire);
            let flushed = words.flushed.load(Ordering::Acquire);
            let size = self.log.segment_size();
            let take = take(size, end, SKIP_SPACE);
            if end + take > flushed + WINDOW {
                return Ok(None);
            }
            // AcqRel: as in `reserve_within`.
            if words
                .end
                .compare_exchange(end, end + take, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.ahead(size, end, take);
                if take == SKIP_SPACE {
                    return Ok(Some(end));
                }
                self.filled(end, take)?;
            }
        }
    }

    /// Writes and marks the skip record at `place` for the `len` bytes at `gap` (none: a void
    /// record).
    pub(super) fn write_skip(&self, place: u64, gap: u64, len: u64) -> Result<()> {
        match self.log.write_skip(place, SKIP_SPACE, gap, len) {
            Ok(Written::Done) => self.written(place, SKIP_SPACE),
            // The place's segment was retired: this skipper stopped so long that its place
            // was skipped and checkpointed, as a writer's record (`write`).
            Ok(Written::Gone) => Err(Error::timed_out()),
            Err(err) => Err(self.failed_by(&err)),
        }
    }

    /// The LSN below which the log is durable.
    pub(crate) fn flushed(&self) -> u64 {
        self.words().flushed.load(Ordering::Acquire)
    }

    /// The fate of the record at `lsn` (a record's start), as its mark kept it: `Pending` until
    /// `flushed` passes `lsn`, then `Counts` or `Void` as long as the slot holds `lsn`'s mark,
    /// `Unknown` once the window has moved on.
    #[cfg_attr(not(any(test, fencelock_loom)), allow(dead_code))]
    pub(crate) fn fate(&self, lsn: u64) -> Fate {
        // Acquire: pairs with the raise's AcqRel (a release sequence of `fetch_max`es), after
        // the flusher's Acquire load of the mark that let it cover `lsn`, itself after the
        // mark's decision (the writer's `WRITTEN` or the skipper's claim, then its `SKIPPED`).
        // So the load below reads that decision or a later lap's word. A weaker order (or no
        // check of `flushed`) lets it read the slot before the decision: an earlier
        // position's word, `Unknown`, and, in the log, no skip yet.
        if self.words().flushed.load(Ordering::Acquire) <= lsn {
            return Fate::Pending;
        }
        // Relaxed: ordered by the load of `flushed` above. A mark of `lsn` is replaced only by
        // a later position's word, never taken back, so what it says now is final.
        let word = self.mark_of(lsn).load(Ordering::Relaxed);
        if !marks(word, lsn) {
            return Fate::Unknown;
        }
        if word & STATE_MASK == WRITTEN {
            Fate::Counts
        } else {
            Fate::Void
        }
    }

    /// The fate of the record at `lsn`, never `Unknown`: when its slot has moved on, a skip
    /// record within the window after it voids it (a skipper writes and syncs it there, at a
    /// place reserved within `WINDOW` of the gap's start, before any sync covers the gap),
    /// else it counts. The log must still hold `[lsn, lsn + WINDOW)`.
    pub(crate) fn fate_in_log(&self, lsn: u64) -> Result<Fate> {
        match self.fate(lsn) {
            Fate::Unknown => Ok(if self.log.skipped(lsn, WINDOW)? {
                Fate::Void
            } else {
                Fate::Counts
            }),
            fate => Ok(fate),
        }
    }
}

/// `log_state`: the ring's processes do not write through the log (their fenced writes commit
/// to the store file).
const LOG_OFF: u64 = u64::MAX;
/// `log_state`: they do; the log was recovered into the store file, and `end`, `flushed` and
/// `checkpointed` start at its end.
const LOG_ON: u64 = u64::MAX - 1;

/// Where a store's log lies: the device and inode of its directory, and a hash (FNV-1a) of
/// its segments' names' common beginning (`NAME.wal`, after the store file's name). Two processes that reach one store file by
/// different names (a rename while it is open, a bind mount of the file) would find different
/// logs beside those names while they share the ring's positions; each joiner compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogPlace {
    pub(crate) dir_dev: u64,
    pub(crate) dir_ino: u64,
    pub(crate) name: u64,
}

/// What [`Ring::decide_log`] tells a process of the ring's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogTurn {
    /// Writes do not go through the log, for the ring's lifetime.
    Off,
    /// Writes go through the log, set up.
    On,
    /// This process decides, and sets the log up first: recovers it, then
    /// [`Ring::log_set_up`].
    SetUp,
    /// Another live process is setting it up: ask again soon.
    Wait,
}

impl Ring {
    /// Decides, once for the ring's lifetime, whether its processes write through the log: the
    /// first process to ask takes the setting up (its liveness id `id` in `log_state`),
    /// recovers the log a crash may have left (whatever it decides: a ring that commits its
    /// writes to the store file must not leave acknowledged writes in a log that a later ring
    /// would apply over them), and decides by [`Ring::log_set_up`]; every later one follows.
    /// No write goes through the log, and no process goes on, before the decision; a setter
    /// that died is taken over, as the recovery it was running is one transaction of the store
    /// file.
    pub(crate) fn decide_log(&self, id: u64, live: &dyn Live) -> LogTurn {
        let word = &self.view.flush().log_state;
        loop {
            // Acquire: pairs with the Release of `log_set_up`, so that a process that sees the
            // log on sees the positions it starts at.
            let state = word.load(Ordering::Acquire);
            let (to, turn) = match state {
                LOG_ON => return LogTurn::On,
                LOG_OFF => return LogTurn::Off,
                0 => (id, LogTurn::SetUp),
                setter if setter == id => return LogTurn::SetUp,
                setter if live.is_held(setter).unwrap_or(true) => return LogTurn::Wait,
                // Its setter died: taken over.
                _ => (id, LogTurn::SetUp),
            };
            // AcqRel: one process decides; the loser reads the winner's word again.
            if word
                .compare_exchange(state, to, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return turn;
            }
        }
    }

    /// Ends the setting up of the log by the process that took it ([`Ring::decide_log`]): the
    /// log was recovered into the store file up to `end`, where reservations, the flushed
    /// prefix and the checkpoint start, and lies at `place`; `None`: the ring's processes do
    /// not write through it. No writer reserves before it (the log is not on).
    pub(crate) fn log_set_up(&self, set: Option<(u64, LogPlace)>) {
        let words = self.view.flush();
        let Some((end, place)) = set else {
            // Release: as below.
            words.log_state.store(LOG_OFF, Ordering::Release);
            return;
        };
        // Relaxed: published by the Release below, before any process joins the log.
        words.log_dir_dev.store(place.dir_dev, Ordering::Relaxed);
        words.log_dir_ino.store(place.dir_ino, Ordering::Relaxed);
        words.log_name.store(place.name, Ordering::Relaxed);
        // Relaxed: published by the Release below, before any writer reserves.
        words.end.store(end, Ordering::Relaxed);
        words.flushed.store(end, Ordering::Relaxed);
        words.checkpointed.store(end, Ordering::Relaxed);
        // Release: pairs with the Acquire of `decide_log`.
        words.log_state.store(LOG_ON, Ordering::Release);
    }

    /// Gives the setting up of the log back (this process, `id`, failed to recover it): the
    /// next process to ask takes it.
    pub(crate) fn log_set_up_failed(&self, id: u64) {
        // AcqRel: as `decide_log`'s swap.
        let _ = self.view.flush().log_state.compare_exchange(
            id,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Where the log lies, as its setter found it: for a process that saw it on
    /// ([`Ring::decide_log`]), to check that it finds the same log.
    pub(crate) fn log_place(&self) -> LogPlace {
        let words = self.view.flush();
        // Relaxed: written before the Release that put the log on, which this process's
        // Acquire in `decide_log` saw; never written again in the ring's lifetime.
        LogPlace {
            dir_dev: words.log_dir_dev.load(Ordering::Relaxed),
            dir_ino: words.log_dir_ino.load(Ordering::Relaxed),
            name: words.log_name.load(Ordering::Relaxed),
        }
    }

    /// The position the store's checkpoint has reached: a segment wholly below it may be gone
    /// (retired), none above it may.
    pub(crate) fn log_checkpointed(&self) -> u64 {
        // Acquire: pairs with the Release of `GroupSync::checkpointed`, which comes before the
        // retirement of the segments below (whose absence the caller saw).
        self.view.flush().checkpointed.load(Ordering::Acquire)
    }

    /// Whether the ring's processes write through the log (decided and set up).
    pub(crate) fn log_on(&self) -> bool {
        // Acquire: as `decide_log`'s.
        self.view.flush().log_state.load(Ordering::Acquire) == LOG_ON
    }

    /// How far the log is reserved, and how far the checkpoint reached: the writer that sees
    /// them two segments apart starts a checkpoint.
    pub(crate) fn log_positions(&self) -> (u64, u64) {
        let words = self.view.flush();
        // Relaxed: a hint of when to checkpoint, which the checkpoint reads again.
        (
            words.end.load(Ordering::Relaxed),
            words.checkpointed.load(Ordering::Relaxed),
        )
    }
}

impl Ring {
    /// For the models: the sleepers' patience runs out (a futex wait's timeout, which the
    /// models' waits do not have), as after a process's death.
    #[cfg(fencelock_loom)]
    pub(super) fn flush_timeouts(&self) {
        let words = self.view.flush();
        words.generation.fetch_add(1, Ordering::Release);
        futex_wake(&words.generation);
    }
}

/// The group sync over a plain preallocated file, for the multi-process test and the bench
/// (`tests/group_sync.rs`, `benches/group_sync.rs`): not the store's log, and not part of the
/// API. Each process opens one on the same store file (for the ring's name and the liveness
/// locks) and the same log file, which it must have made long enough for every record (a
/// position is a byte offset in it).
#[cfg(not(fencelock_loom))]
#[doc(hidden)]
pub struct SharedLogFile {
    ring: Ring,
    live: crate::storage::liveness::Liveness,
    id: u64,
    log: PlainLog,
}

/// A preallocated file written with `pwrite` and synced with `fdatasync`. A skip record is
/// `b"SKIPSKIP"`, its own position, the gap's position and the gap's length, little-endian.
#[cfg(not(fencelock_loom))]
struct PlainLog(std::fs::File, std::sync::atomic::AtomicU64);

#[cfg(not(fencelock_loom))]
impl Log for PlainLog {
    /// One file, never retired: never `Gone`.
    fn write(&self, lsn: u64, record: &[u8]) -> io::Result<Written> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, record, lsn)?;
        Ok(Written::Done)
    }

    fn sync(&self, _from: u64, _to: u64) -> io::Result<()> {
        // Relaxed: a count for the bench, read by this process alone.
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.sync_data()
    }

    fn write_skip(&self, at: u64, space: u64, gap: u64, len: u64) -> io::Result<Written> {
        let mut record = vec![0u8; usize::try_from(space).expect("a small record")];
        record[..8].copy_from_slice(b"SKIPSKIP");
        record[8..16].copy_from_slice(&at.to_le_bytes());
        record[16..24].copy_from_slice(&gap.to_le_bytes());
        record[24..32].copy_from_slice(&len.to_le_bytes());
        self.write(at, &record)
    }

    /// One file: no segments.
    fn segment_size(&self) -> u64 {
        u64::MAX
    }

    /// Zeros (never called: a file of no segments has no fillers).
    fn fill(&self, at: u64, len: u64) -> io::Result<Written> {
        self.write(
            at,
            &vec![0; usize::try_from(len).expect("a filler within the window")],
        )
    }

    /// Looks at each granule of `[lsn, lsn + within)` for a skip record at its own position
    /// whose gap holds `lsn` (a record of the caller's that holds those very 32 bytes would be
    /// taken for one: this log is for tests and the bench).
    fn skipped(&self, lsn: u64, within: u64) -> io::Result<bool> {
        let mut bytes = vec![0u8; usize::try_from(within).expect("a window")];
        let read = std::os::unix::fs::FileExt::read_at(&self.0, &mut bytes, lsn)?;
        let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok((0..read.saturating_sub(31))
            .step_by(GRANULE_STEP)
            .any(|at| {
                &bytes[at..at + 8] == b"SKIPSKIP"
                    && field(at + 8) == lsn + at as u64
                    && (field(at + 16)..field(at + 16) + field(at + 24)).contains(&lsn)
            }))
    }
}

/// The store's log: segment files, each record within one, fillers at their ends. A write into
/// a retired segment (refused by `write_at` with `Timeout`, which it returns for that alone) is
/// [`Written::Gone`]; every other error is the log's. (Under the models too: the store's engine,
/// which writes through it, is built there, though no model runs it.)
impl<D> Log for crate::storage::wal::file::SegmentLog<D>
where
    D: crate::storage::wal::file::LogDir + Clone + Send + 'static,
    D::File: Send + Sync,
{
    fn write(&self, lsn: u64, record: &[u8]) -> io::Result<Written> {
        written(self.write_at(lsn, record))
    }

    fn sync(&self, from: u64, to: u64) -> io::Result<()> {
        crate::storage::wal::file::SegmentLog::sync(self, from, to).map_err(io::Error::other)
    }

    fn write_skip(&self, at: u64, space: u64, gap: u64, len: u64) -> io::Result<Written> {
        written(crate::storage::wal::file::SegmentLog::write_skip(
            self, at, space, gap, len,
        ))
    }

    fn skipped(&self, lsn: u64, within: u64) -> io::Result<bool> {
        crate::storage::wal::file::SegmentLog::skipped(self, lsn, within).map_err(io::Error::other)
    }

    fn segment_size(&self) -> u64 {
        self.size()
    }

    fn fill(&self, at: u64, len: u64) -> io::Result<Written> {
        written(crate::storage::wal::file::SegmentLog::fill(self, at, len))
    }

    fn prepare_ahead(&self, lsn: u64) {
        crate::storage::wal::file::SegmentLog::prepare_ahead(self, lsn / self.size());
    }
}

/// A segment log's write as [`Log`] tells it: its `Timeout` (a retired segment, and nothing
/// else) is [`Written::Gone`].
fn written(result: Result<()>) -> io::Result<Written> {
    match result {
        Ok(()) => Ok(Written::Done),
        Err(Error::Timeout { .. }) => Ok(Written::Gone),
        Err(err) => Err(io::Error::other(err)),
    }
}

#[cfg(not(fencelock_loom))]
impl SharedLogFile {
    /// Opens the group sync of the store file `store` (its ring in `ring_dir`) over the log
    /// file `log`.
    ///
    /// # Errors
    ///
    /// What opening the ring, the liveness lock or the log file returns.
    pub fn open(
        ring_dir: &std::path::Path,
        store: &std::path::Path,
        log: &std::path::Path,
    ) -> Result<SharedLogFile> {
        let meta = std::fs::metadata(store)?;
        let stamp = super::Stamp {
            boot_id: [0x5a; 16],
            version: crate::share::wire::WIRE_VERSION,
        };
        let ring = Ring::open(ring_dir, &meta, None, stamp)?;
        let live = crate::storage::liveness::Liveness::shared(store)?;
        let id = live.lock_fresh(store)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(log)?;
        Ok(SharedLogFile {
            ring,
            live,
            id,
            log: PlainLog(file, std::sync::atomic::AtomicU64::new(0)),
        })
    }

    /// Appends `record` (a multiple of 8 bytes) at a position it returns, once durable.
    ///
    /// # Errors
    ///
    /// As `reserve`, `write` and `await_durable`.
    pub fn append(&self, record: &[u8]) -> Result<u64> {
        self.sync().append(record)
    }

    /// Reserves `len` bytes (the first step of `append`, for a test that stops between steps).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a length that is not a record's; [`Error::Storage`] once
    /// the log failed.
    pub fn reserve(&self, len: u64) -> Result<u64> {
        self.sync().reserve(len)
    }

    /// Writes `record` at `lsn` and marks it written (the second and third steps).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] when the write fails (the log is failed); [`Error::Timeout`] when the
    /// record's gap was skipped meanwhile (the write does not count).
    pub fn write(&self, lsn: u64, record: &[u8]) -> Result<()> {
        self.sync().write(lsn, record)
    }

    /// Waits until the log is durable up to `end` (the last step).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] when a write or sync of the log failed.
    pub fn await_durable(&self, end: u64) -> Result<()> {
        self.sync().await_durable(end)
    }

    /// The position below which the log is durable.
    pub fn flushed(&self) -> u64 {
        self.sync().flushed()
    }

    /// How many `fdatasync` calls this process made.
    pub fn syncs(&self) -> u64 {
        self.log.1.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn sync(&self) -> GroupSync<'_> {
        GroupSync::new(&self.ring, self.id, &self.live, &self.log)
    }
}

#[cfg(all(test, not(fencelock_loom)))]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Every process lives.
    struct Alive;

    impl Live for Alive {
        fn is_held(&self, _id: u64) -> io::Result<bool> {
            Ok(true)
        }
    }

    /// A log whose syncs fail once `failing` is set (EIO, as a disk that lost a write).
    struct Failing {
        failing: Cell<bool>,
    }

    impl Log for Failing {
        fn write(&self, _lsn: u64, _record: &[u8]) -> io::Result<Written> {
            Ok(Written::Done)
        }

        fn sync(&self, _from: u64, _to: u64) -> io::Result<()> {
            if self.failing.get() {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(())
        }

        fn write_skip(&self, _at: u64, _space: u64, _gap: u64, _len: u64) -> io::Result<Written> {
            Ok(Written::Done)
        }

        // It keeps no records, and so no skip records either.
        fn skipped(&self, _lsn: u64, _within: u64) -> io::Result<bool> {
            Ok(false)
        }

        fn segment_size(&self) -> u64 {
            u64::MAX
        }

        fn fill(&self, _at: u64, _len: u64) -> io::Result<Written> {
            Ok(Written::Done)
        }
    }

    /// A log in segments of `SEGMENT` bytes that keeps where each write and filler went.
    struct Segmented {
        writes: std::cell::RefCell<Vec<(u64, u64)>>,
        fills: std::cell::RefCell<Vec<(u64, u64)>>,
    }

    const SEGMENT: u64 = 256;

    impl Log for Segmented {
        fn write(&self, lsn: u64, record: &[u8]) -> io::Result<Written> {
            self.writes.borrow_mut().push((lsn, record.len() as u64));
            Ok(Written::Done)
        }

        fn sync(&self, _from: u64, _to: u64) -> io::Result<()> {
            Ok(())
        }

        fn write_skip(&self, at: u64, space: u64, _gap: u64, _len: u64) -> io::Result<Written> {
            self.writes.borrow_mut().push((at, space));
            Ok(Written::Done)
        }

        // No writer stops in the test that uses it.
        fn skipped(&self, _lsn: u64, _within: u64) -> io::Result<bool> {
            Ok(false)
        }

        fn segment_size(&self) -> u64 {
            SEGMENT
        }

        fn fill(&self, at: u64, len: u64) -> io::Result<Written> {
            self.fills.borrow_mut().push((at, len));
            Ok(Written::Done)
        }
    }

    /// Appends `record` through `sync`, encoded at the position it is reserved at.
    fn append_record(
        sync: &GroupSync<'_>,
        log: &crate::storage::wal::file::SegmentLog,
        record: &crate::storage::wal::record::Record,
    ) -> u64 {
        let lsn = sync.reserve(record.encoded_len()).unwrap();
        log.write_at(lsn, &record.encode(lsn).unwrap()).unwrap();
        sync.written(lsn, record.encoded_len()).unwrap();
        sync.await_durable(lsn + record.encoded_len()).unwrap();
        // A checkpoint at once: the test is of the segments, not of the bound.
        sync.checkpointed(sync.flushed());
        lsn
    }

    #[test]
    fn over_segment_files_every_acknowledged_record_is_scanned_and_a_skipped_one_is_void() {
        use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
        use crate::storage::wal::record::Record;
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = SegmentLog::open(&dir.path().join("store.wal"), 7, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        let put = |i: u64| Record::Put {
            key: format!("key-{i}").into_bytes(),
            value: vec![7; usize::try_from(i * 37 % 900).unwrap()],
            token: i + 1,
            version: i,
        };
        let mut acknowledged = Vec::new();
        for i in 0..30 {
            acknowledged.push((append_record(&sync, &log, &put(i)), put(i)));
        }
        // A writer stops after its reserve; the next append skips it (GAP_PATIENCE); the
        // stopped writer's late write then lands on its reservation, and does not count.
        let late = put(100);
        let stopped = sync.reserve(late.encoded_len()).unwrap();
        for i in 30..40 {
            acknowledged.push((append_record(&sync, &log, &put(i)), put(i)));
        }
        log.write_at(stopped, &late.encode(stopped).unwrap())
            .unwrap();
        assert!(timed_out(sync.written(stopped, late.encoded_len())));
        assert_eq!(sync.fate(stopped), Fate::Void);
        assert!(
            sync.flushed() > 4 * MIN_SIZE,
            "the records crossed several segments"
        );
        let scanned = crate::storage::wal::scan::scan(&log, 0).unwrap();
        assert_eq!(scanned.records, acknowledged);
        assert_eq!(scanned.skipped, [stopped]);
        assert_eq!(scanned.end, sync.flushed());
        assert_eq!(sync.fate_in_log(stopped).unwrap(), Fate::Void);
    }

    #[test]
    fn a_late_write_into_a_retired_segment_fails_its_writer_alone() {
        use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
        use crate::storage::wal::record::Record;
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = SegmentLog::open(&dir.path().join("store.wal"), 7, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let put = |i: u64| Record::Put {
            key: format!("key-{i}").into_bytes(),
            value: vec![7; usize::try_from(i * 37 % 900).unwrap()],
            token: i + 1,
            version: i,
        };
        // A writer reserves in segment 0 and stops before its write.
        let late = GroupSync::new(&ring, 2, &Alive, &log);
        let record = put(1000);
        let stopped = late.reserve(record.encoded_len()).unwrap();
        assert_eq!(stopped / MIN_SIZE, 0);
        // The others append past it (its gap skipped after GAP_PATIENCE) into segment 3.
        let others = GroupSync::new(&ring, 1, &Alive, &log);
        let mut acknowledged = Vec::new();
        let mut i = 0;
        while others.flushed() < 3 * MIN_SIZE {
            acknowledged.push((append_record(&others, &log, &put(i)), put(i)));
            i += 1;
        }
        assert_eq!(others.fate(stopped), Fate::Void);
        // A checkpoint at the first record of segment 1 retires segment 0.
        let checkpoint = acknowledged
            .iter()
            .map(|&(lsn, _)| lsn)
            .find(|&lsn| lsn >= MIN_SIZE)
            .unwrap();
        others.checkpointed(checkpoint);
        log.retire_below(checkpoint).unwrap();
        assert!(!log.path(0).exists());
        // The writer resumes: its write did not happen, and it alone is told so.
        assert!(timed_out(
            late.write(stopped, &record.encode(stopped).unwrap())
        ));
        assert_eq!(
            late.words().failed.load(Ordering::Acquire),
            0,
            "the log stands"
        );
        assert!(!log.path(0).exists(), "a retired segment is not made again");
        // Another process appends on; the scan from the checkpoint reads every acknowledged
        // record since.
        let next = GroupSync::new(&ring, 3, &Alive, &log);
        for i in 2000..2010 {
            acknowledged.push((append_record(&next, &log, &put(i)), put(i)));
        }
        let scanned = crate::storage::wal::scan::scan(&log, checkpoint).unwrap();
        acknowledged.retain(|&(lsn, _)| lsn >= checkpoint);
        assert_eq!(scanned.records, acknowledged);
        assert_eq!(scanned.end, next.flushed());
    }

    #[test]
    fn a_missing_log_directory_fails_the_log_not_only_its_writer() {
        use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let logs = dir.path().join("wal");
        std::fs::create_dir(&logs).unwrap();
        let log = SegmentLog::open(&logs.join("store.wal"), 7, MIN_SIZE).unwrap();
        // ENOENT, for the directory: no late write, a log that cannot be written.
        std::fs::remove_dir(&logs).unwrap();
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        assert!(matches!(sync.append(&[1; 64]), Err(Error::Storage(_))));
        assert_ne!(sync.words().failed.load(Ordering::Acquire), 0);
        let other = GroupSync::new(&ring, 2, &Alive, &log);
        assert!(matches!(other.reserve(8), Err(Error::Storage(_))));
    }

    #[test]
    fn the_reservation_that_crosses_a_segments_half_makes_the_next_segment_ahead() {
        use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
        /// The segment log, counting the segments asked ahead.
        struct Ahead<'a> {
            log: &'a SegmentLog,
            asked: std::cell::RefCell<Vec<u64>>,
        }
        impl Log for Ahead<'_> {
            fn write(&self, lsn: u64, record: &[u8]) -> io::Result<Written> {
                Log::write(self.log, lsn, record)
            }
            fn sync(&self, from: u64, to: u64) -> io::Result<()> {
                Log::sync(self.log, from, to)
            }
            fn write_skip(&self, at: u64, space: u64, gap: u64, len: u64) -> io::Result<Written> {
                Log::write_skip(self.log, at, space, gap, len)
            }
            fn skipped(&self, lsn: u64, within: u64) -> io::Result<bool> {
                Log::skipped(self.log, lsn, within)
            }
            fn segment_size(&self) -> u64 {
                Log::segment_size(self.log)
            }
            fn fill(&self, at: u64, len: u64) -> io::Result<Written> {
                Log::fill(self.log, at, len)
            }
            fn prepare_ahead(&self, lsn: u64) {
                self.asked.borrow_mut().push(lsn);
                Log::prepare_ahead(self.log, lsn);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = SegmentLog::open(&dir.path().join("store.wal"), 7, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let ahead = Ahead {
            log: &log,
            asked: std::cell::RefCell::new(Vec::new()),
        };
        let sync = GroupSync::new(&ring, 1, &Alive, &ahead);
        let end = || sync.words().end.load(Ordering::Acquire);
        // Records of 136 bytes: 15 end before the half (2048), the 16th holds its first byte.
        while end() + 136 <= MIN_SIZE / 2 {
            sync.append(&[1; 136]).unwrap();
        }
        assert!(ahead.asked.borrow().is_empty());
        assert!(!log.path(1).exists(), "nothing made ahead before the half");
        sync.append(&[1; 136]).unwrap();
        assert_eq!(*ahead.asked.borrow(), [MIN_SIZE]);
        // Segment 1 is made by the thread of its own, before any reservation reaches it.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !log.path(1).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "segment 1 was not made ahead"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(end() < MIN_SIZE, "no reservation in segment 1 yet");
        assert_eq!(log.seqs().unwrap(), [0, 1]);
        // Once per segment, whichever records and fillers cross the halves.
        while end() < 4 * MIN_SIZE {
            sync.append(&[2; 136]).unwrap();
            sync.checkpointed(sync.flushed());
        }
        assert_eq!(
            *ahead.asked.borrow(),
            [MIN_SIZE, 2 * MIN_SIZE, 3 * MIN_SIZE, 4 * MIN_SIZE]
        );
    }

    #[test]
    fn writers_in_threads_over_small_segments_lose_no_acknowledged_record() {
        use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
        use crate::storage::wal::record::Record;
        use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire};
        /// Counts a writer out when it ends, by a panic too: the checkpointer below stops
        /// once every writer has ended, and a panic then shows at the join (without this, a
        /// writer's panic left the checkpointer looping and the test hung).
        struct Ended<'a>(&'a AtomicU64);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.fetch_add(1, AcqRel);
            }
        }
        const WRITERS: u64 = 4;
        const EACH: u64 = 150;
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = SegmentLog::open(&dir.path().join("store.wal"), 7, MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        let ended = AtomicU64::new(0);
        let far = std::time::Instant::now() + Duration::from_secs(600);
        let (mut acknowledged, mut voided): (Vec<(u64, Record)>, Vec<u64>) =
            std::thread::scope(|threads| {
                let writers: Vec<_> = (0..WRITERS)
                    .map(|writer| {
                        let (ring, log, ended) = (&ring, &log, &ended);
                        threads.spawn(move || {
                            let _ended = Ended(ended);
                            let sync = GroupSync::new(ring, writer + 1, &Alive, log).until(far);
                            let (mut mine, mut void) = (Vec::new(), Vec::new());
                            for i in 0..EACH {
                                let record = Record::Put {
                                    key: format!("writer-{writer}").into_bytes(),
                                    value: vec![
                                        7;
                                        usize::try_from((i * 53 + writer * 11) % 700)
                                            .unwrap()
                                    ],
                                    token: i + 1,
                                    version: i,
                                };
                                let len = record.encoded_len();
                                loop {
                                    let lsn = sync.reserve(len).unwrap();
                                    log.write_at(lsn, &record.encode(lsn).unwrap()).unwrap();
                                    match sync.written(lsn, len) {
                                        Ok(()) => {
                                            sync.await_durable(lsn + len).unwrap();
                                            mine.push((lsn, record));
                                            break;
                                        }
                                        // This thread stood between its reserve and its mark
                                        // longer than GAP_PATIENCE (a loaded machine) and a
                                        // waiter skipped its record: void, written anew.
                                        Err(Error::Timeout { .. }) => void.push(lsn),
                                        Err(err) => panic!("{err}"),
                                    }
                                }
                            }
                            (mine, void)
                        })
                    })
                    .collect();
                // The checkpointer: follows `flushed`, as the store's will (the scan below
                // reads from 0: nothing is retired).
                let sync = GroupSync::new(&ring, 99, &Alive, &log);
                while ended.load(Acquire) < WRITERS {
                    sync.checkpointed(sync.flushed());
                    std::thread::sleep(Duration::from_micros(200));
                }
                writers
                    .into_iter()
                    .map(|writer| writer.join().unwrap())
                    .fold(
                        (Vec::new(), Vec::new()),
                        |(mut all, mut void), (mine, theirs)| {
                            all.extend(mine);
                            void.extend(theirs);
                            (all, void)
                        },
                    )
            });
        acknowledged.sort_by_key(|(lsn, _)| *lsn);
        voided.sort_unstable();
        let sync = GroupSync::new(&ring, 99, &Alive, &log);
        assert!(
            sync.flushed() > 20 * MIN_SIZE,
            "the records crossed many segments"
        );
        let scanned = crate::storage::wal::scan::scan(&log, 0).unwrap();
        assert_eq!(scanned.records, acknowledged);
        // The scan voids exactly the records whose writers were told they were void.
        assert_eq!(scanned.skipped, voided);
        assert_eq!(scanned.end, sync.flushed());
    }

    #[test]
    fn no_record_crosses_a_segment_end_and_the_fillers_are_covered() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = Segmented {
            writes: std::cell::RefCell::new(Vec::new()),
            fills: std::cell::RefCell::new(Vec::new()),
        };
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        let lens = [24, 200, 64, 256, 8, 120, 136, 248, 16];
        let mut lsns = Vec::new();
        for round in 0..40 {
            let len = lens[round % lens.len()];
            let lsn = sync
                .append(&vec![1; usize::try_from(len).unwrap()])
                .unwrap();
            assert_eq!(sync.fate(lsn), Fate::Counts);
            sync.checkpointed(sync.flushed());
            lsns.push(lsn);
        }
        let writes = log.writes.borrow();
        let fills = log.fills.borrow();
        assert!(!fills.is_empty(), "some records did not fit their segment");
        for &(at, len) in writes.iter() {
            assert_eq!(
                at / SEGMENT,
                (at + len - 1) / SEGMENT,
                "{len} bytes at {at}"
            );
        }
        // Records and fillers tile the log without a hole, each filler to its segment's end.
        let mut pieces: Vec<(u64, u64)> = writes.iter().chain(fills.iter()).copied().collect();
        pieces.sort_unstable();
        let mut at = 0;
        for (lsn, len) in pieces {
            assert_eq!(lsn, at, "no hole before {lsn}");
            at += len;
        }
        for &(at, len) in fills.iter() {
            assert_eq!(
                (at + len) % SEGMENT,
                0,
                "the filler at {at} runs to its segment's end"
            );
        }
        assert_eq!(sync.flushed(), at, "the flusher stepped over every filler");
        // A record longer than a segment is refused, and reserves nothing.
        assert!(matches!(
            sync.reserve(SEGMENT + GRANULE),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(sync.reserve(8).unwrap(), at);
    }

    fn ring(dir: &std::path::Path) -> Ring {
        let store = dir.join("store");
        std::fs::write(&store, b"").unwrap();
        let stamp = crate::ring::Stamp {
            boot_id: [3; 16],
            version: 1,
        };
        Ring::open(dir, &std::fs::metadata(&store).unwrap(), None, stamp).unwrap()
    }

    #[test]
    fn a_writer_past_max_segments_waits_for_a_checkpoint_then_times_out_having_reserved_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = Segmented {
            writes: std::cell::RefCell::new(Vec::new()),
            fills: std::cell::RefCell::new(Vec::new()),
        };
        let deadline = || std::time::Instant::now() + Duration::from_millis(30);
        let sync = GroupSync::new(&ring, 1, &Alive, &log).until(deadline());
        // The checkpoint at 100, in segment 0: records may end up to segment 4's start.
        sync.checkpointed(100);
        let limit = MAX_SEGMENTS * SEGMENT;
        while sync.words().end.load(Ordering::Acquire) + 128 <= limit {
            sync.append(&[5; 128]).unwrap();
        }
        assert_eq!(sync.words().end.load(Ordering::Acquire), limit);
        let before = log.writes.borrow().len();
        assert!(timed_out(sync.append(&[6; 128]).map(|_| ())));
        assert!(timed_out(sync.reserve(8).map(|_| ())));
        assert_eq!(
            sync.words().end.load(Ordering::Acquire),
            limit,
            "nothing reserved"
        );
        assert_eq!(log.writes.borrow().len(), before, "nothing written");
        // A checkpoint that stays in segment 0 does not move the bound; one into segment 1
        // does, by a segment.
        sync.checkpointed(SEGMENT - 8);
        assert!(timed_out(sync.reserve(8).map(|_| ())));
        sync.checkpointed(SEGMENT);
        let sync = GroupSync::new(&ring, 1, &Alive, &log).until(deadline());
        assert_eq!(sync.append(&[7; 128]).unwrap(), limit);
        // A writer waiting at the bound is woken by the checkpoint's raise (its deadline is far
        // off).
        while sync.words().end.load(Ordering::Acquire) + 128 <= limit + SEGMENT {
            sync.append(&[5; 128]).unwrap();
        }
        let far = std::time::Instant::now() + Duration::from_secs(600);
        std::thread::scope(|threads| {
            let waiter = threads.spawn(|| {
                let log = Segmented {
                    writes: std::cell::RefCell::new(Vec::new()),
                    fills: std::cell::RefCell::new(Vec::new()),
                };
                GroupSync::new(&ring, 2, &Alive, &log)
                    .until(far)
                    .reserve(8)
                    .unwrap()
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished(), "it waits for the checkpoint");
            sync.checkpointed(2 * SEGMENT);
            assert_eq!(waiter.join().unwrap(), limit + SEGMENT);
        });
    }

    #[test]
    fn a_failed_sync_is_never_acknowledged_and_fails_every_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = Failing {
            failing: Cell::new(false),
        };
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        assert_eq!(sync.append(&[1; 16]).unwrap(), 0);
        assert_eq!(sync.flushed(), 16);
        log.failing.set(true);
        assert!(matches!(sync.append(&[2; 16]), Err(Error::Storage(_))));
        assert_eq!(sync.flushed(), 16, "the failed sync covered nothing");
        // The disk works again, but the log's state is unknown: refused until set up anew.
        log.failing.set(false);
        assert!(matches!(sync.append(&[3; 16]), Err(Error::Storage(_))));
        assert!(matches!(sync.reserve(8), Err(Error::Storage(_))));
    }

    #[test]
    fn a_record_of_a_bad_length_is_refused_and_reserves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = Failing {
            failing: Cell::new(false),
        };
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        for len in [0, 7, MAX_RECORD + GRANULE] {
            assert!(matches!(sync.reserve(len), Err(Error::InvalidArgument(_))));
        }
        assert_eq!(sync.reserve(8).unwrap(), 0, "nothing was reserved before");
    }

    /// A plain log file in `dir`, four windows long.
    fn plain(dir: &std::path::Path) -> PlainLog {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("log"))
            .unwrap();
        file.set_len(4 * WINDOW).unwrap();
        PlainLog(file, std::sync::atomic::AtomicU64::new(0))
    }

    #[allow(clippy::needless_pass_by_value)] // called on a call's result, which is not used after
    fn timed_out(result: Result<()>) -> bool {
        matches!(result, Err(Error::Timeout { .. }))
    }

    #[test]
    fn a_written_record_counts_once_flushed_passes_it() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = plain(dir.path());
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        let lsn = sync.reserve(24).unwrap();
        assert_eq!(sync.fate(lsn), Fate::Pending, "reserved, not written");
        sync.write(lsn, &[7; 24]).unwrap();
        assert_eq!(sync.fate(lsn), Fate::Pending, "marked, not durable yet");
        sync.await_durable(lsn + 24).unwrap();
        assert_eq!(sync.fate(lsn), Fate::Counts);
        assert_eq!(sync.fate_in_log(lsn).unwrap(), Fate::Counts);
        assert_eq!(sync.fate(lsn + 24), Fate::Pending, "nothing there yet");
    }

    #[test]
    fn a_skipped_writer_is_void_by_its_mark_then_by_the_log_once_the_window_moved_on() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let log = plain(dir.path());
        let sync = GroupSync::new(&ring, 1, &Alive, &log);
        // Two writers stop after reserving; a third waits for them (GAP_PATIENCE), skips both
        // in one gap, and is acknowledged.
        let stopped = sync.reserve(24).unwrap();
        let second = sync.reserve(16).unwrap();
        assert_eq!(sync.fate(stopped), Fate::Pending);
        let after = sync.append(&[2; 16]).unwrap();
        assert_eq!(sync.fate(stopped), Fate::Void);
        assert_eq!(
            sync.fate(second),
            Fate::Void,
            "inside the gap the skip began before it"
        );
        assert_eq!(sync.fate(after), Fate::Counts);
        // The stopped writers resume: their writes do not count, and their fate stays.
        assert!(timed_out(sync.write(stopped, &[1; 24])));
        assert!(timed_out(sync.written(second, 16)));
        assert_eq!(sync.fate(stopped), Fate::Void);
        assert_eq!(sync.fate(second), Fate::Void);
        // The window moves on (two laps): the slots hold later positions' words, and the log
        // tells the fate.
        let mut last = after;
        while sync.flushed() < stopped + 2 * WINDOW {
            last = sync.append(&[3; 4096]).unwrap();
        }
        for lsn in [stopped, second, after] {
            assert_eq!(sync.fate(lsn), Fate::Unknown, "the slot of {lsn} moved on");
        }
        assert_eq!(sync.fate_in_log(stopped).unwrap(), Fate::Void);
        assert_eq!(sync.fate_in_log(second).unwrap(), Fate::Void);
        assert_eq!(sync.fate_in_log(after).unwrap(), Fate::Counts);
        assert_eq!(sync.fate(last), Fate::Counts);
        // A writer stopped past its skip and the laps loses to the later words, and leaves
        // them alone: the next records are covered as before.
        assert!(timed_out(sync.written(stopped, 24)));
        assert_eq!(sync.fate(stopped), Fate::Unknown);
        assert_eq!(sync.fate_in_log(stopped).unwrap(), Fate::Void);
        let next = sync.append(&[4; 16]).unwrap();
        assert_eq!(sync.fate(next), Fate::Counts);
        assert_eq!(sync.fate(last), Fate::Counts);
    }
}
