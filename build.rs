//! With the `capi` feature (the C library; a Rust user's build has neither it nor cbindgen):
//! generates the C header `fencelock.h` into `OUT_DIR` with cbindgen. The committed copy lives at
//! include/fencelock.h; tests/header.rs fails when the two differ. Also writes the version
//! number of the header's `FENCELOCK_VERSION_NUMBER` into `OUT_DIR` for the library's
//! `fencelock_version_number()`, so that the two cannot differ. The source tree is never written
//! here.
//!
//! Also gives the shared library its SONAME on Linux (see `soname`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "capi")]
    capi::run();
}

/// Only with the `capi` feature: cbindgen is an optional build-dependency.
#[cfg(feature = "capi")]
mod capi {
    use std::env;
    use std::path::PathBuf;

    /// The C library's part: its SONAME, its version number and its header.
    pub fn run() {
        let crate_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
        let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
        let out = out_dir.join("fencelock.h");
        println!("cargo:rerun-if-changed=src/ffi");
        println!("cargo:rerun-if-changed=cbindgen.toml");

        // For every link of the capi build, not only the cdylib's: Cargo.toml declares no
        // cdylib (the crate type comes from `cargo rustc --crate-type`), and cargo warns about
        // `rustc-cdylib-link-arg` in a package without one. The test and tool executables of a
        // capi build carry the SONAME too, which the dynamic linker ignores in an executable.
        if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
            println!("cargo:rustc-link-arg=-Wl,-soname,{}", soname());
        }

        // The number fencelock_version_number() returns (src/ffi/mod.rs), as the header's macro.
        std::fs::write(out_dir.join("version_number"), version_number().to_string())
            .expect("OUT_DIR is writable");

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
        let (major, minor, patch) = version_parts();
        let number = version_number();
        format!(
        "\n/* The version of fencelock this header belongs to; fencelock_version() returns the\n   library's at run time, fencelock_version_number() its FENCELOCK_VERSION_NUMBER. */\n\
         #define FENCELOCK_VERSION \"{version}\"\n\
         #define FENCELOCK_VERSION_MAJOR {major}\n\
         #define FENCELOCK_VERSION_MINOR {minor}\n\
         #define FENCELOCK_VERSION_PATCH {patch}\n\
         /* MAJOR * 1000000 + MINOR * 1000 + PATCH, as SQLITE_VERSION_NUMBER: 1002003 is 1.2.3. */\n\
         #define FENCELOCK_VERSION_NUMBER {number}\n\
         /* Whether this header is of version major.minor.patch or later, also in #if, as\n   CURL_AT_LEAST_VERSION. */\n\
         #define FENCELOCK_AT_LEAST_VERSION(major, minor, patch) \\\n    \
         (FENCELOCK_VERSION_NUMBER >= (major) * 1000000 + (minor) * 1000 + (patch))\n",
    )
    }

    /// Cargo's major, minor and patch version of the package.
    fn version_parts() -> (u32, u32, u32) {
        let part = |name: &str| {
            env::var(name)
                .expect("Cargo sets the version parts")
                .parse::<u32>()
                .expect("a version part is a number")
        };
        (
            part("CARGO_PKG_VERSION_MAJOR"),
            part("CARGO_PKG_VERSION_MINOR"),
            part("CARGO_PKG_VERSION_PATCH"),
        )
    }

    /// The version as one number, MAJOR * 1000000 + MINOR * 1000 + PATCH: the header's
    /// `FENCELOCK_VERSION_NUMBER` and the library's `fencelock_version_number()`. The build fails
    /// for a version the number cannot hold (a minor or patch version above 999, or a major version
    /// that overflows a C int), rather than give two versions one number.
    fn version_number() -> i32 {
        let (major, minor, patch) = version_parts();
        assert!(
            minor < 1000 && patch < 1000,
            "FENCELOCK_VERSION_NUMBER holds minor and patch versions up to 999"
        );
        major
            .checked_mul(1_000_000)
            .and_then(|n| n.checked_add(minor * 1000 + patch))
            .and_then(|n| i32::try_from(n).ok())
            .expect("FENCELOCK_VERSION_NUMBER fits a C int")
    }

    /// The SONAME of the shared library: `libfencelock.so.` and the part of the version that names
    /// its ABI, by Cargo's compatibility rule: the major version from 1.0 on (1.4.2 gives
    /// `libfencelock.so.1`), and major.minor before it (0.1.0 gives `libfencelock.so.0.1`), since a
    /// 0.x minor release may break compatibility. cargo-c names 0.x libraries the same way.
    /// scripts/install.sh reads the SONAME from the built library, so this is its one source.
    fn soname() -> String {
        let (major, minor, _) = version_parts();
        if major == 0 {
            format!("libfencelock.so.0.{minor}")
        } else {
            format!("libfencelock.so.{major}")
        }
    }
}
