"""Builds libfencelock with cargo and ships it inside the package; metadata is in pyproject.toml.

`pip install ./bindings/python` runs `cargo build --release --lib` in the repository root (two
levels above this file, or $FENCELOCK_SOURCE_DIR), finds the target directory through
`cargo metadata` (so CARGO_TARGET_DIR and .cargo/config are honoured) and copies
libfencelock.so next to the package's modules. The wheel is tagged for the platform
(py3-none-<platform>): it carries native code but no Python extension, so any Python 3 fits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
LIBRARY = "libfencelock.so"
SOURCE_ENV = "FENCELOCK_SOURCE_DIR"


def repo_root() -> Path:
    explicit = os.environ.get(SOURCE_ENV)
    root = Path(explicit).resolve() if explicit else HERE.parent.parent
    manifest = root / "Cargo.toml"
    if not manifest.is_file() or 'name = "fencelock"' not in manifest.read_text():
        raise SystemExit(
            f"fencelock: no fencelock Cargo.toml in {root}. Build from the repository checkout "
            f"(pip install ./bindings/python) or set ${SOURCE_ENV} to the repository root."
        )
    return root


def cargo(root: Path, *args: str, capture: bool = False) -> str:
    command = [os.environ.get("CARGO", "cargo"), *args]
    try:
        done = subprocess.run(
            command, cwd=root, check=True, text=True, stdout=subprocess.PIPE if capture else None
        )
    except FileNotFoundError as err:
        raise SystemExit(f"fencelock: cargo is needed to build the native library ({err})") from err
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"fencelock: `{' '.join(command)}` failed with status {err.returncode}") from err
    return done.stdout or ""


def build_library() -> Path:
    root = repo_root()
    cargo(root, "build", "--release", "--lib")
    metadata = json.loads(cargo(root, "metadata", "--format-version", "1", "--no-deps", capture=True))
    built = Path(metadata["target_directory"]) / "release" / LIBRARY
    if not built.is_file():
        raise SystemExit(f"fencelock: cargo finished but {built} does not exist")
    return built


class BuildPyWithLibrary(build_py):
    """build_py that also builds the Rust library and puts it inside the package."""

    def run(self) -> None:
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
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
)
