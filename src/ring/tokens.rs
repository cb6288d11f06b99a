//! The token counter of the lease map: tokens are handed out from the map's header, a counter
//! that only grows, bounded by a reservation that the store file holds durably. The durable side
//! (what the file must say before a token is handed out, and after a close or a crash) is
//! `rules/tokens.rs` `Durable`; refilling the reservation ahead of need is `local/lease_map.rs`.
//!
//! The words, in `MapHeader` (`layout.rs`):
//!
//! | word | meaning | who changes it, and how |
//! |---|---|---|
//! | `last_token` | the last token handed out | a grant, by a compare-and-swap from the value it read to that plus its count, only while the result is at most `reserved`; the set-up, by `fetch_max` to the file's base |
//! | `reserved` | the highest token the file has reserved durably | whoever committed a reservation, by `fetch_max` after the commit (so it never goes back, however the refills race) |
//! | `block` | how many tokens the last reservation took | the refiller, by `fetch_max` |
//! | `ready` | 1 once the map's counter is set up from the file | the first process of the map's life, after the set-up (Release) |
//!
//! Why no token is handed out twice: each token is the result of one successful compare-and-swap
//! of `last_token` from `t` to `t + count`, and the word only grows (every other change is a
//! `fetch_max`), so two grants never own overlapping ranges. Why none is handed out beyond the
//! file's reservation: a grant loads `reserved` before its swap and swaps only to a value at most
//! that; `reserved` is raised only after the reservation's commit.
//!
//! Model: `models/tokens.rs` (make test-loom): grants racing refills. The durable side across
//! closes and crashes: the property test of `rules/tokens.rs`.

use super::sync::Ordering;
use super::Ring;
use crate::base::error::{Error, Result};

/// What a grant's attempt to take tokens found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Taken: the first of the tokens, how many reserved tokens are left after them, and the
    /// size of the last reservation (for the decision to refill ahead).
    Taken { first: u64, left: u64, block: u64 },
    /// The reservation does not cover them: reserve up to `end` first, then try again.
    Short { end: u64 },
}

impl Ring {
    /// Whether the map's counter was set up from the store file in this map's life.
    pub(crate) fn tokens_ready(&self) -> bool {
        // Acquire: pairs with the Release in `tokens_set_up`, so that a process that sees the
        // map ready sees the counter and the records its set-up wrote.
        self.map_header().ready.load(Ordering::Acquire) != 0
    }

    /// Raises the counter and the reservation to at least `base` (what the store file says may
    /// have been handed out already). Harmless when another process did it first.
    pub(crate) fn tokens_start_at(&self, base: u64) {
        let header = self.map_header();
        // AcqRel: the max is taken over the latest value of each word, whoever wrote it.
        header.last_token.fetch_max(base, Ordering::AcqRel);
        header.reserved.fetch_max(base, Ordering::AcqRel);
    }

    /// Marks the map's counter as set up.
    pub(crate) fn tokens_set_up(&self) {
        // Release: everything the set-up wrote before this is seen by whoever sees `ready`.
        self.map_header().ready.store(1, Ordering::Release);
    }

    /// The last token handed out.
    pub(crate) fn last_token(&self) -> u64 {
        self.map_header().last_token.load(Ordering::Acquire)
    }

    /// The highest token the store file reserved durably, as far as this map knows.
    pub(crate) fn reserved_tokens(&self) -> u64 {
        self.map_header().reserved.load(Ordering::Acquire)
    }

    /// The size of the last reservation.
    pub(crate) fn token_block(&self) -> u64 {
        // Relaxed: a hint for the size of the next reservation; any value it had is safe.
        self.map_header().block.load(Ordering::Relaxed)
    }

    /// Takes `count` consecutive new tokens, each higher than every token handed out before,
    /// if the reservation covers them.
    pub(crate) fn take_tokens(&self, count: u64) -> Result<Take> {
        let header = self.map_header();
        loop {
            // Zeros would have a reservation made from them, and tokens handed out again.
            self.intact()?;
            // Acquire on both: the reservation read is at least the one whose commit came
            // before any later raise of `last_token` this grant builds on.
            let last = header.last_token.load(Ordering::Acquire);
            let end = last
                .checked_add(count)
                .ok_or_else(|| Error::Storage("the token counter is exhausted".into()))?;
            let reserved = header.reserved.load(Ordering::Acquire);
            if end > reserved {
                return Ok(Take::Short { end });
            }
            // The one step that hands tokens out: only the grant whose swap from `last` wins
            // owns `last + 1 ..= end`. AcqRel: ordered after the reads above, and seen by any
            // later grant that reads the word.
            if header
                .last_token
                .compare_exchange(last, end, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(Take::Taken {
                    first: last + 1,
                    left: reserved - end,
                    block: self.token_block(),
                });
            }
        }
    }

    /// Lets the map hand out tokens up to `bound`, which the store file now reserves durably
    /// (the commit came first), and records the reservation's size `block`.
    pub(crate) fn tokens_reserved(&self, bound: u64, block: u64) {
        let header = self.map_header();
        header.block.fetch_max(block, Ordering::AcqRel);
        // fetch_max: two refills that race leave the higher bound, never the lower.
        header.reserved.fetch_max(bound, Ordering::AcqRel);
    }
}
