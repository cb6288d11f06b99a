//! Layer 4, sharing: what the processes of one store exchange through its ring. The byte form
//! of operations, reads and their results (wire), a process's seat in the ring (member), and
//! the lease records kept in the buckets of the ring's lease map (buckets), and the key index
//! kept in its key map (keys), and the claims a fenced write makes on it (claims).
//!
//! Imports the base, the rules, the storage and the ring.

pub(crate) mod buckets;
// The fenced write's protocol, built ahead of the store's wiring (issue 35, step 4): until
// then only its tests and its model call it.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod claims;
// The key index is built ahead of the fenced writes that use it (issue 35, step 4); until then
// only its tests and the fuzz target call it.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod keys;
pub(crate) mod member;
pub(crate) mod wire;

/// The next `n` bytes of `rest`, which moves past them; `None` when fewer are left (the step of
/// the decoders of a bucket's blob, `buckets.rs` and `keys.rs`, each with its own error).
pub(crate) fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}
