//! The history checker: reads what the workers logged and what the store holds at the end,
//! and reports every place where the history breaks a rule fencelock promises.
//!
//! Times are `CLOCK_BOOTTIME` nanoseconds, one clock for every process. An operation took
//! effect at some moment between its start and its end; one whose process died before it
//! logged an end took effect, or not, at some moment before the process was reaped. Every rule
//! below is checked only where these uncertainties cannot explain the history, so a reported
//! violation is a real one.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::history::{History, Kind, Mode, Op, Outcome, Worker};
use crate::worker::FORGED_BASE;

const MS: u64 = 1_000_000;

/// One logged operation with its process.
struct Ev<'a> {
    worker: &'a Worker,
    op: &'a Op,
    /// When it took effect at the latest: its end, or the death of its process.
    end: u64,
}

impl Ev<'_> {
    fn known(&self) -> bool {
        !matches!(self.op.outcome, None | Some(Outcome::Error(_)))
    }

    fn name(&self) -> String {
        let op = self.op;
        let mut text = format!(
            "[{} {} pid {} thread {} #{} {}",
            if self.worker.opener {
                "opener"
            } else {
                "worker"
            },
            self.worker.index,
            self.worker.pid,
            op.thread,
            op.seq,
            op.kind.as_str()
        );
        for (label, field) in [("lock", &op.lock), ("key", &op.key), ("value", &op.value)] {
            if let Some(field) = field {
                let _ = write!(text, " {label}={field}");
            }
        }
        if op.token != 0 {
            let _ = write!(text, " token={}", op.token);
        }
        let _ = write!(text, " {}..", op.start);
        let _ = match (&op.outcome, op.end) {
            (Some(outcome), Some(end)) => write!(text, "{end} -> {outcome}]"),
            _ => write!(text, "(died by {}) -> unknown]", self.end),
        };
        text.replace('\t', " ")
    }
}

/// A lease granted by a logged, successful acquire.
struct Lease {
    ev: usize,
    lock: String,
    token: u64,
    mode: Mode,
    /// From the grant's end until the lease could first have ended: its expiry computed from
    /// the grant's (or last successful extend's) start, its release's start, its process's kill.
    claim: (u64, u64),
    /// The last moment the lease could still have excluded others.
    latest_end: u64,
}

/// A write of a fenced key or an external fence, as the rules of fencing see it.
#[derive(Clone)]
struct Write {
    ev: usize,
    /// `None` for an acquire-and-put whose grant is unknown.
    token: Option<u64>,
    /// `None` for a delete.
    value: Option<String>,
    start: u64,
    end: u64,
    status: Status,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Accepted,
    Unknown,
    Refused,
}

/// Checks a history; returns the violations found (empty when it is sound).
pub fn check(history: &History) -> Vec<String> {
    let evs: Vec<Ev> = history
        .workers
        .iter()
        .flat_map(|worker| {
            worker.ops.iter().map(move |op| Ev {
                worker,
                op,
                end: op.end.unwrap_or(worker.gone_at),
            })
        })
        .collect();
    let mut out = Vec::new();
    for ev in &evs {
        match &ev.op.outcome {
            Some(Outcome::Error(_)) => out.push(format!("unexpected error: {}", ev.name())),
            // An open may be refused with `Timeout` (another process held the store past the
            // busy timeout); that changed nothing.
            Some(other)
                if ev.op.kind == Kind::Open && !matches!(other, Outcome::Ok | Outcome::Timeout) =>
            {
                out.push(format!("the store did not open: {}", ev.name()));
            }
            _ => {}
        }
    }
    let leases = leases(&evs, &mut out);
    check_grant_order(&evs, &leases, &mut out);
    check_tokens_of_each_lock(&evs, &leases, &mut out);
    check_overlaps(&evs, &leases, &mut out);
    check_locked(&evs, &leases, &mut out);
    check_takeovers(&evs, &leases, &mut out);
    check_keys(&evs, &leases, history, &mut out);
    check_fences(&evs, &leases, &mut out);
    check_listings(&evs, &leases, &mut out);
    check_grant_history(&evs, &leases, history, &mut out);
    out
}

/// The store's grant history of each lock names only grants the logs allow, with the process
/// that was granted each; a lease it says was taken over has a later grant of its lock; and
/// once every worker is gone, none is still held.
fn check_grant_history(evs: &[Ev], leases: &[Lease], history: &History, out: &mut Vec<String>) {
    let Some(state) = &history.final_state else {
        return;
    };
    let by_token: HashMap<u64, &Lease> = leases.iter().map(|l| (l.token, l)).collect();
    for (lock, token, pid, ending) in &state.grants {
        let entry = format!("history entry of {lock}: token {token}, pid {pid}, {ending}");
        match by_token.get(token) {
            Some(lease) => {
                let granted = &evs[lease.ev];
                if lease.lock != *lock || granted.worker.pid != *pid {
                    out.push(format!("{entry}, but the grant was {}", granted.name()));
                }
            }
            // A grant of unknown outcome (or one that timed out after a combiner took it) of
            // this lock, by this process, may have been granted this token.
            None if evs.iter().any(|e| {
                e.op.kind.grants()
                    && e.op.lock.as_deref() == Some(lock)
                    && e.worker.pid == *pid
                    && (!e.known() || matches!(e.op.outcome, Some(Outcome::Timeout)))
            }) => {}
            None => out.push(format!(
                "{entry}: no logged acquire could have been granted it"
            )),
        }
        if ending == "taken-over"
            && !state
                .grants
                .iter()
                .any(|(other, later, _, _)| other == lock && later > token)
            && !leases.iter().any(|l| l.lock == *lock && l.token > *token)
        {
            out.push(format!(
                "{entry}, but no later grant of {lock} took it over"
            ));
        }
        if ending == "held" {
            out.push(format!("{entry} after every worker was gone"));
        }
    }
}

/// The leases of every logged grant, checking on the way that tokens are unique and that no
/// extend or holder write was refused as lost while its lease certainly ran.
fn leases(evs: &[Ev], out: &mut Vec<String>) -> Vec<Lease> {
    let mut follow: HashMap<(&str, u64), Vec<usize>> = HashMap::new();
    for (i, ev) in evs.iter().enumerate() {
        if matches!(ev.op.kind, Kind::Extend | Kind::Release | Kind::HolderPut) {
            if let Some(lock) = &ev.op.lock {
                follow.entry((lock, ev.op.token)).or_default().push(i);
            }
        }
    }
    // The last logged moment of every worker: a worker that was not killed exited after it.
    let mut last_seen: HashMap<usize, u64> = HashMap::new();
    for ev in evs {
        let seen = last_seen.entry(ev.worker.index).or_default();
        *seen = (*seen).max(ev.op.end.unwrap_or(ev.op.start));
    }
    let mut by_token: HashMap<u64, usize> = HashMap::new();
    let mut leases = Vec::new();
    for (i, ev) in evs.iter().enumerate() {
        let (Some(Outcome::Granted(token)), Some(end)) = (&ev.op.outcome, ev.op.end) else {
            continue;
        };
        if let Some(&first) = by_token.get(token) {
            out.push(format!(
                "token {token} granted twice: {} and {}",
                evs[first].name(),
                ev.name()
            ));
            continue;
        }
        by_token.insert(*token, i);
        let lock = ev.op.lock.clone().unwrap_or_default();
        let ttl = ev.op.ttl_ms * MS;
        let mut expiry_low = ev.op.start + ttl;
        let mut expiry_high = end + ttl;
        let mut release: Option<(u64, u64)> = None;
        for &f in follow
            .get(&(lock.as_str(), *token))
            .map_or(&[][..], Vec::as_slice)
        {
            let fe = &evs[f];
            if fe.worker.index != ev.worker.index || fe.op.thread != ev.op.thread {
                out.push(format!(
                    "an operation used the lease of another thread: {} of {}",
                    fe.name(),
                    ev.name()
                ));
                continue;
            }
            let ttl = fe.op.ttl_ms * MS;
            match (fe.op.kind, &fe.op.outcome) {
                (Kind::Release, _) => {
                    release.get_or_insert((fe.op.start, fe.end));
                }
                (Kind::Extend, Some(Outcome::Ok)) => {
                    expiry_low = fe.op.start + ttl;
                    expiry_high = expiry_high.max(fe.end + ttl);
                }
                // An extend that did not report may have taken effect, also after its process
                // was paused or killed (another process may commit it), and a shorter TTL than
                // the lease had left brings the expiry forward.
                (Kind::Extend, None | Some(Outcome::Error(_) | Outcome::Timeout)) => {
                    expiry_low = expiry_low.min(fe.op.start + ttl);
                    expiry_high = expiry_high.max(fe.end + ttl);
                }
                (Kind::Extend | Kind::HolderPut, Some(Outcome::Lost))
                    if release.is_none() && fe.end < expiry_low =>
                {
                    out.push(format!(
                        "lease reported lost before it could expire (at {expiry_low} at the \
                         earliest): {} holding {}",
                        fe.name(),
                        ev.name()
                    ));
                }
                _ => {}
            }
        }
        let death = ev.worker.killed_at.unwrap_or(last_seen[&ev.worker.index]);
        let claim_end = expiry_low.min(release.map_or(u64::MAX, |r| r.0)).min(death);
        leases.push(Lease {
            ev: i,
            lock,
            token: *token,
            mode: ev.op.kind.mode(),
            claim: (end, claim_end),
            latest_end: expiry_high
                .min(release.map_or(u64::MAX, |r| r.1))
                .min(ev.worker.gone_at),
        });
    }
    leases
}

/// Items `(start, end, token, index)` that must not go down in token where one ended before
/// another started (strictly up for grants). Returns the pairs that do: (earlier, later).
fn descents(items: &[(u64, u64, u64, usize)], strict: bool) -> Vec<(usize, usize)> {
    let mut by_start: Vec<_> = items.iter().collect();
    by_start.sort_by_key(|item| item.0);
    let mut by_end: Vec<_> = items.iter().collect();
    by_end.sort_by_key(|item| item.1);
    let mut highest: Option<(u64, usize)> = None;
    let mut next = 0;
    let mut found = Vec::new();
    for later in by_start {
        while next < by_end.len() && by_end[next].1 < later.0 {
            let (_, _, token, index) = *by_end[next];
            if highest.is_none_or(|(h, _)| token > h) {
                highest = Some((token, index));
            }
            next += 1;
        }
        if let Some((token, index)) = highest {
            if token > later.2 || (strict && token == later.2) {
                found.push((index, later.3));
            }
        }
    }
    found
}

fn check_grant_order(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let items: Vec<_> = leases
        .iter()
        .map(|l| (evs[l.ev].op.start, l.claim.0, l.token, l.ev))
        .collect();
    for (earlier, later) in descents(&items, true) {
        out.push(format!(
            "token went down: {} ended before {} started",
            evs[earlier].name(),
            evs[later].name()
        ));
    }
}

/// Each lock's tokens only grow: a grant that the store made after a lease of the same lock had
/// certainly ended (its latest end before the grant's logged moment of grant, which is at or
/// before the store's) carries a higher token. Unlike `check_grant_order`, this sees a grant
/// whose acquire began before the other lease was granted, and whose token was taken then: a
/// grant stopped between taking its token and publishing it.
fn check_tokens_of_each_lock(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let mut by_lock: BTreeMap<&str, Vec<(u64, u64, u64, usize)>> = BTreeMap::new();
    for lease in leases {
        let granted = evs[lease.ev].op.granted_ns;
        if granted != 0 {
            by_lock.entry(&lease.lock).or_default().push((
                granted,
                lease.latest_end,
                lease.token,
                lease.ev,
            ));
        }
    }
    for (lock, items) in by_lock {
        for (earlier, later) in descents(&items, true) {
            out.push(format!(
                "{lock} granted a lower token after a higher one had ended: {} ended before \
                 {} was granted",
                evs[earlier].name(),
                evs[later].name()
            ));
        }
    }
}

/// Where certain claims of one lock overlap, at most one exclusive holder and no other, any
/// number of shared holders, or at most N permits of a semaphore of N.
fn check_overlaps(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let mut by_lock: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for lease in leases.iter().filter(|l| l.claim.0 < l.claim.1) {
        by_lock.entry(&lease.lock).or_default().push(lease);
    }
    for (lock, mut claims) in by_lock {
        claims.sort_by_key(|l| l.claim.0);
        // The claims still running at the start of the one being looked at.
        let mut running: Vec<&Lease> = Vec::new();
        for lease in claims {
            running.retain(|r| r.claim.1 > lease.claim.0);
            if let Some(prev) = running
                .iter()
                .find(|r| r.mode.excludes(lease.mode) || lease.mode.excludes(r.mode))
            {
                out.push(format!(
                    "two holders of {lock} at once: token {} ({:?}) held it {:?} and token {}                      ({:?}) held it {:?}: {} / {}",
                    prev.token,
                    prev.mode,
                    prev.claim,
                    lease.token,
                    lease.mode,
                    lease.claim,
                    evs[prev.ev].name(),
                    evs[lease.ev].name()
                ));
            }
            if let Mode::Permit(permits) = lease.mode {
                let permits_held = running
                    .iter()
                    .filter(|r| matches!(r.mode, Mode::Permit(_)))
                    .count();
                if permits_held >= permits as usize {
                    let tokens: Vec<u64> = running.iter().map(|r| r.token).collect();
                    out.push(format!(
                        "more than {permits} permits of {lock} at once: tokens {tokens:?} \
                         and {}: {}",
                        lease.token,
                        evs[lease.ev].name()
                    ));
                }
            }
            running.push(lease);
        }
    }
}

/// An acquire refused as `Locked` by token T: T must be a lease of that lock that could still
/// run when the acquire started.
fn check_locked(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let by_token: HashMap<u64, &Lease> = leases.iter().map(|l| (l.token, l)).collect();
    let unlogged = unlogged_grants(evs);
    for ev in evs {
        let Some(Outcome::Locked(token)) = ev.op.outcome else {
            continue;
        };
        let lock = ev.op.lock.as_deref().unwrap_or("");
        match by_token.get(&token) {
            Some(lease) if lease.lock != lock => out.push(format!(
                "refused as held by token {token}, a lease of {}: {}",
                lease.lock,
                ev.name()
            )),
            Some(lease) if ev.op.start > lease.latest_end => out.push(format!(
                "refused as held by token {token}, whose lease had ended by {}: {} (lease {})",
                lease.latest_end,
                ev.name(),
                evs[lease.ev].name()
            )),
            Some(_) => {}
            None if Unlogged::seen(&unlogged, lock, token, ev) => {}
            None => out.push(format!(
                "refused as held by token {token}, which no live grant of {lock} carries: {}",
                ev.name()
            )),
        }
    }
}

/// A grant the history does not log, which refusals and listings may name while it could be
/// seen: from `from` to `until`, with a token below `below`.
struct Unlogged {
    from: u64,
    until: u64,
    below: u64,
}

impl Unlogged {
    /// Whether `ev` (a refusal or a listing) may name `token` of `lock` as one of these.
    fn seen(unlogged: &HashMap<&str, Vec<Unlogged>>, lock: &str, token: u64, ev: &Ev) -> bool {
        unlogged.get(lock).is_some_and(|grants| {
            grants.iter().any(|g| {
                token < g.below && ev.op.start <= g.until && g.from <= ev.op.end.unwrap_or(u64::MAX)
            })
        })
    }
}

/// The grants nobody logged, by lock.
fn unlogged_grants<'e>(evs: &'e [Ev]) -> HashMap<&'e str, Vec<Unlogged>> {
    // Grants nobody logged, each seen from its acquire's start until the latest time it could
    // be: acquires of unknown outcome (until their process is gone), an `acquire_and_put` that
    // timed out (its request was run again after its combiner died, found its grant and its
    // key written higher since, and could not tell whether its first run landed: its grant
    // was visible until it was given back, before the call returned), one refused as lost
    // (the redo log's path: its write found stale after its grant had expired and the lock
    // was granted to another), and one granted above a first grant (below its token) that its
    // write found stale (the redo log's path grants and writes again).
    let mut unlogged: HashMap<&str, Vec<Unlogged>> = HashMap::new();
    for ev in evs.iter().filter(|e| e.op.kind.grants()) {
        let (until, below) = match (&ev.op.outcome, ev.op.end) {
            _ if !ev.known() => (ev.worker.gone_at, u64::MAX),
            (Some(Outcome::Timeout | Outcome::Lost), Some(end))
                if ev.op.kind == Kind::AcquireAndPut =>
            {
                (end, u64::MAX)
            }
            (Some(Outcome::Granted(token)), Some(end)) if ev.op.kind == Kind::AcquireAndPut => {
                (end, *token)
            }
            _ => continue,
        };
        unlogged
            .entry(ev.op.lock.as_deref().unwrap_or(""))
            .or_default()
            .push(Unlogged {
                from: ev.op.start,
                until,
                below,
            });
    }
    unlogged
}

/// A grant as `check_takeovers` orders them: token, end of grant, event.
type Grant = (u64, u64, usize);

/// An extend or holder write accepted must find its lease current: not after its certain
/// expiry, and not after a later grant of the lock had completed.
fn check_takeovers(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let by_token: HashMap<u64, &Lease> = leases.iter().map(|l| (l.token, l)).collect();
    // Per lock and holder mode, the grants that take the lock over from a holder of that mode
    // (an exclusive grant from anyone, any grant from an exclusive holder; another permit or
    // shared holder takes nothing over), by token, with the earliest grant end among all
    // higher tokens.
    let mut by_lock: HashMap<(&str, bool), Vec<Grant>> = HashMap::new();
    for lease in leases {
        for exclusive_holder in [true, false] {
            let holder = if exclusive_holder {
                Mode::Exclusive
            } else {
                lease.mode
            };
            if lease.mode.excludes(holder) && holder.excludes(lease.mode) {
                by_lock
                    .entry((&lease.lock, exclusive_holder))
                    .or_default()
                    .push((lease.token, lease.claim.0, lease.ev));
            }
        }
    }
    for grants in by_lock.values_mut() {
        grants.sort_unstable();
        let mut earliest: (u64, usize) = (u64::MAX, usize::MAX);
        for grant in grants.iter_mut().rev() {
            if grant.1 < earliest.0 {
                earliest = (grant.1, grant.2);
            }
            (grant.1, grant.2) = earliest;
        }
    }
    for ev in evs {
        if !matches!(ev.op.kind, Kind::Extend | Kind::HolderPut)
            || ev.op.outcome != Some(Outcome::Ok)
        {
            continue;
        }
        let Some(lease) = by_token.get(&ev.op.token) else {
            out.push(format!("accepted for a lease never granted: {}", ev.name()));
            continue;
        };
        if ev.op.start > lease.latest_end {
            out.push(format!(
                "accepted after the lease had ended by {}: {}",
                lease.latest_end,
                ev.name()
            ));
        }
        let exclusive_holder = lease.mode == Mode::Exclusive;
        // A shared holder is taken over only by an exclusive grant; a permit by nothing.
        let successors = match lease.mode {
            Mode::Permit(_) => None,
            _ => by_lock.get(&(lease.lock.as_str(), exclusive_holder)),
        };
        let Some(grants) = successors else {
            continue;
        };
        let above = grants.partition_point(|g| g.0 <= lease.token);
        if let Some(&(_, end, successor)) = grants.get(above) {
            if end < ev.op.start {
                out.push(format!(
                    "accepted after a newer grant took the lock over: {} after {}",
                    ev.name(),
                    evs[successor].name()
                ));
            }
        }
    }
}

fn write_status(outcome: Option<&Outcome>) -> Status {
    match outcome {
        Some(Outcome::Ok | Outcome::Granted(_)) => Status::Accepted,
        // A write that timed out may still land: the process that took it into its commit
        // (the combiner of the shared request ring) may have been paused past the deadline.
        None | Some(Outcome::Error(_) | Outcome::Timeout) => Status::Unknown,
        Some(_) => Status::Refused,
    }
}

fn check_keys(evs: &[Ev], leases: &[Lease], history: &History, out: &mut Vec<String>) {
    let mut writes: BTreeMap<&str, Vec<Write>> = BTreeMap::new();
    let mut gets: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, ev) in evs.iter().enumerate() {
        let Some(key) = ev.op.key.as_deref() else {
            continue;
        };
        if ev.op.kind == Kind::Get {
            if ev.known() {
                gets.entry(key).or_default().push(i);
            }
            continue;
        }
        if !ev.op.kind.writes_key() {
            continue;
        }
        let status = write_status(ev.op.outcome.as_ref());
        let token = match (ev.op.kind, &ev.op.outcome) {
            (Kind::AcquireAndPut, Some(Outcome::Granted(token))) => Some(*token),
            (Kind::AcquireAndPut, _) => None,
            _ => Some(ev.op.token),
        };
        writes.entry(key).or_default().push(Write {
            ev: i,
            token,
            value: ev.op.value.clone(),
            start: ev.op.start,
            end: ev.end,
            status,
        });
    }
    let granted_end: HashMap<u64, u64> = leases.iter().map(|l| (l.token, l.claim.0)).collect();
    for (key, writes) in &writes {
        check_fenced(evs, &granted_end, &format!("key {key}"), writes, out);
        let reads = Reads::new(writes);
        for &g in gets.get(key).map_or(&[][..], Vec::as_slice) {
            let ev = &evs[g];
            let found = match &ev.op.outcome {
                Some(Outcome::Value(token, value)) => Some((*token, value.as_str())),
                Some(Outcome::NotFound) => None,
                // A read that failed (it may time out behind a process paused inside a
                // commit) found nothing out.
                _ => continue,
            };
            if let Some(problem) = reads.explain(evs, found, ev.op.start, ev.end) {
                out.push(format!("{problem}: read {}", ev.name()));
            }
        }
    }
    let Some(state) = &history.final_state else {
        return;
    };
    if let Err(err) = &state.verify {
        out.push(format!("the final store fails verify(): {err}"));
    }
    let mut present = Vec::new();
    for (key, found) in &state.values {
        if found.is_some() {
            present.push(key.clone());
        }
        let writes = writes.get(key.as_str()).map_or(&[][..], Vec::as_slice);
        let reads = Reads::new(writes);
        let found = found.as_ref().map(|(t, v)| (*t, v.as_str()));
        if let Some(problem) = reads.explain(evs, found, u64::MAX, u64::MAX) {
            out.push(format!("{problem}: in the final store, key {key}"));
        }
        if let Some((token, _)) = found {
            let highest = writes
                .iter()
                .filter(|w| w.status == Status::Accepted)
                .filter_map(|w| w.token.map(|t| (t, w.ev)))
                .max();
            if let Some((highest, w)) = highest.filter(|(h, _)| *h > token) {
                out.push(format!(
                    "final value of key {key} carries token {token}, below the accepted {}",
                    evs[w].name()
                ));
                let _ = highest;
            }
        }
    }
    present.sort();
    let mut listed = state.listed.clone();
    listed.sort();
    if present != listed {
        out.push(format!(
            "keys() lists {listed:?} but get() finds values under {present:?}"
        ));
    }
}

/// Rules common to fenced keys and external fences: accepted tokens never go down, a refusal
/// as stale names a higher token that was written, a forged token is never accepted, and a
/// granted token is never refused as never granted.
fn check_fenced(
    evs: &[Ev],
    granted_end: &HashMap<u64, u64>,
    what: &str,
    writes: &[Write],
    out: &mut Vec<String>,
) {
    let accepted: Vec<_> = writes
        .iter()
        .filter(|w| w.status == Status::Accepted)
        .filter_map(|w| w.token.map(|t| (w.start, w.end, t, w.ev)))
        .collect();
    for (earlier, later) in descents(&accepted, false) {
        out.push(format!(
            "{what} accepted a lower token after a higher one: {} ended before {} started",
            evs[earlier].name(),
            evs[later].name()
        ));
    }
    for w in writes {
        let ev = &evs[w.ev];
        match &ev.op.outcome {
            Some(Outcome::Stale { token, highest }) => {
                let named = writes.iter().any(|o| {
                    o.status != Status::Refused
                        && o.token.is_none_or(|t| t == *highest)
                        && o.start < w.end
                });
                if Some(*token) != w.token || highest <= token || !named {
                    out.push(format!(
                        "{what}: refusal as stale names no higher token written before: {}",
                        ev.name()
                    ));
                }
            }
            Some(Outcome::Invalid) => {
                if let Some(&granted) = w.token.and_then(|t| granted_end.get(&t)) {
                    if granted < w.start {
                        out.push(format!(
                            "{what}: a granted token was refused as never granted: {}",
                            ev.name()
                        ));
                    }
                }
            }
            Some(Outcome::Ok) if w.token.is_some_and(|t| t >= FORGED_BASE) => {
                out.push(format!(
                    "{what}: a forged token was accepted: {}",
                    ev.name()
                ));
            }
            _ => {}
        }
    }
}

/// What reads of one key may return.
struct Reads<'a> {
    writes: &'a [Write],
    /// Accepted writes by start, with the earliest end among those starting at or after each.
    accepted: Vec<(u64, u64, usize)>,
}

impl<'a> Reads<'a> {
    fn new(writes: &'a [Write]) -> Reads<'a> {
        let mut accepted: Vec<(u64, u64, usize)> = writes
            .iter()
            .filter(|w| w.status == Status::Accepted)
            .map(|w| (w.start, w.end, w.ev))
            .collect();
        accepted.sort_unstable();
        let mut earliest = (u64::MAX, usize::MAX);
        for item in accepted.iter_mut().rev() {
            if item.1 < earliest.0 {
                earliest = (item.1, item.2);
            }
            (item.1, item.2) = earliest;
        }
        Reads { writes, accepted }
    }

    /// An accepted write that started after `after` and ended before `before`, if any: proof
    /// that whatever was written by `after` was replaced by `before`.
    fn replaced(&self, after: u64, before: u64) -> Option<usize> {
        let i = self.accepted.partition_point(|a| a.0 <= after);
        self.accepted.get(i).filter(|a| a.1 < before).map(|a| a.2)
    }

    /// Why a read over `start..end` could not have returned `found`, or `None` if it could.
    fn explain(
        &self,
        evs: &[Ev],
        found: Option<(u64, &str)>,
        start: u64,
        end: u64,
    ) -> Option<String> {
        match found {
            Some((token, value)) => {
                let Some(w) = self
                    .writes
                    .iter()
                    .find(|w| w.value.as_deref() == Some(value))
                else {
                    return Some(format!("value {value:?} was never written"));
                };
                let name = evs[w.ev].name();
                if w.status == Status::Refused {
                    return Some(format!("value of a refused write {name}"));
                }
                if w.start > end {
                    return Some(format!("value of a write that started later {name}"));
                }
                if w.token.is_some_and(|t| t != token) {
                    return Some(format!("token {token} differs from the write {name}"));
                }
                self.replaced(w.end, start).map(|r| {
                    format!(
                        "lost update: {name} was replaced by {} before",
                        evs[r].name()
                    )
                })
            }
            None => {
                let deleted = self.writes.iter().any(|w| {
                    w.value.is_none()
                        && w.status != Status::Refused
                        && w.start < end
                        && self.replaced(w.end, start).is_none()
                });
                if deleted {
                    return None;
                }
                self.writes
                    .iter()
                    .filter(|w| w.status == Status::Accepted && w.end < start)
                    .min_by_key(|w| w.end)
                    .map(|w| {
                        format!(
                            "value missing: {} was acknowledged before",
                            evs[w.ev].name()
                        )
                    })
            }
        }
    }
}

/// `locks()` lists under each lock the token of its last grant: a grant of that lock that
/// started before the read ended, and not one that a newer grant of the lock had replaced
/// before the read started. `info()`'s last token is at least that of every grant that ended
/// before it started.
fn check_listings(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let by_token: HashMap<u64, &Lease> = leases.iter().map(|l| (l.token, l)).collect();
    let mut by_lock: HashMap<&str, Vec<&Lease>> = HashMap::new();
    for lease in leases {
        by_lock.entry(&lease.lock).or_default().push(lease);
    }
    // A grant of unknown outcome may have written any token of its lock's record; so may one
    // that timed out after a paused combiner took it (it leaves a dead record, never a live
    // lease: the lease rules above check that). An `acquire_and_put`'s first grant may be
    // listed while the call runs (`check_locked`).
    let unlogged = unlogged_grants(evs);
    let mut unknown: HashMap<&str, u64> = HashMap::new();
    let maybe_written = |e: &&Ev| {
        e.op.kind.grants() && (!e.known() || matches!(e.op.outcome, Some(Outcome::Timeout)))
    };
    for ev in evs.iter().filter(maybe_written) {
        let earliest = unknown
            .entry(ev.op.lock.as_deref().unwrap_or(""))
            .or_insert(u64::MAX);
        *earliest = (*earliest).min(ev.op.start);
    }
    // Grants by the end of their grant, with the highest token among those ended by then.
    let mut ended: Vec<(u64, u64, usize)> =
        leases.iter().map(|l| (l.claim.0, l.token, l.ev)).collect();
    ended.sort_unstable();
    let mut highest = (0, usize::MAX);
    for item in &mut ended {
        if item.1 > highest.0 {
            highest = (item.1, item.2);
        }
        (item.1, item.2) = highest;
    }
    for ev in evs {
        match &ev.op.outcome {
            Some(Outcome::Locks(listed)) => {
                for (lock, token) in listed {
                    // A newer grant replaces the record's token only where it excludes it: a
                    // semaphore or shared lock lists every grant it still holds. A grant of
                    // unknown outcome listed beside others of its lock is one of several
                    // holders, of their kind, not an exclusive one.
                    let beside: Vec<u64> = listed
                        .iter()
                        .filter(|(other, t)| other == lock && t != token)
                        .map(|(_, t)| *t)
                        .collect();
                    let unknown_mode = match beside.iter().find_map(|t| by_token.get(t)) {
                        Some(known) => known.mode,
                        None if !beside.is_empty() => Mode::Shared,
                        None => Mode::Exclusive,
                    };
                    let mode = by_token.get(token).map_or(unknown_mode, |l| l.mode);
                    let newer = by_lock.get(lock.as_str()).and_then(|grants| {
                        grants.iter().find(|g| {
                            g.token > *token
                                && g.claim.0 < ev.op.start
                                && (mode.excludes(g.mode) || g.mode == Mode::Exclusive)
                        })
                    });
                    if let Some(newer) = newer {
                        out.push(format!(
                            "locks() lists token {token} for {lock}, replaced by {} before: {}",
                            evs[newer.ev].name(),
                            ev.name()
                        ));
                    }
                    match by_token.get(token) {
                        Some(lease) if lease.lock != *lock => out.push(format!(
                            "locks() lists token {token} for {lock}, a lease of {}: {}",
                            lease.lock,
                            ev.name()
                        )),
                        Some(lease) if evs[lease.ev].op.start > ev.end => out.push(format!(
                            "locks() lists token {token} for {lock}, granted later by {}: {}",
                            evs[lease.ev].name(),
                            ev.name()
                        )),
                        Some(_) => {}
                        None if unknown.get(lock.as_str()).is_some_and(|&s| s < ev.end) => {}
                        None if Unlogged::seen(&unlogged, lock, *token, ev) => {}
                        None => out.push(format!(
                            "locks() lists token {token} for {lock}, which no grant of {lock} \
                             carries: {}",
                            ev.name()
                        )),
                    }
                }
            }
            Some(Outcome::Info(last_token)) => {
                let before = ended.partition_point(|e| e.0 < ev.op.start);
                if let Some(&(_, token, grant)) = before.checked_sub(1).map(|i| &ended[i]) {
                    if token > *last_token {
                        out.push(format!(
                            "info() reports last token {last_token}, below the token of {}, \
                             granted before: {}",
                            evs[grant].name(),
                            ev.name()
                        ));
                    }
                }
            }
            _ => {}
        }
    }
}

fn check_fences(evs: &[Ev], leases: &[Lease], out: &mut Vec<String>) {
    let mut fences: BTreeMap<&str, Vec<Write>> = BTreeMap::new();
    for (i, ev) in evs.iter().enumerate() {
        if ev.op.kind != Kind::Fence {
            continue;
        }
        fences
            .entry(ev.op.lock.as_deref().unwrap_or(""))
            .or_default()
            .push(Write {
                ev: i,
                token: Some(ev.op.token),
                value: None,
                start: ev.op.start,
                end: ev.end,
                status: write_status(ev.op.outcome.as_ref()),
            });
    }
    let granted_end: HashMap<u64, u64> = leases.iter().map(|l| (l.token, l.claim.0)).collect();
    for (resource, writes) in &fences {
        check_fenced(evs, &granted_end, &format!("fence {resource}"), writes, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::FinalState;

    /// Builds histories by hand: every op completes unless marked unknown.
    struct Builder {
        workers: Vec<Worker>,
    }

    impl Builder {
        fn new(workers: usize) -> Builder {
            Builder {
                workers: (0..workers)
                    .map(|index| Worker {
                        index,
                        pid: 100 + u32::try_from(index).unwrap(),
                        opener: false,
                        killed_at: None,
                        gone_at: 10_000 * MS,
                        ops: Vec::new(),
                    })
                    .collect(),
            }
        }

        #[allow(clippy::too_many_arguments)]
        fn op(
            &mut self,
            worker: usize,
            kind: Kind,
            ms: (u64, u64),
            lock: Option<&str>,
            key: Option<&str>,
            token: u64,
            ttl_ms: u64,
            value: Option<&str>,
            outcome: Option<Outcome>,
        ) -> &mut Self {
            let ops = &mut self.workers[worker].ops;
            let mut op = Op::new(0, ops.len() as u64, kind, ms.0 * MS);
            op.end = outcome.is_some().then_some(ms.1 * MS);
            op.outcome = outcome;
            op.lock = lock.map(Into::into);
            op.key = key.map(Into::into);
            op.token = token;
            op.ttl_ms = ttl_ms;
            op.value = value.map(Into::into);
            ops.push(op);
            self
        }

        fn acquire(
            &mut self,
            w: usize,
            ms: (u64, u64),
            lock: &str,
            ttl: u64,
            token: u64,
        ) -> &mut Self {
            self.op(
                w,
                Kind::Acquire,
                ms,
                Some(lock),
                None,
                0,
                ttl,
                None,
                Some(Outcome::Granted(token)),
            )
        }

        fn release(&mut self, w: usize, ms: (u64, u64), lock: &str, token: u64) -> &mut Self {
            self.op(
                w,
                Kind::Release,
                ms,
                Some(lock),
                None,
                token,
                0,
                None,
                Some(Outcome::Ok),
            )
        }

        fn put(
            &mut self,
            w: usize,
            ms: (u64, u64),
            key: &str,
            token: u64,
            value: &str,
            outcome: Outcome,
        ) -> &mut Self {
            self.op(
                w,
                Kind::Put,
                ms,
                None,
                Some(key),
                token,
                0,
                Some(value),
                Some(outcome),
            )
        }

        fn history(&self, values: &[(&str, Option<(u64, &str)>)]) -> History {
            History {
                workers: self.workers.clone(),
                final_state: Some(FinalState {
                    verify: Ok(()),
                    values: values
                        .iter()
                        .map(|(k, v)| ((*k).into(), v.map(|(t, v)| (t, v.into()))))
                        .collect(),
                    listed: values
                        .iter()
                        .filter(|(_, v)| v.is_some())
                        .map(|(k, _)| (*k).into())
                        .collect(),
                    grants: Vec::new(),
                }),
            }
        }
    }

    fn expect_violation(history: &History, needle: &str) {
        let found = check(history);
        assert!(
            found.iter().any(|v| v.contains(needle)),
            "expected a violation containing {needle:?}, got {found:#?}"
        );
    }

    /// A sound history: a handoff after release, a takeover after expiry with the paused
    /// holder's late writes refused, a read of the newest value, a kill mid-put.
    fn sound() -> Builder {
        let mut b = Builder::new(3);
        b.acquire(0, (0, 5), "a", 100, 1)
            .op(
                0,
                Kind::HolderPut,
                (10, 12),
                Some("a"),
                Some("k"),
                1,
                0,
                Some("v1"),
                Some(Outcome::Ok),
            )
            .release(0, (20, 21), "a", 1)
            .acquire(1, (30, 31), "a", 100, 2)
            .put(1, (40, 41), "k", 2, "v2", Outcome::Ok)
            // Worker 1 is paused past its TTL; worker 2 takes over and writes.
            .acquire(2, (200, 210), "a", 100, 3)
            .op(
                2,
                Kind::HolderPut,
                (220, 230),
                Some("a"),
                Some("k"),
                3,
                0,
                Some("v3"),
                Some(Outcome::Ok),
            )
            .op(
                1,
                Kind::HolderPut,
                (150, 240),
                Some("a"),
                Some("k"),
                2,
                0,
                Some("v2b"),
                Some(Outcome::Lost),
            )
            .put(
                1,
                (250, 251),
                "k",
                2,
                "v2c",
                Outcome::Stale {
                    token: 2,
                    highest: 3,
                },
            )
            .op(
                2,
                Kind::Get,
                (260, 261),
                None,
                Some("k"),
                0,
                0,
                None,
                Some(Outcome::Value(3, "v3".into())),
            )
            .op(
                0,
                Kind::Acquire,
                (215, 216),
                Some("a"),
                None,
                0,
                100,
                None,
                Some(Outcome::Locked(3)),
            )
            .put(
                0,
                (300, 301),
                "k",
                99 + FORGED_BASE,
                "forged",
                Outcome::Invalid,
            )
            // Killed during a put of its own key: either outcome is fine.
            .put(2, (400, 401), "j", 3, "j1", Outcome::Ok)
            .op(
                2,
                Kind::Put,
                (410, 0),
                None,
                Some("j"),
                3,
                0,
                Some("j2"),
                None,
            );
        b.workers[2].killed_at = Some(420 * MS);
        b.workers[2].gone_at = 421 * MS;
        b
    }

    #[test]
    fn a_sound_history_passes() {
        let b = sound();
        assert_eq!(
            check(&b.history(&[("k", Some((3, "v3"))), ("j", Some((3, "j2")))])),
            Vec::<String>::new()
        );
        assert_eq!(
            check(&b.history(&[("k", Some((3, "v3"))), ("j", Some((3, "j1")))])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_grant_history_that_the_logs_contradict_is_reported() {
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .release(0, (20, 21), "a", 1)
            .acquire(1, (30, 35), "a", 100, 2)
            .release(1, (40, 41), "a", 2);
        let with = |grants: &[(u64, u32, &str)]| {
            let mut history = b.history(&[]);
            history.final_state.as_mut().unwrap().grants = grants
                .iter()
                .map(|&(token, pid, ending)| ("a".to_owned(), token, pid, ending.to_owned()))
                .collect();
            history
        };
        assert_eq!(
            check(&with(&[(1, 100, "released"), (2, 101, "released")])),
            Vec::<String>::new()
        );
        expect_violation(&with(&[(1, 101, "released")]), "but the grant was");
        expect_violation(&with(&[(7, 100, "released")]), "no logged acquire");
        expect_violation(&with(&[(2, 101, "taken-over")]), "no later grant");
        expect_violation(&with(&[(2, 101, "held")]), "after every worker was gone");
    }

    #[test]
    fn overlapping_holders_are_reported() {
        let mut b = Builder::new(2);
        // Both released long after the second grant, so both claims run to their expiry.
        b.acquire(0, (0, 5), "a", 100, 1)
            .acquire(1, (50, 60), "a", 100, 2)
            .release(0, (200, 201), "a", 1)
            .release(1, (200, 201), "a", 2);
        expect_violation(&b.history(&[]), "two holders of a at once");
        // After the first holder's expiry (0 + 100 ms) the same grant is fine.
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .acquire(1, (100, 110), "a", 100, 2)
            .release(0, (200, 201), "a", 1)
            .release(1, (200, 201), "a", 2);
        assert_eq!(check(&b.history(&[])), Vec::<String>::new());
        // An extend with a shorter TTL that never reported (its process paused, another
        // process committed it) may end the lease at its start + TTL.
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .op(0, Kind::Extend, (10, 0), Some("a"), None, 1, 20, None, None)
            .acquire(1, (40, 50), "a", 100, 2)
            .release(0, (200, 201), "a", 1)
            .release(1, (200, 201), "a", 2);
        assert_eq!(check(&b.history(&[])), Vec::<String>::new());
        // But not before that.
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .op(0, Kind::Extend, (10, 0), Some("a"), None, 1, 20, None, None)
            .acquire(1, (15, 25), "a", 100, 2)
            .release(0, (200, 201), "a", 1)
            .release(1, (200, 201), "a", 2);
        expect_violation(&b.history(&[]), "two holders of a at once");
    }

    #[test]
    fn permits_and_shared_holders_overlap_only_as_their_kinds_allow() {
        let grant = |b: &mut Builder, w: usize, ms: (u64, u64), kind: Kind, lock: &str, token| {
            b.op(
                w,
                kind,
                ms,
                Some(lock),
                None,
                0,
                100,
                None,
                Some(Outcome::Granted(token)),
            );
        };
        // Two permits of a semaphore of two at once are fine; a third is not.
        let mut b = Builder::new(3);
        grant(&mut b, 0, (0, 5), Kind::AcquirePermit, "s", 1);
        grant(&mut b, 1, (10, 15), Kind::AcquirePermitWait, "s", 2);
        for (w, token) in [(0, 1), (1, 2)] {
            b.release(w, (200, 201), "s", token);
        }
        assert_eq!(check(&b.history(&[])), Vec::<String>::new());
        grant(&mut b, 2, (20, 25), Kind::AcquirePermit, "s", 3);
        b.release(2, (200, 201), "s", 3);
        expect_violation(&b.history(&[]), "more than 2 permits of s at once");
        // Shared holders together are fine; an exclusive one with them is not.
        let mut b = Builder::new(3);
        grant(&mut b, 0, (0, 5), Kind::AcquireShared, "r", 1);
        grant(&mut b, 1, (10, 15), Kind::AcquireSharedWait, "r", 2);
        for (w, token) in [(0, 1), (1, 2)] {
            b.release(w, (200, 201), "r", token);
        }
        assert_eq!(check(&b.history(&[])), Vec::<String>::new());
        grant(&mut b, 2, (20, 25), Kind::Acquire, "r", 3);
        b.release(2, (200, 201), "r", 3);
        expect_violation(&b.history(&[]), "two holders of r at once");
        // A shared grant during an exclusive one is reported too.
        let mut b = Builder::new(2);
        grant(&mut b, 0, (0, 5), Kind::Acquire, "r", 1);
        grant(&mut b, 1, (10, 15), Kind::AcquireShared, "r", 2);
        b.release(0, (200, 201), "r", 1)
            .release(1, (200, 201), "r", 2);
        expect_violation(&b.history(&[]), "two holders of r at once");
    }

    #[test]
    fn a_permit_is_not_taken_over_by_another_permit() {
        let mut b = Builder::new(2);
        b.op(
            0,
            Kind::AcquirePermit,
            (0, 5),
            Some("s"),
            None,
            0,
            1000,
            None,
            Some(Outcome::Granted(1)),
        )
        .op(
            1,
            Kind::AcquirePermit,
            (10, 15),
            Some("s"),
            None,
            0,
            1000,
            None,
            Some(Outcome::Granted(2)),
        )
        .op(
            0,
            Kind::Extend,
            (20, 25),
            Some("s"),
            None,
            1,
            1000,
            None,
            Some(Outcome::Ok),
        )
        .op(
            0,
            Kind::Locks,
            (30, 35),
            None,
            None,
            0,
            0,
            None,
            Some(Outcome::Locks(vec![("s".into(), 1), ("s".into(), 2)])),
        )
        .release(0, (200, 201), "s", 1)
        .release(1, (200, 201), "s", 2);
        assert_eq!(check(&b.history(&[])), Vec::<String>::new());
    }

    #[test]
    fn a_shared_grant_of_unknown_outcome_listed_beside_newer_shared_grants_is_sound() {
        let shared = |b: &mut Builder, w: usize, ms: (u64, u64), outcome: Option<Outcome>| {
            b.op(
                w,
                Kind::AcquireShared,
                ms,
                Some("r"),
                None,
                0,
                1000,
                None,
                outcome,
            );
        };
        let listing = |tokens: &[u64]| {
            let mut b = Builder::new(3);
            // Worker 2's grant never logged its end (token 1, say), then two known ones.
            shared(&mut b, 2, (0, 1), None);
            shared(&mut b, 0, (10, 15), Some(Outcome::Granted(2)));
            shared(&mut b, 1, (20, 25), Some(Outcome::Granted(3)));
            let listed = tokens.iter().map(|&t| ("r".to_owned(), t)).collect();
            b.op(
                0,
                Kind::Locks,
                (30, 35),
                None,
                None,
                0,
                0,
                None,
                Some(Outcome::Locks(listed)),
            )
            .release(0, (200, 201), "r", 2)
            .release(1, (200, 201), "r", 3);
            check(&b.history(&[]))
        };
        assert_eq!(listing(&[3, 2, 1]), Vec::<String>::new());
        // Alone in a listing after a newer grant of its lock, it reads as replaced.
        let alone = listing(&[1]);
        assert!(
            alone.iter().any(|v| v.contains("replaced by")),
            "{alone:#?}"
        );
    }

    #[test]
    fn a_token_going_down_is_reported() {
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 10, 5)
            .acquire(1, (50, 60), "b", 10, 3);
        expect_violation(&b.history(&[]), "token went down");
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 10, 2)
            .acquire(0, (6, 7), "b", 10, 3)
            .put(0, (10, 11), "k", 3, "x", Outcome::Ok)
            .put(1, (20, 21), "k", 2, "y", Outcome::Ok);
        expect_violation(
            &b.history(&[("k", Some((2, "y")))]),
            "accepted a lower token",
        );
    }

    #[test]
    fn a_lock_granted_a_lower_token_after_a_higher_ones_lease_ended_is_reported() {
        // The hostile round's case: worker 0 began its acquire at 0 and took token 3, was
        // stopped, and was granted lock-0 at 200 (its moment of grant as logged), after worker
        // 1's lease of token 4 (granted at 20, 10 ms) had ended. The acquires overlap in time, so
        // the order of their ends and starts alone says nothing.
        let mut b = Builder::new(2);
        b.acquire(0, (0, 210), "lock-0", 100, 3)
            .acquire(1, (10, 20), "lock-0", 10, 4);
        b.workers[0].ops[0].granted_ns = 200 * MS;
        b.workers[1].ops[0].granted_ns = 19 * MS;
        expect_violation(&b.history(&[]), "granted a lower token after a higher one");
        // Granted before the other lease ended (the moment as logged): no violation.
        let mut b = Builder::new(2);
        b.acquire(0, (0, 210), "lock-0", 100, 3)
            .acquire(1, (10, 20), "lock-0", 10, 4);
        b.workers[0].ops[0].granted_ns = 5 * MS;
        b.workers[1].ops[0].granted_ns = 19 * MS;
        let found = check(&b.history(&[]));
        assert!(
            !found.iter().any(|v| v.contains("granted a lower token")),
            "{found:#?}"
        );
    }

    #[test]
    fn a_lost_write_is_reported() {
        let mut b = Builder::new(1);
        b.acquire(0, (0, 5), "a", 100, 1)
            .put(0, (10, 11), "k", 1, "x", Outcome::Ok)
            .put(0, (12, 13), "k", 1, "y", Outcome::Ok);
        expect_violation(&b.history(&[("k", Some((1, "x")))]), "lost update");
        expect_violation(&b.history(&[("k", None)]), "value missing");
        let mut b = Builder::new(1);
        b.acquire(0, (0, 5), "a", 100, 1)
            .put(0, (10, 11), "k", 1, "x", Outcome::Ok)
            .op(
                0,
                Kind::Get,
                (20, 21),
                None,
                Some("k"),
                0,
                0,
                None,
                Some(Outcome::NotFound),
            );
        expect_violation(&b.history(&[("k", Some((1, "x")))]), "value missing");
        // A read that timed out (behind a paused commit) tells nothing.
        let mut b = Builder::new(1);
        b.acquire(0, (0, 5), "a", 100, 1)
            .put(0, (10, 11), "k", 1, "x", Outcome::Ok)
            .op(
                0,
                Kind::Get,
                (20, 21),
                None,
                Some("k"),
                0,
                0,
                None,
                Some(Outcome::Timeout),
            );
        assert_eq!(
            check(&b.history(&[("k", Some((1, "x")))])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_duplicate_token_is_reported() {
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 10, 4)
            .acquire(1, (50, 60), "b", 10, 4);
        expect_violation(&b.history(&[]), "token 4 granted twice");
    }

    /// Worker 0's `acquire_and_put` of "a" runs from 10 to 500 ms and ends `outcome`; worker 1,
    /// at `at` ms, is refused by or (`listing`) lists token 3 of "a", which no logged grant
    /// carries. The violations found about it.
    fn named_unlogged_grant(outcome: Outcome, at: u64, listing: bool) -> Vec<String> {
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "b", 100, 2).op(
            0,
            Kind::AcquireAndPut,
            (10, 500),
            Some("a"),
            Some("k"),
            0,
            100,
            Some("x"),
            Some(outcome),
        );
        if listing {
            b.op(
                1,
                Kind::Locks,
                (at, at + 1),
                None,
                None,
                0,
                0,
                None,
                Some(Outcome::Locks(vec![("a".into(), 3)])),
            );
        } else {
            b.op(
                1,
                Kind::Acquire,
                (at, at + 1),
                Some("a"),
                None,
                0,
                100,
                None,
                Some(Outcome::Locked(3)),
            );
        }
        check(&b.history(&[("k", None)]))
            .into_iter()
            .filter(|v| v.contains("token 3"))
            .collect()
    }

    /// An `acquire_and_put` run again after its combiner died may time out after its grant was
    /// seen; one on the redo log's path may be granted above a grant its write found stale.
    /// Either grant may be named while the call runs, and not after it returned.
    #[test]
    fn an_acquire_and_puts_first_grant_may_be_named_while_it_runs() {
        for listing in [false, true] {
            for outcome in [Outcome::Timeout, Outcome::Lost, Outcome::Granted(4)] {
                let during = named_unlogged_grant(outcome.clone(), 100, listing);
                assert_eq!(during, Vec::<String>::new(), "{outcome:?} {listing}");
                // (A grant that timed out may have left its token in the lock's record, which
                // a listing may show after the call returned: a rule of its own.)
                if !(listing && outcome == Outcome::Timeout) {
                    let after = named_unlogged_grant(outcome.clone(), 600, listing);
                    assert!(!after.is_empty(), "{outcome:?} {listing}");
                }
            }
            // A grant above 2 is not one that a grant of 2 replaced.
            let below = named_unlogged_grant(Outcome::Granted(2), 100, listing);
            assert!(!below.is_empty(), "{listing}");
        }
    }

    #[test]
    fn wrong_refusals_and_late_acceptances_are_reported() {
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .release(0, (10, 11), "a", 1)
            .op(
                1,
                Kind::Acquire,
                (20, 21),
                Some("a"),
                None,
                0,
                100,
                None,
                Some(Outcome::Locked(1)),
            );
        expect_violation(&b.history(&[]), "whose lease had ended");
        let mut b = Builder::new(1);
        b.acquire(0, (0, 5), "a", 100, 1).op(
            0,
            Kind::HolderPut,
            (10, 11),
            Some("a"),
            Some("k"),
            1,
            0,
            Some("x"),
            Some(Outcome::Lost),
        );
        expect_violation(&b.history(&[]), "lost before it could expire");
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .acquire(1, (200, 210), "a", 100, 2)
            .op(
                0,
                Kind::HolderPut,
                (300, 301),
                Some("a"),
                Some("k"),
                1,
                0,
                Some("x"),
                Some(Outcome::Ok),
            );
        expect_violation(&b.history(&[("k", Some((1, "x")))]), "took the lock over");
        let mut b = Builder::new(1);
        b.put(0, (0, 1), "k", FORGED_BASE, "x", Outcome::Ok);
        expect_violation(
            &b.history(&[("k", Some((FORGED_BASE, "x")))]),
            "forged token was accepted",
        );
        let mut b = Builder::new(1);
        b.acquire(0, (0, 5), "a", 100, 1).put(
            0,
            (10, 11),
            "k",
            1,
            "x",
            Outcome::Stale {
                token: 1,
                highest: 7,
            },
        );
        expect_violation(&b.history(&[]), "names no higher token");
    }

    #[test]
    fn an_unknown_write_may_or_may_not_have_happened() {
        let mut b = Builder::new(2);
        b.acquire(0, (0, 5), "a", 100, 1)
            .put(0, (10, 11), "k", 1, "x", Outcome::Ok)
            .op(
                1,
                Kind::Put,
                (20, 0),
                None,
                Some("k"),
                1,
                0,
                Some("y"),
                None,
            );
        b.workers[1].killed_at = Some(30 * MS);
        b.workers[1].gone_at = 31 * MS;
        assert_eq!(
            check(&b.history(&[("k", Some((1, "x")))])),
            Vec::<String>::new()
        );
        assert_eq!(
            check(&b.history(&[("k", Some((1, "y")))])),
            Vec::<String>::new()
        );
        expect_violation(&b.history(&[("k", Some((1, "z")))]), "never written");
    }

    /// Worker 1 is stopped inside a commit from 50 to 450 ms: worker 0's extend and put, and an
    /// opener's open, time out meanwhile. Each is a definite refusal that changed nothing.
    fn behind_a_paused_commit(extend: Outcome, open: Outcome) -> Builder {
        let mut b = Builder::new(3);
        b.workers[2].opener = true;
        b.acquire(0, (0, 5), "a", 100, 1)
            .put(0, (10, 11), "k", 1, "x", Outcome::Ok)
            .put(1, (40, 460), "k", 1, "z", Outcome::Ok)
            .op(
                0,
                Kind::Extend,
                (60, 400),
                Some("a"),
                None,
                1,
                1000,
                None,
                Some(extend),
            )
            .put(0, (70, 410), "k", 1, "y", Outcome::Timeout)
            .op(
                2,
                Kind::Open,
                (120, 420),
                None,
                None,
                0,
                0,
                None,
                Some(open),
            )
            .op(
                2,
                Kind::Open,
                (500, 510),
                None,
                None,
                0,
                0,
                None,
                Some(Outcome::Ok),
            )
            .op(
                2,
                Kind::Get,
                (520, 521),
                None,
                Some("k"),
                0,
                0,
                None,
                Some(Outcome::Value(1, "z".into())),
            )
            // Worker 0's lease ran out at 100 ms, unextended: worker 1 takes the lock over.
            .acquire(1, (470, 480), "a", 100, 2);
        // Both workers live on: their leases could run until their expiry.
        for w in 0..2 {
            b.op(
                w,
                Kind::Get,
                (600, 601),
                None,
                Some("k"),
                0,
                0,
                None,
                Some(Outcome::Value(1, "z".into())),
            );
        }
        b
    }

    #[test]
    fn a_write_that_timed_out_behind_a_paused_commit_may_still_land() {
        let b = behind_a_paused_commit(Outcome::Timeout, Outcome::Timeout);
        assert_eq!(
            check(&b.history(&[("k", Some((1, "z")))])),
            Vec::<String>::new()
        );
        // The put that timed out may show up: the paused combiner may have taken it.
        assert_eq!(
            check(&b.history(&[("k", Some((1, "y")))])),
            Vec::<String>::new()
        );
        // A write that was refused outright must not.
        let mut refused = Builder::new(1);
        refused
            .acquire(0, (0, 5), "a", 100, 2)
            .put(0, (10, 11), "k", 2, "x", Outcome::Ok)
            .put(
                0,
                (20, 21),
                "k",
                1,
                "y",
                Outcome::Stale {
                    token: 1,
                    highest: 2,
                },
            );
        expect_violation(
            &refused.history(&[("k", Some((1, "y")))]),
            "value of a refused write",
        );
        // Had the extend been accepted, worker 1's grant would overlap the extended lease.
        let b = behind_a_paused_commit(Outcome::Ok, Outcome::Timeout);
        expect_violation(&b.history(&[("k", Some((1, "z")))]), "two holders of a");
        // An open fails only by timing out.
        let b = behind_a_paused_commit(Outcome::Timeout, Outcome::Invalid);
        expect_violation(&b.history(&[("k", Some((1, "z")))]), "did not open");
    }

    #[test]
    fn listings_must_name_current_grants() {
        let listing = |outcome: Outcome| {
            let mut b = Builder::new(2);
            b.acquire(0, (0, 5), "a", 100, 1)
                .acquire(0, (200, 205), "a", 100, 2)
                .op(
                    1,
                    Kind::Locks,
                    (300, 301),
                    None,
                    None,
                    0,
                    0,
                    None,
                    Some(outcome),
                );
            check(&b.history(&[]))
        };
        let locks = |lock: &str, token| Outcome::Locks(vec![(lock.to_owned(), token)]);
        assert_eq!(listing(locks("a", 2)), Vec::<String>::new());
        assert_eq!(listing(Outcome::Info(2)), Vec::<String>::new());
        let expect = |found: Vec<String>, needle: &str| {
            assert!(
                found.iter().any(|v| v.contains(needle)),
                "expected {needle:?} in {found:#?}"
            );
        };
        expect(listing(locks("a", 1)), "replaced by");
        expect(listing(locks("a", 7)), "which no grant of a carries");
        expect(listing(locks("b", 2)), "a lease of a");
        expect(listing(Outcome::Info(1)), "info() reports last token 1");
    }
}
