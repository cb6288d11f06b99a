//! The token counter (`tokens.rs`): no token is handed out twice, none beyond what the store
//! file reserved, and a refill that races grants and another refill never lowers the bound.
//! (That tokens never repeat nor go back across clean closes, crashes and power cuts is the
//! property test of `rules/tokens.rs`, over a model of the file.)

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::check;
use crate::ring::tokens::Take;
use crate::ring::Ring;

/// A grant: takes one token, refilling the reservation as `local/lease_map.rs` does when it is
/// short: the file's reservation (`durable`) first, then the map's bound.
fn grant(ring: &Ring, durable: &AtomicU64) -> u64 {
    loop {
        match ring.take_tokens(1).expect("tokens") {
            Take::Taken { first, .. } => {
                assert!(
                    first <= durable.load(Ordering::SeqCst),
                    "token {first} handed out beyond the file's reservation"
                );
                return first;
            }
            Take::Short { end } => {
                let bound = end + 1;
                // The reservation's commit, then the map's bound (`tokens_reserved`).
                durable.fetch_max(bound, Ordering::SeqCst);
                ring.tokens_reserved(bound, 1);
            }
        }
    }
}

#[test]
fn grants_racing_refills_never_share_a_token_nor_pass_the_reservation() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let durable = Arc::new(AtomicU64::new(1));
        ring.tokens_start_at(0);
        ring.tokens_reserved(1, 1);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (ring, durable) = (ring.clone(), durable.clone());
                thread::spawn(move || [grant(&ring, &durable), grant(&ring, &durable)])
            })
            .collect();
        let mut tokens: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("a grant"))
            .collect();
        tokens.sort_unstable();
        assert_eq!(tokens, [1, 2, 3, 4], "each token once, none skipped");
        assert!(ring.last_token() <= ring.reserved_tokens());
    });
}
