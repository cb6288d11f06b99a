//! One commit for every process: writes travel through the shared request ring (`ring/`).
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

use redb::WriteTransaction;

use crate::base::cancel::Waiting;
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::local::LocalEngine;
use crate::ring::{lock_hash, Phase, Posted, Taken};
use crate::rules::context::Context;
use crate::rules::info::Fenced;
use crate::rules::ops::{run, Done, Op};
use crate::rules::query::{mismatched, Answer, Counts, Query};
use crate::rules::record::Record;
use crate::share::member::{Place, RingMember};
use crate::share::wire::{
    decode_answer, decode_reply, decode_request, encode_answer, encode_op, encode_query,
    encode_reply, Request,
};
use crate::storage::commit::{execute, foreign_job, Job};

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

impl LocalEngine {
    /// Runs `op` in a write transaction shared with other writes: through the shared request
    /// ring with every process's (`local/route.rs`), or else with this process's other threads'
    /// (group commit). Gives up with [`Error::Timeout`] if another process keeps the write lock
    /// past `waiting` (by default, the busy timeout), or with [`Error::Cancelled`] when its
    /// handle fires (at once, when it fired before).
    pub(crate) fn submit(&self, op: Op, waiting: Option<Waiting<'_>>) -> Result<Done> {
        self.check_fork()?;
        if self.read_only {
            return Err(crate::storage::db::read_only());
        }
        let waiting = waiting.unwrap_or_else(|| Waiting::new(self.busy_timeout, None));
        crate::base::cancel::check(waiting.cancel)?;
        let db = loop {
            // Through the ring: to a server, or to be committed with other processes' writes
            // (unless `share_commits` is off).
            if let Some(shared) = self
                .shared
                .as_ref()
                .filter(|_| self.share_commits || self.served())
            {
                self.check_file()?;
                if let Some(done) = self.submit_shared(shared, &op, waiting)? {
                    return Ok(done);
                }
            }
            match self.database() {
                // A server took the file since the request was withdrawn: it goes there.
                Err(Error::InUse) if self.served() => {}
                other => break other?,
            }
        };
        db.writable()?;
        // The file check runs once a commit, not once an operation.
        let admit = || self.check_file();
        // A batch that holds the write lock takes along what other processes posted.
        let others = || {
            self.shared
                .as_ref()
                .filter(|_| self.share_commits)
                .map_or_else(Vec::new, |shared| self.ring_jobs(shared))
        };
        let inner = self.arc();
        let run = move |txn: &WriteTransaction| run(&*inner, &op, txn, false);
        let committed = |ops| self.counted_commit(ops);
        let result = self
            .commits
            .run(&db, &admit, &others, &committed, waiting, run);
        drop(db);
        self.make_way();
        if let Some(shared) = &self.shared {
            shared.wake();
        }
        self.note_io_failure(result)
    }

    /// A place in the waiting queue of the lock `name`; `None` without a usable ring (the
    /// wait is then not ordered).
    pub(crate) fn queue_up(&self, name: &str) -> Option<Place<'_>> {
        Some(self.shared.as_deref()?.queue_up(name, &self.live))
    }

    /// Wakes the oldest waiter of the lock `name`, which was just released.
    pub(crate) fn wake_waiter(&self, name: &str) {
        if let Some(shared) = self.shared.as_deref() {
            shared
                .ring()
                .wake_oldest(lock_hash(name), clock::now_ns(), &self.live);
        }
    }

    /// Runs `op` through the ring. `Ok(None)` when it was not posted, or withdrawn: the caller
    /// commits it directly.
    pub(crate) fn submit_shared(
        &self,
        shared: &Arc<RingMember>,
        op: &Op,
        waiting: Waiting<'_>,
    ) -> Result<Option<Done>> {
        let request = encode_op(op);
        match self.post(shared, &request, waiting)? {
            Some(posted) => self.await_done(shared, posted, waiting),
            None => Ok(None),
        }
    }

    /// Waits for the result of the posted write `posted` (see `await_reply`).
    fn await_done(
        &self,
        shared: &Arc<RingMember>,
        posted: Posted,
        waiting: Waiting<'_>,
    ) -> Result<Option<Done>> {
        match self.await_reply(shared, posted, waiting, true)? {
            Some(reply) => decode_reply(&reply)?.map(Some),
            None => Ok(None),
        }
    }

    /// Answers `query` through the server. `Ok(None)` when no server serves the store (any
    /// more): the caller reads the file itself.
    pub(crate) fn ask_server(
        &self,
        shared: &Arc<RingMember>,
        query: &Query,
        waiting: Waiting<'_>,
    ) -> Result<Option<Answer>> {
        let Some(posted) = self.post(shared, &encode_query(query), waiting)? else {
            return Ok(None);
        };
        match self.await_reply(shared, posted, waiting, false)? {
            Some(reply) => decode_answer(&reply)?.map(Some),
            None => Ok(None),
        }
    }

    /// Posts `request`. `None` when it could not be posted (a full ring), unless a server
    /// serves the store: then it waits for a free slot, within `waiting`.
    fn post(
        &self,
        shared: &RingMember,
        request: &[u8],
        waiting: Waiting<'_>,
    ) -> Result<Option<Posted>> {
        loop {
            shared.ring().intact()?;
            match shared.ring().try_post(shared.id(), request, &self.live) {
                Ok(Some(posted)) => return Ok(Some(posted)),
                Ok(None) => {}
                // Its bulk file could not be written: nothing was posted. A store that may
                // commit itself does; one that a server serves says why at once.
                Err(_) if !self.served() => return Ok(None),
                Err(err) => return Err(err.into()),
            }
            if !self.served() {
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
    fn await_reply(
        &self,
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
                    let served = self.served();
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
                        self.combine(shared)
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
                    let combiner_lives = match self.live.is_held(combiner) {
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
    pub(crate) fn combine(&self, shared: &Arc<RingMember>) -> Result<bool> {
        let db = match self.database() {
            // A server took the file meanwhile: it runs the request.
            Err(Error::InUse) if self.served() => return Ok(false),
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
        let Some(txn) = self.note_io_failure(began)? else {
            return Ok(false);
        };
        let mut jobs = self.ring_jobs(shared);
        // When others are writing too, the requesters that the last commit answered post
        // again within microseconds: the combiner lingers a little for them, so that the next
        // commit carries them rather than leaving them for one more.
        if jobs.len() > 1 || shared.ring().last_batch() > 1 {
            let start = clock::now_ns();
            let mut quiet_since = start;
            loop {
                std::thread::yield_now();
                let now = clock::now_ns();
                let more = self.ring_jobs(shared);
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
        let committed = execute(Ok(txn), jobs, self.relaxed(), &|committed| {
            self.counted_commit(committed);
        });
        shared.wake();
        drop(db);
        self.make_way();
        // A full disk stops this process's handle: the next operation reopens it.
        let _ = self.note_io_failure(committed);
        Ok(true)
    }

    /// Jobs for the requests posted in the ring, for a batch that holds the write lock.
    pub(crate) fn ring_jobs(&self, shared: &Arc<RingMember>) -> Vec<Job> {
        shared
            .ring()
            .take_posted(shared.id(), &self.live)
            .into_iter()
            .filter_map(|taken| self.ring_job(shared, taken))
            .collect()
    }

    /// The job of a taken request; `None` for one that does not decode, which is answered at
    /// once (and fails nothing else of the batch).
    fn ring_job(&self, shared: &Arc<RingMember>, taken: Taken) -> Option<Job> {
        let op = match decode_request(&taken.request) {
            Ok(Request::Op(op)) => op,
            // A read is answered at once, from the last commit.
            Ok(Request::Query(query)) => {
                let answer = self.read(|txn| query.run(txn));
                shared.publish(&taken, &encode_answer(&answer));
                return None;
            }
            Err(err) => {
                shared.publish(&taken, &encode_reply(&Err(err)));
                return None;
            }
        };
        let inner = self.arc();
        let shared = Arc::clone(shared);
        let rerun = taken.rerun;
        Some(foreign_job(
            move |txn: &WriteTransaction| run(&*inner, &op, txn, rerun),
            move |result: Result<Done>| shared.publish(&taken, &encode_reply(&result)),
        ))
    }
}

impl LocalEngine {
    /// Answers `query` from a read transaction of this store.
    pub(crate) fn query(&self, query: &Query) -> Result<Answer> {
        self.query_within(query, self.bounded(None))
    }

    /// [`LocalEngine::query`] for a call that waits for the server or the file's header at
    /// most within `waiting` (a write's, which reads first).
    pub(crate) fn query_within(&self, query: &Query, waiting: Waiting<'_>) -> Result<Answer> {
        loop {
            if let Some(shared) = self.shared.as_ref().filter(|_| self.served()) {
                self.check_fork()?;
                match self.ask_server(shared, query, waiting) {
                    Ok(Some(answer)) => return Ok(answer),
                    // A process that took the request from the ring after the server was gone
                    // found the next server holding the file: asked again.
                    Ok(None) | Err(Error::InUse) => {}
                    Err(err) => return Err(err),
                }
            }
            let answer = self.read_within(waiting, |txn| query.run(txn));
            self.make_way();
            match answer {
                // A server took the file meanwhile: it answers.
                Err(Error::InUse) if self.served() => {}
                other => return other,
            }
        }
    }

    /// The record of the lock `name` (its lease, or the grants of a semaphore or shared
    /// lock), if there is one.
    pub(crate) fn lease_of(&self, name: &str) -> Result<Option<Record>> {
        if let Some(member) = self.map() {
            self.check_fork()?;
            // A server waiting to start needs this process to let go of the file, even when
            // it only touches its leases.
            self.make_way();
            return Ok(
                crate::share::leases::entry_of(member.ring(), name)?.and_then(|entry| entry.record)
            );
        }
        self.check_leases_in_file()?;
        match self.query(&Query::Record(name.to_owned()))? {
            Answer::Record(lease) => Ok(lease),
            other => Err(mismatched(&other)),
        }
    }

    /// Refuses to answer from the file what only the shared memory holds: for a read-only
    /// store of a user who may not use the ring (who may not write the store), while processes
    /// use it, so that such a user is never told that a held lock is free.
    fn check_leases_in_file(&self) -> Result<()> {
        if self.read_only
            && self.mode == redb::ConcurrencyMode::MultiWriter
            && self.shared.is_none()
            && self.live.maps_in_use()?
        {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "the leases of {} are in its shared memory (its ring in /dev/shm), which \
                     only users who may write the store can use: this user cannot see them",
                    self.path.display()
                ),
            )));
        }
        Ok(())
    }

    /// Every lease record of the file's leases table, in name order (also where the leases
    /// are kept in shared memory: those of a library that kept them in the file).
    pub(crate) fn file_leases(&self) -> Result<Vec<(String, Record)>> {
        match self.query(&Query::Records)? {
            Answer::Records(records) => Ok(records),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn leases(&self) -> Result<Vec<(String, Record)>> {
        if let Some(member) = self.map() {
            self.check_fork()?;
            self.make_way();
            return crate::local::leases::records(member);
        }
        self.check_leases_in_file()?;
        match self.query(&Query::Records)? {
            Answer::Records(records) => Ok(records),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn value_of(&self, key: &[u8]) -> Result<Option<Fenced>> {
        match self.query(&Query::Value(key.to_vec()))? {
            Answer::Value(value) => Ok(value),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn keys_of(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        match self.query(&Query::Keys(prefix.to_vec()))? {
            Answer::Keys(keys) => Ok(keys),
            other => Err(mismatched(&other)),
        }
    }

    /// The highest token the fence `resource` accepted, read within `waiting`.
    pub(crate) fn fence_of(&self, resource: &str, waiting: Waiting<'_>) -> Result<Option<u64>> {
        match self.query_within(&Query::Fence(resource.to_owned()), waiting)? {
            Answer::Fence(token) => Ok(token),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn counts(&self) -> Result<Counts> {
        match self.query(&Query::Counts)? {
            Answer::Counts(counts) => Ok(counts),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn history_of(&self, name: &str) -> Result<Vec<(u64, Vec<u8>)>> {
        match self.query(&Query::History(name.to_owned()))? {
            Answer::History(entries) => Ok(entries),
            other => Err(mismatched(&other)),
        }
    }

    pub(crate) fn verified(&self) -> Result<()> {
        match self.query(&Query::Verify)? {
            Answer::Verified => Ok(()),
            other => Err(mismatched(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::api::store::Store;

    /// A store and its engine, for tests that reach inside it.
    struct Opened {
        store: Store,
        inner: Arc<LocalEngine>,
    }

    impl std::ops::Deref for Opened {
        type Target = Store;

        fn deref(&self) -> &Store {
            &self.store
        }
    }

    fn open_with(path: &Path, options: &crate::Options) -> Opened {
        let inner = LocalEngine::open(path, options).unwrap();
        assert!(inner.shared.is_some(), "the ring is usable in tests");
        let store = Store::new(Arc::clone(&inner) as Arc<dyn crate::engine::Engine>);
        Opened { store, inner }
    }

    fn open(path: &Path) -> Opened {
        open_with(path, &crate::Options::default())
    }

    fn shared(store: &Opened) -> Arc<RingMember> {
        Arc::clone(store.inner.shared.as_ref().unwrap())
    }

    fn waiting() -> Waiting<'static> {
        Waiting::new(Duration::from_secs(10), None)
    }

    /// A fenced write of `key` with `token` by `store`, posted to the ring.
    fn post_put(store: &Opened, key: &[u8], token: u64) -> Posted {
        let op = Op::Put {
            key: key.to_vec(),
            value: Some(b"v".to_vec()),
            token,
            lease: None,
        };
        let shared = shared(store);
        shared
            .ring()
            .post(shared.id(), &encode_op(&op), &store.inner.live)
            .unwrap()
    }

    fn wrote(done: Option<Done>) {
        assert!(matches!(done, Some(Done::Put { .. })), "{done:?}");
    }

    #[test]
    fn a_request_whose_combiner_died_before_committing_is_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let requester = open(&path);
        let combiner = open(&path);
        let token = requester
            .acquire("a", Duration::from_secs(30))
            .unwrap()
            .token();
        let posted = post_put(&requester, b"k", token);
        let taken = shared(&combiner)
            .ring()
            .take_posted(shared(&combiner).id(), &combiner.inner.live);
        assert_eq!(taken.len(), 1);
        drop(combiner);
        wrote(
            requester
                .inner
                .await_done(&shared(&requester), posted, waiting())
                .unwrap(),
        );
        assert_eq!(requester.get(b"k").unwrap().unwrap().token, token);
    }

    /// A combiner takes every posted request, runs and commits them, and dies before it
    /// publishes the replies.
    fn commit_posted_and_die(combiner: Opened) {
        let inner = Arc::clone(&combiner.inner);
        let jobs: Vec<Job> = shared(&combiner)
            .ring()
            .take_posted(shared(&combiner).id(), &combiner.inner.live)
            .into_iter()
            .map(|taken| {
                let op = crate::share::wire::decode_op(&taken.request).unwrap();
                let inner = Arc::clone(&inner);
                foreign_job(
                    move |txn: &WriteTransaction| run(&*inner, &op, txn, false),
                    |_: Result<Done>| {},
                )
            })
            .collect();
        let txn = inner
            .database()
            .unwrap()
            .writable()
            .unwrap()
            .begin_write()
            .unwrap();
        execute(Ok(txn), jobs, false, &|_| {}).unwrap();
    }

    #[test]
    fn a_rerun_refused_for_what_came_after_its_first_run_has_an_unknown_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let requester = open(&path);
        let first = requester.acquire("a", Duration::from_secs(60)).unwrap();
        let op = Op::Fence {
            resource: "bucket".into(),
            token: first.token(),
        };
        let ring = shared(&requester);
        let posted = ring
            .ring()
            .post(ring.id(), &encode_op(&op), &requester.inner.live)
            .unwrap();
        commit_posted_and_die(open(&path));
        // A higher token passes the fence before the request runs again.
        let second = requester.acquire("b", Duration::from_secs(60)).unwrap();
        requester.fence("bucket", second.token()).unwrap();
        // Its first run landed, but the re-run cannot tell: not a definite refusal.
        let done = requester.inner.await_done(&ring, posted, waiting());
        assert!(matches!(done, Err(Error::Timeout { .. })), "{done:?}");
        assert_eq!(
            requester.fence_token("bucket").unwrap(),
            Some(second.token())
        );
        // A first run of the same fence now is a definite refusal.
        assert!(matches!(
            requester.fence("bucket", first.token()),
            Err(Error::StaleToken { .. })
        ));
    }

    #[test]
    fn a_holders_write_whose_combiner_died_after_committing_reports_that_it_landed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let requester = open(&path);
        // Opened first: its open takes longer than the lease below lasts.
        let combiner = open(&path);
        let holder = requester.acquire("a", Duration::from_millis(30)).unwrap();
        let op = Op::Put {
            key: b"k".to_vec(),
            value: Some(b"v".to_vec()),
            token: holder.token(),
            lease: Some("a".into()),
        };
        let ring = shared(&requester);
        let posted = ring
            .ring()
            .post(ring.id(), &encode_op(&op), &requester.inner.live)
            .unwrap();
        commit_posted_and_die(combiner);
        // The lease runs out before the request runs again: the write landed all the same,
        // and is reported so, not refused as a holder's write after its lease.
        std::thread::sleep(Duration::from_millis(60));
        let done = requester
            .inner
            .await_done(&ring, posted, waiting())
            .unwrap();
        assert!(matches!(done, Some(Done::Put { .. })), "{done:?}");
        assert_eq!(requester.get(b"k").unwrap().unwrap().token, holder.token());
        // A first run of the same write now is refused: the lease ran out.
        assert!(matches!(
            holder.put(b"k", b"v"),
            Err(Error::LockLost { .. })
        ));
    }

    #[test]
    fn a_request_of_a_dead_requester_is_dropped_unrun() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let combiner = open(&path);
        let ring = shared(&combiner);
        // Posted under a liveness id that nobody holds: its requester is gone.
        let op = Op::Fence {
            resource: "r".into(),
            token: 1,
        };
        let posted = ring
            .ring()
            .post(
                crate::storage::liveness::fresh_id().unwrap(),
                &encode_op(&op),
                &combiner.inner.live,
            )
            .unwrap();
        assert!(ring
            .ring()
            .take_posted(ring.id(), &combiner.inner.live)
            .is_empty());
        assert_eq!(
            ring.ring().phase(&posted),
            Phase::Lost,
            "its slot is free again"
        );
    }

    #[test]
    fn a_full_ring_commits_directly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = open(&path);
        let ring = shared(&store);
        let op = encode_op(&Op::Fence {
            resource: "r".into(),
            token: 1,
        });
        let mut posted = Vec::new();
        while let Some(p) = ring.ring().post(ring.id(), &op, &store.inner.live) {
            posted.push(p);
        }
        assert_eq!(posted.len(), 64);
        let holder = store.acquire("a", Duration::from_secs(5)).unwrap();
        holder.put(b"k", b"v").unwrap();
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
        // The direct commits took the posted requests along.
        for p in &posted {
            assert_eq!(ring.ring().phase(p), Phase::Done);
        }
    }

    #[test]
    fn behind_a_paused_combiner_a_posted_write_withdraws_and_times_out_changing_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let options = crate::Options {
            busy_timeout: Duration::from_millis(100),
            ..crate::Options::default()
        };
        let requester = open_with(&path, &options);
        let holder = requester.acquire("a", Duration::from_secs(30)).unwrap();
        let paused = open(&path);
        // Holds the write lock and takes nothing, as a combiner stopped before it took.
        let txn = paused
            .inner
            .database()
            .unwrap()
            .writable()
            .unwrap()
            .begin_write()
            .unwrap();
        assert!(matches!(holder.put(b"k", b"v"), Err(Error::Timeout { .. })));
        drop(txn);
        assert!(requester.get(b"k").unwrap().is_none());
        holder.put(b"k", b"v").unwrap();
        assert_eq!(requester.get(b"k").unwrap().unwrap().value, b"v");
    }

    #[test]
    fn waiting_acquires_are_granted_in_the_order_they_began_to_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = open(&path);
        let ring = shared(&store);
        let hot = lock_hash("hot");
        for _ in 0..5 {
            let holder = store.acquire("hot", Duration::from_secs(30)).unwrap();
            let waiters: Vec<_> = (0..3)
                .map(|i| {
                    // Another store of the same file: another process, as far as locks go.
                    let store = open(&path);
                    let waiter = std::thread::spawn(move || {
                        let holder = store
                            .acquire_wait("hot", Duration::from_secs(30), Duration::from_secs(60))
                            .unwrap();
                        let token = holder.token();
                        std::thread::sleep(Duration::from_millis(5));
                        drop(holder);
                        token
                    });
                    // The next waiter starts once this one is queued.
                    while ring.ring().queued(hot) <= i {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    waiter
                })
                .collect();
            drop(holder);
            let tokens: Vec<u64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
            assert!(
                tokens.windows(2).all(|w| w[0] < w[1]),
                "granted out of the order of waiting: {tokens:?}"
            );
        }
    }

    #[test]
    fn processes_share_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let a = open(&path);
        let b = open(&path);
        let token = a.acquire("a", Duration::from_secs(30)).unwrap().token();
        let commits = a.metrics().unwrap().commits;
        // Both post; one combine commits both.
        let posted_a = post_put(&a, b"a", token);
        let posted_b = post_put(&b, b"b", token);
        assert!(b.inner.combine(&shared(&b)).unwrap());
        assert_eq!(shared(&a).ring().phase(&posted_a), Phase::Done);
        assert_eq!(shared(&b).ring().phase(&posted_b), Phase::Done);
        wrote(
            a.inner
                .await_done(&shared(&a), posted_a, waiting())
                .unwrap(),
        );
        wrote(
            b.inner
                .await_done(&shared(&b), posted_b, waiting())
                .unwrap(),
        );
        assert_eq!(a.metrics().unwrap().commits, commits + 1);
        assert!(a.get(b"a").unwrap().is_some() && a.get(b"b").unwrap().is_some());
    }
}
