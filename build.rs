//! Generates the C header `fencelock.h` into OUT_DIR with cbindgen. The committed copy lives at
//! include/fencelock.h; tests/header.rs fails when the two differ. The source tree is never
//! written here.
//!
//! Also gives the shared library its SONAME on Linux (see `soname`).

use std::env;
use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("fencelock.h");
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=build.rs");

    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{}", soname());
    }

    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable and valid");
    config.after_includes = Some(version_macros());
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/ffi/mod.rs"))
        .generate()
        .expect("cbindgen generates the header from src/ffi")
        .write_to_file(&out);
}

/// The version macros, from Cargo's version of the package.
fn version_macros() -> String {
    let version = env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    let part = |name: &str| env::var(name).expect("Cargo sets the version parts");
    format!(
        "\n/* The version of fencelock this header belongs to; fencelock_version() returns the\n   library's at run time. */\n\
         #define FENCELOCK_VERSION \"{version}\"\n\
         #define FENCELOCK_VERSION_MAJOR {}\n\
         #define FENCELOCK_VERSION_MINOR {}\n\
         #define FENCELOCK_VERSION_PATCH {}\n",
        part("CARGO_PKG_VERSION_MAJOR"),
        part("CARGO_PKG_VERSION_MINOR"),
        part("CARGO_PKG_VERSION_PATCH"),
    )
}

/// The SONAME of the shared library: `libfencelock.so.` and the part of the version that names
/// its ABI, by Cargo's compatibility rule: the major version from 1.0 on (1.4.2 gives
/// `libfencelock.so.1`), and major.minor before it (0.1.0 gives `libfencelock.so.0.1`), since a
/// 0.x minor release may break compatibility. cargo-c names 0.x libraries the same way.
/// scripts/install.sh reads the SONAME from the built library, so this is its one source.
fn soname() -> String {
    let part = |name: &str| env::var(name).expect("Cargo sets the version parts");
    let major = part("CARGO_PKG_VERSION_MAJOR");
    if major == "0" {
        format!("libfencelock.so.0.{}", part("CARGO_PKG_VERSION_MINOR"))
    } else {
        format!("libfencelock.so.{major}")
    }
}
