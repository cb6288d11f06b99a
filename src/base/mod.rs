//! Layer 0, the base: what every other layer uses and that knows nothing of locks. The one
//! error type and its status codes, the host's clock and process identity, thread tags,
//! cancellation of waits, the argument limits and their checks, the catching of a dependency's
//! panics, the owner of the files made beside a store, and random numbers from the kernel.
//!
//! Imports nothing of the crate outside this folder.

pub(crate) mod cancel;
pub(crate) mod clock;
pub(crate) mod error;
pub(crate) mod limits;
pub(crate) mod owner;
pub(crate) mod quiet;
pub(crate) mod thread;

/// Eight random bytes from the kernel (`getrandom`), as a number: a ring's nonce, a redo log's
/// id, the seed of liveness ids.
pub(crate) fn random_u64() -> std::io::Result<u64> {
    let mut bytes = [0u8; 8];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())? != 8 {
        return Err(std::io::Error::other("getrandom gave fewer than 8 bytes"));
    }
    Ok(u64::from_le_bytes(bytes))
}
