//! A multi-process store's leases, kept in its ring's lease map (`share/buckets.rs` over
//! `ring/map.rs`) instead of the store file: a grant, an extend, a release and a wait touch no
//! fsync and no commit.
//!
//! A lease need not survive what ends its holder: a reboot ends every holder (a lease records
//! its boot), and a process's death ends its leases (their liveness locks die with it). What
//! must survive is that tokens never go back and that acknowledged values and fences are on
//! disk. So:
//!
//! - A lease record is changed by one compare-and-swap of its bucket (no lock is held at any
//!   moment, so a process stopped anywhere delays nobody) under the same rules as the file's
//!   records (`rules/admit.rs`).
//! - Tokens come from the map's counter, bounded by a reservation the store file holds durably
//!   (`Op::Reserve`). The reservation is refilled ahead of need, in a thread of its own, so
//!   that no grant waits for it while half a block is left; the block doubles at each refill
//!   (up to [`MAX_BLOCK`]), so a store that grants often refills rarely. A map set up anew
//!   (once every process closed the store, or after a reboot) starts above the reservation.
//! - How each lease ended is judged as before (`rules/history.rs`) and kept with its lock's
//!   record, in the map, until a flush writes it to the file's history: when many are pending,
//!   and when the last user of the store in a process closes it.
//! - Values and fences are written to the file as before (`route.rs`); a holder's write checks
//!   its lease here, inside its transaction.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::base::clock::{self, ProcessId};
use crate::base::error::{Error, Result};
use crate::base::limits::duration_ns;
use crate::local::LocalEngine;
use crate::ring::map::{MapHeader, BUCKETS};
use crate::ring::tokens::Take;
use crate::ring::SharedWord;
use crate::rules::admit::{admit_grant, check_current, check_join, is_live, new_lease};
use crate::rules::history::{dropped, judge, released_at, Ended, Ends, HISTORY_PER_LOCK};
use crate::rules::kind::Kind;
use crate::rules::ops::{unexpected, Done, Op};
use crate::rules::query::{mismatched, Answer, Query};
use crate::rules::record::{Group, Record};
use crate::rules::tokens::Durable;
use crate::share::buckets::{bucket_entries, entries, entry_of, rewrite, update, Change, Entry};
use crate::share::member::RingMember;

/// The first reservation of a map, and the largest. Large, so that a process stopped inside
/// the commit of a refill (which holds the store's write lock, and so every other refill) does
/// not run the others out of tokens for long; tokens jump by up to this much only when a map
/// ends without its last user closing it (a crash), since a clean close seals the counter.
const FIRST_BLOCK: u64 = 1 << 20;
const MAX_BLOCK: u64 = 1 << 32;
/// Buckets that hold records pruned by each grant, and buckets looked at for them at most.
const PRUNE_PER_GRANT: usize = 2;
const PRUNE_LOOKS: usize = 64;
/// Ends pending in the map past which a grant starts a flush to the file.
const FLUSH_AT: u64 = 512;
/// Ends pending in the map past which later ones are counted and dropped, not kept: while no
/// flush can commit (a process stopped inside a commit, a full disk), history gives way to
/// grants. 2,048 ends of the longest names take about half the map's blocks.
pub(crate) const PENDING_BOUND: u64 = 4 * FLUSH_AT;

impl LocalEngine {
    /// The ring whose lease map holds this store's leases: in multi-process mode.
    pub(crate) fn map(&self) -> Option<&RingMember> {
        self.router
            .member()
            .map(Arc::as_ref)
            .filter(|_| self.leases_shared)
    }

    /// The record of the lock `name` (its lease, or the grants of a semaphore or shared
    /// lock), if there is one.
    pub(crate) fn lease_of(&self, name: &str) -> Result<Option<Record>> {
        if let Some(member) = self.map() {
            self.check_fork()?;
            // A server waiting to start needs this process to let go of the file, even when
            // it only touches its leases.
            self.router.make_way(self);
            return Ok(entry_of(member.ring(), name)?.and_then(|entry| entry.record));
        }
        self.check_leases_in_file()?;
        match self.router.query(self, &Query::Record(name.to_owned()))? {
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
            && self.router.member().is_none()
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

    pub(crate) fn leases(&self) -> Result<Vec<(String, Record)>> {
        if let Some(member) = self.map() {
            self.check_fork()?;
            self.router.make_way(self);
            return records(member);
        }
        self.check_leases_in_file()?;
        match self.router.query(self, &Query::Records)? {
            Answer::Records(records) => Ok(records),
            other => Err(mismatched(&other)),
        }
    }

    /// Fails when the lease map holding this store's leases was cut short under it (see
    /// `Ring::intact`).
    pub(crate) fn map_intact(&self) -> Result<()> {
        self.map().map_or(Ok(()), |member| member.ring().intact())
    }

    /// Sets the map up from the store file the first time a process of this map's lifetime
    /// opens it: the token counter (every token up to the file's counter or reservation may
    /// have been handed out), and the live leases the file's leases table holds (granted by a
    /// library that kept them there, before an upgrade).
    pub(crate) fn setup_map(&self, member: &RingMember) -> Result<()> {
        let ring = member.ring();
        if ring.tokens_ready() {
            return Ok(());
        }
        let counts = self.router.counts(self)?;
        let base = Durable {
            counter: counts.last_token,
            reserved: counts.reserved,
            sealed: counts.sealed,
        }
        .map_base();
        ring.tokens_start_at(base);
        let now = clock::now_ns();
        for (name, record) in self.router.file_leases(self)? {
            let mut live = false;
            for lease in record.holders() {
                live |= is_live(self, lease, now)?;
            }
            if !live {
                continue;
            }
            update(
                member.ring(),
                &self.live,
                member.id(),
                &name,
                |entry, _| match entry {
                    // Another process of this map's lifetime set it up first.
                    Some(_) => Ok((Change::Keep, ())),
                    None => Ok((
                        Change::Put(Entry {
                            name: name.clone(),
                            record: Some(record.clone()),
                            tail: Vec::new(),
                        }),
                        (),
                    )),
                },
                |_| Ok(Ends::default()),
            )?;
        }
        // The first block, reserved now rather than by the first grant.
        if ring.reserved_tokens() <= ring.last_token() {
            self.reserve(member, base)?;
        }
        ring.tokens_set_up();
        Ok(())
    }

    /// `count` consecutive new tokens, each higher than every token handed out before: the
    /// first of them.
    fn take_tokens(&self, member: &RingMember, count: u64) -> Result<u64> {
        loop {
            match member.ring().take_tokens(count)? {
                Take::Taken { first, left, block } => {
                    if left < block / 2 {
                        self.refill_ahead(member, left);
                    }
                    return Ok(first);
                }
                // Only when the refill ahead of need did not keep up.
                Take::Short { end } => self.reserve(member, end)?,
            }
        }
    }

    /// Reserves tokens durably up to `need` and a block beyond, and lets the map hand them
    /// out.
    fn reserve(&self, member: &RingMember, need: u64) -> Result<()> {
        let ring = member.ring();
        let block = (ring.token_block() * 2).clamp(FIRST_BLOCK, MAX_BLOCK);
        let at_least = need.max(ring.last_token()).saturating_add(block);
        match self.router.submit(self, Op::Reserve { at_least }, None)? {
            Done::Reserved { bound } => {
                ring.tokens_reserved(bound, block);
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Starts a refill of the reservation in a thread of its own, unless another process is
    /// refilling and a quarter of the block is left (a refill whose process died, or that does
    /// not come while the block runs low, is taken over: two refills at once are harmless).
    fn refill_ahead(&self, member: &RingMember, left: u64) {
        let urgent = left < member.ring().token_block() / 4;
        self.in_background(
            member,
            |h| &h.refilling,
            urgent,
            "fencelock-reserve",
            |engine, member| {
                let need = member.ring().last_token();
                let _ = engine.reserve(member, need);
            },
        );
    }

    /// Runs `job` in a thread of its own as the one process of the map doing it: `slot` (a word
    /// of the map's header) holds the liveness id of the process doing it, 0 for none. The slot
    /// is taken when it is free or its process is dead, or from any other process when
    /// `take_over`, and given back when the job ends (at once when no thread can be started).
    fn in_background(
        &self,
        member: &RingMember,
        slot: fn(&MapHeader) -> &SharedWord,
        take_over: bool,
        name: &str,
        job: fn(&LocalEngine, &RingMember),
    ) {
        let word = slot(member.ring().map_header());
        let current = word.load(Ordering::Acquire);
        if current == member.id()
            || (current != 0 && !take_over && self.live.is_held(current).unwrap_or(true))
        {
            return;
        }
        if word
            .compare_exchange(current, member.id(), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let give_back = move |member: &RingMember| {
            let word = slot(member.ring().map_header());
            let _ = word.compare_exchange(member.id(), 0, Ordering::AcqRel, Ordering::Relaxed);
        };
        let engine = self.arc();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Some(member) = engine.map() {
                    job(&engine, member);
                    give_back(member);
                }
            });
        if spawned.is_err() {
            give_back(member);
        }
    }

    /// Ends the record of `entry` into its tail when none of its grants is live any more, and
    /// counts how they ended: a dead record leaves the map this way.
    fn settle(&self, member: &RingMember, entry: &mut Entry) -> Result<Ends> {
        let mut ends = Ends::default();
        let now = clock::now_ns();
        let Some(record) = &entry.record else {
            return Ok(ends);
        };
        for lease in record.holders() {
            if is_live(self, lease, now)? {
                return Ok(ends);
            }
        }
        let record = entry.record.take().expect("checked");
        for lease in record.holders() {
            let ended = judge(self, record.kind(), lease, now, false)?;
            ends.add(ended.ending());
            self.keep_end(member, &mut ends, &mut entry.tail, lease.token, ended);
        }
        Ok(ends)
    }

    /// Grants `name` as `kind` for `ttl` to `holder` (this process, or a requester whose write
    /// this one commits), which holds the liveness lock `live`: the token and the expiry.
    /// Refuses as a grant of the file would. A grant of `holder` with `live` that the record
    /// holds already (a request run again) is that grant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn grant_in_map(
        &self,
        member: &RingMember,
        name: &str,
        kind: Kind,
        ttl: Duration,
        ticket: Option<u64>,
        holder: ProcessId,
        live: u64,
    ) -> Result<(u64, u64)> {
        let mut ends = Ends::default();
        // A token taken for an attempt that lost its swap serves the next attempt while its
        // bucket's floor admits it (`Floor`: a lock's tokens only grow).
        let mut taken: Option<u64> = None;
        let (granted, settled) = update(
            member.ring(),
            &self.live,
            member.id(),
            name,
            |entry, floor| {
                ends = Ends::default();
                let now = clock::now_ns();
                let current = entry.and_then(|entry| entry.record.as_ref());
                if let Some(lease) = current.and_then(|record| {
                    record
                        .holders()
                        .iter()
                        .find(|lease| lease.live == live && lease.holder == holder)
                }) {
                    return Ok((Change::Keep, (lease.token, lease.expires_ns)));
                }
                let joined = admit_grant(self, name, current, kind, ticket, now)?;
                let token = match taken {
                    Some(token) if floor.admits(token) => token,
                    _ => self.take_tokens(member, 1)?,
                };
                taken = Some(token);
                #[cfg(test)]
                hooks::after_token();
                let lease = new_lease(self, token, holder, live, now, ttl);
                let mut tail = entry.map(|entry| entry.tail.clone()).unwrap_or_default();
                let before = current.map_or(Kind::Exclusive, Record::kind);
                for old in dropped(current, &joined) {
                    let ended = judge(self, before, old, now, true)?;
                    ends.add(ended.ending());
                    self.keep_end(member, &mut ends, &mut tail, old.token, ended);
                }
                let record = match kind {
                    Kind::Exclusive => Record::Exclusive(lease),
                    kind => {
                        let mut holders = joined;
                        holders.push(lease);
                        Record::Group(Group { kind, holders })
                    }
                };
                let entry = Entry {
                    name: name.to_owned(),
                    record: Some(record),
                    tail,
                };
                Ok((Change::Put(entry), (token, lease.expires_ns)))
            },
            |other| self.settle(member, other),
        )?;
        ends.merge(&settled);
        self.ended_in_map(member, &ends);
        self.prune_map(member);
        Ok(granted)
    }

    /// Grants every lock of `names` exclusively for `ttl`, all or none, with tokens that follow
    /// each other; `lives` are the liveness locks the caller holds, one for each name. Every
    /// name is checked before any is granted; one granted by another process in between undoes
    /// the grants made (they are released) and refuses as a check would have.
    pub(crate) fn grant_all_in_map(
        &self,
        member: &RingMember,
        names: &[&str],
        ttl: Duration,
        lives: &[u64],
    ) -> Result<(u64, u64)> {
        loop {
            let now = clock::now_ns();
            for name in names {
                let entry = entry_of(member.ring(), name)?;
                check_join(
                    self,
                    name,
                    entry.and_then(|e| e.record).as_ref(),
                    Kind::Exclusive,
                    now,
                )?;
            }
            let count = names.len() as u64;
            let first = self.take_tokens(member, count)?;
            #[cfg(test)]
            hooks::after_token();
            let expires_ns = now + duration_ns(ttl);
            let mut granted = 0;
            let mut outcome = Ok(true);
            for (i, (name, &live)) in names.iter().zip(lives).enumerate() {
                let token = first + i as u64;
                match self.grant_one_of_all(member, name, token, live, now, ttl) {
                    Ok(true) => granted += 1,
                    other => {
                        outcome = other;
                        break;
                    }
                }
            }
            if granted == names.len() {
                self.prune_map(member);
                return Ok((first, expires_ns));
            }
            for (name, &live) in names.iter().zip(lives).take(granted) {
                self.withdraw_in_map(member, name, live);
            }
            match outcome {
                // A record with a newer token than the block's: take a new block.
                Ok(false) => continue,
                Err(err) => return Err(err),
                Ok(true) => unreachable!("stopped before every name was granted"),
            }
        }
    }

    /// One name of an acquire of several: granted with `token` unless held (the refusal), or
    /// `false` when its bucket's floor does not admit `token` (a grant there took a newer
    /// token: the caller takes newer tokens, see `Floor`).
    fn grant_one_of_all(
        &self,
        member: &RingMember,
        name: &str,
        token: u64,
        live: u64,
        now: u64,
        ttl: Duration,
    ) -> Result<bool> {
        let mut ends = Ends::default();
        let (granted, settled) = update(
            member.ring(),
            &self.live,
            member.id(),
            name,
            |entry, floor| {
                ends = Ends::default();
                let current = entry.and_then(|entry| entry.record.as_ref());
                check_join(self, name, current, Kind::Exclusive, clock::now_ns())?;
                if !floor.admits(token) {
                    return Ok((Change::Keep, false));
                }
                let mut tail = entry.map(|entry| entry.tail.clone()).unwrap_or_default();
                for old in dropped(current, &[]) {
                    let kind = current.map_or(Kind::Exclusive, Record::kind);
                    let ended = judge(self, kind, old, now, true)?;
                    ends.add(ended.ending());
                    self.keep_end(member, &mut ends, &mut tail, old.token, ended);
                }
                let entry = Entry {
                    name: name.to_owned(),
                    record: Some(Record::Exclusive(new_lease(
                        self, token, self.me, live, now, ttl,
                    ))),
                    tail,
                };
                Ok((Change::Put(entry), true))
            },
            |other| self.settle(member, other),
        )?;
        ends.merge(&settled);
        self.ended_in_map(member, &ends);
        Ok(granted)
    }

    /// Keeps the end of the lease `token` in a tail, unless this store keeps no history, or
    /// the map holds [`PENDING_BOUND`] ends already (then `ends` counts it as unrecorded).
    fn keep_end(
        &self,
        member: &RingMember,
        ends: &mut Ends,
        tail: &mut Vec<(u64, Ended)>,
        token: u64,
        ended: Ended,
    ) {
        if !self.history.keeps() {
            return;
        }
        // Relaxed: a bound, not a protocol; a stale count keeps or drops one end more.
        let pending = member
            .ring()
            .map_header()
            .pending_ends
            .load(Ordering::Relaxed);
        if pending >= PENDING_BOUND && !tail.iter().any(|(held, _)| *held == token) {
            ends.unrecorded();
            return;
        }
        push_end(tail, token, ended);
    }

    /// Moves the expiry of the lease `token` of `name` to `ttl` from now, while it is current.
    pub(crate) fn extend_in_map(
        &self,
        member: &RingMember,
        name: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<u64> {
        let (expires, settled) = update(
            member.ring(),
            &self.live,
            member.id(),
            name,
            |entry, _| {
                let now = clock::now_ns();
                let current = entry.and_then(|entry| entry.record.as_ref());
                let mut lease = check_current(self, current, token, now)?;
                lease.expires_ns = now + duration_ns(ttl);
                let record = match current {
                    Some(Record::Group(group)) => {
                        let mut group = group.clone();
                        for held in &mut group.holders {
                            if held.token == token {
                                *held = lease;
                            }
                        }
                        Record::Group(group)
                    }
                    _ => Record::Exclusive(lease),
                };
                let mut entry = entry.cloned().expect("a current lease has an entry");
                entry.record = Some(record);
                Ok((Change::Put(entry), lease.expires_ns))
            },
            |other| self.settle(member, other),
        )?;
        self.ended_in_map(member, &settled);
        Ok(expires)
    }

    /// Takes the lease of `name` whose liveness id is `live` out of its record, leaving no end
    /// behind: the undoing of a grant that was never reported (an acquire of several locks
    /// that failed at a later name, an acquire-and-put whose write failed). Left alone when
    /// another grant replaced it.
    pub(crate) fn withdraw_in_map(&self, member: &RingMember, name: &str, live: u64) {
        let _ = update(
            member.ring(),
            &self.live,
            member.id(),
            name,
            |entry, _| {
                let Some(mut entry) = entry.cloned() else {
                    return Ok((Change::Keep, ()));
                };
                let Some(record) = entry.record.take() else {
                    return Ok((Change::Keep, ()));
                };
                if !record.holders().iter().any(|held| held.live == live) {
                    return Ok((Change::Keep, ()));
                }
                entry.record = match record {
                    Record::Group(mut group) if group.holders.len() > 1 => {
                        group.holders.retain(|held| held.live != live);
                        Some(Record::Group(group))
                    }
                    _ => None,
                };
                Ok((Change::Put(entry), ()))
            },
            |_| Ok(Ends::default()),
        );
    }

    /// Writes the ends of the releases `releases` (name, token, when) into their records'
    /// tails, where those leases are still recorded and let go: what this process knows of
    /// its releases, as it closes the store (`history.rs`). Counts nothing: a lease is counted
    /// as it leaves its record.
    pub(crate) fn note_released_in_map(
        &self,
        member: &RingMember,
        releases: &[(String, u64, u64)],
    ) {
        for (name, token, at) in releases {
            let _ = update(
                member.ring(),
                &self.live,
                member.id(),
                name,
                |entry, _| {
                    let Some(mut entry) = entry.cloned() else {
                        return Ok((Change::Keep, ()));
                    };
                    let Some(record) = &entry.record else {
                        return Ok((Change::Keep, ()));
                    };
                    let Some(lease) = record.holder(*token).copied() else {
                        return Ok((Change::Keep, ()));
                    };
                    if self.live.is_held(lease.live).unwrap_or(true)
                        || entry.tail.iter().any(|(held, _)| held == token)
                    {
                        return Ok((Change::Keep, ()));
                    }
                    let (ending, at) = released_at(&lease, *at);
                    let ended = Ended::new(self, record.kind(), &lease, ending, at);
                    // Counts nothing (see above), dropped or not.
                    self.keep_end(member, &mut Ends::default(), &mut entry.tail, *token, ended);
                    Ok((Change::Put(entry), ()))
                },
                |_| Ok(Ends::default()),
            );
        }
    }

    /// Counts the ends a change of the map recorded, and starts a flush of the map's ends to
    /// the file once many are pending.
    fn ended_in_map(&self, member: &RingMember, ends: &Ends) {
        let activity = self.counters.activity();
        for (counter, n) in ends.counts() {
            activity.add(counter, n);
        }
        let recorded = ends.total();
        if recorded == 0 || !self.history.keeps() {
            return;
        }
        let header = member.ring().map_header();
        let pending = header.pending_ends.fetch_add(recorded, Ordering::AcqRel) + recorded;
        if pending >= FLUSH_AT {
            self.flush_ahead(member);
        }
    }

    /// Looks at the next few buckets of the map (after those the last grant looked at), and
    /// ends the records there whose grants are no longer live, so that released, expired and
    /// dead records do not pile up: up to [`PRUNE_PER_GRANT`] buckets that hold records, of at
    /// most [`PRUNE_LOOKS`] (an empty bucket costs one load).
    fn prune_map(&self, member: &RingMember) {
        let header = member.ring().map_header();
        let ring = member.ring();
        let mut pruned = 0;
        for _ in 0..PRUNE_LOOKS {
            let bucket =
                (header.prune_cursor.fetch_add(1, Ordering::Relaxed) % BUCKETS as u64) as usize;
            if ring.bucket_is_empty(bucket) {
                continue;
            }
            if let Ok(settled) = rewrite(ring, &self.live, member.id(), bucket, |entry| {
                self.settle(member, entry)
            }) {
                self.ended_in_map(member, &settled);
            }
            pruned += 1;
            if pruned == PRUNE_PER_GRANT {
                return;
            }
        }
    }

    /// Starts a flush of the ends pending in the map, in a thread of its own, unless another
    /// process is flushing.
    fn flush_ahead(&self, member: &RingMember) {
        self.in_background(
            member,
            |h| &h.flushing,
            false,
            "fencelock-history",
            |engine, member| {
                let _ = engine.flush_ends(member, None, false);
            },
        );
    }

    /// Writes the ends pending in the map into the file's history, in one transaction, then
    /// takes them out of the map. `waiting` bounds the wait for the store (the busy timeout
    /// when `None`). With `seal`, from the last user of the map as it closes it: the same
    /// transaction writes the last token handed out into the counter and seals the
    /// reservation (see `SEALED_KEY`).
    pub(crate) fn flush_ends(
        &self,
        member: &RingMember,
        waiting: Option<crate::base::cancel::Waiting<'_>>,
        seal: bool,
    ) -> Result<()> {
        let header = member.ring().map_header();
        // Every end counted so far was in a tail before this scan began: the scan writes it,
        // or a tail full of later ends dropped it. Either way it is pending no more.
        let counted = header.pending_ends.load(Ordering::Acquire);
        let mut ends = Vec::new();
        for bucket in 0..BUCKETS {
            for entry in bucket_entries(member.ring(), bucket)? {
                for (token, ended) in entry.tail {
                    ends.push((entry.name.clone(), token, ended));
                }
            }
        }
        let seal = seal.then(|| (member.ring().last_token(), member.ring().reserved_tokens()));
        if ends.is_empty() && seal.is_none() {
            return Ok(());
        }
        let flushed: HashSet<(String, u64)> = ends
            .iter()
            .map(|(name, token, _)| (name.clone(), *token))
            .collect();
        match self
            .router
            .submit(self, Op::RecordEnds { ends, seal }, waiting)?
        {
            Done::Recorded => {}
            other => return Err(unexpected(&other)),
        }
        for bucket in 0..BUCKETS {
            rewrite(member.ring(), &self.live, member.id(), bucket, |entry| {
                let name = entry.name.clone();
                entry
                    .tail
                    .retain(|(token, _)| !flushed.contains(&(name.clone(), *token)));
                Ok(Ends::default())
            })?;
        }
        let _ = header
            .pending_ends
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(counted))
            });
        Ok(())
    }
}

/// Adds the end of the lease `token` to a tail, keeping the latest [`HISTORY_PER_LOCK`]: the
/// file keeps no more of a lock's history either.
fn push_end(tail: &mut Vec<(u64, Ended)>, token: u64, ended: Ended) {
    if tail.iter().any(|(held, _)| *held == token) {
        return;
    }
    tail.push((token, ended));
    if tail.len() > HISTORY_PER_LOCK {
        tail.remove(0);
    }
}

/// The records of the map, with their names, in name order.
pub(crate) fn records(member: &RingMember) -> Result<Vec<(String, Record)>> {
    Ok(entries(member.ring())?
        .into_iter()
        .filter_map(|entry| Some((entry.name, entry.record?)))
        .collect())
}

/// A pause of a grant between taking its token and publishing it (tests only): where a process
/// stopped there (SIGSTOP, a page fault, preemption) lets others run.
#[cfg(test)]
pub(crate) mod hooks {
    use std::cell::RefCell;

    thread_local! {
        static AFTER_TOKEN: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    /// Runs `f` once, in the next grant of this thread, right after it took its token.
    pub(crate) fn pause_after_token(f: impl FnOnce() + 'static) {
        AFTER_TOKEN.with(|hook| *hook.borrow_mut() = Some(Box::new(f)));
    }

    /// Called by grants right after taking their tokens. Taken out before it runs, so that the
    /// grants it makes itself run straight through.
    pub(crate) fn after_token() {
        if let Some(f) = AFTER_TOKEN.with(|hook| hook.borrow_mut().take()) {
            f();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use super::hooks::pause_after_token;
    use crate::api::store::Store;
    use crate::local::LocalEngine;
    use crate::ring::lock_hash;
    use crate::ring::map::bucket_of;

    fn open(path: &Path) -> Store {
        open_engine(path).0
    }

    fn open_engine(path: &Path) -> (Store, Arc<LocalEngine>) {
        let inner = LocalEngine::open(path, &crate::Options::default()).unwrap();
        assert!(inner.map().is_some(), "the lease map is usable in tests");
        let store = Store::new(Arc::clone(&inner) as Arc<dyn crate::engine::Engine>);
        (store, inner)
    }

    /// `count` names of 1,000 bytes in one bucket of the map, as anyone finds them in a second
    /// (FNV-1a over a fixed prefix, then a varying tail).
    fn names_of_one_bucket(count: usize) -> Vec<String> {
        let prefix = "p".repeat(990);
        let start = lock_hash(&prefix);
        let fold = |hash: u64, tail: &str| {
            tail.bytes().fold(hash, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            })
        };
        let target = bucket_of(lock_hash(&format!("{prefix}{:010}", 0)));
        let names: Vec<String> = (0u64..)
            .map(|i| format!("{i:010}"))
            .filter(|tail| bucket_of(fold(start, tail)) == target)
            .take(count)
            .map(|tail| format!("{prefix}{tail}"))
            .collect();
        assert!(names.iter().all(|n| bucket_of(lock_hash(n)) == target));
        names
    }

    #[test]
    fn many_long_names_of_one_bucket_are_all_granted() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("store"));
        // Past the 192 KiB a bucket once held (183 such names), far below the map's capacity.
        let names = names_of_one_bucket(300);
        let held: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                store
                    .acquire(name, Duration::from_secs(60))
                    .unwrap_or_else(|err| panic!("{i} names granted, then: {err}"))
            })
            .collect();
        assert_eq!(held.len(), 300);
        assert_eq!(store.locks().unwrap().len(), 300);
    }

    #[test]
    fn ends_that_cannot_be_flushed_give_way_to_grants_and_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let (store, engine) = open_engine(&path);
        // Another process holds the map's flush and never ends it, as one stopped inside the
        // flush's commit does: the ends of one-off names pile up in the map.
        let (_stopped, flusher) = open_engine(&path);
        let header = engine.map().unwrap().ring().map_header();
        let stopped_id = flusher.map().unwrap().id();
        header
            .flushing
            .store(stopped_id, std::sync::atomic::Ordering::Release);
        // Names of 200 bytes: without the bound their ends fill the map's 16,384 blocks after
        // about 13,000 of them.
        for i in 0..20_000 {
            let name = format!("{i:0>200}");
            let holder = store
                .acquire(&name, Duration::from_secs(60))
                .unwrap_or_else(|err| panic!("grant {i} refused: {err}"));
            holder.release().unwrap();
        }
        assert_eq!(
            header.flushing.load(std::sync::atomic::Ordering::Acquire),
            stopped_id,
            "no flush ran"
        );
        let metrics = store.metrics().unwrap();
        assert!(metrics.history_dropped > 0, "{metrics:?}");
        assert!(metrics.ended_released + metrics.history_dropped > 0);
        // Once a flush can commit, what was kept reaches the history.
        header
            .flushing
            .store(0, std::sync::atomic::Ordering::Release);
        engine
            .flush_ends(engine.map().unwrap(), None, false)
            .unwrap();
        let first = store.history(&format!("{:0>200}", 0)).unwrap();
        assert_eq!(first.len(), 1, "the first name's end was kept: {first:?}");
    }

    /// A name other than `name` in the same bucket of the map.
    fn neighbour_of(name: &str) -> String {
        let bucket = bucket_of(lock_hash(name));
        (0..)
            .map(|i| format!("neighbour-{i}"))
            .find(|other| bucket_of(lock_hash(other)) == bucket)
            .unwrap()
    }

    /// What another process does while a grant of `name` is stopped after taking its token:
    /// it is granted `name` with a short lease, lets it expire, and a grant of another name of
    /// the bucket then ends its record out of the bucket. The token it was granted.
    fn granted_and_gone_meanwhile(other: &Store, name: &str) -> u64 {
        let token = {
            let holder = other.acquire(name, Duration::from_millis(20)).unwrap();
            std::thread::sleep(Duration::from_millis(60));
            let token = holder.token();
            std::mem::forget(holder); // expired, not released
            token
        };
        let neighbour = other
            .acquire(&neighbour_of(name), Duration::from_secs(60))
            .unwrap();
        assert!(neighbour.token() > token);
        std::mem::forget(neighbour);
        token
    }

    #[test]
    fn a_grant_stopped_after_taking_its_token_is_never_published_below_a_later_grant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let (paused, other) = (open(&path), open(&path));
        let meanwhile = Arc::new(std::sync::Mutex::new(0));
        let seen = Arc::clone(&meanwhile);
        pause_after_token(move || {
            *seen.lock().unwrap() = granted_and_gone_meanwhile(&other, "lock-0")
        });
        let late = paused.acquire("lock-0", Duration::from_secs(60)).unwrap();
        let meanwhile = *meanwhile.lock().unwrap();
        assert!(
            meanwhile > 0,
            "the other grant ran while this one was paused"
        );
        assert!(
            late.token() > meanwhile,
            "lock-0 granted token {} after token {meanwhile}: its tokens went back",
            late.token()
        );
    }

    #[test]
    fn an_acquire_of_several_stopped_after_taking_its_tokens_is_never_published_below_a_later_grant(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let (paused, other) = (open(&path), open(&path));
        let meanwhile = Arc::new(std::sync::Mutex::new(0));
        let seen = Arc::clone(&meanwhile);
        pause_after_token(move || {
            *seen.lock().unwrap() = granted_and_gone_meanwhile(&other, "lock-0")
        });
        let late = paused
            .acquire_all(&["lock-0", "lock-1"], Duration::from_secs(60))
            .unwrap();
        let meanwhile = *meanwhile.lock().unwrap();
        assert!(
            meanwhile > 0,
            "the other grant ran while this one was paused"
        );
        let token = late.iter().find(|h| h.name() == "lock-0").unwrap().token();
        assert!(
            token > meanwhile,
            "lock-0 granted token {token} after token {meanwhile}: its tokens went back"
        );
    }

    /// An acquire with a write, run as a combiner runs it, refused by its check: the refusal
    /// leaves the lease map and its token counter as they were (the map is not undone by its
    /// requester afterwards: it is never written).
    #[test]
    fn a_refused_acquire_with_a_write_writes_nothing_in_the_lease_map() {
        use crate::rules::ops::Op;
        use crate::share::buckets::entry_of;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let (store, engine) = open_engine(&path);
        let member = engine.map().unwrap();
        // The key holds a value of a token above every token the map handed out (written
        // directly: no grant makes one), so no new grant may write it.
        let above = member.ring().last_token() + 1_000;
        let db = engine.database().unwrap();
        let txn = db.writable().unwrap().begin_write().unwrap();
        txn.open_table(crate::rules::tables::VALUES)
            .unwrap()
            .insert(
                b"k".as_slice(),
                crate::rules::record::encode_value(above, Some(b"old")).as_slice(),
            )
            .unwrap();
        txn.commit().unwrap();
        drop(db);
        let other = store.acquire("held", Duration::from_secs(60)).unwrap();
        for name in ["free", "held"] {
            let last_token = member.ring().last_token();
            let before = entry_of(member.ring(), name).unwrap();
            let grant = crate::local::acquire::Grant::take(&engine).unwrap();
            let op = Op::Acquire {
                name: name.to_owned(),
                ttl: Duration::from_secs(60),
                write: Some((b"k".to_vec(), b"new".to_vec())),
                holder: engine.me,
                live: grant.live,
                ticket: None,
            };
            let result = engine.router.submit(&*engine, op, None);
            match name {
                "free" => assert!(
                    matches!(result, Err(crate::Error::StaleToken { .. })),
                    "{result:?}"
                ),
                _ => assert!(
                    matches!(result, Err(crate::Error::Locked { .. })),
                    "{result:?}"
                ),
            }
            assert_eq!(
                entry_of(member.ring(), name).unwrap(),
                before,
                "the refused grant of {name} changed its record in the map"
            );
            assert_eq!(
                member.ring().last_token(),
                last_token,
                "{name}: a token was taken"
            );
        }
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"old");
        other.release().unwrap();
    }
}
