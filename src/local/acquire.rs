//! Grants and waits of a local store: one request ([`Acquire`]) for every public acquire.
//!
//! A grant is asked for by the process that will hold it: it first locks a fresh liveness id
//! of its own ([`Grant`]), so that the lease's liveness never depends on the process that
//! commits the grant, then submits the operation (route.rs). Most refusals are answered from a
//! read, before anything is submitted. A waiting acquire takes a place in the lock's queue in
//! the ring at its first refusal and is granted in the order waits began; a waiting
//! `acquire_all` is not queued and holds nothing while it waits.

use std::sync::Arc;

use crate::base::cancel::{check, Waiting, POLL};
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::{check_key, check_name, check_ttl, duration_ns};
use crate::engine::{Acquire, LeaseHandle, Locks};
use crate::local::handle::LocalLease;
use crate::local::log_user::LogUser;
use crate::local::observe::Attempt;
use crate::local::LocalEngine;
use crate::rules::admit::{admit_grant, blocker, check_join, own_blocker};
use crate::rules::kind::{check_kind, Kind, MAX_HOLDERS};
use crate::rules::ops::{unexpected, Done, Op};
use crate::rules::record::Record;
use crate::share::member::Place;

impl LocalEngine {
    /// Grants `request` (see [`crate::engine::Engine::acquire`]), counted and told to the
    /// observer.
    pub(crate) fn grant_request(&self, request: &Acquire<'_>) -> Result<Vec<Arc<dyn LeaseHandle>>> {
        check(request.cancel)?;
        let leases = match request.locks {
            Locks::All(names) => self.acquire_all(names, request)?,
            Locks::One(name) => {
                if let Some((key, value)) = request.write {
                    self.check_value(value)?;
                    check_key(key)?;
                }
                let mut attempt = Attempt::start();
                let result = match request.wait {
                    Some(waiting) => self.wait_in_turn(name, request, waiting, &mut attempt),
                    None => self.grant(name, request, None),
                }
                .map(|lease| vec![lease]);
                self.counters
                    .acquired(&[name], request.kind, &attempt, tokens(&result));
                result?
            }
        };
        let thread = request.thread();
        for lease in &leases {
            self.holds.granted(lease.state.token, thread);
        }
        Ok(leases
            .into_iter()
            .map(|lease| lease as Arc<dyn LeaseHandle>)
            .collect())
    }

    /// Waits for a grant of `name` as `request` asks, in the lock's waiting queue.
    fn wait_in_turn(
        &self,
        name: &str,
        request: &Acquire<'_>,
        waiting: Waiting<'_>,
        attempt: &mut Attempt,
    ) -> Result<Arc<LocalLease>> {
        check(waiting.cancel)?;
        // A place in the lock's waiting queue, taken at the first refusal and left when the
        // wait ends: waiters of every process are granted the lock oldest first.
        let mut place: Option<Place<'_>> = None;
        loop {
            // A waiting acquire not queued yet stands behind every queued waiter.
            let ticket = Some(place.as_ref().map_or(u64::MAX, Place::ticket));
            match self.grant(name, request, ticket) {
                Err(Error::Locked { remaining, .. }) => {
                    attempt.waited = true;
                    waiting.step()?;
                    if place.is_none() {
                        place = self.router.queue_up(name, &self.live);
                    }
                    // The holder's liveness lock, as the record names it now.
                    let record = self.lease_of(name)?;
                    let now = clock::now_ns();
                    self.refuse_own_wait(name, request.kind, record.as_ref(), waiting, now)?;
                    let lease = blocker(self, record.as_ref(), now)?;
                    // A semaphore's waiter waits on one permit, but any permit let go is its
                    // turn: it looks again every millisecond.
                    let deadline = match request.kind {
                        Kind::Semaphore(_) => {
                            waiting.deadline.min(now.saturating_add(duration_ns(POLL)))
                        }
                        _ => waiting.deadline,
                    };
                    match &mut place {
                        // It watches the lease's expiry itself; a refusal for an earlier
                        // waiter has no time left to wait out.
                        Some(place) => {
                            place.wait_turn(lease.as_ref(), deadline, waiting.cancel)?;
                        }
                        None => {
                            let until = deadline
                                .min(clock::now_ns().saturating_add(duration_ns(remaining)));
                            if let Some(lease) = lease {
                                self.wait_until_free(lease.live, until, waiting.cancel)?;
                            }
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// One grant attempt of `name` as `request` asks: exclusively (with its write, if any), or
    /// one more shared holder or permit. `ticket` is the waiter's place in the queue.
    fn grant(
        &self,
        name: &str,
        request: &Acquire<'_>,
        ticket: Option<u64>,
    ) -> Result<Arc<LocalLease>> {
        let (kind, ttl) = (request.kind, request.ttl);
        check_name("lock name", name)?;
        check_ttl(ttl)?;
        check_kind(kind)?;
        if let Some(member) = self.lease_map.member() {
            return self.grant_in_lease_map(member, name, request, ticket);
        }
        // A refusal needs no write transaction: most are answered from a read.
        let now = clock::now_ns();
        // Through a server the read would cost a round trip of its own: the grant's own check
        // refuses there.
        let record = if self.router.served(self) {
            None
        } else {
            self.lease_of(name)?
        };
        admit_grant(self, name, record.as_ref(), kind, ticket, now)?;
        if self.read_only {
            return Err(crate::storage::db::read_only());
        }
        // The liveness lock is this process's before the grant is asked for, whichever
        // process commits it; it is released again unless the grant is reported.
        let grant = Grant::take(self)?;
        let op = match kind {
            Kind::Exclusive => Op::Acquire {
                name: name.to_owned(),
                ttl,
                write: request
                    .write
                    .map(|(key, value)| (key.to_vec(), value.to_vec())),
                holder: self.me,
                live: grant.live,
                ticket,
            },
            kind => Op::AcquireKind {
                name: name.to_owned(),
                kind,
                ttl,
                holder: self.me,
                live: grant.live,
                ticket,
            },
        };
        match self
            .router
            .submit(self, op, Some(request.commit_wait(self.busy_timeout)))?
        {
            Done::Granted { token, expires_ns } => Ok(LocalLease::new(
                self.arc(),
                name.to_owned(),
                kind,
                token,
                grant.keep(),
                expires_ns,
            )),
            other => Err(unexpected(&other)),
        }
    }

    /// One grant attempt of `name` in the store's lease map (`lease_map.rs`); an acquire that
    /// writes a value writes it next, with the new lease's token, and gives the lease back
    /// when the write fails: both or neither, as far as anyone but the caller can tell.
    fn grant_in_lease_map(
        &self,
        member: &crate::share::member::RingMember,
        name: &str,
        request: &Acquire<'_>,
        ticket: Option<u64>,
    ) -> Result<Arc<LocalLease>> {
        self.check_fork()?;
        if self.read_only {
            return Err(crate::storage::db::read_only());
        }
        self.check_file()?;
        let grant = Grant::take(self)?;
        let (kind, ttl) = (request.kind, request.ttl);
        let granted = match (request.write, self.log.get()) {
            (None, _) => self
                .lease_map
                .grant_in_map(self, member, name, kind, ttl, ticket, self.me, grant.live),
            // Through the redo log: granted in the map, then written with the grant's token;
            // a write that fails gives the grant back. A write refused as stale (a higher token
            // wrote the key between this grant and its write, which one transaction makes
            // impossible unless its process dies before the commit and its rerun finds the key
            // written since) is written again with a new token, above that one's, which the
            // grant takes in place (`regrant_in_map`): the lock stays held throughout, so no
            // holder comes between the grant others were refused in the name of and the one
            // returned. Only a grant that ended meanwhile (it expired and was replaced) is
            // granted anew, or refused as lost (`LockLost`, naming it) while another holds the
            // lock.
            // The write is fenced by the key's highest token alone, not by the lease, as the
            // default path's transaction writes it: the grant is this unit's own, and was
            // visible (others were refused in its name) from the moment it was made, so a stop
            // between the two that outlasts the TTL must not turn it into a refusal that gives
            // back a grant others saw. The holder returned then holds an expired lease, as
            // one returned after a transaction stopped as long does.
            // A value over the log's inline limit is committed to the store file before the
            // grant (`LogUser::store_large`), so that the grant is not visible while it commits.
            (Some((key, value)), Some(user)) => {
                let wait = request.commit_wait(self.busy_timeout);
                let stored = std::cell::Cell::new(LogUser::store_large(self, value, wait)?);
                let mut regranted = None;
                // The token of a grant that ended before its write landed (see below).
                let mut ended: Option<u64> = None;
                let granted = loop {
                    let granted = match regranted.take() {
                        Some(regranted) => Ok(regranted),
                        None => self
                            .lease_map
                            .grant_in_map(
                                self, member, name, kind, ttl, ticket, self.me, grant.live,
                            )
                            .map_err(|err| match (err, ended) {
                                // Others saw that grant, so not `Locked`: it was lost.
                                (Error::Locked { token: current, .. }, Some(token)) => {
                                    Error::LockLost {
                                        token,
                                        current: Some(current),
                                    }
                                }
                                (err, _) => err,
                            }),
                    };
                    let Ok((token, expires_ns)) = granted else {
                        break granted;
                    };
                    #[cfg(test)]
                    crate::local::lease_map::hooks::before_write();
                    let Err(err) =
                        user.put_stored(self, key, Some(value), &stored, token, None, wait)
                    else {
                        break Ok((token, expires_ns));
                    };
                    // Any other failure, or the wait run out (the key kept being written
                    // higher): the grant is given back. Not `StaleToken` at the end of the
                    // wait: the token the refusal names was never returned to the caller.
                    // Granted again, the new token is above every token handed out, so above
                    // the key's (a write's token must have been granted: `check_granted`).
                    let again = match err {
                        Error::StaleToken { .. } => wait.step().and_then(|()| {
                            #[cfg(test)]
                            crate::local::lease_map::hooks::after_stale();
                            self.lease_map
                                .regrant_in_map(self, member, name, ttl, self.me, grant.live, token)
                        }),
                        err => Err(err),
                    };
                    match again {
                        // Written again with the new token.
                        Ok(Some(again)) => regranted = Some(again),
                        // The grant ended meanwhile (the call was stopped past its TTL, and the
                        // lock granted to another, or its record ended): granted anew, or, if
                        // another holds the lock now, refused as `LockLost`.
                        Ok(None) => ended = Some(token),
                        Err(err) => {
                            self.lease_map
                                .withdraw_in_map(self, member, name, grant.live);
                            break Err(err);
                        }
                    }
                };
                LogUser::forget(self, stored.get(), &granted, wait);
                granted
            }
            // Granted in the write's own transaction (see `Op::check`): a refusal writes
            // nothing in the map; a grant whose transaction fails after it is withdrawn here.
            (Some((key, value)), None) => {
                let op = Op::Acquire {
                    name: name.to_owned(),
                    ttl,
                    write: Some((key.to_vec(), value.to_vec())),
                    holder: self.me,
                    live: grant.live,
                    ticket,
                };
                match self
                    .router
                    .submit(self, op, Some(request.commit_wait(self.busy_timeout)))
                {
                    Ok(Done::Granted { token, expires_ns }) => Ok((token, expires_ns)),
                    result => {
                        self.lease_map
                            .withdraw_in_map(self, member, name, grant.live);
                        Err(match result {
                            Ok(other) => unexpected(&other),
                            Err(err) => err,
                        })
                    }
                }
            }
        };
        self.router.make_way(self);
        let (token, expires_ns) = granted?;
        Ok(LocalLease::new(
            self.arc(),
            name.to_owned(),
            kind,
            token,
            grant.keep(),
            expires_ns,
        ))
    }

    /// Acquires every lock of `names` exclusively for `request`, all or none, trying once or
    /// (`request.wait`) until every lock is free at once; counted and told as one attempt.
    fn acquire_all(&self, names: &[&str], request: &Acquire<'_>) -> Result<Vec<Arc<LocalLease>>> {
        let mut attempt = Attempt::start();
        let result = self.acquire_all_checked(names, request, &mut attempt);
        self.counters
            .acquired(names, Kind::Exclusive, &attempt, tokens(&result));
        result
    }

    fn acquire_all_checked(
        &self,
        names: &[&str],
        request: &Acquire<'_>,
        attempt: &mut Attempt,
    ) -> Result<Vec<Arc<LocalLease>>> {
        let (ttl, waiting) = (request.ttl, request.wait);
        if names.is_empty() || names.len() > MAX_HOLDERS as usize {
            return Err(Error::invalid(format!(
                "an acquire of several locks names 1 to {MAX_HOLDERS} of them, not {}",
                names.len()
            )));
        }
        for (i, name) in names.iter().enumerate() {
            check_name("lock name", name)?;
            if names[..i].contains(name) {
                return Err(Error::invalid(format!("lock name {name} is given twice")));
            }
        }
        check_ttl(ttl)?;
        if let Some(waiting) = waiting {
            check(waiting.cancel)?;
        }
        loop {
            match self.try_acquire_all(names, request) {
                Err(Error::Locked { .. }) if waiting.is_some() => {
                    attempt.waited = true;
                    let waiting = waiting.expect("checked");
                    waiting.step()?;
                    self.wait_for_any(names, waiting)?;
                }
                other => return other,
            }
        }
    }

    fn try_acquire_all(
        &self,
        names: &[&str],
        request: &Acquire<'_>,
    ) -> Result<Vec<Arc<LocalLease>>> {
        let ttl = request.ttl;
        if let Some(member) = self.lease_map.member() {
            self.check_fork()?;
            if self.read_only {
                return Err(crate::storage::db::read_only());
            }
            self.check_file()?;
            let grants = names
                .iter()
                .map(|_| Grant::take(self))
                .collect::<Result<Vec<_>>>()?;
            let lives: Vec<u64> = grants.iter().map(|grant| grant.live).collect();
            let (first, expires_ns) = self
                .lease_map
                .grant_all_in_map(self, member, names, ttl, &lives)?;
            return Ok(self.exclusive_leases(names, grants, first, expires_ns));
        }
        let now = clock::now_ns();
        if !self.router.served(self) {
            for name in names {
                check_join(
                    self,
                    name,
                    self.lease_of(name)?.as_ref(),
                    Kind::Exclusive,
                    now,
                )?;
            }
        }
        if self.read_only {
            return Err(crate::storage::db::read_only());
        }
        let grants = names
            .iter()
            .map(|_| Grant::take(self))
            .collect::<Result<Vec<_>>>()?;
        let op = Op::AcquireAll {
            names: names.iter().map(|&name| name.to_owned()).collect(),
            ttl,
            holder: self.me,
            lives: grants.iter().map(|grant| grant.live).collect(),
        };
        match self
            .router
            .submit(self, op, Some(request.commit_wait(self.busy_timeout)))?
        {
            Done::GrantedAll {
                first,
                count,
                expires_ns,
            } if count as usize == names.len() => {
                Ok(self.exclusive_leases(names, grants, first, expires_ns))
            }
            other => Err(unexpected(&other)),
        }
    }

    /// The exclusive leases of `names` granted at once: tokens from `first` on, each keeping its
    /// grant's liveness lock, all ending at `expires_ns`.
    fn exclusive_leases(
        &self,
        names: &[&str],
        grants: Vec<Grant<'_>>,
        first: u64,
        expires_ns: u64,
    ) -> Vec<Arc<LocalLease>> {
        names
            .iter()
            .zip(grants)
            .zip(first..)
            .map(|((name, grant), token)| {
                LocalLease::new(
                    self.arc(),
                    (*name).to_owned(),
                    Kind::Exclusive,
                    token,
                    grant.keep(),
                    expires_ns,
                )
            })
            .collect()
    }

    /// [`Error::WouldDeadlock`] when a wait for `name` as `kind`, refused by `record`, could end
    /// only with a lease the waiting thread (`waiting.thread()`) holds through this engine
    /// (`rules::admit::own_blocker`).
    fn refuse_own_wait(
        &self,
        name: &str,
        kind: Kind,
        record: Option<&Record>,
        waiting: Waiting<'_>,
        now: u64,
    ) -> Result<()> {
        let thread = waiting.thread();
        let mine = |token| self.holds.is_mine(token, thread);
        match own_blocker(self, record, kind, &mine, now)? {
            Some(token) => Err(Error::WouldDeadlock {
                name: name.to_owned(),
                token,
            }),
            None => Ok(()),
        }
    }

    /// Waits (within `waiting`) until the first lock of `names` that a live lease holds is let
    /// go, expires, or its holder dies.
    fn wait_for_any(&self, names: &[&str], waiting: Waiting<'_>) -> Result<()> {
        let now = clock::now_ns();
        let mut held = None;
        for name in names {
            let record = self.lease_of(name)?;
            self.refuse_own_wait(name, Kind::Exclusive, record.as_ref(), waiting, now)?;
            if check_join(self, name, record.as_ref(), Kind::Exclusive, now).is_err() {
                held = blocker(self, record.as_ref(), now)?;
                break;
            }
        }
        if let Some(lease) = held {
            let until = waiting.deadline.min(lease.expires_ns);
            self.wait_until_free(lease.live, until, waiting.cancel)?;
        }
        Ok(())
    }
}

/// The tokens of `result`'s leases, or its error, as the counters and the observer take them.
fn tokens(result: &Result<Vec<Arc<LocalLease>>>) -> std::result::Result<Vec<u64>, &Error> {
    match result {
        Ok(leases) => Ok(leases.iter().map(|lease| lease.state.token).collect()),
        Err(err) => Err(err),
    }
}

/// The liveness lock of a lease being requested: a fresh liveness id that the requesting store
/// locks before it asks for the grant, released again unless the grant is kept. A drop guard,
/// so a grant that fails, or a request that panics, releases it.
pub(crate) struct Grant<'a> {
    inner: &'a LocalEngine,
    pub(crate) live: u64,
    kept: bool,
}

impl Grant<'_> {
    /// Locks a fresh liveness id for this store
    /// ([`Liveness::lock_fresh`](crate::storage::liveness::Liveness::lock_fresh)).
    pub(crate) fn take(inner: &LocalEngine) -> Result<Grant<'_>> {
        Ok(Grant {
            inner,
            live: inner.live.lock_fresh(&inner.path)?,
            kept: false,
        })
    }

    /// The grant committed: the lock stays, for the holder to release.
    pub(crate) fn keep(mut self) -> u64 {
        self.kept = true;
        self.live
    }
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let _ = self.inner.live.unlock(self.live);
        }
    }
}
