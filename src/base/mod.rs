//! Layer 0, the base: what every other layer uses and that knows nothing of locks. The one
//! error type and its status codes, the host's clock and process identity, thread tags,
//! cancellation of waits, the argument limits and their checks, and the catching of a
//! dependency's panics.
//!
//! Imports nothing of the crate outside this folder.

pub(crate) mod cancel;
pub(crate) mod clock;
pub(crate) mod error;
pub(crate) mod limits;
pub(crate) mod quiet;
pub(crate) mod thread;
