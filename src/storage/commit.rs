//! Group commit: write operations that arrive at once from threads of one process share one
//! write transaction and one commit, each keeping its own result.
//!
//! The first thread to find no leader becomes the leader: it takes the queued operations, runs
//! them in one transaction, commits, hands every operation its result and steps down. Threads
//! that arrive meanwhile queue up for the next batch. An operation that is refused (a held lock,
//! a stale token) writes nothing, so the others of its batch still commit; a batch of refusals
//! only is not committed at all. An operation that fails in the storage aborts the whole batch,
//! and every operation of it gets the error.
//!
//! Another process may hold redb's write lock for long (it may be paused inside a transaction).
//! Every operation has a deadline, and is refused with [`Error::Timeout`] once it passes (or
//! with [`Error::Cancelled`] once its cancel handle fires) while it waits for that lock.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use redb::WriteTransaction;

use crate::base::cancel::Cancel;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::rules::history::Ends;
use crate::rules::ops::Applied;
use crate::storage::db::Db;

/// A commit that carried operations: how many, and the ends of the leases they took out of
/// the leases table, for the store's counters.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Committed {
    pub ops: usize,
    pub ends: Ends,
}

type Finish = Box<dyn FnOnce(Result<(), &Error>) + Send>;

/// What running one job in the transaction gave.
enum Ran {
    /// Applied; whether it must be durable, and the lease ends it counted.
    Applied(Finish, bool, Ends),
    Refused(Finish),
    Failed(Finish, Error),
}

/// Runs a job's operation in the batch's transaction, or fails it with the batch's error.
type Run = Box<dyn FnOnce(Result<&WriteTransaction, &Error>) -> Ran + Send>;

pub(crate) struct Job {
    run: Run,
    /// `CLOCK_BOOTTIME` nanoseconds after which the job gives up waiting for the write lock.
    deadline: u64,
    /// Ends the job's wait for the write lock early.
    cancel: Option<Cancel>,
}

impl Job {
    /// Why the job stops waiting for the write lock at `now`, if it does.
    fn given_up(&self, now: u64) -> Option<Error> {
        crate::base::cancel::ended(self.cancel.as_ref(), self.deadline, now)
    }
}

/// The most operations one transaction carries, so that one commit does not grow without bound.
const MAX_BATCH: usize = 128;

pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    changed: Condvar,
    /// Commit without an fsync when no write of the batch asks to be durable.
    relaxed: bool,
    /// The wait for the write lock of a batch that gave up, which the next batch takes over.
    /// Only the leader touches it.
    waiting: Mutex<Option<Arc<Handoff>>>,
}

struct Queue {
    jobs: Vec<Job>,
    leader: bool,
}

impl GroupCommit {
    /// With `relaxed`, a batch whose writes all say they need not be durable commits without
    /// an fsync; redb supports that only for a database one process has open.
    pub(crate) fn new(relaxed: bool) -> Self {
        GroupCommit {
            queue: Mutex::new(Queue {
                jobs: Vec::new(),
                leader: false,
            }),
            changed: Condvar::new(),
            relaxed,
            waiting: Mutex::new(None),
        }
    }

    /// Runs `op` in a write transaction shared with the operations queued at the same time, and
    /// returns its result once the transaction committed (or failed). Gives up with
    /// [`Error::Timeout`] if the write lock is not had by the deadline of `waiting`, and with
    /// [`Error::Cancelled`] once its cancel handle fires before that. `admit` runs once a
    /// batch, before its transaction: an error of it fails every operation of the batch.
    /// `extra` gives more jobs once the batch has its transaction (other processes' requests).
    /// `committed` learns how many operations each commit carried.
    pub(crate) fn run<T, F>(
        &self,
        db: &Arc<Db>,
        admit: &dyn Fn() -> Result<()>,
        extra: &dyn Fn() -> Vec<Job>,
        committed: &dyn Fn(Option<Committed>),
        waiting: crate::base::cancel::Waiting<'_>,
        op: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<Applied<T>> + Send + 'static,
    {
        let (job, slot) = job(op, waiting.deadline, waiting.cancel);
        let mut queue = self.queue.lock();
        queue.jobs.push(job);
        loop {
            if let Some(result) = slot.lock().take() {
                return result;
            }
            if queue.leader {
                self.changed.wait(&mut queue);
                continue;
            }
            queue.leader = true;
            let take = queue.jobs.len().min(MAX_BATCH);
            let batch: Vec<Job> = queue.jobs.drain(..take).collect();
            drop(queue);
            let stepping_down = StepDown(self);
            run_batch(
                db,
                admit,
                extra,
                committed,
                batch,
                self.relaxed,
                &mut self.waiting.lock(),
            );
            drop(stepping_down);
            queue = self.queue.lock();
        }
    }
}

/// Where a job's result arrives once its batch is done.
type Slot<T> = Arc<Mutex<Option<Result<T>>>>;

/// A job that runs `op` in a batch's transaction, and the slot its result arrives in.
fn job<T, F>(op: F, deadline: u64, cancel: Option<&Cancel>) -> (Job, Slot<T>)
where
    T: Send + 'static,
    F: FnOnce(&WriteTransaction) -> Result<Applied<T>> + Send + 'static,
{
    let slot: Slot<T> = Arc::new(Mutex::new(None));
    let filled = Arc::clone(&slot);
    let job = job_with(
        op,
        move |result| *filled.lock() = Some(result),
        deadline,
        cancel,
    );
    (job, slot)
}

/// A job that runs `op` in a batch's transaction for another process, and hands its result to
/// `finish` once the batch is done. It has no deadline: its requester keeps its own.
pub(crate) fn foreign_job<T, F>(op: F, finish: impl FnOnce(Result<T>) + Send + 'static) -> Job
where
    T: Send + 'static,
    F: FnOnce(&WriteTransaction) -> Result<Applied<T>> + Send + 'static,
{
    job_with(op, finish, u64::MAX, None)
}

/// A job that runs `op` in a batch's transaction and hands its result to `finish`.
fn job_with<T, F>(
    op: F,
    finish: impl FnOnce(Result<T>) + Send + 'static,
    deadline: u64,
    cancel: Option<&Cancel>,
) -> Job
where
    T: Send + 'static,
    F: FnOnce(&WriteTransaction) -> Result<Applied<T>> + Send + 'static,
{
    let run: Run = Box::new(move |txn: Result<&WriteTransaction, &Error>| {
        let outcome = match txn {
            Ok(txn) => crate::base::quiet::catch(|| op(txn)).unwrap_or_else(|panic| {
                Err(Error::Storage(format!(
                    "a write operation panicked: {panic}"
                )))
            }),
            Err(err) => Err(err.duplicate()),
        };
        match outcome {
            Ok(applied) => {
                let (durable, ends) = (applied.durable, applied.ends);
                Ran::Applied(
                    Box::new(move |committed| {
                        let result = match committed {
                            Ok(()) => Ok(applied.value),
                            Err(err) => Err(err.duplicate()),
                        };
                        finish(result);
                    }),
                    durable,
                    ends,
                )
            }
            Err(err) if err.is_refusal() => Ran::Refused(Box::new(move |_| finish(Err(err)))),
            Err(err) => {
                let fatal = err.duplicate();
                Ran::Failed(Box::new(move |_| finish(Err(err))), fatal)
            }
        }
    });

    Job {
        run,
        deadline,
        cancel: cancel.cloned(),
    }
}

/// Hands leadership back and wakes the waiting threads, also when a batch unwinds.
struct StepDown<'a>(&'a GroupCommit);

impl Drop for StepDown<'_> {
    fn drop(&mut self) {
        self.0.queue.lock().leader = false;
        self.0.changed.notify_all();
    }
}

fn panicked(what: &str, panic: &str) -> Error {
    Error::Storage(format!("the storage engine panicked in {what}: {panic}"))
}

/// A blocking `begin_write` run in a thread of its own, handed to whichever batch still wants
/// it when it returns.
///
/// redb's `begin_write` queues for the write lock in the kernel, so writers of different
/// processes take turns fairly; but it has no timeout, and a process paused inside a commit holds
/// the lock indefinitely. The wait therefore runs in a thread, and the batch waits for the
/// handoff only up to its deadlines. A batch that gives up leaves the wait to the next batch;
/// a transaction that nobody wants any more is dropped at once (an abort), so this process never
/// sits on the write lock unasked.
struct Handoff {
    /// The database handle it waits on (a reopen after an I/O error makes a new one).
    db: Arc<Db>,
    state: Mutex<Handed>,
    ready: Condvar,
}

enum Handed {
    /// The thread waits for the lock; `wanted` says whether a batch waits for the thread.
    Waiting { wanted: bool },
    /// The thread got the lock (or failed), and a batch wanted it.
    Ready(Box<Result<WriteTransaction>>),
    /// The thread got the lock when no batch wanted it, and gave it back.
    Returned,
}

impl Handoff {
    fn start(db: &Arc<Db>) -> Result<Arc<Handoff>> {
        let handoff = Arc::new(Handoff {
            db: Arc::clone(db),
            state: Mutex::new(Handed::Waiting { wanted: true }),
            ready: Condvar::new(),
        });
        let (db, shared) = (Arc::clone(db), Arc::clone(&handoff));
        std::thread::Builder::new()
            .name("fencelock-write-wait".into())
            .spawn(move || {
                let began = crate::base::quiet::catch(|| Ok(db.writable()?.begin_write()?))
                    .unwrap_or_else(|panic| Err(panicked("begin_write", &panic)));
                let mut state = shared.state.lock();
                *state = match *state {
                    Handed::Waiting { wanted: true } => Handed::Ready(Box::new(began)),
                    // Dropping the transaction gives the lock back.
                    _ => Handed::Returned,
                };
                shared.ready.notify_all();
            })?;
        Ok(handoff)
    }

    /// No batch waits for the transaction any more: if it comes, it is given back at once.
    fn unwant(&self) {
        let mut state = self.state.lock();
        match &mut *state {
            Handed::Waiting { wanted } => *wanted = false,
            // Came meanwhile: give it back now.
            Handed::Ready(_) => *state = Handed::Returned,
            Handed::Returned => {}
        }
    }
}

/// Takes the write lock for `batch`. While another process holds it, jobs whose deadline passes
/// or whose cancel handle fires are completed with [`Error::Timeout`] or [`Error::Cancelled`]
/// and dropped from the batch.
fn begin(
    db: &Arc<Db>,
    batch: &mut Vec<Job>,
    waiting: &mut Option<Arc<Handoff>>,
) -> Result<WriteTransaction> {
    loop {
        let handoff = match waiting.take() {
            Some(handoff) if Arc::ptr_eq(&handoff.db, db) => handoff,
            // A wait on a handle reopened since: its transaction, if it comes, is not wanted.
            Some(stale) => {
                stale.unwant();
                continue;
            }
            None => match db.writable()?.try_begin_write() {
                Err(redb::TransactionError::WouldBlock) => Handoff::start(db)?,
                other => return Ok(other?),
            },
        };
        {
            let mut state = handoff.state.lock();
            if let Handed::Waiting { wanted } = &mut *state {
                *wanted = true;
                let now = clock::now_ns();
                let earliest = batch.iter().map(|job| job.deadline).min().unwrap_or(now);
                let slice = Duration::from_nanos(earliest.saturating_sub(now))
                    .min(crate::base::cancel::POLL);
                let _ = handoff.ready.wait_for(&mut state, slice);
            }
            match std::mem::replace(&mut *state, Handed::Returned) {
                Handed::Ready(began) => return *began,
                // Given back before this batch asked again: try afresh.
                Handed::Returned => continue,
                still @ Handed::Waiting { .. } => *state = still,
            }
        }
        let now = clock::now_ns();
        let (ended, left): (Vec<Job>, Vec<Job>) = std::mem::take(batch)
            .into_iter()
            .partition(|job| job.given_up(now).is_some());
        *batch = left;
        let mut last = None;
        for job in ended {
            let err = job.given_up(now).unwrap_or(Error::timed_out());
            let (Ran::Refused(finish) | Ran::Applied(finish, ..) | Ran::Failed(finish, _)) =
                (job.run)(Err(&err));
            finish(Err(&err));
            last = Some(err);
        }
        if batch.is_empty() {
            // The next batch takes the wait over; until then its transaction is not wanted.
            handoff.unwant();
            *waiting = Some(handoff);
            return Err(last.unwrap_or(Error::timed_out()));
        }
        *waiting = Some(handoff);
    }
}

fn run_batch(
    db: &Arc<Db>,
    admit: &dyn Fn() -> Result<()>,
    extra: &dyn Fn() -> Vec<Job>,
    committed: &dyn Fn(Option<Committed>),
    mut batch: Vec<Job>,
    relaxed: bool,
    waiting: &mut Option<Arc<Handoff>>,
) {
    let txn = admit().and_then(|()| {
        crate::base::quiet::catch(|| begin(db, &mut batch, waiting))
            .unwrap_or_else(|panic| Err(panicked("begin_write", &panic)))
    });
    if txn.is_ok() {
        batch.extend(extra());
    }
    let _ = execute(txn, batch, relaxed, committed);
}

/// Runs `batch` in `txn` (or fails every job with its error), commits unless nothing was
/// applied or a job failed, and hands every job its result. With `relaxed`, commits without an
/// fsync when no job asks to be durable. Tells `committed` what a commit carried (`None` when
/// the batch committed nothing). Returns the batch's outcome: how the commit went, or the error
/// that failed it.
pub(crate) fn execute(
    txn: Result<WriteTransaction>,
    batch: Vec<Job>,
    relaxed: bool,
    committed_ops: &dyn Fn(Option<Committed>),
) -> Result<()> {
    let mut finishes = Vec::with_capacity(batch.len());
    let mut fatal: Option<Error> = None;
    let mut applied = 0;
    let mut ends = Ends::default();
    let mut durable = !relaxed;
    for job in batch {
        let input = match (&txn, &fatal) {
            (Err(err), _) | (Ok(_), Some(err)) => Err(err),
            (Ok(txn), None) => Ok(txn),
        };
        match (job.run)(input) {
            Ran::Applied(finish, must_last, counted) => {
                applied += 1;
                durable |= must_last;
                ends.merge(&counted);
                finishes.push(finish);
            }
            Ran::Refused(finish) => finishes.push(finish),
            Ran::Failed(finish, err) => {
                finishes.push(finish);
                fatal.get_or_insert(err);
            }
        }
    }
    let committed: Result<()> = match (txn, fatal) {
        (Err(err), _) => Err(err),
        (Ok(txn), Some(err)) => {
            let _ = crate::base::quiet::catch(|| txn.abort());
            Err(err)
        }
        // Nothing to commit: refusals write nothing.
        (Ok(txn), None) if applied == 0 => {
            crate::base::quiet::catch(|| txn.abort().map_err(Error::from))
                .unwrap_or_else(|panic| Err(panicked("abort", &panic)))
        }
        (Ok(mut txn), None) => crate::base::quiet::catch(|| {
            if !durable {
                txn.set_durability(redb::Durability::None)
                    .map_err(|err| Error::Storage(err.to_string()))?;
            }
            txn.commit().map_err(Error::from)
        })
        .unwrap_or_else(|panic| Err(panicked("commit", &panic))),
    };
    committed_ops((committed.is_ok() && applied > 0).then_some(Committed { ops: applied, ends }));
    for finish in finishes {
        finish(committed.as_ref().copied());
    }
    committed
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use redb::{ConcurrencyMode, TableDefinition};

    use super::*;

    const NUMBERS: TableDefinition<u64, u64> = TableDefinition::new("numbers");
    fn open(path: &std::path::Path) -> Arc<Db> {
        let db = crate::storage::db::redb_builder(ConcurrencyMode::MultiWriter)
            .create(path)
            .unwrap();
        Arc::new(Db::Writable(db))
    }

    fn later() -> u64 {
        clock::now_ns() + 30_000_000_000
    }

    /// A job writing `key = value`; `ran` is set when it runs.
    fn insert(key: u64, value: u64, ran: &Arc<AtomicBool>) -> (Job, Slot<u64>) {
        let ran = Arc::clone(ran);
        job(
            move |txn: &WriteTransaction| {
                ran.store(true, Ordering::SeqCst);
                txn.open_table(NUMBERS)?.insert(key, value)?;
                Ok(Applied {
                    value,
                    durable: true,
                    ends: Ends::default(),
                })
            },
            later(),
            None,
        )
    }

    fn failing(err: fn() -> Error) -> (Job, Slot<u64>) {
        job(
            move |txn: &WriteTransaction| {
                // Opened, as a real operation opens its tables before it refuses.
                txn.open_table(NUMBERS)?;
                Err(err())
            },
            later(),
            None,
        )
    }

    fn value(db: &Db, key: u64) -> Option<u64> {
        let txn = db.begin_read().unwrap();
        let table = match txn.open_table(NUMBERS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return None,
            Err(err) => panic!("{err}"),
        };
        table.get(key).unwrap().map(|v| v.value())
    }

    fn run(db: &Arc<Db>, jobs: Vec<Job>) {
        run_batch(db, &|| Ok(()), &Vec::new, &|_| {}, jobs, false, &mut None);
    }

    fn take(slot: &Slot<u64>) -> Result<u64> {
        slot.lock()
            .take()
            .expect("every job of a batch gets its result")
    }

    #[test]
    fn a_refusal_writes_nothing_and_the_rest_of_its_batch_commits() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("db"));
        let (one, two) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (a, a_slot) = insert(1, 10, &one);
        let (refused, refused_slot) = failing(|| Error::StaleToken {
            token: 1,
            highest: 2,
        });
        let (b, b_slot) = insert(2, 20, &two);
        run(&db, vec![a, refused, b]);
        assert_eq!(take(&a_slot).unwrap(), 10);
        assert!(matches!(take(&refused_slot), Err(Error::StaleToken { .. })));
        assert_eq!(take(&b_slot).unwrap(), 20);
        assert_eq!((value(&db, 1), value(&db, 2)), (Some(10), Some(20)));
    }

    #[test]
    fn a_storage_failure_fails_its_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("db"));
        let ran = Arc::new(AtomicBool::new(false));
        let (a, a_slot) = insert(1, 10, &ran);
        let (failed, failed_slot) = failing(|| Error::Storage("the disk failed".into()));
        let (b, b_slot) = insert(2, 20, &Arc::new(AtomicBool::new(false)));
        run(&db, vec![a, failed, b]);
        for slot in [&a_slot, &failed_slot, &b_slot] {
            let err = take(slot).unwrap_err();
            assert!(err.to_string().contains("the disk failed"), "{err}");
        }
        assert_eq!((value(&db, 1), value(&db, 2)), (None, None));
    }

    #[test]
    fn a_panicking_operation_fails_its_batch_without_unwinding_into_the_leader() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("db"));
        let ran = Arc::new(AtomicBool::new(false));
        let (a, a_slot) = insert(1, 10, &ran);
        let (panics, panics_slot) = job(
            |txn: &WriteTransaction| -> Result<Applied<u64>> {
                txn.open_table(NUMBERS)?.insert(5, 5)?;
                panic!("a defect in an operation")
            },
            later(),
            None,
        );
        run(&db, vec![a, panics]);
        assert!(matches!(take(&a_slot), Err(Error::Storage(_))));
        let err = take(&panics_slot).unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
        assert_eq!((value(&db, 1), value(&db, 5)), (None, None));
    }

    #[test]
    fn jobs_give_up_at_their_deadline_or_cancel_while_another_writer_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = open(&path);
        let other = open(&path);
        let blocking = other.writable().unwrap().begin_write().unwrap();
        let mut waiting = None;
        let ran = Arc::new(AtomicBool::new(false));
        let (mut timed, timed_slot) = insert(1, 10, &ran);
        timed.deadline = clock::now_ns() + 20_000_000;
        let cancel = Cancel::new();
        cancel.cancel();
        let (cancelled, cancelled_slot) = job(
            |_: &WriteTransaction| -> Result<Applied<u64>> { unreachable!("never runs") },
            later(),
            Some(&cancel),
        );
        run_batch(
            &db,
            &|| Ok(()),
            &Vec::new,
            &|_| {},
            vec![timed, cancelled],
            false,
            &mut waiting,
        );
        assert!(matches!(take(&timed_slot), Err(Error::Timeout { .. })));
        assert!(matches!(take(&cancelled_slot), Err(Error::Cancelled)));
        assert!(!ran.load(Ordering::SeqCst), "the timed-out job never ran");
        // The next batch takes the wait over and commits once the other writer lets go.
        let (next, next_slot) = insert(2, 20, &Arc::new(AtomicBool::new(false)));
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(blocking);
        });
        run_batch(
            &db,
            &|| Ok(()),
            &Vec::new,
            &|_| {},
            vec![next],
            false,
            &mut waiting,
        );
        release.join().unwrap();
        assert_eq!(take(&next_slot).unwrap(), 20);
        assert_eq!(value(&db, 2), Some(20));
    }

    #[test]
    fn an_admission_error_fails_the_batch_before_its_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("db"));
        let (a, a_slot) = insert(1, 10, &Arc::new(AtomicBool::new(false)));
        run_batch(
            &db,
            &|| Err(Error::Replaced("moved away".into())),
            &Vec::new,
            &|_| {},
            vec![a],
            false,
            &mut None,
        );
        assert!(matches!(take(&a_slot), Err(Error::Replaced(_))));
        assert_eq!(value(&db, 1), None);
    }
}
