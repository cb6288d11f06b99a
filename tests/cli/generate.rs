//! `generate` (hidden, for `make install CLI=1`): the man pages and the shell completions,
//! rendered from the command's own definitions.

use std::fs;
use std::process::Command;

use crate::common::*;
use crate::help::help_exit_rows;

/// The commands a user sees, each with a page.
const COMMANDS: [&str; 13] = [
    "run", "hold", "put", "get", "delete", "fence", "status", "top", "keys", "info", "history",
    "metrics", "serve",
];

/// Whether `program` can be run here (zsh and fish need not be installed).
fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// `man -l PAGE` as plain ASCII, one line a paragraph (no wrapping), or None without man(1).
fn render(page: &std::path::Path) -> Option<String> {
    let out = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("LC_ALL", "C")
        .env("MANWIDTH", "1000")
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "man -l {}: {}",
        page.display(),
        stderr(&out)
    );
    assert_eq!(stderr(&out), "", "man -l {} warned", page.display());
    Some(stdout(&out))
}

/// man fencelock-run reads like flock(1)'s page: its sections in that order, every option
/// `run --help` lists, and the exit statuses `run --help` gives, word for word.
#[test]
fn man_pages_have_a_page_a_command_and_read_like_flocks() {
    let env = Env::new();
    let dir = env.path("man");
    let out = env.run(&["generate", "man", dir.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut pages: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    let mut expected: Vec<String> = COMMANDS
        .iter()
        .map(|command| format!("fencelock-{command}.1"))
        .chain(["fencelock.1".to_owned()])
        .collect();
    expected.sort();
    assert_eq!(
        pages, expected,
        "no page for help or generate, one for every other command"
    );

    let run_page = dir.join("fencelock-run.1");
    let roff = fs::read_to_string(&run_page).unwrap();
    assert!(roff.starts_with(".TH FENCELOCK-RUN 1 "), "{roff}");
    let sections = [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "EXIT STATUS",
        "EXAMPLES",
        "SEE ALSO",
    ];
    let mut at = 0;
    for section in sections {
        // The roff crate quotes an argument with a space.
        let heading = if section.contains(' ') {
            format!("\n.SH \"{section}\"\n")
        } else {
            format!("\n.SH {section}\n")
        };
        let found = roff[at..]
            .find(&heading)
            .unwrap_or_else(|| panic!("no {section} after the sections before it:\n{roff}"));
        at += found + 1;
    }

    let Some(text) = render(&run_page) else {
        eprintln!("man(1) is not installed: the page's roff is checked, not its rendering");
        return;
    };
    for section in sections {
        assert!(
            text.lines().any(|line| line == section),
            "no {section}:\n{text}"
        );
    }
    assert!(
        text.contains("fencelock run [OPTIONS] --lock NAME -c STRING"),
        "{text}"
    );
    let help = stdout(&env.run(&["run", "--help"]));
    for option in help
        .split_whitespace()
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(|word| word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
    {
        assert!(
            text.contains(option),
            "{option} is not in the man page:\n{text}"
        );
    }
    let exit = &text[text.find("\nEXIT STATUS\n").unwrap()..text.find("\nEXAMPLES\n").unwrap()];
    let from_man: Vec<(String, String)> = exit
        .lines()
        .filter_map(|line| {
            let (code, meaning) = line.trim().split_once(' ')?;
            let numeric = code.chars().all(|c| c.is_ascii_digit() || "+N".contains(c));
            numeric.then(|| {
                (
                    code.to_owned(),
                    meaning.split_whitespace().collect::<Vec<_>>().join(" "),
                )
            })
        })
        .collect();
    assert_eq!(from_man, help_exit_rows(&help), "{text}");
    assert!(
        text.contains("    fencelock run --lock backup -w 300"),
        "{text}"
    );

    // Every page renders without a warning.
    for page in &pages {
        render(&dir.join(page));
    }
}

/// The completions parse in their shells and complete the commands, not the hidden one.
#[test]
fn completions_parse_and_complete_the_commands() {
    let env = Env::new();
    let script = |shell: &str| {
        let out = env.run(&["generate", "completion", shell]);
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let path = env.path(&format!("completion.{shell}"));
        fs::write(&path, &out.stdout).unwrap();
        path
    };
    let bash = script("bash");
    let out = Command::new("bash").arg("-n").arg(&bash).output().unwrap();
    assert!(out.status.success(), "bash -n: {}", stderr(&out));
    let complete = |word: &str| {
        let out = Command::new("bash")
            .args([
                "-c",
                "source \"$1\"; COMP_WORDS=(fencelock \"$2\"); COMP_CWORD=1; \
                 _fencelock fencelock \"$2\" fencelock; echo \"${COMPREPLY[*]}\"",
                "bash",
            ])
            .arg(&bash)
            .arg(word)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_owned()
    };
    assert_eq!(complete("ru"), "run");
    assert_eq!(complete("ge"), "get", "the hidden generate is offered");
    let out = Command::new("bash")
        .args([
            "-c",
            "source \"$1\"; COMP_WORDS=(fencelock run --kill); COMP_CWORD=2; \
                _fencelock fencelock --kill run; echo \"${COMPREPLY[*]}\"",
            "bash",
        ])
        .arg(&bash)
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), "--kill-after", "{}", stderr(&out));

    let zsh = script("zsh");
    if installed("zsh") {
        let out = Command::new("zsh").arg("-n").arg(&zsh).output().unwrap();
        assert!(out.status.success(), "zsh -n: {}", stderr(&out));
    }
    let fish = script("fish");
    if installed("fish") {
        let out = Command::new("fish")
            .arg("-c")
            .arg(format!(
                "source '{}'; complete -C 'fencelock ru'",
                fish.display()
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "fish: {}", stderr(&out));
        assert!(stdout(&out).starts_with("run\t"), "{}", stdout(&out));
    }
    let out = env.run(&["generate", "completion", "tcsh"]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    // Hidden from --help too.
    assert!(!stdout(&env.run(&["--help"])).contains("generate"));
}
