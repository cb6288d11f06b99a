//! Lock kinds beside the exclusive lock: semaphores (up to N holders of a name at once) and
//! shared locks (any number of shared holders, or one exclusive holder), and what a new grant of
//! each kind must find in the name's record.
//!
//! Every grant of any kind is a lease of its own: its own token from the store's one counter,
//! its own liveness id and TTL. Holders of a semaphore or shared lock share one record of the
//! name (record.rs, format 3); a grant that is no longer live (released, expired, holder dead)
//! frees its place at once and is dropped from the record when it is next written.

use crate::backend::on_etcd;
use std::sync::Arc;
use std::time::Duration;

use crate::base::cancel::{Cancel, Waiting};
use crate::base::clock;
use crate::base::error::{Error, Result};
use crate::base::limits::{check_name, check_ttl};
use crate::holder::Holder;
use crate::leases::Grant;
use crate::observe::Attempt;
use crate::rules::kind::{check_kind, Kind, MAX_HOLDERS};
use crate::rules::leases::{blocker, check_join, check_turn};
use crate::rules::ops::{unexpected, Done, Op};
use crate::store::Store;

impl Store {
    /// Tries once to acquire `name` as `kind` for `ttl`: exclusively (as [`Store::acquire`]),
    /// shared, or one permit of a semaphore of `N` permits. Each grant is a lease of its own,
    /// with its own token (higher than every earlier grant of the store), liveness and TTL, and
    /// is released, extended, lost and fenced like an exclusive one. A grant that would hold
    /// the name together with live holders (another shared holder, another permit) waits its
    /// turn behind every queued waiting acquire of the name, so a stream of shared acquires
    /// does not starve a waiting exclusive one.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] while the name is held in a way that excludes this grant (an exclusive
    /// holder; a shared holder, for an exclusive acquire; every permit taken; a lock of another
    /// kind; an earlier waiter); [`Error::PermitsMismatch`] when live permits of the name were
    /// granted with another count; [`Error::InvalidArgument`] for a semaphore of 0 or more than
    /// [`MAX_HOLDERS`] permits; otherwise as [`Store::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::Kind;
    /// # let dir = tempfile::tempdir()?;
    /// let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let ttl = Duration::from_secs(30);
    /// let a = store.acquire_kind("gpu", Kind::Semaphore(2), ttl)?;
    /// let b = store.acquire_kind("gpu", Kind::Semaphore(2), ttl)?;
    /// assert!(b.token() > a.token());
    /// assert!(matches!(
    ///     store.acquire_kind("gpu", Kind::Semaphore(2), ttl),
    ///     Err(fencelock::Error::Locked { .. })
    /// ));
    /// assert!(matches!(
    ///     store.acquire_kind("gpu", Kind::Semaphore(3), ttl),
    ///     Err(fencelock::Error::PermitsMismatch { permits: 2, requested: 3 })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_kind(&self, name: &str, kind: Kind, ttl: Duration) -> Result<Holder> {
        if kind == Kind::Exclusive {
            return self.acquire(name, ttl);
        }
        on_etcd!(self.inner, _remote => Err(not_on_etcd()));
        let attempt = Attempt::start();
        let result = self.acquire_kind_inner(name, kind, ttl, None, None);
        self.observed(name, kind, &attempt, result)
    }

    /// Like [`Store::acquire_kind`], waiting up to `timeout` for its turn, as
    /// [`Store::acquire_wait`] does: waiting acquires of a name, of every kind, are granted
    /// oldest first across processes. A waiter of a semaphore looks again at least every
    /// millisecond, since any permit let go is its turn.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire_kind`],
    /// but never [`Error::Locked`].
    pub fn acquire_kind_wait(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Holder> {
        on_etcd!(self.inner, remote => match kind {
            Kind::Exclusive => remote.acquire_wait(name, ttl, timeout, None),
            _ => Err(not_on_etcd()),
        });
        self.wait_for(name, kind, ttl, Waiting::new(timeout, None))
    }

    /// Like [`Store::acquire_kind_wait`], and ends with [`Error::Cancelled`], changing
    /// nothing, once `cancel` fires.
    pub fn acquire_kind_wait_cancellable(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Holder> {
        on_etcd!(self.inner, remote => match kind {
            Kind::Exclusive => remote.acquire_wait(name, ttl, timeout, Some(cancel)),
            _ => Err(not_on_etcd()),
        });
        self.wait_for(name, kind, ttl, Waiting::new(timeout, Some(cancel)))
    }

    pub(crate) fn acquire_kind_inner(
        &self,
        name: &str,
        kind: Kind,
        ttl: Duration,
        waiting: Option<Waiting<'_>>,
        ticket: Option<u64>,
    ) -> Result<Holder> {
        on_etcd!(self.inner, _remote => Err(not_on_etcd()));
        check_name("lock name", name)?;
        check_ttl(ttl)?;
        check_kind(kind)?;
        let inner = &self.inner;
        // Most refusals are answered from a read, as for an exclusive acquire.
        let now = clock::now_ns();
        // Through a server the read would cost a round trip of its own: the grant's own check
        // refuses there.
        let record = if inner.served() {
            None
        } else {
            inner.lease_of(name)?
        };
        let joined = check_join(&***inner, record.as_ref(), kind, now)?;
        let queued = if joined.is_empty() {
            ticket
        } else {
            Some(ticket.unwrap_or(u64::MAX))
        };
        check_turn(
            &***inner,
            name,
            blocker(&***inner, record.as_ref(), now)?.as_ref(),
            queued,
            now,
        )?;
        if inner.read_only {
            return Err(crate::storage::db::read_only());
        }
        let grant = Grant::take(inner)?;
        let op = Op::AcquireKind {
            name: name.to_owned(),
            kind,
            ttl,
            holder: inner.me,
            live: grant.live,
            ticket,
        };
        match inner.submit(op, waiting)? {
            Done::Granted { token, expires_ns } => Ok(Holder::new(
                Arc::clone(inner),
                name.to_owned(),
                kind,
                token,
                grant.keep(),
                expires_ns,
            )),
            other => Err(unexpected(&other)),
        }
    }

    /// Tries once to acquire every lock of `names` exclusively for `ttl`, all or none, in one
    /// transaction. Deadlock-free by construction: it never holds some of the locks while it
    /// waits for others, so no order of names can deadlock with another acquire.
    ///
    /// Each lock gets a holder of its own, in the order of `names`, with its own token (the
    /// tokens follow each other), liveness and TTL: each is released, extended, lost and fenced
    /// on its own, exactly like a holder of [`Store::acquire`]. One token per name, rather than
    /// one for the grant, because a token fences the writes of one lease: with its own token,
    /// each name's lease stays an ordinary lease (a holder-checked write is checked against the
    /// lock it names, and releasing one lock leaves the others held), and every token is still
    /// higher than every earlier grant of any of the names.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] naming the first lock in `names` that a live lease holds (nothing is
    /// granted); [`Error::InvalidArgument`] for no names, more than [`MAX_HOLDERS`], a name
    /// given twice, or a name or TTL as [`Store::acquire`] refuses; otherwise as
    /// [`Store::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// let store = fencelock::Store::open(dir.path().join("locks.db"))?;
    /// let held = store.acquire("b", Duration::from_secs(30))?;
    /// assert!(store.acquire_all(&["a", "b"], Duration::from_secs(30)).is_err());
    /// assert!(store.lock("a")?.is_none(), "all or none: a was not granted either");
    /// drop(held);
    /// let both = store.acquire_all(&["a", "b"], Duration::from_secs(30))?;
    /// assert_eq!(both[1].token(), both[0].token() + 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_all(&self, names: &[&str], ttl: Duration) -> Result<Vec<Holder>> {
        self.acquire_all_inner(names, ttl, None)
    }

    /// Like [`Store::acquire_all`], waiting up to `timeout` until every lock is free at once.
    /// Its waits are not queued behind other waiters of the locks (it takes them whenever all
    /// are free together), and it holds none of them while it waits.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; otherwise as [`Store::acquire_all`],
    /// but never [`Error::Locked`].
    pub fn acquire_all_wait(
        &self,
        names: &[&str],
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Vec<Holder>> {
        self.acquire_all_inner(names, ttl, Some(Waiting::new(timeout, None)))
    }

    /// Like [`Store::acquire_all_wait`], and ends with [`Error::Cancelled`], changing nothing,
    /// once `cancel` fires.
    pub fn acquire_all_wait_cancellable(
        &self,
        names: &[&str],
        ttl: Duration,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Vec<Holder>> {
        self.acquire_all_inner(names, ttl, Some(Waiting::new(timeout, Some(cancel))))
    }

    fn acquire_all_inner(
        &self,
        names: &[&str],
        ttl: Duration,
        waiting: Option<Waiting<'_>>,
    ) -> Result<Vec<Holder>> {
        on_etcd!(self.inner, _remote => Err(not_on_etcd()));
        let mut attempt = Attempt::start();
        let result = self.acquire_all_checked(names, ttl, waiting, &mut attempt);
        self.inner
            .acquired(names, Kind::Exclusive, &attempt, result.as_deref());
        result
    }

    fn acquire_all_checked(
        &self,
        names: &[&str],
        ttl: Duration,
        waiting: Option<Waiting<'_>>,
        attempt: &mut Attempt,
    ) -> Result<Vec<Holder>> {
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
            crate::base::cancel::check(waiting.cancel)?;
        }
        loop {
            match self.try_acquire_all(names, ttl, waiting) {
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
        ttl: Duration,
        waiting: Option<Waiting<'_>>,
    ) -> Result<Vec<Holder>> {
        let inner = &self.inner;
        let now = clock::now_ns();
        if !inner.served() {
            for name in names {
                check_join(
                    &***inner,
                    inner.lease_of(name)?.as_ref(),
                    Kind::Exclusive,
                    now,
                )?;
            }
        }
        if inner.read_only {
            return Err(crate::storage::db::read_only());
        }
        let grants = names
            .iter()
            .map(|_| Grant::take(inner))
            .collect::<Result<Vec<_>>>()?;
        let op = Op::AcquireAll {
            names: names.iter().map(|&name| name.to_owned()).collect(),
            ttl,
            holder: inner.me,
            lives: grants.iter().map(|grant| grant.live).collect(),
        };
        match inner.submit(op, waiting)? {
            Done::GrantedAll {
                first,
                count,
                expires_ns,
            } if count as usize == names.len() => Ok(names
                .iter()
                .zip(grants)
                .zip(first..)
                .map(|((name, grant), token)| {
                    Holder::new(
                        Arc::clone(inner),
                        (*name).to_owned(),
                        Kind::Exclusive,
                        token,
                        grant.keep(),
                        expires_ns,
                    )
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// Waits (within `waiting`) until the first lock of `names` that a live lease holds is let
    /// go, expires, or its holder dies.
    fn wait_for_any(&self, names: &[&str], waiting: Waiting<'_>) -> Result<()> {
        let inner = &self.inner;
        let now = clock::now_ns();
        let mut held = None;
        for name in names {
            let record = inner.lease_of(name)?;
            if check_join(&***inner, record.as_ref(), Kind::Exclusive, now).is_err() {
                held = blocker(&***inner, record.as_ref(), now)?;
                break;
            }
        }
        if let Some(lease) = held {
            let until = waiting.deadline.min(lease.expires_ns);
            inner.wait_until_free(lease.live, until, waiting.cancel)?;
        }
        Ok(())
    }
}

/// The refusal of a semaphore, a shared lock or a multi-lock acquire on an etcd store, which
/// has only exclusive locks so far.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
fn not_on_etcd() -> crate::Error {
    crate::Error::invalid(
        "semaphores, shared locks and acquire_all are not available on an etcd store yet: \
         only exclusive locks are",
    )
}
