//! Property tests: random operation sequences against the store and against an in-memory model
//! of fencelock's rules give the same results, on every backend. Leases are long, so time
//! plays no part here; `an_expired_lease_is_taken_over_and_its_holder_is_fenced_out` covers
//! expiry.
//!
//! The model counts grants (its tokens are 1, 2, 3, ...); the store's tokens are compared by
//! their rank among its grants, and where the backend's tokens follow each other
//! (`Capability::ConsecutiveTokens`) they must be those very numbers. Each case runs on a
//! store of its own; 64 cases on every backend, etcd included.

use std::collections::BTreeMap;
use std::time::Duration;

use fencelock::{Error, Holder, LockState, Options, Store};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use crate::harness::{Capability, Harness};

crate::on_every_backend! {
    [the_store_follows_the_model]
}

const LONG: Duration = Duration::from_secs(3600);
const LOCKS: [&str; 3] = ["a", "b", "c"];
const KEYS: [&[u8]; 5] = [b"k", b"ka", b"kb", b"x", b""];
const RESOURCES: [&str; 2] = ["r1", "r2"];
const VALUE_LIMIT: usize = 8;

/// How a token is chosen for a put, delete or fence.
#[derive(Debug, Clone)]
enum Token {
    Zero,
    /// A granted one, this many below the highest (clamped to 1).
    Below(u64),
    /// The next one, not granted yet.
    Next,
    Max,
    /// The token of the n-th holder so far.
    Holder(usize),
}

#[derive(Debug, Clone)]
enum Op {
    Acquire(usize),
    AcquireAndPut(usize, usize, Vec<u8>),
    Release(usize),
    Extend(usize),
    HolderPut(usize, usize, Vec<u8>),
    HolderDelete(usize, usize),
    Put(usize, Vec<u8>, Token),
    Delete(usize, Token),
    Fence(usize, Token),
    Get(usize),
    Keys(usize),
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        1 => Just(Token::Zero),
        4 => (0u64..4).prop_map(Token::Below),
        1 => Just(Token::Next),
        1 => Just(Token::Max),
        3 => (0usize..16).prop_map(Token::Holder),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    // Up to one byte over the limit.
    proptest::collection::vec(any::<u8>(), 0..=VALUE_LIMIT + 1)
}

fn op() -> impl Strategy<Value = Op> {
    let lock = 0..LOCKS.len();
    let key = 0..KEYS.len();
    let holder = 0usize..16;
    prop_oneof![
        4 => lock.clone().prop_map(Op::Acquire),
        2 => (lock, key.clone(), value()).prop_map(|(l, k, v)| Op::AcquireAndPut(l, k, v)),
        3 => holder.clone().prop_map(Op::Release),
        2 => holder.clone().prop_map(Op::Extend),
        4 => (holder.clone(), key.clone(), value()).prop_map(|(h, k, v)| Op::HolderPut(h, k, v)),
        1 => (holder, key.clone()).prop_map(|(h, k)| Op::HolderDelete(h, k)),
        4 => (key.clone(), value(), token()).prop_map(|(k, v, t)| Op::Put(k, v, t)),
        2 => (key.clone(), token()).prop_map(|(k, t)| Op::Delete(k, t)),
        2 => (0..RESOURCES.len(), token()).prop_map(|(r, t)| Op::Fence(r, t)),
        3 => key.clone().prop_map(Op::Get),
        1 => key.prop_map(Op::Keys),
    ]
}

/// The result of one operation, in a form both sides produce.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Granted(u64),
    Done,
    Existed(bool),
    Found(Option<(u64, Vec<u8>)>),
    Keys(Vec<Vec<u8>>),
    Locked(u64),
    Stale { token: u64, highest: u64 },
    Lost,
    Invalid,
    Other(String),
}

/// fencelock's rules, with leases that never expire.
#[derive(Default)]
struct Model {
    counter: u64,
    /// Per lock: the token of the last grant and whether it is still held.
    leases: BTreeMap<&'static str, (u64, bool)>,
    /// Per key: the highest token accepted and the value (`None` once deleted).
    values: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>,
    fences: BTreeMap<&'static str, u64>,
    /// Every holder granted so far: its lock, token, and whether it was released.
    holders: Vec<(&'static str, u64, bool)>,
}

impl Model {
    fn token(&self, choice: &Token) -> u64 {
        match choice {
            Token::Zero => 0,
            Token::Below(n) => self.counter.saturating_sub(*n).max(1),
            Token::Next => self.counter + 1,
            Token::Max => u64::MAX,
            Token::Holder(i) => self
                .holders
                .get(*i % self.holders.len().max(1))
                .map_or(1, |h| h.1),
        }
    }

    fn grant(&mut self, lock: &'static str) -> Result<u64, Outcome> {
        match self.leases.get(lock) {
            Some(&(token, true)) => Err(Outcome::Locked(token)),
            _ => {
                self.counter += 1;
                self.leases.insert(lock, (self.counter, true));
                self.holders.push((lock, self.counter, false));
                Ok(self.counter)
            }
        }
    }

    fn write(&mut self, key: &[u8], value: Option<&[u8]>, token: u64) -> Outcome {
        if key.is_empty() || value.is_some_and(|v| v.len() > VALUE_LIMIT) || token == 0 {
            return Outcome::Invalid;
        }
        if token > self.counter {
            return Outcome::Invalid;
        }
        self.fenced(key, value, token)
    }

    fn fenced(&mut self, key: &[u8], value: Option<&[u8]>, token: u64) -> Outcome {
        let existed = match self.values.get(key) {
            Some(&(highest, _)) if token < highest => {
                return Outcome::Stale { token, highest };
            }
            Some((_, value)) => value.is_some(),
            None => false,
        };
        self.values
            .insert(key.to_vec(), (token, value.map(<[u8]>::to_vec)));
        if value.is_some() {
            Outcome::Done
        } else {
            Outcome::Existed(existed)
        }
    }

    /// Whether holder `i` still owns its lease (not released, and the lock's current grant).
    fn owns(&self, i: usize) -> bool {
        let (lock, token, released) = self.holders[i];
        !released && self.leases.get(lock).is_some_and(|l| l.0 == token)
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Acquire(l) => match self.grant(LOCKS[*l]) {
                Ok(token) => Outcome::Granted(token),
                Err(refused) => refused,
            },
            Op::AcquireAndPut(l, k, v) => {
                if KEYS[*k].is_empty() || v.len() > VALUE_LIMIT {
                    return Outcome::Invalid;
                }
                match self.grant(LOCKS[*l]) {
                    Ok(token) => {
                        assert_eq!(self.fenced(KEYS[*k], Some(v), token), Outcome::Done);
                        Outcome::Granted(token)
                    }
                    Err(refused) => refused,
                }
            }
            Op::Release(h) => {
                let Some(i) = self.holder(*h) else {
                    return Outcome::Done;
                };
                if self.owns(i) {
                    let lock = self.holders[i].0;
                    self.leases.get_mut(lock).expect("owned").1 = false;
                }
                self.holders[i].2 = true;
                Outcome::Done
            }
            Op::Extend(h) => match self.holder(*h) {
                None => Outcome::Done,
                Some(i) if self.owns(i) => Outcome::Done,
                Some(_) => Outcome::Lost,
            },
            Op::HolderPut(h, k, v) => self.holder_write(*h, KEYS[*k], Some(v)),
            Op::HolderDelete(h, k) => self.holder_write(*h, KEYS[*k], None),
            Op::Put(k, v, t) => {
                let token = self.token(t);
                self.write(KEYS[*k], Some(v), token)
            }
            Op::Delete(k, t) => {
                let token = self.token(t);
                self.write(KEYS[*k], None, token)
            }
            Op::Fence(r, t) => {
                let token = self.token(t);
                if token == 0 {
                    return Outcome::Invalid;
                }
                match self.fences.get(RESOURCES[*r]) {
                    Some(&highest) if token < highest => Outcome::Stale { token, highest },
                    Some(&highest) if token == highest => Outcome::Done,
                    _ if token > self.counter => Outcome::Invalid,
                    _ => {
                        self.fences.insert(RESOURCES[*r], token);
                        Outcome::Done
                    }
                }
            }
            Op::Get(k) => {
                if KEYS[*k].is_empty() {
                    return Outcome::Invalid;
                }
                Outcome::Found(match self.values.get(KEYS[*k]) {
                    Some((token, Some(value))) => Some((*token, value.clone())),
                    _ => None,
                })
            }
            Op::Keys(k) => Outcome::Keys(
                self.values
                    .iter()
                    .filter(|(key, (_, value))| key.starts_with(KEYS[*k]) && value.is_some())
                    .map(|(key, _)| key.clone())
                    .collect(),
            ),
        }
    }

    fn holder(&self, h: usize) -> Option<usize> {
        (!self.holders.is_empty()).then(|| h % self.holders.len())
    }

    fn holder_write(&mut self, h: usize, key: &[u8], value: Option<&[u8]>) -> Outcome {
        let Some(i) = self.holder(h) else {
            return Outcome::Done;
        };
        if self.holders[i].2 {
            return Outcome::Lost;
        }
        if key.is_empty() || value.is_some_and(|v| v.len() > VALUE_LIMIT) {
            return Outcome::Invalid;
        }
        if !self.owns(i) {
            return Outcome::Lost;
        }
        self.fenced(key, value, self.holders[i].1)
    }
}

/// The real store, with the holders it granted and its tokens in the order it granted them.
struct Real {
    store: Store,
    holders: Vec<Holder>,
    tokens: Vec<u64>,
}

impl Real {
    /// The store's token of the model's token `ordinal`: the store's `ordinal`-th grant; 0 and
    /// `u64::MAX` as they are; the one after the last grant, the store's last token plus one.
    fn token(&self, ordinal: u64) -> u64 {
        let last = self.tokens.last().copied().unwrap_or(0);
        match ordinal {
            0 | u64::MAX => ordinal,
            n if n == self.tokens.len() as u64 + 1 => last + 1,
            n => self.tokens[usize::try_from(n).unwrap() - 1],
        }
    }

    /// The model's token of the store's token `token`, as [`Real::token`] maps them.
    fn ordinal(&self, token: u64) -> u64 {
        let last = self.tokens.last().copied().unwrap_or(0);
        match self.tokens.iter().position(|&t| t == token) {
            _ if token == 0 || token == u64::MAX => token,
            Some(i) => i as u64 + 1,
            None if token == last + 1 => self.tokens.len() as u64 + 1,
            None => panic!("token {token} is neither granted nor chosen"),
        }
    }

    fn granted(&mut self, granted: fencelock::Result<Holder>) -> Outcome {
        match granted {
            Ok(holder) => {
                let token = holder.token();
                if let Some(&last) = self.tokens.last() {
                    assert!(token > last, "grant {token} after {last}");
                }
                self.tokens.push(token);
                self.holders.push(holder);
                Outcome::Granted(self.tokens.len() as u64)
            }
            Err(err) => self.outcome_of(err),
        }
    }

    fn outcome_of(&self, err: Error) -> Outcome {
        match err {
            Error::Locked { token, pid, .. } => {
                assert_eq!(pid, std::process::id());
                Outcome::Locked(self.ordinal(token))
            }
            Error::StaleToken { token, highest } => Outcome::Stale {
                token: self.ordinal(token),
                highest: self.ordinal(highest),
            },
            Error::LockLost { .. } => Outcome::Lost,
            Error::InvalidArgument(_) => Outcome::Invalid,
            other => Outcome::Other(other.to_string()),
        }
    }

    fn apply(&mut self, model: &Model, op: &Op) -> Outcome {
        let holder = |h: usize| (!self.holders.is_empty()).then(|| h % self.holders.len());
        let done = |real: &Real, r: fencelock::Result<()>| {
            r.map_or_else(|err| real.outcome_of(err), |()| Outcome::Done)
        };
        let existed = |real: &Real, r: fencelock::Result<bool>| {
            r.map_or_else(|err| real.outcome_of(err), Outcome::Existed)
        };
        match op {
            Op::Acquire(l) => {
                let granted = self.store.acquire(LOCKS[*l], LONG);
                self.granted(granted)
            }
            Op::AcquireAndPut(l, k, v) => {
                let granted = self.store.acquire_and_put(LOCKS[*l], LONG, KEYS[*k], v);
                self.granted(granted)
            }
            Op::Release(h) => {
                holder(*h).map_or(Outcome::Done, |i| done(self, self.holders[i].release()))
            }
            Op::Extend(h) => {
                holder(*h).map_or(Outcome::Done, |i| done(self, self.holders[i].extend(LONG)))
            }
            Op::HolderPut(h, k, v) => holder(*h).map_or(Outcome::Done, |i| {
                done(self, self.holders[i].put(KEYS[*k], v))
            }),
            Op::HolderDelete(h, k) => holder(*h).map_or(Outcome::Done, |i| {
                existed(self, self.holders[i].delete(KEYS[*k]))
            }),
            Op::Put(k, v, t) => {
                let token = self.token(model.token(t));
                done(self, self.store.put(KEYS[*k], v, token))
            }
            Op::Delete(k, t) => {
                let token = self.token(model.token(t));
                existed(self, self.store.delete(KEYS[*k], token))
            }
            Op::Fence(r, t) => {
                let token = self.token(model.token(t));
                done(self, self.store.fence(RESOURCES[*r], token))
            }
            Op::Get(k) => match self.store.get(KEYS[*k]) {
                Ok(found) => Outcome::Found(found.map(|f| (self.ordinal(f.token), f.value))),
                Err(err) => self.outcome_of(err),
            },
            Op::Keys(k) => self
                .store
                .keys(KEYS[*k])
                .map_or_else(|err| self.outcome_of(err), Outcome::Keys),
        }
    }

    /// Compares what the store reports as a whole with the model.
    fn compare_state(&self, h: &Harness, model: &Model) -> Result<(), TestCaseError> {
        let store = &self.store;
        store
            .verify()
            .map_err(|e| TestCaseError::fail(format!("verify: {e}")))?;
        if h.supports(Capability::ConsecutiveTokens) {
            let expected: Vec<u64> = (1..=model.counter).collect();
            prop_assert_eq!(&self.tokens, &expected);
        }
        let info = store.info().unwrap();
        prop_assert_eq!(self.ordinal(info.last_token), model.counter);
        prop_assert_eq!(info.fences, model.fences.len() as u64);
        let held: Vec<(String, u64)> = store
            .locks()
            .unwrap()
            .into_iter()
            .filter(|l| l.state == LockState::Held)
            .map(|l| (l.name, self.ordinal(l.token)))
            .collect();
        let expected: Vec<(String, u64)> = model
            .leases
            .iter()
            .filter(|(_, (_, held))| *held)
            .map(|(name, (token, _))| ((*name).to_owned(), *token))
            .collect();
        prop_assert_eq!(held, expected);
        for resource in RESOURCES {
            prop_assert_eq!(
                store
                    .fence_token(resource)
                    .unwrap()
                    .map(|t| self.ordinal(t)),
                model.fences.get(resource).copied()
            );
        }
        Ok(())
    }
}

/// One case: `ops` on a fresh store of `h`'s backend and on the model.
fn follows(h: &Harness, ops: &[Op]) -> Result<(), TestCaseError> {
    let case = h.fresh();
    let options = Options {
        max_value_len: VALUE_LIMIT,
        ..Options::default()
    };
    let mut real = Real {
        store: case.store_with(&options),
        holders: Vec::new(),
        tokens: Vec::new(),
    };
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let got = real.apply(&model, op);
        let expected = model.apply(op);
        prop_assert_eq!(got, expected, "step {} {:?}", step, op);
    }
    real.compare_state(&case, &model)?;
    // Reopened, the store holds the same: every acknowledged write is durable. (The holders
    // stay, but in single-process mode, where they would keep the store open.)
    let mut holders = std::mem::take(&mut real.holders);
    if !case.supports(Capability::SecondOpen) {
        holders.clear();
    }
    let Real { store, tokens, .. } = real;
    drop(store);
    let store = case.reopen();
    let reopened = Real {
        store,
        holders: Vec::new(),
        tokens,
    };
    for key in KEYS.iter().filter(|k| !k.is_empty()) {
        let expected = match model.values.get(*key) {
            Some((token, Some(value))) => Some((*token, value.clone())),
            _ => None,
        };
        let found = reopened.store.get(key).unwrap();
        prop_assert_eq!(
            found.map(|f| (reopened.ordinal(f.token), f.value)),
            expected
        );
    }
    drop(holders);
    Ok(())
}

fn the_store_follows_the_model(h: &Harness) {
    let config = ProptestConfig {
        cases: 64,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let ops = proptest::collection::vec(op(), 1..60);
    if let Err(err) = runner.run(&ops, |ops| follows(h, &ops)) {
        panic!("{err}\n{runner}");
    }
}
