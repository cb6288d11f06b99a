//! Group commit: write operations that arrive at once from threads of one process share one
//! write transaction and one commit, each keeping its own result.
//!
//! The first thread to find no leader becomes the leader: it takes the queued operations, runs
//! them in one transaction, commits, hands every operation its result and steps down. Threads
//! that arrive meanwhile queue up for the next batch. An operation that is refused (a held lock,
//! a stale token) writes nothing, so the others of its batch still commit. An operation that
//! fails in the storage aborts the whole batch, and every operation of it gets the error; an
//! operation that took an effect outside the database (a liveness lock) undoes it then.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use redb::WriteTransaction;

use crate::error::{Error, Result};

/// Undoes an operation's effect outside the database when its transaction does not commit.
pub(crate) type Undo = Box<dyn FnOnce() + Send>;

/// What an operation produced in the transaction: its value once committed, and how to undo it
/// otherwise.
pub(crate) struct Applied<T> {
    pub value: T,
    pub undo: Option<Undo>,
}

impl<T> Applied<T> {
    pub(crate) fn new(value: T) -> Self {
        Applied { value, undo: None }
    }
}

type Finish = Box<dyn FnOnce(Result<(), &Error>) + Send>;
type Job = Box<dyn FnOnce(Result<&WriteTransaction, &Error>) -> (Finish, Option<Error>) + Send>;

/// The most operations one transaction carries, so that one commit does not grow without bound.
const MAX_BATCH: usize = 128;

pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    changed: Condvar,
}

struct Queue {
    jobs: Vec<Job>,
    leader: bool,
}

impl GroupCommit {
    pub(crate) fn new() -> Self {
        GroupCommit {
            queue: Mutex::new(Queue {
                jobs: Vec::new(),
                leader: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Runs `op` in a write transaction shared with the operations queued at the same time, and
    /// returns its result once the transaction committed (or failed).
    pub(crate) fn run<T, F>(&self, db: &redb::Database, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<Applied<T>> + Send + 'static,
    {
        let slot: Arc<Mutex<Option<Result<T>>>> = Arc::new(Mutex::new(None));
        let filled = Arc::clone(&slot);
        let job: Job = Box::new(move |txn| {
            let outcome = match txn {
                Ok(txn) => catch_unwind(AssertUnwindSafe(|| op(txn)))
                    .unwrap_or_else(|_| Err(Error::Storage("a write operation panicked".into()))),
                Err(err) => Err(err.duplicate()),
            };
            match outcome {
                Ok(applied) => {
                    let finish: Finish = Box::new(move |committed| {
                        let result = match committed {
                            Ok(()) => Ok(applied.value),
                            Err(err) => {
                                if let Some(undo) = applied.undo {
                                    undo();
                                }
                                Err(err.duplicate())
                            }
                        };
                        *filled.lock() = Some(result);
                    });
                    (finish, None)
                }
                Err(err) => {
                    let fatal = (!err.is_refusal()).then(|| err.duplicate());
                    let finish: Finish = Box::new(move |_| *filled.lock() = Some(Err(err)));
                    (finish, fatal)
                }
            }
        });

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
            let _stepping_down = StepDown(self);
            run_batch(db, batch);
            drop(_stepping_down);
            queue = self.queue.lock();
        }
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

fn run_batch(db: &redb::Database, batch: Vec<Job>) {
    let txn = db.begin_write().map_err(Error::from);
    let mut finishes = Vec::with_capacity(batch.len());
    let mut fatal: Option<Error> = None;
    for job in batch {
        let input = match (&txn, &fatal) {
            (Err(err), _) | (Ok(_), Some(err)) => Err(err),
            (Ok(txn), None) => Ok(txn),
        };
        let (finish, failed) = job(input);
        finishes.push(finish);
        if fatal.is_none() {
            fatal = failed;
        }
    }
    let committed: Result<()> = match (txn, fatal) {
        (Err(err), _) => Err(err),
        (Ok(txn), Some(err)) => {
            drop(txn.abort());
            Err(err)
        }
        (Ok(txn), None) => txn.commit().map_err(Error::from),
    };
    for finish in finishes {
        finish(committed.as_ref().map(|_| ()));
    }
}
