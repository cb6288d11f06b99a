//! The committed C header is the one cbindgen generates, and its version agrees with Cargo's
//! and the library's.
//!
//! build.rs generates the header into `OUT_DIR` on every build. To update the committed copies
//! (include/fencelock.h and the Go module's bindings/go/fencelock.h):
//!     `FENCELOCK_UPDATE_HEADER=1` cargo test --features capi --test header

use std::ffi::CStr;
use std::path::Path;

const FRESH: &str = include_str!(concat!(env!("OUT_DIR"), "/fencelock.h"));
const COMMITTED_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include/fencelock.h");
/// The Go module's copy, so that the module builds once fetched (bindings/go/cgo.go).
const GO_COPY_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bindings/go/fencelock.h");

#[test]
fn committed_header_matches_a_fresh_generation() {
    let committed = committed_copy(COMMITTED_PATH);
    if committed != FRESH {
        let line = committed
            .lines()
            .zip(FRESH.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || committed.lines().count().min(FRESH.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "include/fencelock.h is stale (first difference at line {line}); regenerate it with \
             FENCELOCK_UPDATE_HEADER=1 cargo test --features capi --test header"
        );
    }
}

#[test]
fn go_module_copy_matches_a_fresh_generation() {
    let copy = committed_copy(GO_COPY_PATH);
    assert!(
        copy == FRESH,
        "bindings/go/fencelock.h is stale; regenerate it with \
         FENCELOCK_UPDATE_HEADER=1 cargo test --features capi --test header"
    );
}

/// The committed copy at `path`, first overwritten with a fresh generation when
/// `FENCELOCK_UPDATE_HEADER` is set.
fn committed_copy(path: &str) -> String {
    if std::env::var_os("FENCELOCK_UPDATE_HEADER").is_some() {
        std::fs::write(path, FRESH).unwrap_or_else(|err| panic!("write {path}: {err}"));
    }
    std::fs::read_to_string(Path::new(path)).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// The value of `#define NAME value` in the header.
fn define<'a>(header: &'a str, name: &str) -> &'a str {
    header
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
            rest.starts_with(' ').then(|| rest.trim())
        })
        .unwrap_or_else(|| panic!("the header defines {name}"))
}

#[test]
fn version_macros_cargo_and_runtime_agree() {
    let cargo = env!("CARGO_PKG_VERSION");
    assert_eq!(define(FRESH, "FENCELOCK_VERSION"), format!("\"{cargo}\""));
    let parts: Vec<&str> = cargo.split(['.', '-', '+']).take(3).collect();
    assert_eq!(define(FRESH, "FENCELOCK_VERSION_MAJOR"), parts[0]);
    assert_eq!(define(FRESH, "FENCELOCK_VERSION_MINOR"), parts[1]);
    assert_eq!(define(FRESH, "FENCELOCK_VERSION_PATCH"), parts[2]);
    let number: Vec<i32> = parts.iter().map(|p| p.parse().expect("a number")).collect();
    let number = number[0] * 1_000_000 + number[1] * 1000 + number[2];
    assert_eq!(
        define(FRESH, "FENCELOCK_VERSION_NUMBER"),
        number.to_string()
    );
    assert_eq!(fencelock::ffi::fencelock_version_number(), number);
    // SAFETY: fencelock_version returns a static NUL-terminated string.
    let runtime = unsafe { CStr::from_ptr(fencelock::ffi::fencelock_version()) };
    assert_eq!(runtime.to_str().expect("UTF-8"), cargo);
    assert_eq!(fencelock::VERSION, cargo);
}

#[test]
fn status_macros_match_the_engine_codes() {
    use fencelock::Status;
    for (name, status) in [
        ("FENCELOCK_OK", Status::Ok),
        ("FENCELOCK_LOCKED", Status::Locked),
        ("FENCELOCK_STALE_TOKEN", Status::StaleToken),
        ("FENCELOCK_LOCK_LOST", Status::LockLost),
        ("FENCELOCK_TIMEOUT", Status::Timeout),
        ("FENCELOCK_INVALID_ARGUMENT", Status::InvalidArgument),
        ("FENCELOCK_NULL_POINTER", Status::NullPointer),
        ("FENCELOCK_IO", Status::Io),
        ("FENCELOCK_CORRUPT", Status::Corrupt),
        ("FENCELOCK_NOT_A_STORE", Status::NotAStore),
        (
            "FENCELOCK_INCOMPATIBLE_VERSION",
            Status::IncompatibleVersion,
        ),
        ("FENCELOCK_IN_USE", Status::InUse),
        ("FENCELOCK_FORKED", Status::Forked),
        ("FENCELOCK_STORAGE", Status::Storage),
        ("FENCELOCK_NOT_FOUND", Status::NotFound),
        ("FENCELOCK_PANIC", Status::Panic),
        ("FENCELOCK_CANCELLED", Status::Cancelled),
        ("FENCELOCK_REPLACED", Status::Replaced),
    ] {
        assert_eq!(define(FRESH, name), (status as i32).to_string(), "{name}");
    }
}
