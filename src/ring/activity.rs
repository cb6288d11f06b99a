//! The store's activity page, after the ring's slots: the counters every process that opens
//! the store counts into (what they count is `rules/metrics.rs`), so that any of them (the
//! `fencelock metrics` command among them) reads the store's counts. A store without a ring
//! (single-process mode, `share_commits` off, a ring it may not use) counts in a page of its
//! own ([`Activity::private`]), and its snapshot says so.
//!
//! The page also keeps the store's recent releases (token and time): a release writes nothing
//! to the file, and the grant that next takes the lock reads here whether, and when, the lease
//! before it was released (`rules/history.rs`). A note is written as a small seqlock: its token
//! cleared first and written last (Release each), and read around its time (Acquire each), so a
//! note being rewritten is never paired with another release's time.
//!
//! It also holds the store's **change bell**: a word every commit of the store bumps, after the
//! commit is visible, and a futex on it that the commit wakes while someone sleeps there, so
//! that a reader waits for the next change of the store's values without polling (a leader
//! election's observers, `api/election.rs`). The wake is the doorbell's store-then-load
//! handshake (`server.rs`): the committer bumps the word, then loads the sleepers' count; a
//! sleeper counts itself, then sleeps only while the word is the one it read before its read
//! of the store. With `SeqCst` on both sides a commit after that read is never slept through.
//!
//! The counters have no model: their races only blur a count or miss a note (see above). The
//! bell ([`Bell`], on the facade's atomics and futex) has one: `models/bell.rs`, with the
//! mutants `bell-no-wake` and `bell-counted-late` of scripts/mutants.sh.

use std::time::{Duration, SystemTime};

// std's atomics, not the models': the counters and release notes race only to blur a count
// or to miss a note (which `rules/history.rs` allows), and no model needs them.
use crate::rules::metrics::{unix_ns_now, Counter, Metrics, Scope, COUNTERS, WAIT_BUCKETS};
use std::sync::atomic::{AtomicU64, Ordering};

use super::sync;

/// Releases the page remembers, the latest ones.
const RELEASE_LOG: usize = 1024;

#[repr(C)]
struct ReleaseNote {
    /// 0 while the note is being written.
    token: AtomicU64,
    /// `CLOCK_BOOTTIME` ns of the release.
    at_ns: AtomicU64,
}

/// The activity page. Every field is an atomic, valid for any bit pattern, so it may live in
/// shared memory that other processes write.
#[repr(C)]
pub(crate) struct Activity {
    /// When the page was set up (Unix ns): the counters count from then.
    since_unix_ns: AtomicU64,
    counters: [AtomicU64; COUNTERS],
    wait_buckets: [AtomicU64; WAIT_BUCKETS.len() + 1],
    /// Notes written so far; note `n` is at `n % RELEASE_LOG`.
    release_head: AtomicU64,
    releases: [ReleaseNote; RELEASE_LOG],
    /// The change bell.
    bell: Bell,
}

/// The store's change bell: a word every commit bumps once it is visible, and a futex on it.
///
/// | word | written by | meaning |
/// |---|---|---|
/// | `changes` | every committer, `fetch_add` (`SeqCst`) | the store's commits so far (it wraps) |
/// | `sleepers` | each sleeper, +1 before its sleep, -1 after (`SeqCst`) | sleepers now |
///
/// The handshake is the doorbell's (`server.rs`): the committer bumps `changes`, then loads
/// `sleepers` and wakes only when someone counted itself; a sleeper counts itself, then sleeps
/// only while `changes` is the mark it read before its read of the store (the futex compares
/// under the kernel's lock). A `SeqCst` fence on each side, between its write and its look, so of
/// "bump, then load the count" and "count, then compare the word" at least one sees the other:
/// a commit after the sleeper's read is never slept through.
#[repr(C)]
pub(crate) struct Bell {
    changes: sync::AtomicU32,
    /// A dead process's count stays: it costs only the wake-ups it asks for.
    sleepers: sync::AtomicU32,
}

impl Bell {
    pub(crate) fn new() -> Bell {
        Bell {
            changes: sync::AtomicU32::new(0),
            sleepers: sync::AtomicU32::new(0),
        }
    }

    /// The bell now: read before the store is read, and given to [`Bell::wait`].
    pub(crate) fn mark(&self) -> u32 {
        // SeqCst: ordered before the caller's read of the store (a commit that read missed
        // rings after this mark).
        self.changes.load(sync::Ordering::SeqCst)
    }

    /// Rings the bell: called after a commit is visible to readers.
    pub(crate) fn ring(&self) {
        // SeqCst, both: the bump before the load of the count (the handshake above).
        self.changes.fetch_add(1, sync::Ordering::SeqCst);
        // The committer's half: the bump, this fence, then the look at the count. The fences
        // (here and in `wait`) make the handshake hold by the fence rule, as the doorbell's do;
        // the model checks it (loom takes SeqCst loads and stores for AcqRel: without them it
        // finds the store-buffering outcome, both sides missing each other, and a lost wake).
        sync::fence(sync::Ordering::SeqCst);
        if self.sleepers.load(sync::Ordering::SeqCst) != 0 {
            sync::futex_wake(&self.changes);
        }
    }

    /// Sleeps while the bell is `mark`, for at most `timeout` (a signal or a spurious wake-up
    /// may end it sooner: the caller looks again).
    pub(crate) fn wait(&self, mark: u32, timeout: Duration) {
        // SeqCst: counted before the futex compares the word (the handshake above).
        self.sleepers.fetch_add(1, sync::Ordering::SeqCst);
        // The sleeper's half: the count, this fence, then the futex's compare of the word.
        sync::fence(sync::Ordering::SeqCst);
        sync::futex_wait(&self.changes, mark, timeout);
        // SeqCst as its increment; after the sleep, so a ring meanwhile saw it counted.
        self.sleepers.fetch_sub(1, sync::Ordering::SeqCst);
    }
}

/// The bytes the page takes in the ring.
pub(crate) const ACTIVITY_SIZE: usize = std::mem::size_of::<Activity>().next_multiple_of(4096);

impl Activity {
    /// A page of this process's own.
    pub(crate) fn private() -> Box<Activity> {
        let page = Box::new(Activity {
            since_unix_ns: AtomicU64::new(0),
            counters: [const { AtomicU64::new(0) }; COUNTERS],
            wait_buckets: [const { AtomicU64::new(0) }; WAIT_BUCKETS.len() + 1],
            release_head: AtomicU64::new(0),
            releases: [const {
                ReleaseNote {
                    token: AtomicU64::new(0),
                    at_ns: AtomicU64::new(0),
                }
            }; RELEASE_LOG],
            bell: Bell::new(),
        });
        page.start();
        page
    }

    /// Sets up a page that was all zeros.
    pub(crate) fn start(&self) {
        self.since_unix_ns.store(unix_ns_now(), Ordering::Relaxed);
    }

    pub(crate) fn add(&self, counter: Counter, n: u64) {
        self.counters[counter as usize].fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self, counter: Counter) -> u64 {
        self.counters[counter as usize].load(Ordering::Relaxed)
    }

    /// The change bell now: read before the store is read, and given to [`Activity::wait_change`].
    pub(crate) fn change_mark(&self) -> u32 {
        self.bell.mark()
    }

    /// Rings the change bell: called after a commit is visible to readers.
    pub(crate) fn changed(&self) {
        self.bell.ring();
    }

    /// Sleeps while the change bell is `mark`, for at most `timeout` (a signal or a spurious
    /// wake-up may end it sooner: the caller looks again).
    pub(crate) fn wait_change(&self, mark: u32, timeout: Duration) {
        self.bell.wait(mark, timeout);
    }

    /// Counts an acquire that waited for `waited` (granted or not): its bucket, then its time,
    /// then `Waits`, in the order `wait_histogram` reads them backwards.
    pub(crate) fn waited(&self, waited: Duration) {
        let bucket = WAIT_BUCKETS
            .iter()
            .position(|&bound| waited <= bound)
            .unwrap_or(WAIT_BUCKETS.len());
        self.wait_buckets[bucket].fetch_add(1, Ordering::Release);
        self.counters[Counter::WaitNs as usize].fetch_add(
            u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        self.counters[Counter::Waits as usize].fetch_add(1, Ordering::Release);
    }

    /// The wait histogram's buckets and the total time of the waits they count. Read in the
    /// reverse of the order `waited` writes (`Waits`, the time, the buckets), the time covers
    /// every wait `Waits` showed and only waits the buckets count; when `Waits` equals the
    /// buckets' sum, the buckets and the time count the same waits exactly. While waits land in
    /// between, it reads again a few times; after that (or for good, once a process died in
    /// the middle of counting a wait) the time may lack the waits in flight, but it never holds
    /// a wait the buckets lack. The histogram's count is the buckets' sum, always.
    fn wait_histogram(&self) -> ([u64; WAIT_BUCKETS.len() + 1], Duration) {
        let read = || {
            let waits = self.counters[Counter::Waits as usize].load(Ordering::Acquire);
            let ns = self.counters[Counter::WaitNs as usize].load(Ordering::Acquire);
            let mut buckets = [0; WAIT_BUCKETS.len() + 1];
            for (out, bucket) in buckets.iter_mut().zip(&self.wait_buckets) {
                *out = bucket.load(Ordering::Acquire);
            }
            (waits, ns, buckets)
        };
        let mut seen = read();
        for _ in 0..8 {
            if seen.0 == seen.2.iter().sum::<u64>() {
                break;
            }
            seen = read();
        }
        (seen.2, Duration::from_nanos(seen.1))
    }

    /// Notes the release of the lease `token` at `at_ns` (`CLOCK_BOOTTIME`).
    pub(crate) fn note_release(&self, token: u64, at_ns: u64) {
        let n = self.release_head.fetch_add(1, Ordering::AcqRel);
        #[allow(clippy::cast_possible_truncation)] // A remainder below RELEASE_LOG.
        let note = &self.releases[(n % RELEASE_LOG as u64) as usize];
        note.token.store(0, Ordering::Release);
        note.at_ns.store(at_ns, Ordering::Release);
        note.token.store(token, Ordering::Release);
    }

    /// When the lease `token` was released (`CLOCK_BOOTTIME` ns), if the page still has the
    /// note.
    pub(crate) fn release_of(&self, token: u64) -> Option<u64> {
        if token == 0 {
            return None;
        }
        let head = self.release_head.load(Ordering::Acquire);
        let written = usize::try_from(head).map_or(RELEASE_LOG, |head| head.min(RELEASE_LOG));
        self.releases[..written].iter().find_map(|note| {
            // The token is written last and cleared first: read it around the time, so
            // that a note being rewritten is not paired with another's time.
            if note.token.load(Ordering::Acquire) != token {
                return None;
            }
            let at = note.at_ns.load(Ordering::Acquire);
            (note.token.load(Ordering::Acquire) == token).then_some(at)
        })
    }

    /// Forgets the note of the release of `token`, if the page has it.
    pub(crate) fn forget_release(&self, token: u64) {
        for note in &self.releases {
            let _ = note
                .token
                .compare_exchange(token, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn snapshot(&self, scope: Scope) -> Metrics {
        let (wait_buckets, wait_time) = self.wait_histogram();
        Metrics {
            scope,
            since: SystemTime::UNIX_EPOCH
                + Duration::from_nanos(self.since_unix_ns.load(Ordering::Relaxed)),
            grants: self.get(Counter::Grants),
            releases: self.get(Counter::Releases),
            refused_locked: self.get(Counter::RefusedLocked),
            refused_timeout: self.get(Counter::RefusedTimeout),
            refused_cancelled: self.get(Counter::RefusedCancelled),
            refused_other: self.get(Counter::RefusedOther),
            stale_writes: self.get(Counter::StaleWrites),
            lock_lost: self.get(Counter::LockLost),
            waits: wait_buckets.iter().sum(),
            wait_time,
            wait_buckets,
            ended_released: self.get(Counter::EndedReleased),
            ended_expired: self.get(Counter::EndedExpired),
            ended_taken_over: self.get(Counter::EndedTakenOver),
            ended_holder_died: self.get(Counter::EndedHolderDied),
            commits: self.get(Counter::Commits),
            committed_ops: self.get(Counter::CommittedOps),
            history_dropped: self.get(Counter::HistoryDropped),
            live_exclusive: 0,
            live_shared: 0,
            live_permits: 0,
            queued_waiters: 0,
            file_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_change_bell_wakes_its_sleepers_and_a_stale_mark_never_sleeps() {
        let page: &'static Activity = Box::leak(Activity::private());
        let mark = page.change_mark();
        page.changed();
        // Rung after the mark was taken: the wait returns at once, whatever its timeout.
        page.wait_change(mark, Duration::from_secs(3600));
        let mark = page.change_mark();
        let (woken, told) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            while page.change_mark() == mark {
                page.wait_change(mark, Duration::from_secs(3600));
            }
            woken.send(page.change_mark()).unwrap();
        });
        // The sleeper is asleep by now, or sees the ring before it sleeps: woken either way.
        std::thread::sleep(Duration::from_millis(50));
        page.changed();
        let seen = told.recv_timeout(Duration::from_secs(60));
        assert_eq!(seen, Ok(mark.wrapping_add(1)), "the ring woke no sleeper");
        assert_eq!(page.bell.sleepers.load(sync::Ordering::SeqCst), 0);
    }

    #[test]
    fn waits_fall_in_their_buckets_and_render_cumulatively() {
        let page = Activity::private();
        page.waited(Duration::from_micros(500));
        page.waited(Duration::from_millis(1));
        page.waited(Duration::from_millis(50));
        page.waited(Duration::from_secs(3600));
        let m = page.snapshot(Scope::Process);
        assert_eq!(m.waits, 4);
        assert_eq!(m.wait_buckets, [2, 0, 1, 0, 0, 0, 0, 1]);
        let text = m.prometheus("/tmp/a \"b\".db");
        assert!(text.contains(
            "fencelock_wait_seconds_bucket{store=\"/tmp/a \\\"b\\\".db\",scope=\"process\",le=\"0.1\"} 3"
        ));
        assert!(text.contains("le=\"+Inf\"} 4"));
        assert!(text.contains("fencelock_wait_seconds_count{"));
    }

    /// The `_count` and `_sum` series of the wait histogram.
    fn count_and_sum(text: &str) -> (u64, f64) {
        let value = |series: &str| {
            let line = text
                .lines()
                .find(|l| l.starts_with(series))
                .unwrap_or_else(|| panic!("no {series}:\n{text}"));
            line.rsplit(' ').next().unwrap().to_owned()
        };
        (
            value("fencelock_wait_seconds_count{").parse().unwrap(),
            value("fencelock_wait_seconds_sum{").parse().unwrap(),
        )
    }

    #[test]
    fn the_start_time_is_named_by_convention_and_no_series_restates_another() {
        let text = Activity::private().snapshot(Scope::Store).prometheus("s");
        assert!(
            text.contains("# TYPE fencelock_start_time_seconds gauge\n"),
            "{text}"
        );
        assert!(!text.contains("counting_since"), "{text}");
        // lease_ends_total{how!="released"} tells it.
        assert!(!text.contains("leases_lost"), "{text}");
    }

    #[test]
    fn a_wait_being_counted_is_in_the_count_as_in_the_inf_bucket_and_not_in_the_sum() {
        let page = Activity::private();
        page.waited(Duration::from_millis(5));
        // Another process is counting a wait: its bucket is counted, its time and `Waits` not
        // yet (or it was killed there).
        page.wait_buckets[3].fetch_add(1, Ordering::Release);
        let m = page.snapshot(Scope::Process);
        assert_eq!(m.waits, 2);
        assert_eq!(m.wait_time, Duration::from_millis(5));
        let text = m.prometheus("s");
        assert!(text.contains("le=\"+Inf\"} 2\n"), "{text}");
        assert_eq!(count_and_sum(&text), (2, 0.005));
    }

    /// The orders of `waited` and `wait_histogram` under real interleavings. It samples them:
    /// with `waited`'s writes in the reverse order it failed two runs of three here.
    #[test]
    fn under_concurrent_waits_no_snapshot_has_a_time_without_its_count() {
        const WAIT: Duration = Duration::from_millis(2);
        const PER_THREAD: u32 = 200_000;
        let page = Activity::private();
        let done = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..PER_THREAD {
                        page.waited(WAIT);
                    }
                    done.fetch_add(1, Ordering::Release);
                });
            }
            while done.load(Ordering::Acquire) < 2 {
                let m = page.snapshot(Scope::Process);
                assert_eq!(m.waits, m.wait_buckets.iter().sum::<u64>());
                assert!(
                    m.wait_time <= WAIT * u32::try_from(m.waits).unwrap(),
                    "{m:?}"
                );
            }
        });
        let m = page.snapshot(Scope::Process);
        assert_eq!(m.waits, 2 * u64::from(PER_THREAD));
        assert_eq!(m.wait_time, WAIT * 2 * PER_THREAD);
    }

    #[test]
    fn the_release_log_keeps_the_latest_releases() {
        let page = Activity::private();
        assert_eq!(page.release_of(7), None);
        page.note_release(7, 1234);
        assert_eq!(page.release_of(7), Some(1234));
        assert_eq!(page.release_of(0), None);
        for token in 100..100 + RELEASE_LOG as u64 {
            page.note_release(token, token);
        }
        assert_eq!(page.release_of(7), None, "overwritten by later releases");
        assert_eq!(page.release_of(100), Some(100));
    }
}
