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
//!
//! The engine holds this process's use of the map as a part, [`MapUser`] (the ring, where the
//! store keeps its leases there); what it needs of the engine (the rules' view of it, its
//! liveness, its router for the commits of a refill and a flush) it asks through [`MapHost`],
//! so that this file never names the engine.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::base::clock::{self, ProcessId};
use crate::base::error::Result;
use crate::base::limits::duration_ns;
use crate::local::route::{Host, Router};
use crate::ring::map::{MapHeader, BUCKETS};
use crate::ring::tokens::Take;
use crate::ring::SharedWord;
use crate::rules::admit::{admit_grant, check_current, check_join, is_live, new_lease};
use crate::rules::history::{dropped, judge, released_at, Ended, Ends, HISTORY_PER_LOCK};
use crate::rules::kind::Kind;
use crate::rules::ops::{unexpected, Done, Op};
use crate::rules::record::{Group, Lease, Record};
use crate::rules::tokens::Durable;
use crate::share::buckets::{
    bucket_entries, entries, entry_of, rewrite, update, Change, Entry, Floor,
};
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

/// What the lease map's user needs of the engine beyond what its router does (`route::Host`): the
/// process its grants go to, its router (which commits a refill of the reservation and a flush of
/// the ends to the file), and this part again, for a thread of its own to reach it.
pub(crate) trait MapHost: Host {
    /// This process, the holder of the grants it asks for itself.
    fn me(&self) -> ProcessId;

    /// The router that commits the engine's operations.
    fn router(&self) -> &Router;

    /// The engine's user of the lease map.
    fn lease_map(&self) -> &MapUser;
}

/// This store's use of its ring's lease map (see the module's doc): grants, extends, releases
/// and the ends they judge, the tokens and their reservation, the flush of the ends to the file.
/// The map's own state is in the ring, shared by every process; this part holds the ring.
pub(crate) struct MapUser {
    /// The ring whose map holds this store's leases: in multi-process mode (and a server's);
    /// `None` in single-process mode, where they are in the file, committed without an fsync.
    member: Option<Arc<RingMember>>,
}

// The part's methods are reached through the part (`engine.lease_map.grant(..)`), where a
// reader looks for them; several are given the ring member that their caller already took out
// of this part, and so read nothing else of it.
#[allow(clippy::unused_self)]
impl MapUser {
    /// The user of the lease map of `member`, where the store keeps its leases there.
    pub(crate) fn new(member: Option<Arc<RingMember>>) -> MapUser {
        MapUser { member }
    }

    /// The ring whose lease map holds this store's leases: in multi-process mode.
    pub(crate) fn member(&self) -> Option<&RingMember> {
        self.member.as_deref()
    }

    /// Fails when the lease map holding this store's leases was cut short under it (see
    /// `Ring::intact`).
    pub(crate) fn map_intact(&self) -> Result<()> {
        self.member()
            .map_or(Ok(()), |member| member.ring().intact())
    }

    /// Sets the map up from the store file the first time a process of this map's lifetime
    /// opens it: the token counter (every token up to the file's counter or reservation may
    /// have been handed out), and the live leases the file's leases table holds (granted by a
    /// library that kept them there, before an upgrade).
    pub(crate) fn setup_map<H: MapHost>(&self, host: &H, member: &RingMember) -> Result<()> {
        let ring = member.ring();
        if ring.tokens_ready() {
            return Ok(());
        }
        let counts = host.router().counts(host)?;
        let base = Durable {
            counter: counts.last_token,
            reserved: counts.reserved,
            sealed: counts.sealed,
        }
        .map_base();
        ring.tokens_start_at(base);
        let now = clock::now_ns();
        for (name, record) in host.router().file_leases(host)? {
            let mut live = false;
            for lease in record.holders() {
                live |= is_live(host, lease, now)?;
            }
            if !live {
                continue;
            }
            update(
                member.ring(),
                host.live(),
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
            self.reserve(host, member, base)?;
        }
        ring.tokens_set_up();
        Ok(())
    }

    /// `count` consecutive new tokens, each higher than every token handed out before: the
    /// first of them.
    fn take_tokens<H: MapHost>(&self, host: &H, member: &RingMember, count: u64) -> Result<u64> {
        loop {
            match member.ring().take_tokens(count)? {
                Take::Taken { first, left, block } => {
                    if left < block / 2 {
                        self.refill_ahead(host, member, left);
                    }
                    return Ok(first);
                }
                // Only when the refill ahead of need did not keep up.
                Take::Short { end } => self.reserve(host, member, end)?,
            }
        }
    }

    /// The token for one attempt of a grant's swap: the one `taken` for an attempt that lost its
    /// swap while its bucket's `floor` admits it (`Floor`: a lock's tokens only grow), else a
    /// new one, kept in `taken` for the next attempt.
    fn token_for_swap<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        taken: &mut Option<u64>,
        floor: Floor,
    ) -> Result<u64> {
        let token = match *taken {
            Some(token) if floor.admits(token) => token,
            _ => self.take_tokens(host, member, 1)?,
        };
        *taken = Some(token);
        Ok(token)
    }

    /// Reserves tokens durably up to `need` and a block beyond, and lets the map hand them
    /// out.
    fn reserve<H: MapHost>(&self, host: &H, member: &RingMember, need: u64) -> Result<()> {
        let ring = member.ring();
        let block = (ring.token_block() * 2).clamp(FIRST_BLOCK, MAX_BLOCK);
        let at_least = need.max(ring.last_token()).saturating_add(block);
        match host.router().submit(host, Op::Reserve { at_least }, None)? {
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
    fn refill_ahead<H: MapHost>(&self, host: &H, member: &RingMember, left: u64) {
        let urgent = left < member.ring().token_block() / 4;
        self.in_background(
            host,
            member,
            |h| &h.refilling,
            urgent,
            "fencelock-reserve",
            |engine, member| {
                let need = member.ring().last_token();
                let _ = engine.lease_map().reserve(engine, member, need);
            },
        );
    }

    /// Runs `job` in a thread of its own as the one process of the map doing it: `slot` (a word
    /// of the map's header) holds the liveness id of the process doing it, 0 for none. The slot
    /// is taken when it is free or its process is dead, or from any other process when
    /// `take_over`, and given back when the job ends (at once when no thread can be started).
    fn in_background<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        slot: fn(&MapHeader) -> &SharedWord,
        take_over: bool,
        name: &str,
        job: fn(&H, &RingMember),
    ) {
        let word = slot(member.ring().map_header());
        let current = word.load(Ordering::Acquire);
        if current == member.id()
            || (current != 0 && !take_over && host.live().is_held(current).unwrap_or(true))
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
        let engine = host.arc();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Some(member) = engine.lease_map().member() {
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
    fn settle<H: MapHost>(&self, host: &H, member: &RingMember, entry: &mut Entry) -> Result<Ends> {
        let mut ends = Ends::default();
        let now = clock::now_ns();
        let Some(record) = &entry.record else {
            return Ok(ends);
        };
        for lease in record.holders() {
            if is_live(host, lease, now)? {
                return Ok(ends);
            }
        }
        let record = entry.record.take().expect("checked");
        for lease in record.holders() {
            let ended = judge(host, record.kind(), lease, now, false)?;
            ends.add(ended.ending());
            self.keep_end(host, member, &mut ends, &mut entry.tail, lease.token, ended);
        }
        Ok(ends)
    }

    /// Grants `name` as `kind` for `ttl` to `holder` (this process, or a requester whose write
    /// this one commits), which holds the liveness lock `live`: the token and the expiry.
    /// Refuses as a grant of the file would. A grant of `holder` with `live` that the record
    /// holds already (a request run again) is that grant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn grant_in_map<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        name: &str,
        kind: Kind,
        ttl: Duration,
        ticket: Option<u64>,
        holder: ProcessId,
        live: u64,
    ) -> Result<(u64, u64)> {
        let mut ends = Ends::default();
        // A token taken for an attempt that lost its swap serves the next (`token_for_swap`).
        let mut taken: Option<u64> = None;
        let (granted, settled) = update(
            member.ring(),
            host.live(),
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
                let joined = admit_grant(host, name, current, kind, ticket, now)?;
                let token = self.token_for_swap(host, member, &mut taken, floor)?;
                #[cfg(test)]
                hooks::after_token();
                let lease = new_lease(host, token, holder, live, now, ttl);
                let mut tail = entry.map(|entry| entry.tail.clone()).unwrap_or_default();
                let before = current.map_or(Kind::Exclusive, Record::kind);
                for old in dropped(current, &joined) {
                    let ended = judge(host, before, old, now, true)?;
                    ends.add(ended.ending());
                    self.keep_end(host, member, &mut ends, &mut tail, old.token, ended);
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
            |other| self.settle(host, member, other),
        )?;
        ends.merge(&settled);
        self.ended_in_map(host, member, &ends);
        self.prune_map(host, member);
        Ok(granted)
    }

    /// Grants every lock of `names` exclusively for `ttl`, all or none, with tokens that follow
    /// each other; `lives` are the liveness locks the caller holds, one for each name. Every
    /// name is checked before any is granted; one granted by another process in between undoes
    /// the grants made (they are released) and refuses as a check would have.
    pub(crate) fn grant_all_in_map<H: MapHost>(
        &self,
        host: &H,
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
                    host,
                    name,
                    entry.and_then(|e| e.record).as_ref(),
                    Kind::Exclusive,
                    now,
                )?;
            }
            let count = names.len() as u64;
            let first = self.take_tokens(host, member, count)?;
            #[cfg(test)]
            hooks::after_token();
            let expires_ns = now + duration_ns(ttl);
            let mut granted = 0;
            let mut outcome = Ok(true);
            for (i, (name, &live)) in names.iter().zip(lives).enumerate() {
                let token = first + i as u64;
                match self.grant_one_of_all(host, member, name, token, live, now, ttl) {
                    Ok(true) => granted += 1,
                    other => {
                        outcome = other;
                        break;
                    }
                }
            }
            if granted == names.len() {
                self.prune_map(host, member);
                return Ok((first, expires_ns));
            }
            for (name, &live) in names.iter().zip(lives).take(granted) {
                self.withdraw_in_map(host, member, name, live);
            }
            match outcome {
                // A record with a newer token than the block's: take a new block.
                Ok(false) => {}
                Err(err) => return Err(err),
                Ok(true) => unreachable!("stopped before every name was granted"),
            }
        }
    }

    /// One name of an acquire of several: granted with `token` unless held (the refusal), or
    /// `false` when its bucket's floor does not admit `token` (a grant there took a newer
    /// token: the caller takes newer tokens, see `Floor`).
    #[allow(clippy::too_many_arguments)]
    fn grant_one_of_all<H: MapHost>(
        &self,
        host: &H,
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
            host.live(),
            member.id(),
            name,
            |entry, floor| {
                ends = Ends::default();
                let current = entry.and_then(|entry| entry.record.as_ref());
                check_join(host, name, current, Kind::Exclusive, clock::now_ns())?;
                if !floor.admits(token) {
                    return Ok((Change::Keep, false));
                }
                let mut tail = entry.map(|entry| entry.tail.clone()).unwrap_or_default();
                for old in dropped(current, &[]) {
                    let kind = current.map_or(Kind::Exclusive, Record::kind);
                    let ended = judge(host, kind, old, now, true)?;
                    ends.add(ended.ending());
                    self.keep_end(host, member, &mut ends, &mut tail, old.token, ended);
                }
                let entry = Entry {
                    name: name.to_owned(),
                    record: Some(Record::Exclusive(new_lease(
                        host,
                        token,
                        host.me(),
                        live,
                        now,
                        ttl,
                    ))),
                    tail,
                };
                Ok((Change::Put(entry), true))
            },
            |other| self.settle(host, member, other),
        )?;
        ends.merge(&settled);
        self.ended_in_map(host, member, &ends);
        Ok(granted)
    }

    /// Keeps the end of the lease `token` in a tail, unless this store keeps no history, or
    /// the map holds [`PENDING_BOUND`] ends already (then `ends` counts it as unrecorded).
    fn keep_end<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        ends: &mut Ends,
        tail: &mut Vec<(u64, Ended)>,
        token: u64,
        ended: Ended,
    ) {
        if !host.keeps_history() {
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
    pub(crate) fn extend_in_map<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        name: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<u64> {
        let (expires, settled) = update(
            member.ring(),
            host.live(),
            member.id(),
            name,
            |entry, _| {
                let now = clock::now_ns();
                let current = entry.and_then(|entry| entry.record.as_ref());
                let mut lease = check_current(host, current, token, now)?;
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
            |other| self.settle(host, member, other),
        )?;
        self.ended_in_map(host, member, &settled);
        Ok(expires)
    }

    /// Takes the lease of `name` whose liveness id is `live` out of its record, leaving no end
    /// behind: the undoing of a grant that was never reported (an acquire of several locks
    /// that failed at a later name, an acquire-and-put whose write failed). Left alone when
    /// another grant replaced it.
    pub(crate) fn withdraw_in_map<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        name: &str,
        live: u64,
    ) {
        let _ = update(
            member.ring(),
            host.live(),
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

    /// Gives the lease of `name` that `holder` holds with `live` and `token` a new token, above
    /// every token handed out before, and an expiry `ttl` from now, in one swap: the lock stays
    /// held throughout, and the old token leaves no end behind (it was never reported to its
    /// caller, as a withdrawn grant's). The grant again of an acquire-and-put whose write was
    /// refused as stale (`acquire.rs`): withdrawn and granted anew, the lock would be free in
    /// between, and the call could end refused by a holder that came between, after others
    /// were refused in its first grant's name. `Ok(None)` when the record no longer holds that
    /// lease (it expired and was replaced, or ended): there is nothing to keep.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn regrant_in_map<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        name: &str,
        ttl: Duration,
        holder: ProcessId,
        live: u64,
        token: u64,
    ) -> Result<Option<(u64, u64)>> {
        let mut taken: Option<u64> = None;
        let (regranted, settled) = update(
            member.ring(),
            host.live(),
            member.id(),
            name,
            |entry, floor| {
                let held = |lease: &Lease| {
                    lease.holder == holder && lease.live == live && lease.token == token
                };
                let Some(mut entry) = entry.cloned() else {
                    return Ok((Change::Keep, None));
                };
                let Some(record) = entry.record.as_mut() else {
                    return Ok((Change::Keep, None));
                };
                if !record.holders().iter().any(held) {
                    return Ok((Change::Keep, None));
                }
                let new = self.token_for_swap(host, member, &mut taken, floor)?;
                let lease = new_lease(host, new, holder, live, clock::now_ns(), ttl);
                match record {
                    Record::Exclusive(old) => *old = lease,
                    Record::Group(group) => {
                        for old in group.holders.iter_mut().filter(|old| held(old)) {
                            *old = lease;
                        }
                    }
                }
                Ok((Change::Put(entry), Some((new, lease.expires_ns))))
            },
            |other| self.settle(host, member, other),
        )?;
        self.ended_in_map(host, member, &settled);
        Ok(regranted)
    }

    /// Writes the ends of the releases `releases` (name, token, when) into their records'
    /// tails, where those leases are still recorded and let go: what this process knows of
    /// its releases, as it closes the store (`history.rs`). Counts nothing: a lease is counted
    /// as it leaves its record.
    pub(crate) fn note_released_in_map<H: MapHost>(
        &self,
        host: &H,
        member: &RingMember,
        releases: &[(String, u64, u64)],
    ) {
        for (name, token, at) in releases {
            let _ = update(
                member.ring(),
                host.live(),
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
                    if host.live().is_held(lease.live).unwrap_or(true)
                        || entry.tail.iter().any(|(held, _)| held == token)
                    {
                        return Ok((Change::Keep, ()));
                    }
                    let (ending, at) = released_at(&lease, *at);
                    let ended = Ended::new(host, record.kind(), &lease, ending, at);
                    // Counts nothing (see above), dropped or not.
                    self.keep_end(
                        host,
                        member,
                        &mut Ends::default(),
                        &mut entry.tail,
                        *token,
                        ended,
                    );
                    Ok((Change::Put(entry), ()))
                },
                |_| Ok(Ends::default()),
            );
        }
    }

    /// Counts the ends a change of the map recorded, and starts a flush of the map's ends to
    /// the file once many are pending.
    fn ended_in_map<H: MapHost>(&self, host: &H, member: &RingMember, ends: &Ends) {
        let activity = host.counters().activity();
        for (counter, n) in ends.counts() {
            activity.add(counter, n);
        }
        let recorded = ends.total();
        if recorded == 0 || !host.keeps_history() {
            return;
        }
        let header = member.ring().map_header();
        let pending = header.pending_ends.fetch_add(recorded, Ordering::AcqRel) + recorded;
        if pending >= FLUSH_AT {
            self.flush_ahead(host, member);
        }
    }

    /// Looks at the next few buckets of the map (after those the last grant looked at), and
    /// ends the records there whose grants are no longer live, so that released, expired and
    /// dead records do not pile up: up to [`PRUNE_PER_GRANT`] buckets that hold records, of at
    /// most [`PRUNE_LOOKS`] (an empty bucket costs one load).
    fn prune_map<H: MapHost>(&self, host: &H, member: &RingMember) {
        let header = member.ring().map_header();
        let ring = member.ring();
        let mut pruned = 0;
        for _ in 0..PRUNE_LOOKS {
            #[allow(clippy::cast_possible_truncation)] // below BUCKETS
            let bucket =
                (header.prune_cursor.fetch_add(1, Ordering::Relaxed) % BUCKETS as u64) as usize;
            if ring.bucket_is_empty(bucket) {
                continue;
            }
            if let Ok(settled) = rewrite(ring, host.live(), member.id(), bucket, |entry| {
                self.settle(host, member, entry)
            }) {
                self.ended_in_map(host, member, &settled);
            }
            pruned += 1;
            if pruned == PRUNE_PER_GRANT {
                return;
            }
        }
    }

    /// Starts a flush of the ends pending in the map, in a thread of its own, unless another
    /// process is flushing.
    fn flush_ahead<H: MapHost>(&self, host: &H, member: &RingMember) {
        self.in_background(
            host,
            member,
            |h| &h.flushing,
            false,
            "fencelock-history",
            |engine, member| {
                let _ = engine.lease_map().flush_ends(engine, member, None, false);
            },
        );
    }

    /// Writes the ends pending in the map into the file's history, in one transaction, then
    /// takes them out of the map. `waiting` bounds the wait for the store (the busy timeout
    /// when `None`). With `seal`, from the last user of the map as it closes it: the same
    /// transaction writes the last token handed out into the counter and seals the
    /// reservation (see `SEALED_KEY`).
    pub(crate) fn flush_ends<H: MapHost>(
        &self,
        host: &H,
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
        match host
            .router()
            .submit(host, Op::RecordEnds { ends, seal }, waiting)?
        {
            Done::Recorded => {}
            other => return Err(unexpected(&other)),
        }
        for bucket in 0..BUCKETS {
            rewrite(member.ring(), host.live(), member.id(), bucket, |entry| {
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

/// Pauses of a grant (tests only), where a process stopped (SIGSTOP, a page fault, preemption)
/// lets others run: between taking its token and publishing it, and, for an acquire that
/// writes through the redo log, between its grant and its write, and between a write refused
/// as stale and its grant again.
#[cfg(test)]
pub(crate) mod hooks {
    use std::cell::RefCell;
    use std::thread::LocalKey;

    type Hook = RefCell<Option<Box<dyn FnOnce()>>>;

    thread_local! {
        static AFTER_TOKEN: Hook = RefCell::new(None);
        static BEFORE_WRITE: Hook = RefCell::new(None);
        static AFTER_STALE: Hook = RefCell::new(None);
    }

    /// Runs `f` once, in the next grant of this thread, right after it took its token.
    pub(crate) fn pause_after_token(f: impl FnOnce() + 'static) {
        AFTER_TOKEN.with(|hook| *hook.borrow_mut() = Some(Box::new(f)));
    }

    /// Runs `f` once, in the next acquire of this thread that writes through the redo log,
    /// right after its grant and before its write.
    #[cfg_attr(fencelock_loom, allow(dead_code))]
    pub(crate) fn pause_before_write(f: impl FnOnce() + 'static) {
        BEFORE_WRITE.with(|hook| *hook.borrow_mut() = Some(Box::new(f)));
    }

    /// Runs `f` once, in the next acquire of this thread that writes through the redo log,
    /// right after its write was refused as stale and before it is granted again.
    #[cfg_attr(fencelock_loom, allow(dead_code))]
    pub(crate) fn pause_after_stale(f: impl FnOnce() + 'static) {
        AFTER_STALE.with(|hook| *hook.borrow_mut() = Some(Box::new(f)));
    }

    /// Called by grants right after taking their tokens.
    pub(crate) fn after_token() {
        run(&AFTER_TOKEN);
    }

    /// Called by an acquire that writes through the redo log, between its grant and its write.
    pub(crate) fn before_write() {
        run(&BEFORE_WRITE);
    }

    /// Called by an acquire that writes through the redo log, between a write refused as stale
    /// and its grant again.
    pub(crate) fn after_stale() {
        run(&AFTER_STALE);
    }

    /// Runs the hook set, taken out before it runs, so that the grants it makes itself run
    /// straight through.
    fn run(hook: &'static LocalKey<Hook>) {
        if let Some(f) = hook.with(|hook| hook.borrow_mut().take()) {
            f();
        }
    }
}

#[cfg(test)]
mod tests;
