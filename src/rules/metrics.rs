//! What the store did, counted: grants, refusals by reason, waits, how leases ended, stale
//! writes, commits: what is counted ([`Counter`]), a snapshot of the counts ([`Metrics`]) and its
//! Prometheus text. The counters themselves live in the store's activity page
//! (`ring/activity.rs`), which every process that opens the store counts into.

use std::fmt::Write as _;
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

pub(crate) const COUNTERS: usize = 32;
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
    /// operations per commit). With [`crate::Options::write_log`], each write acknowledged
    /// through the redo log counts as one commit of one operation (the log shares its syncs,
    /// not its commits).
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
