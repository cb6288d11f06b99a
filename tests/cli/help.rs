//! `--help` and `--version`: exit statuses, the database, examples; the README's exit table.

use std::fmt::Write as _;
use std::fs;

use crate::common::*;

#[test]
fn help_documents_exit_codes_database_and_examples() {
    let env = Env::new();
    let out = env.run(&["--help"]);
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for needle in [
        "Exit status",
        "80",
        "81",
        "82",
        "83",
        "84",
        "85",
        "86",
        "126",
        "127",
        "128+N",
        "FENCELOCK_DB",
        "XDG_STATE_HOME",
        ".local/state/fencelock/locks.db",
    ] {
        assert!(
            help.contains(needle),
            "top-level help lacks {needle:?}:\n{help}"
        );
    }
    for sub in [
        "run", "elect", "leader", "put", "get", "delete", "fence", "status", "locks", "keys",
        "info", "history", "metrics",
    ] {
        let out = env.run(&[sub, "--help"]);
        assert_eq!(code(&out), 0, "{sub} --help");
        let help = stdout(&out);
        assert!(
            help.contains("Example"),
            "{sub} --help lacks an example:\n{help}"
        );
        assert!(
            help.contains("Exit status"),
            "{sub} --help lacks exit status:\n{help}"
        );
    }
    let out = env.run(&["--version"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(env!("CARGO_PKG_VERSION")));
}

/// The rows of the table under the `Exit status` line of `text` (`--help`): (code, meaning)
/// pairs.
pub fn help_exit_rows(text: &str) -> Vec<(String, String)> {
    let heading = text.find("Exit status").expect("an exit status table");
    let start = heading + text[heading..].find('\n').expect("a table under it") + 1;
    text[start..]
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let line = line.trim_start();
            let (code, meaning) = line.split_once("  ")?;
            let numeric = code.chars().all(|c| c.is_ascii_digit() || "+N".contains(c));
            numeric.then(|| (code.to_owned(), meaning.trim().to_owned()))
        })
        .collect()
}

/// The rows of the README's exit status table, between its two markers.
fn readme_exit_rows(readme: &str) -> Vec<(String, String)> {
    let begin = readme
        .find("<!-- exit-status:begin")
        .expect("README marks its exit status table");
    let end = readme[begin..]
        .find("<!-- exit-status:end -->")
        .expect("README ends its exit status table")
        + begin;
    readme[begin..end]
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| status"))
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            match cells.as_slice() {
                [code, meaning] => Some((code.trim().to_owned(), meaning.trim().to_owned())),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn the_readme_exit_table_is_the_one_help_prints() {
    let env = Env::new();
    let help = stdout(&env.run(&["--help"]));
    let from_help = help_exit_rows(&help);
    assert!(from_help.len() >= 12, "{help}");
    let readme = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut table = String::from("| status | meaning |\n|-----:|---------|\n");
    for (code, meaning) in &from_help {
        let _ = writeln!(table, "| {code} | {meaning} |");
    }
    assert_eq!(
        readme_exit_rows(&readme),
        from_help,
        "the README's exit status table differs from `fencelock --help` \
         (src/bin/fencelock/exit.rs); paste this between its markers:\n{table}"
    );
    // `run --help` gives the rows `run` can exit with, word for word.
    let run_help = stdout(&env.run(&["run", "--help"]));
    let from_run = help_exit_rows(&run_help);
    assert!(from_run.iter().any(|(code, _)| code == "82"), "{run_help}");
    assert!(
        from_run.iter().any(|(code, _)| code == "128+N"),
        "{run_help}"
    );
    for row in &from_run {
        assert!(from_help.contains(row), "{row:?} is not in --help's table");
    }
    // The documented codes are the ones the tool exits with (the tests below check each).
    for expected in [
        0,
        NOT_FOUND,
        USAGE,
        DATABASE,
        LOCKED,
        TIMEOUT,
        STALE_TOKEN,
        LOCK_LOST,
        IO,
        CANNOT_EXECUTE,
        COMMAND_NOT_FOUND,
    ] {
        let code = expected.to_string();
        assert!(
            from_help.iter().any(|(c, _)| *c == code),
            "status {code} is not in --help"
        );
    }
}

#[test]
fn the_fence_example_checks_and_writes_in_one_step() {
    let env = Env::new();
    let help = stdout(&env.run(&["fence", "--help"]));
    // The check-then-act example, `fencelock fence ... && <write elsewhere>`, is gone ...
    let example = &help[help.find("Example").expect("an example")..];
    assert!(
        !example.contains("fencelock fence"),
        "the example checks, then writes:\n{help}"
    );
    // ... for a fenced put as the commit point, and the help says why.
    assert!(example.contains("fencelock put"), "{help}");
    assert!(help.contains("not safe"), "{help}");
    assert!(help.contains("one step"), "{help}");
}
