//! Layer 7, the public face: [`crate::Store`] and [`crate::Holder`], which hold an engine
//! (`engine/`) and forward to it. `Store::open_with` is the one place that names the engines.
//!
//! Imports every layer below it; the C ABI (`ffi/`) above it uses only what `lib.rs` exports.

#[cfg(feature = "tokio")]
pub(crate) mod async_tokio;
pub(crate) mod holder;
pub(crate) mod lock;
pub(crate) mod store;
