//! `fencelock history NAME --svg`: a lock's history as a picture, one bar per lease on a
//! common time axis, written as plain SVG text.
//!
//! The bars come from the store's history alone: a lease runs from its grant to its expiry (or
//! its release); a lease taken over is drawn on past its expiry, hatched, to the grant that took
//! it over: its holder still held on, and only fencing stops its late writes. The store keeps
//! no record of a refused write (a refusal writes nothing) nor of a pause, so those come from
//! an events file the writer kept (`--events`): one JSON object a line,
//! `{"event": "paused"|"resumed"|"write-accepted"|"write-refused", "token": N, "at_ms": T}`
//! with T in Unix epoch milliseconds and an optional `"key"`; each is drawn on its lease's row.
//!
//! The picture depends only on the history and the events, never on the time it is drawn
//! (a lease still held is drawn to its expiry), so the same inputs give the same bytes.

use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use fencelock::{Ending, HistoryEntry};
use serde_json::Value;

use crate::commands::unix_ms;
use crate::{exit, output, Failure};

/// What an events-file line tells of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    Paused,
    Resumed,
    WriteAccepted,
    WriteRefused,
}

/// One line of an events file, parsed.
#[derive(Debug, Clone)]
pub struct Event {
    what: What,
    token: u64,
    at_ms: i64,
    key: Option<String>,
    line: usize,
}

/// Reads an events file (`-` for standard input).
pub fn read_events(path: &Path) -> Result<Vec<Event>, Failure> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|err| {
        Failure::new(
            exit::IO,
            format!("cannot read the events file {}: {err}", path.display()),
        )
    })?;
    let mut events = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| {
            Failure::new(
                exit::USAGE,
                format!("events file {}, line {line_no}: {why}", path.display()),
            )
        };
        let value: Value =
            serde_json::from_str(line).map_err(|err| bad(&format!("not JSON: {err}")))?;
        let what = match value.get("event").and_then(Value::as_str) {
            Some("paused") => What::Paused,
            Some("resumed") => What::Resumed,
            Some("write-accepted") => What::WriteAccepted,
            Some("write-refused") => What::WriteRefused,
            Some(other) => {
                return Err(bad(&format!(
                    "unknown event {other:?} (paused, resumed, write-accepted or write-refused)"
                )))
            }
            None => return Err(bad("no \"event\" string")),
        };
        let token = value
            .get("token")
            .and_then(Value::as_u64)
            .filter(|token| *token > 0)
            .ok_or_else(|| bad("no \"token\" (a positive integer)"))?;
        let at_ms = value
            .get("at_ms")
            .and_then(Value::as_i64)
            .ok_or_else(|| bad("no \"at_ms\" (Unix epoch milliseconds, an integer)"))?;
        let key = match value.get("key") {
            None | Some(Value::Null) => None,
            Some(Value::String(key)) => Some(key.clone()),
            Some(_) => return Err(bad("\"key\" is not a string")),
        };
        events.push(Event {
            what,
            token,
            at_ms,
            key,
            line: line_no,
        });
    }
    Ok(events)
}

/// One lease's row: its bar and what the events put on it.
struct Row<'a> {
    entry: &'a HistoryEntry,
    start: i64,
    /// Where the valid lease ends: its release, or its expiry.
    lease_end: i64,
    /// Past `lease_end`, to the grant that took it over.
    overrun_end: Option<i64>,
    /// Whether the end is known; else the bar ends at the expiry, dashed.
    end_known: bool,
    pauses: Vec<(i64, Option<i64>)>,
    marks: Vec<&'a Event>,
}

const WIDTH: f64 = 960.0;
const CHART_LEFT: f64 = 150.0;
const CHART_RIGHT: f64 = 890.0;
const TOP: f64 = 78.0;
const ROW: f64 = 70.0;
const BAR: f64 = 22.0;

/// The SVG text of `name`'s history `entries` (oldest first), with `events` on their leases.
pub fn render(name: &str, entries: &[HistoryEntry], events: &[Event]) -> Result<String, Failure> {
    let ms = |at: Option<SystemTime>| at.map(unix_ms);
    let mut rows: Vec<Row<'_>> = Vec::with_capacity(entries.len());
    for entry in entries {
        let granted = ms(entry.granted);
        let expires = ms(entry.expires);
        let ended = match entry.ending {
            Ending::Held => None,
            _ => ms(entry.ended),
        };
        let start = granted.or(expires).or(ended).unwrap_or(0);
        let (lease_end, overrun_end, end_known) = match (entry.ending, ended, expires) {
            (Ending::TakenOver, Some(ended), Some(expires)) if ended > expires => {
                (expires, Some(ended), true)
            }
            (Ending::Held, _, Some(expires)) => (expires, None, true),
            (_, Some(ended), _) => (ended, None, true),
            (_, None, Some(expires)) => (expires, None, false),
            (_, None, None) => (start, None, false),
        };
        rows.push(Row {
            entry,
            start,
            lease_end: lease_end.max(start),
            overrun_end,
            end_known,
            pauses: Vec::new(),
            marks: Vec::new(),
        });
    }

    // Each event on its lease's row, in time order; pauses paired with the resume after them.
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|event| (event.token, event.at_ms, event.line));
    let mut left_out = 0usize;
    for event in sorted {
        let Some(row) = rows.iter_mut().find(|row| row.entry.token == event.token) else {
            left_out += 1;
            continue;
        };
        match event.what {
            What::Paused => {
                if row.pauses.last().is_some_and(|(_, end)| end.is_none()) {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!(
                            "events file, line {}: token {} paused again before it resumed",
                            event.line, event.token
                        ),
                    ));
                }
                row.pauses.push((event.at_ms, None));
            }
            What::Resumed => match row.pauses.last_mut() {
                Some((_, end @ None)) => *end = Some(event.at_ms),
                _ => {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!(
                            "events file, line {}: token {} resumed with no pause before it",
                            event.line, event.token
                        ),
                    ))
                }
            },
            What::WriteAccepted | What::WriteRefused => row.marks.push(event),
        }
    }
    if left_out > 0 {
        let plural = if left_out == 1 { "" } else { "s" };
        output::say(format!(
            "{left_out} event{plural} of leases not in the history of {name:?} left out"
        ));
    }

    let mut first = i64::MAX;
    let mut last = i64::MIN;
    for row in &rows {
        let times = [Some(row.start), Some(row.lease_end), row.overrun_end];
        let pauses = row.pauses.iter().flat_map(|(from, to)| [Some(*from), *to]);
        let marks = row.marks.iter().map(|event| Some(event.at_ms));
        for at in times.into_iter().chain(pauses).chain(marks).flatten() {
            first = first.min(at);
            last = last.max(at);
        }
    }
    if first > last {
        (first, last) = (0, 1000);
    }
    let span = (last - first).max(1);
    let step = tick_step(span);
    // The axis ends at the tick after the last time.
    let axis_ms = (span + step - 1) / step * step;
    let x =
        |at: i64| CHART_LEFT + (at - first) as f64 * (CHART_RIGHT - CHART_LEFT) / axis_ms as f64;

    let height = TOP + ROW * rows.len() as f64 + 140.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"Helvetica, Arial, sans-serif\" \
         font-size=\"12\">"
    );
    svg.push_str(
        "<defs>\n\
         <pattern id=\"overrun\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#f6c56b\"/>\
         <rect width=\"3\" height=\"8\" fill=\"#e08a00\"/></pattern>\n\
         <pattern id=\"paused\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(-45)\"><rect width=\"6\" height=\"6\" fill=\"#eeeeee\"/>\
         <rect width=\"2\" height=\"6\" fill=\"#c8c8c8\"/></pattern>\n\
         </defs>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
    );
    let _ = writeln!(
        svg,
        "<text x=\"20\" y=\"28\" font-size=\"16\" font-weight=\"bold\">Lock \u{201c}{}\u{201d}: \
         one bar per lease</text>",
        escape(name)
    );
    let _ = writeln!(
        svg,
        "<text x=\"20\" y=\"48\" fill=\"#555555\">From the store\u{2019}s history (fencelock \
         history --svg); time 0 is {}.</text>",
        utc(first)
    );

    // Grid lines and the axis.
    let axis_y = TOP + ROW * rows.len() as f64 + 8.0;
    svg.push_str("<g class=\"axis\" stroke=\"#dddddd\">\n");
    let mut tick = 0;
    while tick <= axis_ms {
        let tx = x(first + tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{tx:.1}\" y1=\"{:.1}\" x2=\"{tx:.1}\" y2=\"{axis_y:.1}\"/>",
            TOP - 8.0
        );
        tick += step;
    }
    svg.push_str("</g>\n");
    let _ = writeln!(
        svg,
        "<line x1=\"{CHART_LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" \
         stroke=\"#333333\"/>",
        x(first + axis_ms)
    );
    let mut tick = 0;
    while tick <= axis_ms {
        let tx = x(first + tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{tx:.1}\" y1=\"{axis_y:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" \
             stroke=\"#333333\"/><text class=\"tick\" x=\"{tx:.1}\" y=\"{:.1}\" \
             text-anchor=\"middle\">{}</text>",
            axis_y + 5.0,
            axis_y + 19.0,
            tick_label(tick, step)
        );
        tick += step;
    }

    for (i, row) in rows.iter().enumerate() {
        let top = TOP + ROW * i as f64;
        let bar_y = top + 24.0;
        let token = row.entry.token;
        let _ = writeln!(
            svg,
            "<g class=\"lease\" data-token=\"{token}\" data-ending=\"{}\">",
            row.entry.ending.as_str()
        );
        let _ = writeln!(
            svg,
            "<text x=\"20\" y=\"{:.1}\" font-weight=\"bold\">token {token}</text>\
             <text x=\"20\" y=\"{:.1}\" fill=\"#555555\">pid {}</text>",
            bar_y + 10.0,
            bar_y + 24.0,
            row.entry.pid
        );
        for (from, to) in &row.pauses {
            let x1 = x(*from);
            let x2 = to.map_or(x(first + axis_ms), x);
            let _ = writeln!(
                svg,
                "<rect class=\"pause\" x=\"{x1:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
                 fill=\"url(#paused)\" opacity=\"0.9\"/><text x=\"{:.1}\" y=\"{:.1}\" \
                 fill=\"#666666\" font-style=\"italic\">paused</text>",
                bar_y - 14.0,
                (x2 - x1).max(1.0),
                BAR + 28.0,
                x1 + 3.0,
                bar_y - 3.0
            );
        }
        let x1 = x(row.start);
        let x2 = x(row.lease_end).max(x1 + 2.0);
        let dash = if row.end_known {
            ""
        } else {
            " stroke-dasharray=\"4 3\""
        };
        let _ = writeln!(
            svg,
            "<rect class=\"bar\" x=\"{x1:.1}\" y=\"{bar_y:.1}\" width=\"{:.1}\" height=\"{BAR}\" \
             fill=\"#3b7dd8\" stroke=\"#1f4f96\"{dash}><title>token {token}: {}</title></rect>",
            x2 - x1,
            describe(row)
        );
        let mut end_x = x2;
        if let Some(overrun) = row.overrun_end {
            let x3 = x(overrun).max(x2 + 2.0);
            let _ = writeln!(
                svg,
                "<rect class=\"overrun\" x=\"{x2:.1}\" y=\"{bar_y:.1}\" width=\"{:.1}\" \
                 height=\"{BAR}\" fill=\"url(#overrun)\" stroke=\"#b86e00\"><title>token \
                 {token}: expired while its holder still held on, until a later grant took the \
                 lock over</title></rect>",
                x3 - x2
            );
            end_x = x3;
        }
        // The token on its bar, or just before it when the bar is too short.
        let label = format!("{token}");
        let fits = x2 - x1 >= 7.5 * label.len() as f64 + 24.0;
        if fits {
            let _ = writeln!(
                svg,
                "<text class=\"token\" x=\"{:.1}\" y=\"{:.1}\" fill=\"#ffffff\" \
                 font-weight=\"bold\">{label}</text>",
                x1 + 5.0,
                bar_y + 15.0
            );
        } else {
            let _ = writeln!(
                svg,
                "<text class=\"token\" x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\">{label}</text>",
                end_x + 4.0,
                bar_y + 15.0
            );
        }
        let _ = writeln!(
            svg,
            "<text class=\"ending\" x=\"{end_x:.1}\" y=\"{:.1}\" text-anchor=\"end\" \
             fill=\"#333333\">{}</text>",
            bar_y + BAR + 13.0,
            ending_label(row)
        );
        for event in &row.marks {
            let mx = x(event.at_ms);
            let my = bar_y + BAR / 2.0;
            // The label above the bar, toward the middle of the chart.
            let (lx, anchor) = if mx > f64::midpoint(CHART_LEFT, CHART_RIGHT) {
                (mx + 9.0, "end")
            } else {
                (mx - 9.0, "start")
            };
            let key = event
                .key
                .as_deref()
                .map(|key| format!(" to {}", escape(key)))
                .unwrap_or_default();
            if event.what == What::WriteRefused {
                let _ = writeln!(
                    svg,
                    "<g class=\"refused\" data-token=\"{token}\"><title>write{key} with token \
                     {token} refused: a higher token had written</title>\
                     <circle cx=\"{mx:.1}\" cy=\"{my:.1}\" r=\"9\" fill=\"#d62728\" \
                     stroke=\"#ffffff\" stroke-width=\"1.5\"/><path d=\"M{:.1} {:.1}l8 8m0 -8l-8 \
                     8\" stroke=\"#ffffff\" stroke-width=\"2.2\"/><text x=\"{lx:.1}\" y=\"{:.1}\" \
                     text-anchor=\"{anchor}\" fill=\"#d62728\" font-weight=\"bold\">write with \
                     token {token} refused</text></g>",
                    mx - 4.0,
                    my - 4.0,
                    bar_y - 13.0
                );
            } else {
                let _ = writeln!(
                    svg,
                    "<g class=\"accepted\" data-token=\"{token}\"><title>write{key} with token \
                     {token} accepted</title><circle cx=\"{mx:.1}\" cy=\"{my:.1}\" r=\"9\" \
                     fill=\"#2ca02c\" stroke=\"#ffffff\" stroke-width=\"1.5\"/><path d=\"M{:.1} \
                     {:.1}l3 3.5l5.5 -7\" fill=\"none\" stroke=\"#ffffff\" stroke-width=\"2.2\"/>\
                     <text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" fill=\"#2ca02c\" \
                     font-weight=\"bold\">write with token {token} accepted</text></g>",
                    mx - 4.5,
                    my,
                    bar_y - 13.0
                );
            }
        }
        svg.push_str("</g>\n");
    }

    // The legend.
    let ly = axis_y + 48.0;
    let _ = write!(
        svg,
        "<g class=\"legend\">\n\
         <rect x=\"20\" y=\"{0:.1}\" width=\"26\" height=\"12\" fill=\"#3b7dd8\"/>\
         <text x=\"52\" y=\"{1:.1}\">lease: from its grant to its release or expiry</text>\n\
         <rect x=\"380\" y=\"{0:.1}\" width=\"26\" height=\"12\" fill=\"url(#overrun)\"/>\
         <text x=\"412\" y=\"{1:.1}\">expired, holder still held on: taken over</text>\n\
         <rect x=\"20\" y=\"{2:.1}\" width=\"26\" height=\"12\" fill=\"url(#paused)\" \
         stroke=\"#c8c8c8\"/><text x=\"52\" y=\"{3:.1}\">holder paused (events file)</text>\n\
         <circle cx=\"386\" cy=\"{4:.1}\" r=\"6\" fill=\"#2ca02c\"/><text x=\"398\" \
         y=\"{3:.1}\">write accepted</text>\n\
         <circle cx=\"530\" cy=\"{4:.1}\" r=\"6\" fill=\"#d62728\"/><text x=\"542\" \
         y=\"{3:.1}\">write refused: stale token (events file)</text>\n\
         </g>\n",
        ly,
        ly + 10.5,
        ly + 22.0,
        ly + 32.5,
        ly + 28.0,
    );
    let _ = writeln!(
        svg,
        "<text x=\"20\" y=\"{:.1}\" fill=\"#777777\" font-size=\"11\">The store records \
         grants and how each lease ended. It keeps no record of a refused write (a refusal \
         writes nothing)</text>\n<text x=\"20\" y=\"{:.1}\" fill=\"#777777\" \
         font-size=\"11\">nor of a pause: those come from the writers\u{2019} events file \
         (--events).</text>",
        ly + 56.0,
        ly + 70.0
    );
    svg.push_str("</svg>\n");
    Ok(svg)
}

fn describe(row: &Row<'_>) -> String {
    format!("pid {}, {}", row.entry.pid, row.entry.ending.as_str())
}

fn ending_label(row: &Row<'_>) -> &'static str {
    match row.entry.ending {
        Ending::Held => "held \u{2192}",
        Ending::Released => "released",
        Ending::Expired => "expired",
        Ending::TakenOver => "taken over",
        Ending::HolderDied if row.end_known => "holder died",
        Ending::HolderDied => "holder died (when?)",
        _ => "ended",
    }
}

/// A 1, 2 or 5 times a power of ten milliseconds, for at most about ten ticks.
fn tick_step(span_ms: i64) -> i64 {
    let mut base = 1i64;
    loop {
        for mult in [1, 2, 5] {
            let step = base * mult;
            if span_ms / step <= 10 {
                return step;
            }
        }
        base *= 10;
    }
}

/// `t` on the axis: in seconds, with as many decimals as the step needs.
fn tick_label(t_ms: i64, step_ms: i64) -> String {
    let decimals = match step_ms {
        s if s % 1000 == 0 => 0,
        s if s % 100 == 0 => 1,
        s if s % 10 == 0 => 2,
        _ => 3,
    };
    format!("{:.*} s", decimals, t_ms as f64 / 1000.0)
}

/// `YYYY-MM-DD HH:MM:SS.mmm UTC`: the same text whatever the time zone of the machine.
fn utc(at_ms: i64) -> String {
    let days = at_ms.div_euclid(86_400_000);
    let in_day = at_ms.rem_euclid(86_400_000);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} UTC",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// Text for XML: markup characters as entities, and characters XML 1.0 may not hold (controls,
/// U+FFFE, U+FFFF) written as `\u{..}`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(951_782_400_123), "2000-02-29 00:00:00.123 UTC");
        assert_eq!(utc(-1), "1969-12-31 23:59:59.999 UTC");
    }

    #[test]
    fn ticks() {
        assert_eq!(tick_step(1100), 200);
        assert_eq!(tick_step(10), 1);
        assert_eq!(tick_step(3_600_000), 500_000);
        assert_eq!(tick_label(400, 200), "0.4 s");
        assert_eq!(tick_label(4000, 1000), "4 s");
    }

    #[test]
    fn escapes() {
        assert_eq!(escape("a<b>&\"'\u{1}"), "a&lt;b&gt;&amp;&quot;&apos;\\u{1}");
    }
}
