//! Claims: the fenced write of one record over the key index (`share/keys.rs`) and the group
//! sync (`ring/flush.rs`), as docs/design/writes.md's "Step 4's key index: claims, their fate,
//! and who settles them" orders it. A writer reserves log space, checks its key's settled entry
//! (the caller's lease check and token rule), claims the key's next version at its position by
//! one compare-and-swap of the entry (`pending = lsn`), writes and marks its record, and waits
//! until the log is durable past it. The claim's fate is its record's mark (`GroupSync::fate`):
//! written by its writer, or skipped by a waiter when its writer stopped; whoever finds the
//! claim with `flushed` past it settles it into the entry (`newest = lsn` when it counts, only
//! `pending = None` when it is void), by one compare-and-swap from the entry it read.
//!
//! What holds, and why:
//! - **At most one pending claim per key.** A claim is made only from an entry read after the
//!   writer's reservation with nothing pending, and a writer of a key with a pending claim
//!   first waits for its fate and settles it. So `highest` never counts a write whose fate is
//!   open when a check reads it, and a refusal is always for a durable reason.
//! - **A key's committed records are in LSN order.** A claim is made from an entry read after
//!   its reservation, and a claim reserved later cannot be settled while this reservation is
//!   unmarked (`flushed` stops below it): it is still pending when this writer reads, and
//!   this writer voids its reservation. So the key's last record in the log is its newest.
//! - **Nobody waits for another's claim while holding an unmarked reservation** (that
//!   reservation would keep `flushed` below the very claim it waits for until a skipper takes
//!   it): the only waits are before the reservation, and after this writer's own mark.
//! - **A stopped writer delays a key's next writer by `GAP_PATIENCE` at most**: the next writer
//!   waits for `flushed` to pass the claim, and the group sync skips a gap that stands there.
//! - **A get never waits** ([`Claims::read`]): a claim that `flushed` has not passed is a write
//!   not acknowledged yet, so the get reads `newest`, the previous value.
//!
//! The store's fenced writes call it where `Options::write_log` is on (`local/log_user.rs`).
//! Model: `ring/models/claims.rs` (make test-loom).

use std::time::Instant;

use super::keys::{self, Entry, Space};
use crate::base::error::{Error, Result};
use crate::ring::flush::{Fate, GroupSync, Log};
use crate::ring::{Live, Ring};

/// The steps of a write after which a test or a model stops its writer (see
/// [`Claims::write_until`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(any(test, fencelock_loom)), allow(dead_code))]
pub(crate) enum Step {
    /// Its log space reserved; nothing else done.
    Reserved,
    /// Its claim published in the key's entry; its record not written.
    Claimed,
    /// Its record written; not marked.
    Written,
    /// Its record marked written; not awaited (nor acknowledged).
    Marked,
}

/// How a write ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome<R> {
    /// Durable and counting: its position, and the key's entry as this write left it (its
    /// record the newest, nothing pending).
    Acknowledged { lsn: u64, entry: Entry },
    /// The caller's check refused it: its reservation holds a void record, and nothing else
    /// changed.
    Refused(R),
}

/// What became of a reservation between it and the claim.
enum Attempt<R> {
    /// The claim is published: the entry it set, and the record's bytes.
    Claimed(Entry, Vec<u8>),
    /// A claim was pending on the key (made after this writer's wait), or the entry changed
    /// before the claim's swap: start over.
    Raced,
    Refused(R),
}

/// One process's side of the protocol: the ring (its key map and group sync), the process's
/// liveness id (`id`, its blocks' owner in the key map) and liveness, and the log.
pub(crate) struct Claims<'a, L: Live> {
    ring: &'a Ring,
    live: &'a L,
    id: u64,
    log: &'a dyn Log,
    /// When a writer stops writing anew a record that a skipper voided, and its reserves stop
    /// waiting for a checkpoint; `None`: never.
    deadline: Option<Instant>,
    /// Ends a write with `Cancelled` once it fires, in its waits before its reservation (for a
    /// pending claim's fate, for room in the log) and before each attempt.
    cancel: Option<&'a crate::base::cancel::Cancel>,
}

impl<'a, L: Live> Claims<'a, L> {
    pub(crate) fn new(ring: &'a Ring, live: &'a L, id: u64, log: &'a dyn Log) -> Self {
        Claims {
            ring,
            live,
            id,
            log,
            deadline: None,
            cancel: None,
        }
    }

    /// The same, its writes given up with `Timeout` at `deadline` (see [`Claims::write`]).
    #[cfg_attr(any(test, fencelock_loom), allow(dead_code))]
    pub(crate) fn until(self, deadline: Instant) -> Self {
        Claims {
            deadline: Some(deadline),
            ..self
        }
    }

    /// The same, its writes ended with `Cancelled` by `cancel` where nothing of them is in the
    /// log yet (see [`Claims::write`]).
    pub(crate) fn cancellable(self, cancel: Option<&'a crate::base::cancel::Cancel>) -> Self {
        Claims { cancel, ..self }
    }

    /// Replaces the entry of `key` by `new` if it is still `read`: one compare-and-swap of
    /// its bucket in the key index (`share/keys.rs`); `false` when another process changed it.
    fn replace(&self, space: Space, key: &[u8], read: Option<&Entry>, new: Entry) -> Result<bool> {
        keys::replace(self.ring, self.live, self.id, space, key, read, Some(new))
    }

    fn sync(&self) -> GroupSync<'a> {
        let sync = GroupSync::new(self.ring, self.id, self.live, self.log);
        match self.deadline {
            Some(deadline) => sync.until(deadline),
            None => sync,
        }
    }

    /// The entry of `key` in `space` with its pending claim settled if `flushed` has passed
    /// it: the fate of its record's mark (or, once the window has moved on, the log's skip
    /// records) decides. A claim that counts becomes `newest`; a void one leaves `pending` and
    /// puts `highest` back to what it was before the claim (`before`): a token that was never
    /// written fences nothing, so a refusal only ever names a written token, and the floor does
    /// not drop when the entry later leaves the index for the store file (which never saw the
    /// void token: the torture run's `--write-log` found a key that refused a token naming a
    /// void one, then accepted a lower token once the entry was pruned). Its version stays
    /// used, as a voided record of it may still be in the log (section 6; `voided` keeps the
    /// entry until a checkpoint passes it).
    /// One compare-and-swap from the entry read; a lost one reads again (someone else settled
    /// it, or a later claim was made). A claim `flushed` has not passed stays pending: its
    /// writer is on its way, or stopped, and then its gap will be skipped.
    pub(crate) fn settle(&self, space: Space, key: &[u8]) -> Result<Option<Entry>> {
        let sync = self.sync();
        loop {
            let read = keys::entry(self.ring, space, key)?;
            let Some(now) = read else {
                return Ok(None);
            };
            let Some(at) = now.pending else {
                return Ok(read);
            };
            // The mark's fate, never assumed from `flushed` alone: a gap that a skipper took is
            // below `flushed` too.
            let fate = sync.fate_in_log(at)?;
            let settled = match fate {
                Fate::Counts => Entry {
                    before: now.highest,
                    newest: at,
                    pending: None,
                    ..now
                },
                Fate::Void => Entry {
                    highest: now.before,
                    pending: None,
                    voided: at,
                    ..now
                },
                // `fate_in_log` answers `Unknown` from the log, never with it.
                Fate::Pending | Fate::Unknown => return Ok(read),
            };
            if self.replace(space, key, read.as_ref(), settled)? {
                return Ok(Some(settled));
            }
        }
    }

    /// The entry a get of `key` uses: its `newest` is the value to read (none: redb's). A claim
    /// that `flushed` has passed is settled first, so a get right after an acknowledgement
    /// returns the write; one that `flushed` has not passed is a write not acknowledged yet,
    /// and the get reads `newest`, the previous value, without waiting (its writer may be
    /// stopped).
    pub(crate) fn read(&self, space: Space, key: &[u8]) -> Result<Option<Entry>> {
        self.settle(space, key)
    }

    /// Writes one record of `len` bytes for `key` in `space`, fenced. `base` reads the key as
    /// the store of record holds it, when the index holds no entry (its highest token and
    /// version; `newest` as the store says "redb's"): read after the index, so that an entry a
    /// checkpoint took out of the index is read where the checkpoint put it. `check` is given the
    /// key's settled entry (or the base) and returns the write's token, or a refusal; `record`
    /// makes the record's bytes from its position and its version (the entry's `version + 1`).
    ///
    /// A writer so slow between its reservation and its mark that a waiter skipped its gap
    /// (docs/design/writes.md section 8: a skip knows a writer is late, not that it is stopped)
    /// writes its record anew, its claim settled void, until the deadline ([`Claims::until`]);
    /// without a deadline (the tests and the models, where every gap is skipped) it fails
    /// with `Timeout` at once.
    ///
    /// Errors: a storage error of the log, the key index or the ring; `Timeout` past the
    /// deadline (the write did not happen, unless its record was written and its wait for the
    /// sync timed out: then, as for a timed-out commit, it may still be durable); `Cancelled`
    /// when the handle ([`Claims::cancellable`]) fired before the write reserved its place in
    /// the log, or while it waited to (the write did not happen).
    // The model stops its writers at each step, through `write_until`.
    #[cfg_attr(fencelock_loom, allow(dead_code))]
    pub(crate) fn write<R>(
        &self,
        space: Space,
        key: &[u8],
        base: &mut dyn FnMut() -> Result<Entry>,
        len: u64,
        check: &mut dyn FnMut(&Entry) -> std::result::Result<u64, R>,
        record: &mut dyn FnMut(u64, u64) -> Result<Vec<u8>>,
    ) -> Result<Outcome<R>> {
        let outcome = self.write_until(space, key, base, len, check, record, None)?;
        Ok(outcome.expect("a write that no step stops ends"))
    }

    /// As [`Claims::write`], for a writer stopped right after step `stop` (`None`: one that is
    /// not): `Ok(None)` when it stopped there. The tests and the model stop writers so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_until<R>(
        &self,
        space: Space,
        key: &[u8],
        base: &mut dyn FnMut() -> Result<Entry>,
        len: u64,
        check: &mut dyn FnMut(&Entry) -> std::result::Result<u64, R>,
        record: &mut dyn FnMut(u64, u64) -> Result<Vec<u8>>,
        stop: Option<Step>,
    ) -> Result<Option<Outcome<R>>> {
        let sync = self.sync();
        // The waits before a reservation, which a cancel handle may end: nothing of this
        // attempt is in the log yet (an earlier attempt's record was voided by a skipper).
        let before_reserving = self.sync().cancellable(self.cancel);
        let mut again = false;
        loop {
            crate::base::cancel::check(self.cancel)?;
            // A record voided by a skipper is written anew, within the deadline.
            if again
                && self
                    .deadline
                    .is_some_and(|deadline| Instant::now() >= deadline)
            {
                return Err(Error::timed_out());
            }
            again = true;
            // No claim pending on the key: wait for its fate (no reservation held yet), then
            // settle it.
            while let Some(at) = self.settle(space, key)?.and_then(|entry| entry.pending) {
                before_reserving.await_durable(at + 1)?;
            }
            let lsn = before_reserving.reserve(len)?;
            if stop == Some(Step::Reserved) {
                return Ok(None);
            }
            // From here to the claim, every way out voids the reservation and marks it, so
            // that `flushed` passes it.
            let (claim, bytes) = match self.claim(space, key, base, lsn, len, check, record) {
                Ok(Attempt::Claimed(claim, bytes)) => (claim, bytes),
                Ok(Attempt::Raced) => {
                    sync.void(lsn, len)?;
                    continue;
                }
                Ok(Attempt::Refused(refusal)) => {
                    sync.void(lsn, len)?;
                    return Ok(Some(Outcome::Refused(refusal)));
                }
                Err(err) => {
                    sync.void(lsn, len)?;
                    return Err(err);
                }
            };
            if stop == Some(Step::Claimed) {
                return Ok(None);
            }
            // A failed write fails the log (section 9): nothing since is acknowledged, and the
            // claim, unmarked, is never taken as counting. `Timeout`: its segment is gone (its
            // gap was skipped and checkpointed past); the claim is void.
            match sync.write_unmarked(lsn, &bytes) {
                Ok(()) => {}
                Err(Error::Timeout { .. }) if self.deadline.is_some() => continue,
                Err(err) => return Err(err),
            }
            if stop == Some(Step::Written) {
                return Ok(None);
            }
            // `Timeout`: a skipper won the mark; the claim is void, and the record is written
            // anew.
            match sync.written(lsn, len) {
                Ok(()) => {}
                Err(Error::Timeout { .. }) if self.deadline.is_some() => continue,
                Err(err) => return Err(err),
            }
            if stop == Some(Step::Marked) {
                return Ok(None);
            }
            sync.await_durable(lsn + len)?;
            // The mark is this writer's and `flushed` passed it: the claim counts, whoever
            // settles it (this writer, or one that read it first).
            self.settle(space, key)?;
            let entry = Entry {
                before: claim.highest,
                newest: lsn,
                pending: None,
                ..claim
            };
            return Ok(Some(Outcome::Acknowledged { lsn, entry }));
        }
    }

    /// Between the reservation at `lsn` and the claim: reads the entry again, checks, makes
    /// the record, and publishes the claim.
    ///
    /// The claim is published before the record is written (the design note wrote it after):
    /// a writer that loses the claim's swap then has written nothing but its void, whereas a
    /// record written before a lost swap would be in the page cache with the winner's version,
    /// and a crash before the void reached the disk could leave both records of one version
    /// in the log (which the scan past `flushed` would take, and apply refuses as `Corrupt`).
    /// A claim whose record is not written yet is like any claim `flushed` has not passed:
    /// nobody settles it before its mark.
    #[allow(clippy::too_many_arguments)]
    fn claim<R>(
        &self,
        space: Space,
        key: &[u8],
        base: &mut dyn FnMut() -> Result<Entry>,
        lsn: u64,
        len: u64,
        check: &mut dyn FnMut(&Entry) -> std::result::Result<u64, R>,
        record: &mut dyn FnMut(u64, u64) -> Result<Vec<u8>>,
    ) -> Result<Attempt<R>> {
        let read = keys::entry(self.ring, space, key)?;
        // The one-pending rule: a claim made since this writer's wait is not claimed over
        // (the entry would lose that claim's fate, and its record may lie after this one):
        // this reservation is voided, and the writer waits for that claim's fate.
        if read.is_some_and(|entry| entry.pending.is_some()) {
            return Ok(Attempt::Raced);
        }
        let now = match read {
            Some(entry) => entry,
            None => base()?,
        };
        let token = match check(&now) {
            Ok(token) => token,
            Err(refusal) => return Ok(Attempt::Refused(refusal)),
        };
        // The claim publishes all the write changes in the entry at once: a settle then
        // needs nothing but the fate.
        let claim = Entry {
            highest: now.highest.max(token),
            before: now.highest,
            version: now.version + 1,
            newest: now.newest,
            pending: Some(lsn),
            voided: now.voided,
        };
        let bytes = record(lsn, claim.version)?;
        if bytes.len() as u64 != len {
            return Err(Error::InvalidArgument(format!(
                "a record of {} bytes made for a reservation of {len}",
                bytes.len()
            )));
        }
        if self.replace(space, key, read.as_ref(), claim)? {
            Ok(Attempt::Claimed(claim, bytes))
        } else {
            Ok(Attempt::Raced)
        }
    }
}

#[cfg(all(test, not(fencelock_loom)))]
mod tests {
    use super::*;
    use crate::ring::flush::GAP_PATIENCE;
    use crate::ring::Stamp;
    use crate::storage::liveness::Liveness;
    use crate::storage::wal::file::{SegmentLog, MIN_SIZE};
    use crate::storage::wal::record::Record;
    use crate::storage::wal::scan::{scan, Scanned};

    const STAMP: Stamp = Stamp {
        boot_id: [6; 16],
        version: 1,
    };
    const ALIVE: u64 = 1 << 50;
    const KEY: &[u8] = b"orders/7";
    /// The key as redb holds it: never written.
    const BASE: Entry = Entry {
        highest: 0,
        before: 0,
        version: 0,
        newest: 0,
        pending: None,
        voided: 0,
    };

    /// A ring, its liveness (this process: `ALIVE`) and a log of segment files, in a temp dir.
    struct Store {
        _dir: tempfile::TempDir,
        ring: Ring,
        live: Liveness,
        log: SegmentLog,
    }

    fn store() -> Store {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        std::fs::write(&path, b"").unwrap();
        let live = Liveness::shared(&path).unwrap();
        assert!(live.lock(ALIVE).unwrap());
        let meta = std::fs::metadata(&path).unwrap();
        let ring = Ring::open(dir.path(), &meta, None, STAMP).unwrap();
        let log = SegmentLog::open(&dir.path().join("store.wal"), 9, 16 * MIN_SIZE).unwrap();
        log.prepare(0).unwrap();
        Store {
            _dir: dir,
            ring,
            live,
            log,
        }
    }

    impl Store {
        fn claims(&self) -> Claims<'_, Liveness> {
            Claims::new(&self.ring, &self.live, ALIVE, &self.log)
        }

        /// The key's entry as the index holds it, settled or not.
        fn indexed(&self) -> Option<Entry> {
            keys::entry(&self.ring, Space::Key, KEY).unwrap()
        }

        fn scanned(&self) -> Scanned {
            scan(&self.log, 0).unwrap()
        }
    }

    fn put(token: u64, version: u64) -> Record {
        Record::Put {
            key: KEY.to_vec(),
            value: token.to_le_bytes().repeat(5),
            token,
            version,
        }
    }

    /// The token rule of the tests: `token` is admitted at or above the key's highest, else
    /// refused with the highest.
    fn admit(token: u64) -> impl FnMut(&Entry) -> std::result::Result<u64, u64> {
        move |entry| {
            if token >= entry.highest {
                Ok(token)
            } else {
                Err(entry.highest)
            }
        }
    }

    /// A fenced put of `token` to `KEY`, stopped after `stop`.
    fn put_until(
        claims: &Claims<'_, Liveness>,
        token: u64,
        stop: Option<Step>,
    ) -> Result<Option<Outcome<u64>>> {
        claims.write_until(
            Space::Key,
            KEY,
            &mut || Ok(BASE),
            put(token, 0).encoded_len(),
            &mut admit(token),
            &mut |lsn, version| put(token, version).encode(lsn),
            stop,
        )
    }

    fn acknowledged(outcome: &Outcome<u64>) -> (u64, Entry) {
        match *outcome {
            Outcome::Acknowledged { lsn, entry } => (lsn, entry),
            Outcome::Refused(highest) => panic!("refused below {highest}"),
        }
    }

    fn put_acknowledged(claims: &Claims<'_, Liveness>, token: u64) -> (u64, Entry) {
        let outcome = claims.write(
            Space::Key,
            KEY,
            &mut || Ok(BASE),
            put(token, 0).encoded_len(),
            &mut admit(token),
            &mut |lsn, version| put(token, version).encode(lsn),
        );
        acknowledged(&outcome.unwrap())
    }

    #[test]
    fn a_write_is_acknowledged_durable_and_settled() {
        let store = store();
        let claims = store.claims();
        let (lsn, entry) = put_acknowledged(&claims, 5);
        let settled = Entry {
            highest: 5,
            before: 5,
            version: 1,
            newest: lsn,
            pending: None,
            voided: 0,
        };
        assert_eq!(entry, settled);
        assert_eq!(store.indexed(), Some(settled));
        assert!(claims.sync().flushed() > lsn, "acknowledged below flushed");
        assert_eq!(store.scanned().records, [(lsn, put(5, 1))]);
        // The next write of the key is its version 2, after it in the log.
        let (next, entry) = put_acknowledged(&claims, 5);
        assert!(next > lsn);
        assert_eq!(entry.version, 2);
        assert_eq!(
            store.scanned().records,
            [(lsn, put(5, 1)), (next, put(5, 2))]
        );
    }

    #[test]
    fn a_lower_token_is_refused_and_writes_only_a_void() {
        let store = store();
        let claims = store.claims();
        let (lsn, settled) = put_acknowledged(&claims, 9);
        let refused = put_until(&claims, 4, None).unwrap().unwrap();
        assert_eq!(refused, Outcome::Refused(9));
        assert_eq!(store.indexed(), Some(settled), "nothing changed");
        // Its reservation holds a void, which `flushed` passes once another write is durable.
        let (next, entry) = put_acknowledged(&claims, 9);
        let scanned = store.scanned();
        assert_eq!(scanned.records, [(lsn, put(9, 1)), (next, put(9, 2))]);
        assert!(scanned.skipped.is_empty() && scanned.holes == 0);
        assert!(
            next > lsn + put(9, 1).encoded_len(),
            "the void lies between"
        );
        assert_eq!(entry.version, 2, "a refusal claims no version");
    }

    #[test]
    fn two_writers_of_one_key_with_rising_tokens_are_acknowledged_in_lsn_order() {
        const WRITES: u64 = 40;
        let store = store();
        let tokens = std::sync::atomic::AtomicU64::new(1);
        let acknowledged: Vec<(u64, u64)> = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..2)
                .map(|_| {
                    let (store, tokens) = (&store, &tokens);
                    scope.spawn(move || {
                        let claims = store.claims();
                        let mut mine = Vec::new();
                        for _ in 0..WRITES {
                            let token = tokens.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            match put_until(&claims, token, None) {
                                Ok(Some(Outcome::Acknowledged { lsn, entry })) => {
                                    assert_eq!(entry.highest, token);
                                    mine.push((lsn, token));
                                }
                                Ok(Some(Outcome::Refused(highest))) => assert!(highest > token),
                                // Descheduled past GAP_PATIENCE between its claim and its
                                // mark on a loaded machine: skipped, and void.
                                Err(Error::Timeout { .. }) => {}
                                other => panic!("{other:?}"),
                            }
                        }
                        mine
                    })
                })
                .collect();
            writers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let mut in_log = acknowledged.clone();
        in_log.sort_unstable();
        assert!(
            in_log.windows(2).all(|pair| pair[0].1 < pair[1].1),
            "tokens in LSN order: {in_log:?}"
        );
        let last = *in_log.last().expect("some write was acknowledged");
        let entry = store.claims().read(Space::Key, KEY).unwrap().unwrap();
        assert_eq!((entry.newest, entry.pending), (last.0, None));
        assert_eq!(entry.highest, last.1);
        // The log's records of the key are exactly the acknowledged ones, in order.
        let records: Vec<(u64, u64)> = store
            .scanned()
            .records
            .into_iter()
            .map(|(lsn, record)| match record {
                Record::Put { token, .. } => (lsn, token),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(records, in_log);
    }

    #[test]
    fn a_writer_stopped_at_each_step_is_skipped_and_its_claim_settled_by_its_mark() {
        let steps = [Step::Reserved, Step::Claimed, Step::Written, Step::Marked];
        // Settled by a reader after a waiter passed it, or by the next writer of the key.
        for (stop, read_first) in steps.into_iter().flat_map(|s| [(s, true), (s, false)]) {
            let store = store();
            let claims = store.claims();
            let (first, _) = put_acknowledged(&claims, 3);
            let sync = claims.sync();
            let before = sync.flushed();
            let started = std::time::Instant::now();
            assert!(put_until(&claims, 4, Some(stop)).unwrap().is_none());
            // The stopped writer's reservation is the next one.
            let stopped = before;
            if read_first {
                // A waiter passes it (skipping its gap unless it was marked), and a read then
                // finds its claim's fate: the mark's, not `flushed`'s.
                sync.await_durable(stopped + 1).unwrap();
                let seen = claims.read(Space::Key, KEY).unwrap().unwrap();
                let newest = if stop == Step::Marked { stopped } else { first };
                assert_eq!((seen.newest, seen.pending), (newest, None), "{stop:?}");
                // A void claim's token fences nothing: only a written token raises the floor
                // (a refusal then names a token that was written, and the floor never drops
                // when the entry leaves the index for the store file).
                let highest = if stop == Step::Marked { 4 } else { 3 };
                assert_eq!((seen.highest, seen.before), (highest, highest), "{stop:?}");
            }
            let (next, entry) = put_acknowledged(&claims, 5);
            if stop != Step::Marked {
                // The gap was waited for, then skipped (a lower bound, not a timing limit).
                assert!(started.elapsed() >= GAP_PATIENCE, "{stop:?}");
            }
            assert!(next > stopped, "{stop:?}");
            let claimed = stop != Step::Reserved;
            let counts = stop == Step::Marked;
            if counts {
                assert_eq!(sync.fate(stopped), Fate::Counts, "{stop:?}");
            } else {
                assert_eq!(sync.fate(stopped), Fate::Void, "{stop:?}");
            }
            // The void claim used its version all the same; one that counts was settled as
            // the newest before this write claimed over it.
            assert_eq!(entry.version, if claimed { 3 } else { 2 }, "{stop:?}");
            assert_eq!(entry.highest, 5);
            assert_eq!(store.indexed(), Some(entry), "{stop:?}");
            let mut records = vec![(first, put(3, 1))];
            if counts {
                records.push((stopped, put(4, 2)));
            }
            records.push((next, put(5, entry.version)));
            // The stopped writer resumes: its late write and mark do not count.
            if stop == Step::Claimed {
                assert_eq!(
                    store
                        .log
                        .write(stopped, &put(4, 2).encode(stopped).unwrap())
                        .unwrap(),
                    crate::ring::flush::Written::Done
                );
            }
            if stop == Step::Claimed || stop == Step::Written {
                let len = put(4, 2).encoded_len();
                assert!(matches!(
                    sync.written(stopped, len),
                    Err(Error::Timeout { .. })
                ));
            }
            assert_eq!(store.scanned().records, records, "{stop:?}");
            assert_eq!(store.indexed(), Some(entry), "{stop:?}");
        }
    }

    #[test]
    fn a_reader_during_a_pending_claim_returns_the_previous_newest_without_waiting() {
        let store = store();
        let claims = store.claims();
        let (first, _) = put_acknowledged(&claims, 3);
        // A writer marked its record and stopped before anyone synced past it.
        assert!(put_until(&claims, 4, Some(Step::Marked)).unwrap().is_none());
        let sync = claims.sync();
        let claimed = sync.flushed();
        let seen = claims.read(Space::Key, KEY).unwrap().unwrap();
        assert_eq!((seen.newest, seen.pending), (first, Some(claimed)));
        // Once `flushed` passes it (another process's sync), a read settles it and returns it.
        sync.await_durable(claimed + 1).unwrap();
        let seen = claims.read(Space::Key, KEY).unwrap().unwrap();
        assert_eq!((seen.newest, seen.pending), (claimed, None));
        assert_eq!(store.indexed(), Some(seen));
        // A claim stopped before its mark: the read does not wait for it.
        assert!(put_until(&claims, 5, Some(Step::Claimed))
            .unwrap()
            .is_none());
        let seen = claims.read(Space::Key, KEY).unwrap().unwrap();
        assert_eq!(seen.newest, claimed);
        assert_eq!(
            seen.pending,
            Some(sync.flushed()),
            "the claim is left pending"
        );
    }
}
