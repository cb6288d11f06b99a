//! `fencelock top`: a live view of the store, as top(1) and htop refresh theirs. On a terminal a
//! full-screen view (ratatui over crossterm): a line of rates (grants, refusals and waits a
//! second, from the store's counters), then every lock with its holders, the time it has been
//! held, the time left on its lease and its waiters, oldest first; keys sort it by hold or wait
//! time or by name, pick a lock and show its grant history. When standard output is not a
//! terminal, the same listing as plain text, printed again every interval (`--iterations`
//! bounds how many times).

use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime};

use fencelock::{HistoryEntry, LockState, Metrics, Store};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState};
use ratatui::{DefaultTerminal, Frame};

use crate::commands::write_stdout;
use crate::duration::format_duration;
use crate::listing::{self, LockView};
use crate::output::{self, Cell};
use crate::{exit, procs, Failure, TopArgs};

/// How the locks are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sort {
    /// Held longest first.
    Hold,
    /// Longest waiter first.
    Wait,
    /// By name.
    Name,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Hold => Sort::Wait,
            Sort::Wait => Sort::Name,
            Sort::Name => Sort::Hold,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Sort::Hold => "hold time",
            Sort::Wait => "wait time",
            Sort::Name => "name",
        }
    }
}

/// A lock as the view shows it: its listing and what it is sorted by.
struct Shown {
    view: LockView,
    /// How long its oldest live grant has been held (zero when none is live).
    held_for: Duration,
    /// How long its oldest waiter has waited (zero without waiters).
    waited: Duration,
}

/// One look at the store.
struct Snapshot {
    locks: Vec<Shown>,
    metrics: Option<Metrics>,
    taken: Instant,
}

/// Grants, refusals and waits a second between two looks.
#[derive(Default, Clone, Copy)]
struct Rates {
    grants: f64,
    refusals: f64,
    waits: f64,
}

fn refusals(m: &Metrics) -> u64 {
    m.refused_locked + m.refused_timeout + m.refused_cancelled + m.refused_other
}

fn rates(before: Option<&Snapshot>, now: &Snapshot) -> Option<Rates> {
    let before = before?;
    let (a, b) = (before.metrics.as_ref()?, now.metrics.as_ref()?);
    let secs = now.taken.duration_since(before.taken).as_secs_f64();
    // Counters that went back were set up again (every process closed the store): no rate.
    if secs <= 0.0 || b.grants < a.grants || refusals(b) < refusals(a) || b.waits < a.waits {
        return None;
    }
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52 a second
    let per_second = |x: u64, y: u64| (y - x) as f64 / secs;
    Some(Rates {
        grants: per_second(a.grants, b.grants),
        refusals: per_second(refusals(a), refusals(b)),
        waits: per_second(a.waits, b.waits),
    })
}

fn look(store: &Store, sort: Sort) -> Result<Snapshot, Failure> {
    let views = listing::gather(store, None)?;
    let now = SystemTime::now();
    let mut locks: Vec<Shown> = views
        .into_iter()
        .map(|view| {
            let held_for = view
                .grants
                .iter()
                .filter(|grant| grant.state == LockState::Held)
                .map(|grant| now.duration_since(grant.granted_at).unwrap_or_default())
                .max()
                .unwrap_or_default();
            let waited = view
                .waiters
                .iter()
                .map(|waiter| waiter.waited)
                .max()
                .unwrap_or_default();
            Shown {
                view,
                held_for,
                waited,
            }
        })
        .collect();
    sort_locks(&mut locks, sort);
    Ok(Snapshot {
        locks,
        // An etcd store keeps no counters: the view goes without rates.
        metrics: store.metrics().ok(),
        taken: Instant::now(),
    })
}

fn sort_locks(locks: &mut [Shown], sort: Sort) {
    match sort {
        Sort::Hold => locks.sort_by(|a, b| {
            b.held_for
                .cmp(&a.held_for)
                .then_with(|| a.view.name.cmp(&b.view.name))
        }),
        Sort::Wait => locks.sort_by(|a, b| {
            b.waited
                .cmp(&a.waited)
                .then_with(|| b.held_for.cmp(&a.held_for))
                .then_with(|| a.view.name.cmp(&b.view.name))
        }),
        Sort::Name => locks.sort_by(|a, b| a.view.name.cmp(&b.view.name)),
    }
}

/// The header line: the store, the server, the rates, the order.
fn summary(store: &Store, rates: Option<Rates>, sort: Sort) -> String {
    let rates = rates.map_or_else(
        || "rates after the next refresh".to_owned(),
        |r| {
            format!(
                "{:.1} grants/s, {:.1} refusals/s, {:.1} waits/s",
                r.grants, r.refusals, r.waits
            )
        },
    );
    let server = store
        .server()
        .map_or_else(|| "no server".to_owned(), |pid| format!("server pid {pid}"));
    format!(
        "{} ({server}): {rates}; sorted by {}",
        store.path().display(),
        sort.as_str()
    )
}

const HEADERS: [&str; 9] = [
    "NAME", "STATE", "TOKEN", "PID", "HELD", "LEFT", "WAITED", "KIND", "COMMAND",
];

/// The rows of the listing, as text cells: a row per grant, then a row per waiter; with the
/// index of the lock each row belongs to.
fn rows(snapshot: &Snapshot) -> Vec<(usize, [String; 9])> {
    let now = SystemTime::now();
    let mut rows = Vec::new();
    for (index, shown) in snapshot.locks.iter().enumerate() {
        let name = output::quote_for_terminal(&shown.view.name);
        for grant in &shown.view.grants {
            let live = grant.state == LockState::Held;
            rows.push((
                index,
                [
                    name.clone(),
                    grant.state.as_str().to_owned(),
                    grant.token.to_string(),
                    grant.pid.to_string(),
                    if live {
                        format_duration(now.duration_since(grant.granted_at).unwrap_or_default())
                    } else {
                        "-".to_owned()
                    },
                    if live {
                        format_duration(grant.remaining)
                    } else {
                        "-".to_owned()
                    },
                    "-".to_owned(),
                    grant.kind.describe(),
                    if grant.state == LockState::HolderDead {
                        "-".to_owned()
                    } else {
                        output::quote_for_terminal(&procs::brief(grant.pid, 50))
                    },
                ],
            ));
        }
        for waiter in &shown.view.waiters {
            rows.push((
                index,
                [
                    name.clone(),
                    "waiting".to_owned(),
                    "-".to_owned(),
                    waiter.pid.to_string(),
                    "-".to_owned(),
                    "-".to_owned(),
                    format_duration(waiter.waited),
                    "-".to_owned(),
                    output::quote_for_terminal(&procs::brief(waiter.pid, 50)),
                ],
            ));
        }
    }
    rows
}

/// `fencelock top`.
pub fn top(store: &Store, args: &TopArgs) -> Result<(), Failure> {
    if std::io::stdout().is_terminal() && args.iterations.is_none() {
        return full_screen(store, args);
    }
    plain(store, args)
}

/// The plain-text view: the listing again every interval.
fn plain(store: &Store, args: &TopArgs) -> Result<(), Failure> {
    let mut before: Option<Snapshot> = None;
    let mut done = 0u64;
    loop {
        let snapshot = look(store, args.sort)?;
        let mut text = format!(
            "{}\n",
            summary(store, rates(before.as_ref(), &snapshot), args.sort)
        );
        let rows: Vec<Vec<Cell>> = rows(&snapshot)
            .into_iter()
            .map(|(_, cells)| cells.into_iter().map(Cell::from).collect())
            .collect();
        if rows.is_empty() {
            text.push_str("no locks recorded\n");
        } else {
            text.push_str(&output::table(&HEADERS, &rows, false));
        }
        text.push('\n');
        write_stdout(text.as_bytes())?;
        done += 1;
        if args.iterations.is_some_and(|n| done >= n) {
            return Ok(());
        }
        before = Some(snapshot);
        std::thread::sleep(args.interval);
    }
}

/// What the full-screen view shows.
struct View {
    sort: Sort,
    /// The lock picked (by name, so that it stays picked as the order changes).
    picked: Option<String>,
    /// The picked lock's history, while it is shown.
    history: Option<(String, Result<Vec<HistoryEntry>, String>)>,
}

fn full_screen(store: &Store, args: &TopArgs) -> Result<(), Failure> {
    let mut terminal = ratatui::try_init()
        .map_err(|err| Failure::new(exit::IO, format!("cannot set up the terminal: {err}")))?;
    let result = run_screen(&mut terminal, store, args);
    ratatui::restore();
    result
}

fn run_screen(
    terminal: &mut DefaultTerminal,
    store: &Store,
    args: &TopArgs,
) -> Result<(), Failure> {
    let io = |err: std::io::Error| Failure::new(exit::IO, format!("terminal: {err}"));
    let mut view = View {
        sort: args.sort,
        picked: None,
        history: None,
    };
    let mut snapshot = look(store, view.sort)?;
    let mut shown_rates = None;
    loop {
        if view.picked.is_none() {
            view.picked = snapshot.locks.first().map(|l| l.view.name.clone());
        }
        let head = summary(store, shown_rates, view.sort);
        terminal
            .draw(|frame| draw(frame, &head, &snapshot, &view))
            .map_err(io)?;
        let next_look = snapshot.taken + args.interval;
        // Keys until the next refresh.
        loop {
            let left = next_look.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left).map_err(io)? {
                break;
            }
            let Event::Key(key) = event::read().map_err(io)? else {
                continue;
            };
            if key.kind != KeyEventKind::Press {
                continue;
            }
            let names: Vec<&str> = snapshot
                .locks
                .iter()
                .map(|l| l.view.name.as_str())
                .collect();
            let at = view
                .picked
                .as_deref()
                .and_then(|p| names.iter().position(|n| *n == p));
            match key.code {
                KeyCode::Char('q') => return Ok(()),
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    return Ok(());
                }
                KeyCode::Esc if view.history.is_none() => return Ok(()),
                KeyCode::Esc => view.history = None,
                KeyCode::Char('s') => view.sort = view.sort.next(),
                KeyCode::Char('h') => view.sort = Sort::Hold,
                KeyCode::Char('w') => view.sort = Sort::Wait,
                KeyCode::Char('n') => view.sort = Sort::Name,
                KeyCode::Down | KeyCode::Char('j') => {
                    let next = at.map_or(0, |i| (i + 1).min(names.len().saturating_sub(1)));
                    view.picked = names.get(next).map(|n| (*n).to_owned());
                }
                KeyCode::Up | KeyCode::Char('k') => {
                    let next = at.map_or(0, |i| i.saturating_sub(1));
                    view.picked = names.get(next).map(|n| (*n).to_owned());
                }
                KeyCode::Enter if view.history.is_some() => view.history = None,
                KeyCode::Enter => {
                    if let Some(name) = view.picked.clone() {
                        let history = store.history(&name).map_err(|err| err.to_string());
                        view.history = Some((name, history));
                    }
                }
                _ => continue,
            }
            sort_locks(&mut snapshot.locks, view.sort);
            let head = summary(store, shown_rates, view.sort);
            terminal
                .draw(|frame| draw(frame, &head, &snapshot, &view))
                .map_err(io)?;
        }
        let next = look(store, view.sort)?;
        shown_rates = rates(Some(&snapshot), &next).or(shown_rates);
        snapshot = next;
        if let Some((name, _)) = &view.history {
            let name = name.clone();
            let history = store.history(&name).map_err(|err| err.to_string());
            view.history = Some((name, history));
        }
    }
}

fn draw(frame: &mut Frame<'_>, head: &str, snapshot: &Snapshot, view: &View) {
    let [top_line, body, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(Line::from(head.to_owned()))
            .style(Style::new().add_modifier(Modifier::BOLD)),
        top_line,
    );
    let (locks_area, history_area) = if view.history.is_some() {
        let [a, b] =
            Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(body);
        (a, Some(b))
    } else {
        (body, None)
    };
    let rows = rows(snapshot);
    let picked_row = view.picked.as_deref().and_then(|picked| {
        rows.iter()
            .position(|(index, _)| snapshot.locks[*index].view.name == picked)
    });
    let mut widths = HEADERS.map(|h| u16::try_from(h.len()).unwrap_or(u16::MAX));
    for (_, cells) in &rows {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(u16::try_from(cell.chars().count()).unwrap_or(u16::MAX));
        }
    }
    let table_rows: Vec<Row<'_>> = rows
        .into_iter()
        .map(|(_, cells)| {
            let style = match cells[1].as_str() {
                "held" => Style::new().fg(Color::Green),
                "waiting" => Style::new().fg(Color::Yellow),
                "holder-dead" => Style::new().fg(Color::Red),
                _ => Style::new().add_modifier(Modifier::DIM),
            };
            Row::new(cells).style(style)
        })
        .collect();
    let title = format!(" {} locks ", snapshot.locks.len());
    // Every column as wide as its widest cell, and COMMAND, the last, gets what is left: a
    // narrow terminal cuts the command, never a name or a number.
    let mut constraints = widths.map(Constraint::Length);
    constraints[HEADERS.len() - 1] = Constraint::Fill(1);
    let table = Table::new(table_rows, constraints)
        .header(Row::new(HEADERS).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::new().borders(Borders::TOP).title(title))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(picked_row);
    frame.render_stateful_widget(table, locks_area, &mut state);
    if let (Some(area), Some((name, history))) = (history_area, &view.history) {
        let title = format!(" history of {} ", output::quote_for_terminal(name));
        let block = Block::new().borders(Borders::TOP).title(title);
        match history {
            Ok(entries) => {
                let now = SystemTime::now();
                let rows: Vec<Row<'_>> = entries
                    .iter()
                    .map(|entry| {
                        let held = entry
                            .granted
                            .and_then(|granted| {
                                entry.ended.unwrap_or(now).duration_since(granted).ok()
                            })
                            .map_or_else(|| "?".to_owned(), format_duration);
                        Row::new([
                            entry.token.to_string(),
                            entry.kind.describe(),
                            entry.pid.to_string(),
                            held,
                            entry.ending.as_str().to_owned(),
                        ])
                    })
                    .collect();
                let table = Table::new(
                    rows,
                    [
                        Constraint::Length(10),
                        Constraint::Length(14),
                        Constraint::Length(8),
                        Constraint::Length(10),
                        Constraint::Length(12),
                    ],
                )
                .header(
                    Row::new(["TOKEN", "KIND", "PID", "HELD FOR", "HOW"])
                        .style(Style::new().add_modifier(Modifier::BOLD)),
                )
                .block(block);
                frame.render_widget(table, area);
            }
            Err(err) => frame.render_widget(Paragraph::new(err.clone()).block(block), area),
        }
    }
    frame.render_widget(
        Paragraph::new(
            "q quit  s sort (h hold, w wait, n name)  \u{2191}\u{2193} pick  Enter history  Esc back",
        )
        .style(Style::new().add_modifier(Modifier::DIM)),
        keys,
    );
}
