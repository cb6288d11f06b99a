//! What the store did, counted: grants, refusals by reason, waits, how leases ended, stale
//! writes, commits. The counters live in the store's activity page (the last page of the shared
//! ring, in `/dev/shm`), which every process that opens the store counts into, so that any of
//! them (the `fencelock metrics` command among them) reads the store's counts. A store without
//! a ring (single-process mode, `share_commits` off, a ring it may not use) counts in a page of
//! its own, and its snapshot says so.
//!
//! The page also keeps the store's recent releases (token and time): a release writes nothing
//! to the file, and the grant that next takes the lock reads here whether, and when, the lease
//! before it was released (`rules/history.rs`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::base::clock;
use crate::rules::info::{LockInfo, LockState};
use crate::rules::kind::Kind;

/// What the store counts (indices into the page's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    Grants,
    Releases,
    RefusedLocked,
    RefusedTimeout,
    RefusedCancelled,
    RefusedOther,
    StaleWrites,
    LockLost,
    Waits,
    WaitNs,
    EndedReleased,
    EndedExpired,
    EndedTakenOver,
    EndedHolderDied,
    Commits,
    CommittedOps,
    HistoryDropped,
}

const COUNTERS: usize = 32;
const _: () = assert!((Counter::HistoryDropped as usize) < COUNTERS);

/// Upper bounds of the wait-duration histogram's buckets; a last bucket counts the rest.
pub(crate) const WAIT_BUCKETS: [Duration; 7] = [
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(600),
];

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
        self.releases[..head.min(RELEASE_LOG as u64) as usize]
            .iter()
            .find_map(|note| {
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

/// Unix time now, in ns.
pub(crate) fn unix_ns_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The Unix time (ns) of the `CLOCK_BOOTTIME` instant `boot_ns` of this boot, by the offset
/// between the clocks now.
pub(crate) fn unix_ns_at(boot_ns: u64) -> u64 {
    let now = clock::now_ns();
    let unix = unix_ns_now();
    if boot_ns <= now {
        unix.saturating_sub(now - boot_ns)
    } else {
        unix.saturating_add(boot_ns - now)
    }
}

/// Whose operations a [`Metrics`] snapshot counts.
///
/// # Examples
///
/// ```
/// use fencelock::Scope;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// assert_eq!(store.metrics()?.scope, Scope::Store);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Every process on this host that opened the store since [`Metrics::since`]: the
    /// counters are in shared memory beside the store, kept while any process has it open.
    Store,
    /// This open store only (single-process mode, `share_commits` off, or a shared area this
    /// process may not use).
    Process,
}

impl Scope {
    /// `"store"` or `"process"`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(fencelock::Scope::Process.as_str(), "process");
    /// ```
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Store => "store",
            Scope::Process => "process",
        }
    }
}

/// A snapshot of the store's counters ([`crate::Store::metrics`]). Counters only grow; they
/// start again from zero when the shared area is set up anew (after every process closed the
/// store, or a reboot), as [`Metrics::since`] tells, which Prometheus treats as a counter reset.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("locks.db");
/// # let store = fencelock::Store::open(&path)?;
/// let holder = store.acquire("nightly", Duration::from_secs(30))?;
/// holder.release()?;
/// let metrics = store.metrics()?;
/// assert_eq!((metrics.grants, metrics.releases), (1, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// What the counters count: this process's operations or the whole store's.
    pub scope: Scope,
    /// When counting started.
    pub since: SystemTime,
    /// Leases granted (every name of an `acquire_all` counts).
    pub grants: u64,
    /// Leases released by their holders.
    pub releases: u64,
    /// Acquires refused because the lock was held ([`crate::Error::Locked`]).
    pub refused_locked: u64,
    /// Waiting acquires whose timeout passed first ([`crate::Error::Timeout`]).
    pub refused_timeout: u64,
    /// Waiting acquires cancelled ([`crate::Error::Cancelled`]).
    pub refused_cancelled: u64,
    /// Acquires refused for another reason (a bad argument, a mismatched kind, storage).
    pub refused_other: u64,
    /// Writes and fences refused for a stale token ([`crate::Error::StaleToken`]).
    pub stale_writes: u64,
    /// Holders' writes and extends refused because the lease was lost ([`crate::Error::LockLost`]).
    pub lock_lost: u64,
    /// Acquires that waited (granted, timed out or cancelled): the sum of
    /// [`Metrics::wait_buckets`]. And their total wait, of those same waits (a wait being
    /// counted as the snapshot is taken may be in the count and not yet in the time).
    pub waits: u64,
    /// The total wait of [`Metrics::waits`].
    pub wait_time: Duration,
    /// Waits by duration: the count at or under each bound of [`WAIT_BUCKET_BOUNDS`], and a
    /// last count of the longer ones (not cumulative).
    pub wait_buckets: [u64; 8],
    /// How the leases that later grants (or the pruning of dead records) replaced had ended:
    /// released by the holder, expired, taken over by a later grant while the holder still
    /// held on past its TTL, or the holder died without releasing.
    pub ended_released: u64,
    /// Replaced leases that had expired.
    pub ended_expired: u64,
    /// Replaced leases that a later grant took over past their TTL.
    pub ended_taken_over: u64,
    /// Replaced leases whose holder died without releasing.
    pub ended_holder_died: u64,
    /// Write transactions committed, and the operations they carried (their ratio is the
    /// operations per commit).
    pub commits: u64,
    /// The operations those commits carried.
    pub committed_ops: u64,
    /// Lease ends left out of the history: while the history could not be written to the
    /// store file (a process stopped inside a commit, a full disk), the shared memory keeps at
    /// most 2,048 pending ends, and drops later ones rather than refuse grants.
    pub history_dropped: u64,
    /// Gauges, of the whole store whatever [`Metrics::scope`] says, taken with the snapshot.
    /// The live leases (granted, not expired, their holder's process alive) by kind: exclusive
    /// leases, shared holders, semaphore permits. Read from the store's lease records and their
    /// holders' liveness locks, as [`crate::Store::locks`] does, so they cannot drift.
    pub live_exclusive: u64,
    /// Live shared holders.
    pub live_shared: u64,
    /// Live semaphore permits.
    pub live_permits: u64,
    /// Waiting acquires of live processes in the store's waiting queue (in the shared ring).
    /// Waits without a place there are not counted: a waiting `acquire_all`, a wait that found
    /// the queue full (62 places), every wait of a store without a ring ([`Scope::Process`]).
    pub queued_waiters: u64,
    /// The store file's size in bytes.
    pub file_bytes: u64,
}

/// The upper bounds of [`Metrics::wait_buckets`], in order.
pub const WAIT_BUCKET_BOUNDS: [Duration; 7] = WAIT_BUCKETS;

impl Metrics {
    /// Sets the live-lease gauges from `locks`, the store's lease records described now.
    pub(crate) fn count_live(&mut self, locks: &[LockInfo]) {
        for lock in locks.iter().filter(|lock| lock.state == LockState::Held) {
            match lock.kind {
                Kind::Shared => self.live_shared += 1,
                Kind::Semaphore(_) => self.live_permits += 1,
                _ => self.live_exclusive += 1,
            }
        }
    }

    /// Leases that ended other than by a release: expired, taken over, or of a dead holder.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Store;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// let store = Store::open(&path)?;
    /// let _paused = store.acquire("nightly", Duration::from_millis(100))?;
    /// let (ttl, timeout) = (Duration::from_secs(30), Duration::from_secs(10));
    /// let _next = Store::open(&path)?.acquire_wait("nightly", ttl, timeout)?;
    /// let metrics = store.metrics()?;
    /// assert_eq!((metrics.ended_taken_over, metrics.leases_lost()), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn leases_lost(&self) -> u64 {
        self.ended_expired + self.ended_taken_over + self.ended_holder_died
    }

    /// The snapshot in Prometheus' text exposition format (version 0.0.4), every series
    /// named `fencelock_...` and labelled with `store`, the store's path, and `scope`: the
    /// counters `grants_total`, `releases_total`, `refusals_total{reason}`,
    /// `lease_ends_total{how}`, `commits_total`, `committed_operations_total`; the gauges
    /// `start_time_seconds` (when counting started), `live_leases{kind}`, `queued_waiters`,
    /// `file_size_bytes`, `build_info{version}` (1); the histogram `wait_seconds`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("locks.db");
    /// # let store = fencelock::Store::open(&path)?;
    /// let _holder = store.acquire("nightly", Duration::from_secs(30))?;
    /// let text = store.metrics()?.prometheus("locks.db");
    /// assert!(text.contains("fencelock_grants_total{store=\"locks.db\",scope=\"store\"} 1\n"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn prometheus(&self, store: &str) -> String {
        let store = escape_label(store);
        let mut out = String::new();
        let series: [Family; 12] = [
            (
                "grants_total",
                "counter",
                "Leases granted.",
                vec![(String::new(), self.grants.to_string())],
            ),
            (
                "releases_total",
                "counter",
                "Leases released by their holders.",
                vec![(String::new(), self.releases.to_string())],
            ),
            (
                "refusals_total",
                "counter",
                "Acquires, writes and extends refused, by reason.",
                [
                    ("locked", self.refused_locked),
                    ("timeout", self.refused_timeout),
                    ("cancelled", self.refused_cancelled),
                    ("other", self.refused_other),
                    ("stale_token", self.stale_writes),
                    ("lock_lost", self.lock_lost),
                ]
                .iter()
                .map(|(reason, n)| (format!(",reason=\"{reason}\""), n.to_string()))
                .collect(),
            ),
            (
                "lease_ends_total",
                "counter",
                "How replaced leases had ended.",
                [
                    ("released", self.ended_released),
                    ("expired", self.ended_expired),
                    ("taken_over", self.ended_taken_over),
                    ("holder_died", self.ended_holder_died),
                ]
                .iter()
                .map(|(how, n)| (format!(",how=\"{how}\""), n.to_string()))
                .collect(),
            ),
            (
                "commits_total",
                "counter",
                "Write transactions committed.",
                vec![(String::new(), self.commits.to_string())],
            ),
            (
                "committed_operations_total",
                "counter",
                "Operations carried by committed transactions.",
                vec![(String::new(), self.committed_ops.to_string())],
            ),
            (
                "history_dropped_total",
                "counter",
                "Lease ends left out of the history while it could not be written.",
                vec![(String::new(), self.history_dropped.to_string())],
            ),
            (
                "start_time_seconds",
                "gauge",
                "Unix time when counting started: the counters count from then.",
                vec![(
                    String::new(),
                    format!(
                        "{:.3}",
                        self.since
                            .duration_since(SystemTime::UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_secs_f64()
                    ),
                )],
            ),
            (
                "live_leases",
                "gauge",
                "Leases live now (granted, not expired, holder alive), by kind; semaphores count \
                 their permits.",
                [
                    ("exclusive", self.live_exclusive),
                    ("shared", self.live_shared),
                    ("semaphore", self.live_permits),
                ]
                .iter()
                .map(|(kind, n)| (format!(",kind=\"{kind}\""), n.to_string()))
                .collect(),
            ),
            (
                "queued_waiters",
                "gauge",
                "Waiting acquires in the store's waiting queue now.",
                vec![(String::new(), self.queued_waiters.to_string())],
            ),
            (
                "file_size_bytes",
                "gauge",
                "Size of the store file.",
                vec![(String::new(), self.file_bytes.to_string())],
            ),
            (
                "build_info",
                "gauge",
                "The fencelock library that took the snapshot, by version.",
                vec![(
                    format!(",version=\"{}\"", escape_label(env!("CARGO_PKG_VERSION"))),
                    "1".to_owned(),
                )],
            ),
        ];
        let scope = self.scope.as_str();
        for (name, kind, help, values) in &series {
            let _ = writeln!(out, "# HELP fencelock_{name} {help}");
            let _ = writeln!(out, "# TYPE fencelock_{name} {kind}");
            for (labels, value) in values {
                let _ = writeln!(
                    out,
                    "fencelock_{name}{{store=\"{store}\",scope=\"{scope}\"{labels}}} {value}"
                );
            }
        }
        let name = "wait_seconds";
        let _ = writeln!(
            out,
            "# HELP fencelock_{name} How long acquires waited (granted or not)."
        );
        let _ = writeln!(out, "# TYPE fencelock_{name} histogram");
        let mut cumulative = 0;
        for (i, count) in self.wait_buckets.iter().enumerate() {
            cumulative += count;
            let bound = WAIT_BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| format!("{}", b.as_secs_f64()));
            let _ = writeln!(
                out,
                "fencelock_{name}_bucket{{store=\"{store}\",scope=\"{scope}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "fencelock_{name}_sum{{store=\"{store}\",scope=\"{scope}\"}} {}",
            self.wait_time.as_secs_f64()
        );
        // Equal to the `+Inf` bucket, as OpenMetrics requires, whatever `waits` holds.
        let _ = writeln!(
            out,
            "fencelock_{name}_count{{store=\"{store}\",scope=\"{scope}\"}} {cumulative}"
        );
        out
    }
}

/// A metric family: its name, type and help, and its series (their extra labels and value).
type Family = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(String, String)>,
);

/// A label value as Prometheus' text format writes it.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
