//! `fencelock generate` (hidden): the man pages and shell completions `make install CLI=1`
//! installs, rendered from the clap definitions and the `--help` texts, so that they say what
//! `--help` says.
//!
//! A page is `clap_mangen`'s NAME, SYNOPSIS and OPTIONS, and sections cut from the command's
//! `after_help` at the headings every help text uses: what comes before them is the
//! DESCRIPTION (after the one-line about), `Exit status` the EXIT STATUS (a row of
//! `exit::help`'s table becomes a tagged paragraph), `Example` or `Examples` the EXAMPLES
//! (indented lines are commands, set unfilled), `Database:` the FILES.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

use crate::{exit, Cli, Failure};

/// The man section of every page.
const SECTION: &str = "1";

/// The pages other than the command's own to point to, by command name.
const SEE_ALSO: &[(&str, &str)] = &[("run", "flock(1), timeout(1)")];

/// Synopses written out, as flock(1)'s are, where the usage line clap derives says less (it
/// cannot tell that `-c` replaces the command); the others are that usage line.
const SYNOPSES: &[(&str, &[&str])] = &[(
    "run",
    &[
        "[OPTIONS] --lock NAME [--] COMMAND [ARGUMENT...]",
        "[OPTIONS] --lock NAME -c STRING",
    ],
)];

/// The command as its users see it: without hidden subcommands (`generate`), which
/// `clap_complete` would offer otherwise.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    let mut visible = clap::Command::new("fencelock")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(about) = full.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(after) = full.get_after_help() {
        visible = visible.after_help(after.clone());
    }
    visible.build();
    visible
}

/// Writes `fencelock.1` and a `fencelock-COMMAND.1` for every command into `dir` (created if
/// missing); returns the files written.
pub fn man_pages(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let io_failure =
        |path: &Path, err: io::Error| Failure::new(exit::IO, format!("{}: {err}", path.display()));
    fs::create_dir_all(dir).map_err(|err| io_failure(dir, err))?;
    let top = visible_command();
    let mut pages = vec![&top];
    pages.extend(top.get_subcommands().filter(|sub| sub.get_name() != "help"));
    let mut written = Vec::new();
    for cmd in pages {
        let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
        let path = dir.join(format!("{name}.{SECTION}"));
        fs::write(&path, page(cmd)).map_err(|err| io_failure(&path, err))?;
        written.push(path);
    }
    Ok(written)
}

/// Prints the completion script of `shell`.
pub fn completion(shell: Shell) -> Result<(), Failure> {
    let mut cmd = visible_command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "fencelock", &mut script);
    crate::commands::write_stdout(&script)
}

/// A section of a help text's epilogue.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Heading {
    Description,
    Files,
    ExitStatus,
    Examples,
}

impl Heading {
    fn title(self) -> &'static str {
        match self {
            Heading::Description => "DESCRIPTION",
            Heading::Files => "FILES",
            Heading::ExitStatus => "EXIT STATUS",
            Heading::Examples => "EXAMPLES",
        }
    }

    /// The heading a line of a help text opens, and the rest of that line.
    fn opened_by(line: &str) -> Option<(Heading, &str)> {
        let headings = [
            ("Database:", Heading::Files),
            ("Exit status", Heading::ExitStatus),
            ("Examples", Heading::Examples),
            ("Example", Heading::Examples),
        ];
        headings.iter().find_map(|(prefix, heading)| {
            let rest = line.strip_prefix(prefix)?;
            Some((*heading, rest.trim_start_matches(':').trim_start()))
        })
    }
}

/// `after_help` cut at its headings, in order; the lines before the first are the description.
/// What follows a heading on its line starts the section, as a sentence.
fn sections(after_help: &str) -> Vec<(Heading, Vec<String>)> {
    let mut sections = vec![(Heading::Description, Vec::new())];
    for line in after_help.lines() {
        if let Some((heading, rest)) = Heading::opened_by(line) {
            let mut chars = rest.chars();
            let sentence = chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect())
                .unwrap_or_default();
            sections.push((heading, vec![sentence]));
        } else if let Some((_, lines)) = sections.last_mut() {
            lines.push(line.to_owned());
        }
    }
    sections
}

/// The man page of `cmd` (a built command: its display name is `fencelock-run`).
fn page(cmd: &clap::Command) -> Vec<u8> {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let man = Man::new(with_aliases(cmd));
    let after_help = cmd
        .get_after_help()
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut sections = sections(&after_help);

    // Written here: clap_mangen drops an empty date from the .TH line, which shifts the
    // source and the manual into the wrong places.
    let mut head = format!(
        ".TH {} {SECTION} \"\" \"fencelock {}\" \"User Commands\"\n",
        name.to_uppercase(),
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes();
    let mut options = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = man.render_name_section(&mut head);
    let _ = man.render_options_section(&mut options);
    // The commands, each with its page; clap_mangen's list would name a page for `help`.
    let mut commands = Roff::new();
    if cmd.has_subcommands() {
        commands.control("SH", ["COMMANDS"]);
        for sub in cmd.get_subcommands().filter(|sub| sub.get_name() != "help") {
            let page = sub.get_display_name().unwrap_or_else(|| sub.get_name());
            commands.control("TP", []);
            commands.text([bold(page), roman(format!("({SECTION})"))]);
            let mut about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            let aliases: Vec<String> = sub
                .get_visible_aliases()
                .map(|alias| format!("fencelock {alias}"))
                .collect();
            if !aliases.is_empty() {
                about = format!("{about} (also {})", aliases.join(", "));
            }
            commands.text([roman(about)]);
        }
    }

    let mut description = Roff::new();
    synopsis(&mut description, cmd);
    description.control("SH", [Heading::Description.title()]);
    if let Some(about) = cmd.get_about() {
        let about = about.to_string();
        let end = if about.ends_with('.') { "" } else { "." };
        description.text([roman(format!("{about}{end}"))]);
    }
    let lines = sections.remove(0).1;
    if lines.iter().any(|line| !line.trim().is_empty()) {
        description.control("PP", []);
        prose(&mut description, &lines);
    }

    let mut rest = Roff::new();
    for (heading, lines) in &sections {
        rest.control("SH", [heading.title()]);
        match heading {
            Heading::Examples => examples(&mut rest, lines),
            _ => prose(&mut rest, lines),
        }
    }
    rest.control("SH", ["SEE ALSO"]);
    let mut see_also = vec![if cmd.get_name() == "fencelock" {
        "flock(1)".to_owned()
    } else {
        format!("fencelock({SECTION})")
    }];
    see_also.extend(
        SEE_ALSO
            .iter()
            .filter(|(command, _)| *command == cmd.get_name())
            .map(|(_, pages)| (*pages).to_owned()),
    );
    rest.text([roman(see_also.join(", "))]);

    // Each piece starts with the roff crate's preamble (it defines the apostrophe string); the
    // page needs it once.
    let preamble = Roff::new().render();
    let mut out = head;
    for piece in [
        description.render().into_bytes(),
        options,
        commands.render().into_bytes(),
        rest.render().into_bytes(),
    ] {
        out.extend_from_slice(piece.strip_prefix(preamble.as_bytes()).unwrap_or(&piece));
    }
    out
}

/// `cmd` with each option's visible aliases in its help, as `--help` shows them: `clap_mangen`
/// leaves them out.
fn with_aliases(cmd: &clap::Command) -> clap::Command {
    let mut cmd = cmd.clone();
    let aliased: Vec<(clap::Id, Vec<String>)> = cmd
        .get_arguments()
        .map(|arg| {
            let shorts = arg.get_visible_short_aliases().unwrap_or_default();
            let longs = arg.get_visible_aliases().unwrap_or_default();
            let aliases = shorts
                .iter()
                .map(|short| format!("-{short}"))
                .chain(longs.iter().map(|long| format!("--{long}")))
                .collect();
            (arg.get_id().clone(), aliases)
        })
        .filter(|(_, aliases): &(_, Vec<String>)| !aliases.is_empty())
        .collect();
    for (id, aliases) in aliased {
        cmd = cmd.mut_arg(id, |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let label = if aliases.len() == 1 {
                "alias"
            } else {
                "aliases"
            };
            arg.help(format!("{help} [{label}: {}]", aliases.join(", ")))
        });
    }
    cmd
}

/// SYNOPSIS: the forms of [`SYNOPSES`], else clap's usage line.
fn synopsis(roff: &mut Roff, cmd: &clap::Command) {
    roff.control("SH", ["SYNOPSIS"]);
    let bin = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let usage = cmd.clone().render_usage().to_string();
    let derived = usage
        .trim_start_matches("Usage:")
        .trim()
        .strip_prefix(bin)
        .unwrap_or(&usage)
        .trim()
        .to_owned();
    let forms = SYNOPSES
        .iter()
        .find(|(command, _)| *command == cmd.get_name())
        .map_or_else(
            || vec![derived],
            |(_, forms)| forms.iter().map(|f| (*f).to_owned()).collect(),
        );
    for (i, form) in forms.into_iter().enumerate() {
        if i > 0 {
            roff.control("br", []);
        }
        roff.text([bold(bin), roman(format!(" {form}"))]);
    }
}

/// A row of `exit::help`'s table: the status and its meaning.
fn exit_row(line: &str) -> Option<(&str, &str)> {
    let (code, meaning) = line.trim_start().split_once("  ")?;
    exit::TABLE
        .iter()
        .any(|row| row.code == code)
        .then(|| (code, meaning.trim()))
}

/// Prose: lines filled into paragraphs, a blank line between two; a `  - ` line starts a
/// bulleted item; a row of the exit table becomes a tagged paragraph.
fn prose(roff: &mut Roff, lines: &[String]) {
    let mut in_rows = false;
    let mut pending_break = false;
    for line in lines {
        if line.trim().is_empty() {
            pending_break = true;
            continue;
        }
        if let Some((code, meaning)) = exit_row(line) {
            roff.control("TP", []);
            roff.text([bold(code)]);
            roff.text([roman(meaning)]);
            in_rows = true;
            pending_break = false;
            continue;
        }
        if let Some(item) = line.strip_prefix("  - ") {
            roff.control("IP", ["\\(bu", "2"]);
            roff.text([roman(item.trim())]);
            pending_break = false;
            continue;
        }
        if pending_break || in_rows {
            roff.control("PP", []);
            pending_break = false;
            in_rows = false;
        }
        roff.text([roman(line.trim())]);
    }
}

/// Examples: indented lines are commands, set unfilled as written; others are prose.
fn examples(roff: &mut Roff, lines: &[String]) {
    let mut in_code = false;
    for line in lines.iter().filter(|line| !line.trim().is_empty()) {
        let code = line.starts_with("  ");
        if code != in_code {
            if code {
                roff.control("RS", ["4"]);
                roff.control("nf", []);
            } else {
                roff.control("fi", []);
                roff.control("RE", []);
            }
            in_code = code;
        }
        if code {
            roff.text([roman(&line[2..])]);
        } else {
            roff.text([roman(line.trim())]);
        }
    }
    if in_code {
        roff.control("fi", []);
        roff.control("RE", []);
    }
}
