"""Builds libfencelock with cargo and ships it inside the package; metadata is in pyproject.toml.

Building the package runs `cargo rustc --profile dist --lib --features capi --crate-type
cdylib,staticlib` (the C library, the release build, stripped, as make install builds it) in
the crate's root: `rust/` inside an sdist, else the repository root two levels above this file,
or $FENCELOCK_SOURCE_DIR. The target directory comes from `cargo metadata` (so CARGO_TARGET_DIR
and .cargo/config are honoured); libfencelock.so is copied next to the package's modules.
$FENCELOCK_FEATURES adds cargo features: FENCELOCK_FEATURES=etcd builds the etcd backend.

The wheel is tagged py3-none-<platform>: it carries native code but no Python extension, so any
Python 3 fits. With FENCELOCK_GLIBC=2.17 (say) the library is linked against that glibc version
by cargo-zigbuild (`pip install ziglang cargo-zigbuild`) and the wheel is tagged
manylinux_2_17_<arch>, which a package index accepts; `auditwheel show` confirms the tag.

`python -m build --sdist` puts the crate (`cargo package`: its sources, Cargo.toml, Cargo.lock)
in the sdist under rust/, so that the sdist builds on any machine with cargo.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
LIBRARY = "libfencelock.so"
SOURCE_ENV = "FENCELOCK_SOURCE_DIR"
GLIBC_ENV = "FENCELOCK_GLIBC"
FEATURES_ENV = "FENCELOCK_FEATURES"
PROFILE = "dist"  # Cargo.toml: the release build without debug information, stripped
SDIST_CRATE = "rust"  # where an sdist carries the crate


def repo_root() -> Path:
    explicit = os.environ.get(SOURCE_ENV)
    if explicit:
        root = Path(explicit).resolve()
    elif (HERE / SDIST_CRATE / "Cargo.toml").is_file():
        root = HERE / SDIST_CRATE
    else:
        root = HERE.parent.parent
    manifest = root / "Cargo.toml"
    if not manifest.is_file() or 'name = "fencelock"' not in manifest.read_text():
        raise SystemExit(
            f"fencelock: no fencelock Cargo.toml in {root}. Build from the repository checkout "
            f"(pip install ./bindings/python), from an sdist, or set ${SOURCE_ENV} to the "
            f"repository root."
        )
    return root


def glibc_target() -> tuple[str, str] | None:
    """(glibc version, architecture) of a manylinux build, from $FENCELOCK_GLIBC; None without."""
    wanted = os.environ.get(GLIBC_ENV)
    if not wanted:
        return None
    if not re.fullmatch(r"2\.[0-9]+", wanted):
        raise SystemExit(f"fencelock: ${GLIBC_ENV} must be a glibc version such as 2.17, not {wanted!r}")
    arch = platform.machine()
    if arch not in ("x86_64", "aarch64"):
        raise SystemExit(f"fencelock: ${GLIBC_ENV} is supported on x86_64 and aarch64, not {arch}")
    return wanted, arch


def cargo(root: Path, *args: str, capture: bool = False) -> str:
    return run(root, [os.environ.get("CARGO", "cargo"), *args], capture=capture)


def run(root: Path, command: list[str], capture: bool = False) -> str:
    try:
        done = subprocess.run(
            command, cwd=root, check=True, text=True, stdout=subprocess.PIPE if capture else None
        )
    except FileNotFoundError as err:
        raise SystemExit(f"fencelock: cargo is needed to build the native library ({err})") from err
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"fencelock: `{' '.join(command)}` failed with status {err.returncode}") from err
    return done.stdout or ""


def metadata(root: Path) -> dict:
    return json.loads(cargo(root, "metadata", "--format-version", "1", "--no-deps", capture=True))


def target_directory(root: Path) -> Path:
    return Path(metadata(root)["target_directory"])


def capi_args() -> list[str]:
    """The C library's build: the capi feature and $FENCELOCK_FEATURES (e.g. ``etcd``), and the
    crate type, which Cargo.toml leaves to the command (a Rust user builds no C library)."""
    features = " ".join(["capi", os.environ.get(FEATURES_ENV, "").strip()]).strip()
    # Both crate types, as make install and scripts/go-lib.sh build them: one build serves all.
    return ["--lib", "--features", features, "--crate-type", "cdylib,staticlib"]


def build_library() -> Path:
    root = repo_root()
    glibc = glibc_target()
    if glibc is None:
        cargo(root, "rustc", "--profile", PROFILE, *capi_args())
        built = target_directory(root) / PROFILE / LIBRARY
    else:
        version, arch = glibc
        if shutil.which("cargo-zigbuild") is None:
            raise SystemExit(
                f"fencelock: ${GLIBC_ENV}={version} builds with cargo-zigbuild, which is not on "
                f"PATH: pip install ziglang cargo-zigbuild"
            )
        triple = f"{arch}-unknown-linux-gnu"
        # `cargo zigbuild` has no --crate-type; cargo-zigbuild's own rustc command has.
        command = ["cargo-zigbuild", "rustc", "--profile", PROFILE, "--target", f"{triple}.{version}"]
        run(root, [*command, *capi_args()])
        built = target_directory(root) / triple / PROFILE / LIBRARY
    if not built.is_file():
        raise SystemExit(f"fencelock: cargo finished but {built} does not exist")
    return built


class BuildPyWithLibrary(build_py):
    """build_py that also builds the Rust library and puts it inside the package."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            # pip builds in the source tree, whose build/ keeps the files of earlier builds: a
            # module since removed or renamed in src/ would be shipped again.
            shutil.rmtree(Path(self.build_lib) / "fencelock", ignore_errors=True)
        super().run()
        built = build_library()
        if getattr(self, "editable_mode", False):
            # An editable install imports straight from src/ (the copy is git-ignored).
            destination = HERE / "src" / "fencelock"
        else:
            destination = Path(self.build_lib) / "fencelock"
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, destination / LIBRARY)


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-<platform>: native code, no CPython extension."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        glibc = glibc_target()
        if glibc is not None:
            version, arch = glibc
            plat = f"manylinux_{version.replace('.', '_')}_{arch}"
        return "py3", "none", plat


class SdistWithCrate(sdist):
    """sdist that also carries the crate, as `cargo package` lays it out, under rust/."""

    def make_release_tree(self, base_dir: str, files) -> None:
        super().make_release_tree(base_dir, files)
        root = repo_root()
        cargo(root, "package", "--no-verify", "--allow-dirty", "--quiet")
        crate_metadata = metadata(root)
        version = crate_metadata["packages"][0]["version"]
        crate = Path(crate_metadata["target_directory"]) / "package" / f"fencelock-{version}.crate"
        destination = Path(base_dir) / SDIST_CRATE
        with tarfile.open(crate) as archive:
            for member in archive.getmembers():
                # Every member is under fencelock-VERSION/; refuse anything else.
                top, _, rest = member.name.partition("/")
                if top != f"fencelock-{version}" or not rest or ".." in Path(rest).parts:
                    raise SystemExit(f"fencelock: unexpected path {member.name!r} in {crate}")
                if not (member.isfile() or member.isdir()):
                    raise SystemExit(f"fencelock: {member.name!r} in {crate} is not a plain file")
                member.name = rest
                archive.extract(member, destination)


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel, "sdist": SdistWithCrate},
)
