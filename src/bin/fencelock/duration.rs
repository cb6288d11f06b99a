//! Durations as people write and read them: `500ms`, `30s`, `1m30s`, `4.2s`, `3m10s`.
//!
//! Not humantime's: its grammar is wider (`5 s`, `5min`, `1w`, `5M` for months) and narrower
//! (`.25s`, `0.0001h` and fractions of more than about ten digits are refused), and it writes
//! `4s 250ms` where the tool says `4.2s`. Keeping this tool's inputs and messages would take a
//! check in front of it as long as the parser it would replace.

use std::time::Duration;

/// Units accepted after a number, longest spelling first so `ms` is not read as `m`.
const UNITS: [(&str, u128); 5] = [
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3600 * 1_000_000_000),
    ("d", 86_400 * 1_000_000_000),
];

/// The longest duration accepted: a year is beyond every limit of the library.
const LONGEST_NS: u128 = 366 * 86_400 * 1_000_000_000;

const EXPECTED: &str = "expected a number and a unit (ms, s, m, h, d), e.g. 500ms, 30s, 1m30s";

/// A lease time `fencelock run` can keep alive: [`fencelock::MIN_KEEP_ALIVE_TTL`] to
/// [`fencelock::MAX_TTL`], checked with the arguments so that nothing is written for a TTL the
/// keep-alive would refuse.
pub fn parse_keep_alive_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text)?;
    let (min, max) = (fencelock::MIN_KEEP_ALIVE_TTL, fencelock::MAX_TTL);
    if !(min..=max).contains(&ttl) {
        return Err(format!(
            "ttl {} is outside {} to {}",
            format_duration(ttl),
            format_duration(min),
            format_duration(max)
        ));
    }
    Ok(ttl)
}

/// How long `fencelock run` waits for a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Try once (`-w 0`, as `flock -w 0`).
    Once,
    /// Wait up to this long.
    For(Duration),
    /// Wait without a limit (`-w forever`).
    Forever,
}

/// Parses `-w`: a bare number of seconds as flock(1) takes it (`10`, `0.5`), a duration
/// (`500ms`, `5m`), or `forever`. Zero means try once.
pub fn parse_wait(text: &str) -> Result<Wait, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Wait::Forever);
    }
    let total = parse_seconds(text)
        .map_err(|err| format!("{err}; or a bare number of seconds (10, 0.5), or `forever`"))?;
    Ok(if total.is_zero() {
        Wait::Once
    } else {
        Wait::For(total)
    })
}

/// Parses `run --kill-after`: a bare number of seconds as timeout(1)'s `-k` takes it (`5`,
/// `0.5`) or a duration (`500ms`, `1m`). Zero, as in timeout(1), sends no SIGKILL.
pub fn parse_kill_after(text: &str) -> Result<Duration, String> {
    parse_seconds(text)
        .map_err(|err| format!("{err}; or a bare number of seconds (5, 0.5); 0 sends no SIGKILL"))
}

/// Parses `top --interval`: a bare number of seconds as top(1)'s `-d` takes it (`2`, `0.5`)
/// or a duration (`500ms`), from 10 ms (a shorter one would read the store without a pause).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval =
        parse_seconds(text).map_err(|err| format!("{err}; or a bare number of seconds"))?;
    if interval < Duration::from_millis(10) {
        return Err(format!("interval {text:?} is under the shortest, 10ms"));
    }
    Ok(interval)
}

/// A bare number of seconds (`10`, `0.5`) or a duration (`500ms`, `5m`), zero included.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let bare_seconds =
        !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if bare_seconds {
        parse_total(&format!("{trimmed}s"), text)
    } else {
        parse_total(trimmed, text)
    }
}

/// Parses one or more `<number><unit>` groups (`30s`, `1.5s`, `1m30s`). Zero, negative or
/// unit-less durations are refused with a message that says what is expected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let total = parse_total(text.trim(), text)?;
    if total.is_zero() {
        return Err(format!(
            "duration {text:?} is zero: a duration must be greater than zero"
        ));
    }
    Ok(total)
}

/// `trimmed` as a sum of `<number><unit>` groups, zero included; `text` is what the user
/// wrote, for the messages.
fn parse_total(trimmed: &str, text: &str) -> Result<Duration, String> {
    if trimmed.is_empty() {
        return Err(format!("empty duration: {EXPECTED}"));
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "negative duration {text:?}: a duration must be greater than zero"
        ));
    }
    let mut rest = trimmed;
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let Some((unit, unit_ns)) = UNITS.iter().find(|(unit, _)| after.starts_with(unit)) else {
            return Err(format!("invalid duration {text:?}: {EXPECTED}"));
        };
        total_ns = total_ns
            .checked_add(
                scale(number, *unit_ns)
                    .ok_or_else(|| format!("invalid duration {text:?}: {EXPECTED}"))?,
            )
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        if total_ns > LONGEST_NS {
            return Err(format!("duration {text:?} is too long (at most 366d)"));
        }
        rest = &after[unit.len()..];
    }
    Ok(Duration::from_nanos(
        u64::try_from(total_ns).expect("bounded by LONGEST_NS"),
    ))
}

/// `number` (digits with at most one decimal point) times `unit_ns`, in whole nanoseconds.
fn scale(number: &str, unit_ns: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    if !whole
        .bytes()
        .chain(fraction.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // Digits past the nanosecond cannot matter; cutting them keeps the arithmetic in range.
    let fraction = &fraction[..fraction.len().min(18)];
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction_ns = if fraction.is_empty() {
        0
    } else {
        let digits: u128 = fraction.parse().ok()?;
        digits * unit_ns / 10u128.pow(u32::try_from(fraction.len()).ok()?)
    };
    whole.checked_mul(unit_ns)?.checked_add(fraction_ns)
}

/// A short, human-readable form: `850ms`, `4.2s`, `42s`, `3m10s`, `2h5m`, `3d4h`. Rounds down.
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let secs = duration.as_secs();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        let tenths = ms / 100;
        format!("{}.{}s", tenths / 10, tenths % 10)
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        pair(secs / 60, "m", secs % 60, "s")
    } else if secs < 86_400 {
        pair(secs / 3600, "h", secs % 3600 / 60, "m")
    } else {
        pair(secs / 86_400, "d", secs % 86_400 / 3600, "h")
    }
}

fn pair(major: u64, major_unit: &str, minor: u64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit}{minor}{minor_unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1d"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration(".25s"), Ok(ms(250)));
        assert_eq!(parse_duration(" 10s "), Ok(ms(10_000)));
    }

    #[test]
    fn refuses_bad_forms_with_a_reason() {
        for bad in ["abc", "30", "s", "1x", "1.2.3s", "1..s", ".s", "", "5 s"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(
                err.contains("expected a number and a unit") || err.contains("empty"),
                "{bad}: {err}"
            );
        }
        assert!(parse_duration("0s").unwrap_err().contains("zero"));
        assert!(parse_duration("0ms0s").unwrap_err().contains("zero"));
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("400d").unwrap_err().contains("too long"));
        assert!(parse_duration("99999999999999999999999999999999999999h")
            .unwrap_err()
            .contains("invalid"));
    }

    #[test]
    fn waits_take_bare_seconds_durations_zero_and_forever() {
        let ms = Duration::from_millis;
        assert_eq!(parse_wait("10"), Ok(Wait::For(ms(10_000))));
        assert_eq!(parse_wait("0.5"), Ok(Wait::For(ms(500))));
        assert_eq!(parse_wait(".25"), Ok(Wait::For(ms(250))));
        assert_eq!(parse_wait("5m"), Ok(Wait::For(ms(300_000))));
        assert_eq!(parse_wait("300ms"), Ok(Wait::For(ms(300))));
        assert_eq!(parse_wait("0"), Ok(Wait::Once));
        assert_eq!(parse_wait("0.0"), Ok(Wait::Once));
        assert_eq!(parse_wait("0s"), Ok(Wait::Once));
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("FOREVER"), Ok(Wait::Forever));
        for bad in ["", "abc", "-1", "1.2.3", "10 s", "never"] {
            let err = parse_wait(bad).expect_err(bad);
            assert!(err.contains("bare number of seconds"), "{bad}: {err}");
        }
        assert!(parse_wait("400d").unwrap_err().contains("too long"));
    }

    #[test]
    fn kill_after_takes_bare_seconds_and_durations_and_zero_for_none() {
        let ms = Duration::from_millis;
        assert_eq!(parse_kill_after("5"), Ok(ms(5_000)));
        assert_eq!(parse_kill_after("0.5"), Ok(ms(500)));
        assert_eq!(parse_kill_after("1m"), Ok(ms(60_000)));
        assert_eq!(parse_kill_after("0"), Ok(Duration::ZERO));
        for bad in ["", "soon", "-1", "forever", "1.2.3"] {
            let err = parse_kill_after(bad).expect_err(bad);
            assert!(err.contains("0 sends no SIGKILL"), "{bad}: {err}");
        }
    }

    #[test]
    fn formats_short_and_readable() {
        let ms = Duration::from_millis;
        assert_eq!(format_duration(ms(0)), "0ms");
        assert_eq!(format_duration(ms(850)), "850ms");
        assert_eq!(format_duration(ms(4_250)), "4.2s");
        assert_eq!(format_duration(ms(42_900)), "42s");
        assert_eq!(format_duration(ms(190_000)), "3m10s");
        assert_eq!(format_duration(ms(180_000)), "3m");
        assert_eq!(format_duration(ms(7_500_000)), "2h5m");
        assert_eq!(format_duration(ms(273_600_000)), "3d4h");
    }
}
