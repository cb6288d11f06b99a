//! The `fencelock` command-line tool, run as a user runs it: every subcommand and exit status,
//! signal forwarding, and a paused `run` whose late write is refused. One module a command (or
//! a concern that spans commands); `common` holds the helpers they share.
//!
//! Sleeps here only let leases run out or wait for a file a script writes; no test asserts how
//! long anything took.

mod common;

mod elect;
mod generate;
mod help;
mod history;
mod hold;
mod lost;
mod metrics;
mod notice;
mod run;
mod serve;
mod signals;
mod status;
mod store;
mod timeline;
mod top;
mod unwritable;
mod usage;
mod values;
