//! Who commits an operation or answers a read ([`Router`]): a server, a combiner in the shared
//! request ring (`ring/`), or this process with its own threads' operations (group commit). The
//! router owns the routing state (the ring member, whether commits are shared, the group commit,
//! whether this store is a server's); what it needs of the engine (its database handle, its
//! liveness, a job's transaction run by the rules) it asks through [`Host`], defined here so that
//! the router never names the engine.
//!
//! One commit for every process: writes travel through the shared request ring.
//!
//! A thread with a write posts its operation in the ring and then tries, without waiting, to
//! take the store's write lock. The one that gets it is the combiner: it takes every posted
//! request (its own, its threads', other processes'), runs them in one transaction with one
//! commit, publishes each result and wakes each requester. The others sleep on their slot until
//! their result is there, or until the combiner is done and one of them may combine next.
//!
//! Liveness never depends on who commits: the requester holds the liveness lock of the lease it
//! asks for (`storage/liveness.rs`), so a grant whose requester died is dead on arrival. The
//! failure rules:
//!
//! - A combiner that dies before it publishes: its requests' slots are TAKEN by a dead process;
//!   their requesters post them again. A re-run acquire whose grant did commit finds its own
//!   liveness id in the record and returns that same grant; a re-run write or fence has the
//!   result it had (an equal token passes), and an extend extends again. A re-run holder's
//!   write whose lease ran out since finds the key holding exactly its write with its token:
//!   it reports that it landed, not a refusal. (The slot shows a re-run: a combiner took it
//!   before.)
//! - A combiner that is paused (SIGSTOP) holds the write lock, as any process paused inside a
//!   commit does: requests still POSTED withdraw after [`WITHDRAW_AFTER`] and wait for the lock
//!   on their own, within their deadline; requests it TAKEN wait for it up to their deadline and
//!   then give up. An acquire given up then leaves at most a dead record (its requester lets
//!   its liveness lock go); a write given up then may still land when the combiner resumes, as a
//!   write that times out inside any database's commit may.
//! - A requester that dies after posting: a combiner drops its request (or runs it, if it took
//!   it first: a grant without its requester's lock is dead on arrival); a slot it left is
//!   reclaimed when the ring runs full.
//! - A full ring, or no usable ring: the write commits directly. A request or reply larger
//!   than a slot travels in a bulk file beside the ring (`ring/`).
//!
//! A server (`local/serve.rs`) is a combiner that holds the file alone: while one serves,
//! requesters never combine, reads travel too, and a request waits for the server up to its
//! deadline.

use std::sync::Arc;
use std::time::Duration;

use redb::{ReadTransaction, WriteTransaction};

use crate::base::cancel::Waiting;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::local::observe::Counters;
use crate::ring::{lock_hash, Phase, Posted, Taken};
use crate::rules::context::{Context, LeaseMap};
use crate::rules::info::Fenced;
use crate::rules::ops::{run, Done, Op};
use crate::rules::query::{mismatched, Answer, Counts, Query};
use crate::rules::record::Record;
use crate::share::member::{Place, RingMember};
use crate::share::wire::{
    decode_answer, decode_reply, decode_request, encode_answer, encode_op, encode_query,
    encode_reply, Request,
};
use crate::storage::commit::{execute, foreign_job, GroupCommit, Job};
use crate::storage::db::Db;
use crate::storage::liveness::Liveness;

/// How long a request may stay posted, no combiner taking it, before its requester withdraws
/// it and waits for the write lock itself: long enough for a combiner's commit, short enough
/// that a paused combiner costs little.
const WITHDRAW_AFTER: u64 = 5_000_000;
/// How long a combiner waits for more requests after the last one arrived, when others write
/// too, and at most in all: a small part of a commit (about 500 µs).
const LINGER_QUIET: u64 = 40_000;
const LINGER_MAX: u64 = 150_000;
/// How long a requester looks for its reply, yielding, before it sleeps on its slot: a
/// server's reply comes within tens of microseconds, less than the wake-up of a sleeping
/// thread costs on an idle machine.
const REPLY_SPIN: u64 = 30_000;
/// The longest a requester sleeps on its slot before it looks again at its deadline and at its
/// combiner's liveness.
const SLEEP: Duration = Duration::from_millis(1);

/// What the router needs of the engine whose operations it routes, and no more: the rules' view
/// of it ([`Context`], [`LeaseMap`]) for the jobs it runs in a transaction, its database handle,
/// its liveness and its counters.
pub(crate) trait Host: Context + LeaseMap + Send + Sync + Sized + 'static {
    /// The engine, shared: a job of a batch holds it until the batch ends.
    fn arc(&self) -> Arc<Self>;

    /// The liveness locks of the store's file.
    fn live(&self) -> &Liveness;

    /// Whether the store was opened read-only.
    fn read_only(&self) -> bool;

    /// How long an operation waits, unless it says otherwise.
    fn busy_timeout(&self) -> Duration;

    /// [`crate::base::error::Error::Forked`] in a child of the process that opened the store.
    fn check_fork(&self) -> Result<()>;

    /// [`crate::base::error::Error::Replaced`] when the store's path names another file now.
    fn check_file(&self) -> Result<()>;

    /// The open database (reopened first after a full disk); [`Error::InUse`] while a server
    /// serves the store.
    fn database(&self) -> Result<Arc<Db>>;

    /// Closes this store's handle of the database, for a server to open the file.
    fn close_database(&self);

    /// `result`, once a failure for lack of space has marked the handle for a reopen.
    fn note_io_failure<T>(&self, result: Result<T>) -> Result<T>;

    /// Runs `f` in a read transaction of this store's database, within `waiting`.
    fn read_within<T>(
        &self,
        waiting: Waiting<'_>,
        f: impl FnOnce(&ReadTransaction) -> Result<T>,
    ) -> Result<T>;

    /// The counters a commit is counted in.
    fn counters(&self) -> &Counters;
}

/// The wait of a read that says nothing of its own: the busy timeout from now.
pub(crate) fn bounded(host: &impl Host) -> Waiting<'static> {
    Waiting::bounded(host.busy_timeout(), None)
}

/// Decides who commits an operation or answers a read: a server, a combiner in the shared ring,
/// or this process's group commit (see the module's doc).
pub(crate) struct Router {
    /// The shared request ring, in multi-process mode when it can be used.
    member: Option<Arc<RingMember>>,
    /// Whether writes travel through the ring's slots to be committed together
    /// (`Options::share_commits`).
    share_commits: bool,
    /// This process's own threads' writes, committed together.
    commits: GroupCommit,
    /// This store is a server's (`local/serve.rs`): it holds the file exclusively, and commits
    /// every batch durably.
    serving: bool,
}

impl Router {
    /// The router of a store with the ring `member` (if it can use one); `relaxed` commits
    /// may skip the fsync (a single-process store's own).
    pub(crate) fn new(
        member: Option<Arc<RingMember>>,
        share_commits: bool,
        relaxed: bool,
        serving: bool,
    ) -> Router {
        Router {
            member,
            share_commits,
            commits: GroupCommit::new(relaxed),
            serving,
        }
    }

    /// The shared request ring, in multi-process mode when it can be used.
    pub(crate) fn member(&self) -> Option<&Arc<RingMember>> {
        self.member.as_ref()
    }

    /// Whether this store is a server's.
    pub(crate) fn serving(&self) -> bool {
        self.serving
    }

    /// Whether a server serves the store (`local/serve.rs`): operations then go through it, and
    /// this store's own handle of the database is closed, since the server needs the file alone.
    pub(crate) fn served(&self, host: &impl Host) -> bool {
        match &self.member {
            Some(shared) if !self.serving && shared.served(host.live()) => {
                host.close_database();
                true
            }
            _ => false,
        }
    }

    /// After an operation: closes this store's handle of the database while a server waits to
    /// start, so that it can take the file (operations meanwhile open it again).
    pub(crate) fn make_way(&self, host: &impl Host) {
        if let Some(shared) = &self.member {
            if !self.serving && shared.wanted(host.live()) {
                host.close_database();
            }
        }
    }

    /// Runs `op` in a write transaction shared with other writes: through the shared request
    /// ring with every process's, or else with this process's other threads'
    /// (group commit). Gives up with [`Error::Timeout`] if another process keeps the write lock
    /// past `waiting` (by default, the busy timeout), or with [`Error::Cancelled`] when its
    /// handle fires (at once, when it fired before).
    pub(crate) fn submit<H: Host>(
        &self,
        host: &H,
        op: Op,
        waiting: Option<Waiting<'_>>,
    ) -> Result<Done> {
        host.check_fork()?;
        if host.read_only() {
            return Err(crate::storage::db::read_only());
        }
        let waiting = waiting.unwrap_or_else(|| Waiting::new(host.busy_timeout(), None));
        crate::base::cancel::check(waiting.cancel)?;
        let db = loop {
            // Through the ring: to a server, or to be committed with other processes' writes
            // (unless `share_commits` is off).
            if let Some(shared) = self
                .member
                .as_ref()
                .filter(|_| self.share_commits || self.served(host))
            {
                host.check_file()?;
                if let Some(done) = self.submit_shared(host, shared, &op, waiting)? {
                    return Ok(done);
                }
            }
            match host.database() {
                // A server took the file since the request was withdrawn: it goes there.
                Err(Error::InUse) if self.served(host) => {}
                other => break other?,
            }
        };
        db.writable()?;
        // The file check runs once a commit, not once an operation.
        let admit = || host.check_file();
        // A batch that holds the write lock takes along what other processes posted.
        let others = || {
            self.member
                .as_ref()
                .filter(|_| self.share_commits)
                .map_or_else(Vec::new, |shared| self.ring_jobs(host, shared))
        };
        let inner = host.arc();
        let run = move |txn: &WriteTransaction| run(&*inner, &*inner, &op, txn, false);
        let committed = |ops| host.counters().commit(ops);
        let result = self
            .commits
            .run(&db, &admit, &others, &committed, waiting, run);
        drop(db);
        self.make_way(host);
        if let Some(shared) = &self.member {
            shared.wake();
        }
        host.note_io_failure(result)
    }

    /// A place in the waiting queue of the lock `name`; `None` without a usable ring (the
    /// wait is then not ordered).
    pub(crate) fn queue_up<'a>(&'a self, name: &str, live: &'a Liveness) -> Option<Place<'a>> {
        Some(self.member.as_deref()?.queue_up(name, live))
    }

    /// Wakes the oldest waiter of the lock `name`, which was just released.
    pub(crate) fn wake_waiter(&self, name: &str, live: &Liveness) {
        if let Some(shared) = self.member.as_deref() {
            shared
                .ring()
                .wake_oldest(lock_hash(name), clock::now_ns(), live);
        }
    }

    /// Runs `op` through the ring. `Ok(None)` when it was not posted, or withdrawn: the caller
    /// commits it directly.
    pub(crate) fn submit_shared<H: Host>(
        &self,
        host: &H,
        shared: &Arc<RingMember>,
        op: &Op,
        waiting: Waiting<'_>,
    ) -> Result<Option<Done>> {
        let request = encode_op(op);
        match self.post(host, shared, &request, waiting)? {
            Some(posted) => self.await_done(host, shared, posted, waiting),
            None => Ok(None),
        }
    }

    /// Waits for the result of the posted write `posted` (see `await_reply`).
    pub(crate) fn await_done<H: Host>(
        &self,
        host: &H,
        shared: &Arc<RingMember>,
        posted: Posted,
        waiting: Waiting<'_>,
    ) -> Result<Option<Done>> {
        match self.await_reply(host, shared, posted, waiting, true)? {
            Some(reply) => decode_reply(&reply)?.map(Some),
            None => Ok(None),
        }
    }

    /// Answers `query` through the server. `Ok(None)` when no server serves the store (any
    /// more): the caller reads the file itself.
    pub(crate) fn ask_server<H: Host>(
        &self,
        host: &H,
        shared: &Arc<RingMember>,
        query: &Query,
        waiting: Waiting<'_>,
    ) -> Result<Option<Answer>> {
        let Some(posted) = self.post(host, shared, &encode_query(query), waiting)? else {
            return Ok(None);
        };
        match self.await_reply(host, shared, posted, waiting, false)? {
            Some(reply) => decode_answer(&reply)?.map(Some),
            None => Ok(None),
        }
    }

    /// Posts `request`. `None` when it could not be posted (a full ring), unless a server
    /// serves the store: then it waits for a free slot, within `waiting`.
    fn post<H: Host>(
        &self,
        host: &H,
        shared: &RingMember,
        request: &[u8],
        waiting: Waiting<'_>,
    ) -> Result<Option<Posted>> {
        loop {
            shared.ring().intact()?;
            match shared.ring().try_post(shared.id(), request, host.live()) {
                Ok(Some(posted)) => return Ok(Some(posted)),
                Ok(None) => {}
                // Its bulk file could not be written: nothing was posted. A store that may
                // commit itself does; one that a server serves says why at once.
                Err(_) if !self.served(host) => return Ok(None),
                Err(err) => return Err(err.into()),
            }
            if !self.served(host) {
                return Ok(None);
            }
            if let Some(err) = waiting.given_up(clock::now_ns()) {
                return Err(err);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Waits for the reply to `posted`; a write (`combines`) combines when the write lock is
    /// free and no server serves the store. `Ok(None)` when the request was withdrawn, nobody
    /// having taken it: the caller runs it directly.
    fn await_reply<H: Host>(
        &self,
        host: &H,
        shared: &Arc<RingMember>,
        posted: Posted,
        waiting: Waiting<'_>,
        combines: bool,
    ) -> Result<Option<Vec<u8>>> {
        let posted_at = clock::now_ns();
        // Posted again after its combiner died: that combiner may have committed it, so it is
        // run again only as a re-run (through the ring), never withdrawn to run as a first run.
        let mut reposted = false;
        loop {
            // A cut ring's slots are zeros: the request is gone, and no reply will come.
            shared.ring().intact()?;
            let now = clock::now_ns();
            match shared.ring().phase(&posted) {
                Phase::Done => {
                    let reply = shared.ring().reply(posted);
                    shared.ring().intact()?;
                    return Ok(Some(reply));
                }
                Phase::Lost => {
                    shared.ring().done_with(&posted);
                    return Err(Error::Storage(
                        "the shared request ring lost this request's slot".into(),
                    ));
                }
                Phase::Posted(seen) => {
                    // Behind a server, only the server runs it; a server paused holds it up
                    // until the deadline, since no other process may open the file.
                    let served = self.served(host);
                    if !served && !combines {
                        if shared.ring().withdraw(&posted) {
                            return Ok(None);
                        }
                        continue;
                    }
                    // The write lock is tried before any deadline: a write whose timeout has
                    // run out still commits when nothing stands in its way.
                    match if served {
                        Ok(false)
                    } else {
                        self.combine(host, shared)
                    } {
                        Ok(true) => continue,
                        Ok(false) => {}
                        // Not left posted behind an error: another combiner would run it.
                        Err(err) => {
                            if shared.ring().withdraw(&posted) {
                                return Err(err);
                            }
                            continue;
                        }
                    }
                    let gave_up = waiting.given_up(now);
                    let withdraws =
                        !served && !reposted && now.saturating_sub(posted_at) > WITHDRAW_AFTER;
                    if gave_up.is_some() || withdraws {
                        if shared.ring().withdraw(&posted) {
                            return gave_up.map_or(Ok(None), Err);
                        }
                        continue;
                    }
                    if served && now.saturating_sub(posted_at) < REPLY_SPIN {
                        std::thread::yield_now();
                        continue;
                    }
                    shared.ring().wait(&posted, seen, SLEEP);
                }
                Phase::Taken(combiner, seen) => {
                    let combiner_lives = match host.live().is_held(combiner) {
                        Ok(lives) => lives,
                        // Its combiner cannot be tested: given up on, as at the deadline (the
                        // outcome is unknown), so that the slot is not left taken for as long
                        // as this process lives.
                        Err(err) => {
                            if shared.ring().abandon(&posted) {
                                shared.ring().done_with(&posted);
                                return Err(err.into());
                            }
                            continue;
                        }
                    };
                    if !combiner_lives {
                        // Its combiner died: it is run again.
                        reposted |= shared.ring().repost(&posted);
                        continue;
                    }
                    if let Some(err) = waiting.given_up(now) {
                        if shared.ring().abandon(&posted) {
                            shared.ring().done_with(&posted);
                            return Err(err);
                        }
                        continue;
                    }
                    if now.saturating_sub(posted_at) < REPLY_SPIN {
                        std::thread::yield_now();
                        continue;
                    }
                    shared.ring().wait(&posted, seen, SLEEP);
                }
            }
        }
    }

    /// Becomes the combiner if the write lock is free: runs every posted request in one
    /// transaction. Returns whether it did.
    pub(crate) fn combine<H: Host>(&self, host: &H, shared: &Arc<RingMember>) -> Result<bool> {
        let db = match host.database() {
            // A server took the file meanwhile: it runs the request.
            Err(Error::InUse) if self.served(host) => return Ok(false),
            other => other?,
        };
        let began = crate::base::quiet::catch(|| match db.writable()?.try_begin_write() {
            Err(redb::TransactionError::WouldBlock) => Ok(None),
            other => Ok(Some(other?)),
        })
        .unwrap_or_else(|panic| {
            Err(Error::Storage(format!(
                "the storage engine panicked in begin_write: {panic}"
            )))
        });
        let Some(txn) = host.note_io_failure(began)? else {
            return Ok(false);
        };
        let mut jobs = self.ring_jobs(host, shared);
        // When others are writing too, the requesters that the last commit answered post
        // again within microseconds: the combiner lingers a little for them, so that the next
        // commit carries them rather than leaving them for one more.
        if jobs.len() > 1 || shared.ring().last_batch() > 1 {
            let start = clock::now_ns();
            let mut quiet_since = start;
            loop {
                std::thread::yield_now();
                let now = clock::now_ns();
                let more = self.ring_jobs(host, shared);
                if !more.is_empty() {
                    jobs.extend(more);
                    quiet_since = now;
                }
                if now - quiet_since >= LINGER_QUIET || now - start >= LINGER_MAX {
                    break;
                }
            }
        }
        shared.ring().set_last_batch(jobs.len());
        // Another combiner may have taken every request since; the transaction then aborts
        // unused.
        let committed = execute(Ok(txn), jobs, host.relaxed(), &|committed| {
            host.counters().commit(committed);
        });
        shared.wake();
        drop(db);
        self.make_way(host);
        // A full disk stops this process's handle: the next operation reopens it.
        let _ = host.note_io_failure(committed);
        Ok(true)
    }

    /// Jobs for the requests posted in the ring, for a batch that holds the write lock.
    pub(crate) fn ring_jobs<H: Host>(&self, host: &H, shared: &Arc<RingMember>) -> Vec<Job> {
        shared
            .ring()
            .take_posted(shared.id(), host.live())
            .into_iter()
            .filter_map(|taken| self.ring_job(host, shared, taken))
            .collect()
    }

    /// The job of a taken request; `None` for one that does not decode, which is answered at
    /// once (and fails nothing else of the batch).
    #[allow(clippy::unused_self)] // a step of `ring_jobs`, kept beside it on the router
    fn ring_job<H: Host>(&self, host: &H, shared: &Arc<RingMember>, taken: Taken) -> Option<Job> {
        let op = match decode_request(&taken.request) {
            Ok(Request::Op(op)) => op,
            // A read is answered at once, from the last commit.
            Ok(Request::Query(query)) => {
                let answer = host.read_within(bounded(host), |txn| query.run(txn));
                shared.publish(&taken, &encode_answer(&answer));
                return None;
            }
            Err(err) => {
                shared.publish(&taken, &encode_reply(&Err(err)));
                return None;
            }
        };
        let inner = host.arc();
        let shared = Arc::clone(shared);
        let rerun = taken.rerun;
        Some(foreign_job(
            move |txn: &WriteTransaction| run(&*inner, &*inner, &op, txn, rerun),
            move |result: Result<Done>| shared.publish(&taken, &encode_reply(&result)),
        ))
    }

    /// Answers `query` from a read transaction of this store.
    pub(crate) fn query<H: Host>(&self, host: &H, query: &Query) -> Result<Answer> {
        self.query_within(host, query, bounded(host))
    }

    /// [`Router::query`] for a call that waits for the server or the file's header at
    /// most within `waiting` (a write's, which reads first).
    pub(crate) fn query_within<H: Host>(
        &self,
        host: &H,
        query: &Query,
        waiting: Waiting<'_>,
    ) -> Result<Answer> {
        loop {
            if let Some(shared) = self.member.as_ref().filter(|_| self.served(host)) {
                host.check_fork()?;
                match self.ask_server(host, shared, query, waiting) {
                    Ok(Some(answer)) => return Ok(answer),
                    // A process that took the request from the ring after the server was gone
                    // found the next server holding the file: asked again.
                    Ok(None) | Err(Error::InUse) => {}
                    Err(err) => return Err(err),
                }
            }
            let answer = host.read_within(waiting, |txn| query.run(txn));
            self.make_way(host);
            match answer {
                // A server took the file meanwhile: it answers.
                Err(Error::InUse) if self.served(host) => {}
                other => return other,
            }
        }
    }

    /// Every lease record of the file's leases table, in name order (also where the leases
    /// are kept in shared memory: those of a library that kept them in the file).
    pub(crate) fn file_leases<H: Host>(&self, host: &H) -> Result<Vec<(String, Record)>> {
        match self.query(host, &Query::Records)? {
            Answer::Records(records) => Ok(records),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn value_of<H: Host>(&self, host: &H, key: &[u8]) -> Result<Option<Fenced>> {
        match self.query(host, &Query::Value(key.to_vec()))? {
            Answer::Value(value) => Ok(value),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn keys_of<H: Host>(&self, host: &H, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        match self.query(host, &Query::Keys(prefix.to_vec()))? {
            Answer::Keys(keys) => Ok(keys),
            other => Err(mismatched(&other)),
        }
    }

    /// The highest token the fence `resource` accepted, read within `waiting`.
    pub(crate) fn fence_of<H: Host>(
        &self,
        host: &H,
        resource: &str,
        waiting: Waiting<'_>,
    ) -> Result<Option<u64>> {
        match self.query_within(host, &Query::Fence(resource.to_owned()), waiting)? {
            Answer::Fence(token) => Ok(token),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn counts<H: Host>(&self, host: &H) -> Result<Counts> {
        match self.query(host, &Query::Counts)? {
            Answer::Counts(counts) => Ok(counts),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn history_of<H: Host>(&self, host: &H, name: &str) -> Result<Vec<(u64, Vec<u8>)>> {
        match self.query(host, &Query::History(name.to_owned()))? {
            Answer::History(entries) => Ok(entries),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn verified<H: Host>(&self, host: &H) -> Result<()> {
        match self.query(host, &Query::Verify)? {
            Answer::Verified => Ok(()),
            other => Err(mismatched(&other)),
        }
    }
}

#[cfg(test)]
mod tests;
