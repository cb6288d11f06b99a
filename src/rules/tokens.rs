//! Tokens: the counter (the highest token granted, read and moved in the granting transaction),
//! the durable reservation that keeps tokens unique across a crash where grants commit without
//! an fsync, and the admission rule of every fenced write.

use redb::ReadableTable;

use crate::base::error::{Error, Result};
use crate::rules::tables::COUNTER_KEY;
use crate::rules::tables::{RESERVED_KEY, SEALED_KEY};

/// How many tokens one durable reservation covers.
const TOKEN_BLOCK: u64 = 4096;

/// The new durable bound on tokens when `token` passes the last reservation: a block beyond
/// `token`. A transaction that records one must be durable.
pub(crate) fn reservation(
    meta: &impl ReadableTable<&'static str, u64>,
    token: u64,
) -> Result<Option<u64>> {
    let reserved = reserved(meta)?;
    Ok((token > reserved).then(|| token.saturating_add(TOKEN_BLOCK)))
}

/// The durable bound on the tokens handed out where grants do not write the counter (0 for
/// none yet).
pub(crate) fn reserved(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(RESERVED_KEY)?.map_or(0, |v| v.value()))
}

/// The reservation the last user of a store's shared memory sealed, 0 for none (`SEALED_KEY`).
pub(crate) fn sealed(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(SEALED_KEY)?.map_or(0, |v| v.value()))
}

/// What the store file holds of the tokens of multi-process mode's lease maps: the counter, the
/// reservation and the seal (the meta table's three keys). The one place of the rules that keep
/// those tokens unique and rising across maps, clean closes, crashes and power cuts, with a
/// property test against a model of maps (below):
///
/// - a map starts at [`Durable::map_base`]: above every token a map before it may have handed
///   out;
/// - a map hands out no token above a reservation [`Durable::reserve`] made durable, and the
///   first reservation of a map, made before its first token, breaks a seal;
/// - the last user of a map may [`Durable::seal`] it: the next map then goes on from the
///   counter, not from the reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Durable {
    /// The last token handed out, as far as the file knows (`COUNTER_KEY`).
    pub(crate) counter: u64,
    /// No token above it was handed out (`RESERVED_KEY`).
    pub(crate) reserved: u64,
    /// The reservation the last user of a map sealed, 0 for none (`SEALED_KEY`).
    pub(crate) sealed: u64,
}

impl Durable {
    pub(crate) fn read(meta: &impl ReadableTable<&'static str, u64>) -> Result<Durable> {
        Ok(Durable {
            counter: read_counter(meta)?,
            reserved: reserved(meta)?,
            sealed: sealed(meta)?,
        })
    }

    /// Where a map set up from this file starts: every token up to it may have been handed out.
    /// A seal that still names the reservation says that no token above the counter was; else
    /// any token up to the reservation may have been.
    pub(crate) fn map_base(self) -> u64 {
        if self.sealed != 0 && self.sealed == self.reserved {
            self.counter
        } else {
            self.counter.max(self.reserved)
        }
    }

    /// The file after a reservation of at least `at_least`. A map reserves before it hands out
    /// its first token, and from then on a seal's promise (no token above the counter was
    /// handed out) is false: it is broken in the same commit, whether or not the bound moved.
    /// Left in place, a crash of this map would leave the seal standing, and the next map would
    /// hand out this map's tokens again.
    pub(crate) fn reserve(self, at_least: u64) -> Durable {
        Durable {
            reserved: self.reserved.max(at_least),
            sealed: 0,
            ..self
        }
    }

    /// The file after the last user of a map, which handed out up to `last` and saw the
    /// reservation `seen`, sealed it. Only as the reservation it saw: a reservation made since
    /// (by a process that may have handed out tokens above `last`) leaves it open.
    pub(crate) fn seal(self, last: u64, seen: u64) -> Durable {
        if self.reserved != seen {
            return self;
        }
        Durable {
            counter: self.counter.max(last),
            sealed: seen,
            ..self
        }
    }
}

pub(crate) fn read_counter(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
    Ok(meta.get(COUNTER_KEY)?.map_or(0, |v| v.value()))
}

/// The admission rule of every fenced write: a token lower than the highest that the key or
/// resource accepted is refused with [`Error::StaleToken`]; an equal or higher one passes.
pub(crate) fn admit(token: u64, highest: Option<u64>) -> Result<()> {
    match highest {
        Some(highest) if token < highest => Err(Error::StaleToken { token, highest }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Durable;

    /// What happens to a store's lease maps, one step at a time.
    #[derive(Debug, Clone)]
    enum Step {
        /// Grants of `n` tokens from the current map (set up first if there is none).
        Grant(u64),
        /// A refill of the reservation ahead of need, by a block of `2^k`.
        Refill(u32),
        /// The map's last user closes it cleanly: the seal.
        Close,
        /// Every user dies (SIGKILL, OOM), or the power is cut: the map is gone, the file keeps
        /// every commit (each of them is durable).
        Crash,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (1u64..5000).prop_map(Step::Grant),
            2 => (0u32..24).prop_map(Step::Refill),
            1 => Just(Step::Close),
            1 => Just(Step::Crash),
        ]
    }

    /// A map as `local/lease_map.rs` runs one: the last token it handed out, its reservation.
    struct Map {
        last: u64,
        reserved: u64,
    }

    /// A reservation by `map` of `need` and a block beyond: the file commits it first.
    fn reserve(file: &mut Durable, map: &mut Map, need: u64, block: u64) {
        *file = file.reserve(need.max(map.last) + block);
        map.reserved = map.reserved.max(file.reserved);
    }

    fn run(steps: &[Step]) -> Result<(), String> {
        let mut file = Durable::default();
        let mut map: Option<Map> = None;
        let mut highest = 0;
        for step in steps {
            match step {
                Step::Grant(n) => {
                    let map = map.get_or_insert_with(|| {
                        let base = file.map_base();
                        let mut map = Map {
                            last: base,
                            reserved: base,
                        };
                        reserve(&mut file, &mut map, base, 1 << 20);
                        map
                    });
                    for _ in 0..*n {
                        if map.last + 1 > map.reserved {
                            let need = map.last + 1;
                            reserve(&mut file, map, need, 1 << 20);
                        }
                        map.last += 1;
                        if map.last <= highest {
                            return Err(format!(
                                "token {} handed out after {highest}, in {steps:?}",
                                map.last
                            ));
                        }
                        highest = map.last;
                    }
                }
                Step::Refill(k) => {
                    if let Some(map) = &mut map {
                        let need = map.last;
                        reserve(&mut file, map, need, 1 << k);
                    }
                }
                Step::Close => {
                    if let Some(map) = map.take() {
                        file = file.seal(map.last, map.reserved);
                    }
                }
                Step::Crash => map = None,
            }
        }
        Ok(())
    }

    #[test]
    fn tokens_never_repeat_nor_go_back_across_maps_closes_and_crashes() {
        // The hostile round's case first: a map that refilled far ahead is sealed; the next
        // map grants, then crashes; the one after it must not grant those tokens again.
        let found = [
            Step::Grant(1),
            Step::Refill(23),
            Step::Close,
            Step::Grant(1),
            Step::Crash,
            Step::Grant(1),
        ];
        run(&found).unwrap();
        proptest!(ProptestConfig::with_cases(2000), |(steps in proptest::collection::vec(step(), 1..40))| {
            prop_assert_eq!(run(&steps), Ok(()));
        });
    }
}
