//! The tool's exit statuses: one table, [`TABLE`], that `fencelock --help`, `fencelock run
//! --help` and the README's table are rendered from. `tests/cli/help.rs` checks that the
//! README's copy matches the one `--help` prints (and prints the table to paste when it does
//! not).

use std::fmt::Write as _;

pub const OK: u8 = 0;
pub const NOT_FOUND: u8 = 1;
pub const USAGE: u8 = 80;
pub const DATABASE: u8 = 81;
pub const LOCKED: u8 = 82;
pub const TIMEOUT: u8 = 83;
pub const STALE_TOKEN: u8 = 84;
pub const LOCK_LOST: u8 = 85;
pub const IO: u8 = 86;
pub const CANNOT_EXECUTE: u8 = 126;
pub const COMMAND_NOT_FOUND: u8 = 127;

/// One row of the table.
pub struct Status {
    /// The status as written: a number, or `128+N`.
    pub code: &'static str,
    pub meaning: &'static str,
    /// Whether `fencelock run` can exit with it (other than through its command).
    pub run: bool,
}

/// Every status the tool exits with. Meanings stay on one line: `--help` prints them unwrapped,
/// so that the README's table can be checked against it row by row.
pub const TABLE: &[Status] = &[
    Status {
        code: "0",
        meaning: "success; for `run`, the command exited 0",
        run: false,
    },
    Status {
        code: "1",
        meaning: "not found: `get` of a key with no value, `status --lock` of a lock with no record, `history` of a lock with no grant on record",
        run: false,
    },
    Status {
        code: "80",
        meaning: "usage error: bad option, duration, signal or argument (a token never granted, another `--permits` count than the live permits'), missing command",
        run: true,
    },
    Status {
        code: "81",
        meaning: "database error: cannot open, read or write the store (missing for a read command, damaged, newer version, I/O)",
        run: true,
    },
    Status {
        code: "82",
        meaning: "`run` without a wait (`-n`, `-w 0` or neither): the lock is held by another live lease (`-E N` makes it N)",
        run: true,
    },
    Status {
        code: "83",
        meaning: "timed out: `run -w` waited its limit for the lock (`-E N` makes it N), or another process held the store past `--busy-timeout`",
        run: true,
    },
    Status {
        code: "84",
        meaning: "stale token: a higher token already wrote the key or passed the fence",
        run: false,
    },
    Status {
        code: "85",
        meaning: "`run`: the lease was lost while the command ran; the command was sent `--lost-signal` (default TERM), and SIGKILL `--kill-after` later (default 5s) if it still ran",
        run: true,
    },
    Status {
        code: "86",
        meaning: "I/O error outside the store: reading `--file` or stdin, writing stdout",
        run: false,
    },
    Status {
        code: "126",
        meaning: "`run`: the command was found but could not be executed",
        run: true,
    },
    Status {
        code: "127",
        meaning: "`run`: the command was not found",
        run: true,
    },
    Status {
        code: "128+N",
        meaning: "`run`: the command died by signal N, or the wait for the lock was interrupted by signal N",
        run: true,
    },
];

/// The table as `--help` prints it: the codes right-aligned, one row a line.
pub fn help(rows: impl Iterator<Item = &'static Status>) -> String {
    let mut text = String::new();
    for row in rows {
        let _ = writeln!(text, "  {:>5}  {}", row.code, row.meaning);
    }
    text
}

/// Every row, for the top-level `--help`.
pub fn help_all() -> String {
    help(TABLE.iter())
}

/// The rows `run` can give, for `fencelock run --help`.
pub fn help_run() -> String {
    help(TABLE.iter().filter(|row| row.run))
}
