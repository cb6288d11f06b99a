//! Every public type of the library, and every public method of one, carries an `# Examples`
//! section (a doc test, which `cargo test --doc` compiles and runs), and every public method that
//! returns a `Result` an `# Errors` section, as fd-lock documents each method. Read from the
//! source: the rustdoc JSON that would tell it is nightly-only.
//!
//! The public surface is what src/lib.rs re-exports (but not what it re-exports `#[doc(hidden)]`):
//! each type named there, found in its module's file, and the `pub fn`s of its inherent `impl`
//! blocks. The parser relies on rustfmt's layout (an item's doc comment directly above it, an
//! `impl` block from `impl` at the start of a line to the `}` that starts one).

use std::path::{Path, PathBuf};

/// A public item whose doc comment was read.
struct Item {
    what: String,
    doc: String,
    returns_result: bool,
}

/// The doc comment and attributes directly above line `at`.
fn doc_above(lines: &[&str], at: usize) -> String {
    let mut start = at;
    while start > 0 {
        let line = lines[start - 1].trim_start();
        if line.starts_with("///") || line.starts_with("#[") {
            start -= 1;
        } else {
            break;
        }
    }
    lines[start..at].join("\n")
}

/// The file of module `path` (`rules::info`) under src/.
fn module_file(root: &Path, path: &str) -> PathBuf {
    let base = root.join("src").join(path.replace("::", "/"));
    let file = base.with_extension("rs");
    if file.exists() {
        file
    } else {
        base.join("mod.rs")
    }
}

/// The types src/lib.rs re-exports, with the module each comes from: (module, name).
fn exported_types(lib: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = lib.lines().collect();
    let mut types = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("pub use ") {
            i += 1;
            continue;
        }
        let hidden = i > 0 && lines[i - 1].trim() == "#[doc(hidden)]";
        let mut statement = String::new();
        while i < lines.len() {
            statement.push_str(lines[i].trim());
            statement.push(' ');
            i += 1;
            if statement.trim_end().ends_with(';') {
                break;
            }
        }
        if hidden {
            continue;
        }
        let path = statement
            .trim_start_matches("pub use ")
            .trim_end()
            .trim_end_matches(';');
        let (module, names) = match path.split_once("::{") {
            Some((module, names)) => (module, names.trim_end_matches('}').to_string()),
            None => {
                let (module, name) = path.rsplit_once("::").expect("a path with a module");
                (module, name.to_string())
            }
        };
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            // Constants (`MAX_TTL`) are not types.
            if name.chars().any(char::is_lowercase) {
                types.push((module.to_string(), name.to_string()));
            }
        }
    }
    types
}

/// The type `name` and the `pub fn`s of its inherent impl blocks in `source`.
fn items_of(source: &str, name: &str) -> Vec<Item> {
    let lines: Vec<&str> = source.lines().collect();
    let mut items = Vec::new();
    let declares = |line: &str| {
        ["struct", "enum", "trait", "type"].iter().any(|kind| {
            line.strip_prefix(&format!("pub {kind} {name}"))
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
    };
    for (at, line) in lines.iter().enumerate() {
        if declares(line) {
            items.push(Item {
                what: format!("type {name}"),
                doc: doc_above(&lines, at),
                returns_result: false,
            });
        }
    }
    let mut in_impl = false;
    for (at, line) in lines.iter().enumerate() {
        if line.starts_with("impl") {
            let header = line.trim_end_matches('{').trim();
            let target = header.split_whitespace().last().unwrap_or_default();
            in_impl = !header.contains(" for ")
                && (target == name || target.starts_with(&format!("{name}<")));
        } else if *line == "}" {
            in_impl = false;
        } else if in_impl {
            if let Some(rest) = line.strip_prefix("    pub fn ") {
                let method = rest.split(['(', '<']).next().unwrap_or_default();
                let signature: String = lines[at..]
                    .iter()
                    .take_while(|l| !l.trim_end().ends_with('{'))
                    .chain(lines[at..].iter().find(|l| l.trim_end().ends_with('{')))
                    .copied()
                    .collect();
                items.push(Item {
                    what: format!("{name}::{method}"),
                    doc: doc_above(&lines, at),
                    returns_result: signature.contains("-> Result<"),
                });
            }
        }
    }
    items
}

#[test]
fn every_public_type_and_method_has_an_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let types = exported_types(&lib);
    let mut missing = Vec::new();
    let mut methods = 0;
    for (module, name) in &types {
        let file = module_file(root, module);
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|err| panic!("{}: {err}", file.display()));
        let items = items_of(&source, name);
        if !items.iter().any(|item| item.what.starts_with("type ")) {
            missing.push(format!("{name}: no declaration found in {shown}"));
        }
        for item in &items {
            methods += usize::from(!item.what.starts_with("type "));
            if !item.doc.contains("/// # Examples") {
                missing.push(format!("{}: no `# Examples` ({shown})", item.what));
            }
            if item.returns_result && !item.doc.contains("/// # Errors") {
                missing.push(format!("{}: returns a Result, no `# Errors`", item.what));
            }
        }
    }
    // The parser must find the surface at all, or it would pass by reading nothing.
    assert!(
        types.iter().any(|(_, name)| name == "Store") && types.iter().any(|(_, n)| n == "Holder"),
        "src/lib.rs's re-exports were not read: {types:?}"
    );
    assert!(methods >= 40, "only {methods} public methods found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
