//! Shaping output: aligned tables, colour on terminals only, names quoted for terminals, byte
//! strings in JSON.

use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write as _};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{Map, Value};

/// Whether to colour standard output: only on a terminal, and never when `NO_COLOR` is set to
/// a non-empty value (<https://no-color.org>).
pub fn colour_stdout() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Writes `fencelock: MESSAGE` and a newline to stderr: every message of the tool goes through
/// here. A failed write is ignored (`eprintln!` would panic, exit 101): a log on a full disk or
/// a closed pipe must neither change the documented status nor stop the work at hand, such as
/// a watcher that tells of a lost lease and then signals the command.
pub fn say(message: impl fmt::Display) {
    let _ = writeln!(io::stderr().lock(), "fencelock: {message}");
}

/// ANSI colours used for lock states.
#[derive(Debug, Clone, Copy)]
pub enum Colour {
    Green,
    Yellow,
    Red,
    Dim,
}

impl Colour {
    fn code(self) -> &'static str {
        match self {
            Colour::Green => "32",
            Colour::Yellow => "33",
            Colour::Red => "31",
            Colour::Dim => "2",
        }
    }
}

/// One table cell: its text and an optional colour.
pub struct Cell {
    pub text: String,
    pub colour: Option<Colour>,
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell { text, colour: None }
    }
}

/// Renders rows under `headers`, columns left-aligned and padded to the widest cell. Padding is
/// computed on the plain text, so colour codes never shift the columns.
pub fn table(headers: &[&str], rows: &[Vec<Cell>], colour: bool) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.text.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<(&str, Option<Colour>)>| {
        let last = cells.len() - 1;
        for (i, (text, cell_colour)) in cells.into_iter().enumerate() {
            match cell_colour.filter(|_| colour) {
                Some(c) => {
                    let _ = write!(out, "\x1b[{}m{text}\x1b[0m", c.code());
                }
                None => out.push_str(text),
            }
            if i < last {
                let pad = widths[i] - text.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    };
    line(headers.iter().map(|h| (*h, None)).collect());
    for row in rows {
        line(row.iter().map(|c| (c.text.as_str(), c.colour)).collect());
    }
    out
}

/// `text` as a terminal may show it: unchanged when it holds no control character, `"` or
/// `\`; otherwise in double quotes with C escapes, as git quotes paths: `\n`, `\t` and the
/// like, `\"`, `\\`, and each byte of any other control character in octal (`\033` for
/// ESC, `\302\233` for U+009B). A name can then neither run escape sequences on the
/// reader's terminal nor pass for another name.
pub fn quote_for_terminal(text: &str) -> String {
    if !text
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return text.to_owned();
    }
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\x07' => quoted.push_str("\\a"),
            '\x08' => quoted.push_str("\\b"),
            '\t' => quoted.push_str("\\t"),
            '\n' => quoted.push_str("\\n"),
            '\x0b' => quoted.push_str("\\v"),
            '\x0c' => quoted.push_str("\\f"),
            '\r' => quoted.push_str("\\r"),
            c if c.is_control() => {
                let mut utf8 = [0; 4];
                for byte in c.encode_utf8(&mut utf8).bytes() {
                    let _ = write!(quoted, "\\{byte:03o}");
                }
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// Inserts a byte string into a JSON object: as `field` when it is UTF-8 text, otherwise as
/// `field_base64` (standard alphabet, padded). Exactly one of the two is present.
pub fn insert_bytes(object: &mut Map<String, Value>, field: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => object.insert(field.to_owned(), Value::String(text.to_owned())),
        Err(_) => object.insert(
            format!("{field}_base64"),
            Value::String(STANDARD.encode(bytes)),
        ),
    };
}

/// A byte count for people: `812 B`, `1.5 KiB`, `3.0 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    #[allow(clippy::cast_precision_loss)] // one decimal is shown
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_not_utf8_are_standard_padded_base64() {
        let mut object = Map::new();
        insert_bytes(&mut object, "key", b"plain");
        insert_bytes(&mut object, "value", &[0xff, 0xfe, 0x00, 0x66]);
        assert_eq!(
            Value::Object(object),
            serde_json::json!({"key": "plain", "value_base64": "//4AZg=="})
        );
    }

    #[test]
    fn table_aligns_on_plain_text_even_when_coloured() {
        let rows = vec![vec![
            Cell::from("a-long-name".to_owned()),
            Cell {
                text: "held".to_owned(),
                colour: Some(Colour::Green),
            },
            Cell::from("7".to_owned()),
        ]];
        let plain = table(&["NAME", "STATE", "TOKEN"], &rows, false);
        assert_eq!(plain, "NAME         STATE  TOKEN\na-long-name  held   7\n");
        let coloured = table(&["NAME", "STATE", "TOKEN"], &rows, true);
        assert_eq!(
            coloured,
            "NAME         STATE  TOKEN\na-long-name  \x1b[32mheld\x1b[0m   7\n"
        );
    }

    #[test]
    fn names_are_quoted_only_when_a_terminal_could_misread_them() {
        assert_eq!(quote_for_terminal("nightly-export"), "nightly-export");
        assert_eq!(quote_for_terminal("café ünïcode"), "café ünïcode");
        assert_eq!(quote_for_terminal("\x1b[31mred\x07"), r#""\033[31mred\a""#);
        assert_eq!(quote_for_terminal("a\u{9b}b\x7f"), r#""a\302\233b\177""#);
        assert_eq!(quote_for_terminal("say \"hi\"\\"), r#""say \"hi\"\\""#);
        assert_eq!(quote_for_terminal("a\nb\tc"), r#""a\nb\tc""#);
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(format_size(812), "812 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(3 << 20), "3.0 MiB");
    }
}
