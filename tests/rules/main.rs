//! The rules of fencelock, each written once as a body that takes a [`harness::Harness`] and
//! run on every backend: a file shared by processes (`file`), the same with its fenced writes
//! through the redo log (`logged`, `Options::write_log`; it runs `file`'s own tests too), a
//! file in single-process mode (`single_process`), a file a server serves (`served`), and, with the `etcd` feature, a
//! prefix on an etcd node (`etcd`). `cargo test --test rules` lists each rule once a backend:
//! `fencing::served::every_grant_of_any_lock_gets_a_higher_token`; `-- ::etcd::` selects one
//! backend. A few tests that concern one backend alone are listed under it only.
//!
//! The etcd tests share one etcd node, started at the first of them and killed when the test
//! binary exits; each has a key prefix of its own.

#[cfg(feature = "etcd")]
#[path = "../etcd/cluster.rs"]
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod harness;

/// Emits, for each body `fn name(&Harness)` listed first, a test `name` in each of the
/// modules `file`, `logged`, `single_process`, `served` and (with the `etcd` feature) `etcd`, each
/// running the body on a fresh harness of that backend. A body listed under a backend's name
/// (`etcd: [name, ...]`) is a test of that backend's module only: one that concerns that
/// backend alone, or one that must carry an attribute there (`#[ignore = "bug: ..."]`).
#[macro_export]
macro_rules! on_every_backend {
    (
        [$($(#[$attr:meta])* $body:ident),* $(,)?]
        $(file: [$($(#[$file_attr:meta])* $file:ident),* $(,)?])?
        $(single_process: [$($(#[$single_attr:meta])* $single:ident),* $(,)?])?
        $(served: [$($(#[$served_attr:meta])* $served:ident),* $(,)?])?
        $(etcd: [$($(#[$etcd_attr:meta])* $etcd:ident),* $(,)?])?
    ) => {
        $crate::backend_tests!(file, File, [
            $($(#[$attr])* $body,)* $($($(#[$file_attr])* $file,)*)?
        ]);
        $crate::backend_tests!(logged, Logged, [
            $($(#[$attr])* $body,)* $($($(#[$file_attr])* $file,)*)?
        ]);
        $crate::backend_tests!(single_process, SingleProcess, [
            $($(#[$attr])* $body,)* $($($(#[$single_attr])* $single,)*)?
        ]);
        $crate::backend_tests!(served, Served, [
            $($(#[$attr])* $body,)* $($($(#[$served_attr])* $served,)*)?
        ]);
        #[cfg(feature = "etcd")]
        $crate::backend_tests!(etcd, Etcd, [
            $($(#[$attr])* $body,)* $($($(#[$etcd_attr])* $etcd,)*)?
        ]);
    };
}

/// The module `$module` of tests that run each body on `Backend::$backend`.
#[macro_export]
macro_rules! backend_tests {
    ($module:ident, $backend:ident, [$($(#[$attr:meta])* $body:ident,)*]) => {
        mod $module {
            $(
                #[test]
                $(#[$attr])*
                fn $body() {
                    $crate::harness::Harness::run($crate::harness::Backend::$backend, super::$body);
                }
            )*
        }
    };
}

mod bad_input;
mod cancel;
mod election;
mod fencing;
mod kinds;
mod model;
