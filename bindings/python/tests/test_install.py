"""The installed package: imported from site-packages with its own library, platform wheel."""

from __future__ import annotations

import os
import shutil
from importlib import metadata
from pathlib import Path

from conftest import PACKAGE_SOURCE, run

import fencelock


def test_imported_from_the_installation_not_the_source_tree():
    package_dir = Path(fencelock.__file__).resolve().parent
    if os.environ.get("FENCELOCK_ALLOW_SOURCE_IMPORT") != "1":
        assert PACKAGE_SOURCE not in package_dir.parents, f"imported from the source tree: {package_dir}"
    if not os.environ.get("FENCELOCK_LIBRARY"):
        assert Path(fencelock.library_path()) == package_dir / "libfencelock.so"
        assert (package_dir / "libfencelock.so").is_file()
    assert (package_dir / "py.typed").is_file()


def test_the_installation_carries_every_module_of_the_source():
    installed = {p.name for p in Path(fencelock.__file__).resolve().parent.glob("*.py")}
    source = {p.name for p in (PACKAGE_SOURCE / "src" / "fencelock").glob("*.py")}
    assert installed == source


def test_wheel_is_platform_specific():
    wheel = metadata.distribution("fencelock").read_text("WHEEL") or ""
    assert "Root-Is-Purelib: false" in wheel
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    assert tags and all(not tag.endswith("-any") for tag in tags), tags


def test_import_works_from_any_directory_without_environment(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("FENCELOCK_LIBRARY", "PYTHONPATH")}
    done = subprocess_in(tmp_path, "import fencelock; print(fencelock.library_version())", env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == fencelock.__version__


def test_fencelock_library_points_at_another_build(tmp_path):
    copy = tmp_path / "elsewhere" / "libfencelock.so"
    copy.parent.mkdir()
    shutil.copy2(fencelock.library_path(), copy)
    env = {**os.environ, "FENCELOCK_LIBRARY": str(copy)}
    done = subprocess_in(tmp_path, "import fencelock; print(fencelock.library_path())", env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(copy)


def test_a_missing_library_is_a_clear_import_error(tmp_path):
    env = {**os.environ, "FENCELOCK_LIBRARY": str(tmp_path / "nope.so")}
    done = subprocess_in(tmp_path, "import fencelock", env)
    assert done.returncode != 0
    assert "ImportError" in done.stderr and "FENCELOCK_LIBRARY" in done.stderr


def subprocess_in(cwd: Path, code: str, env):
    return run(code, env=env, cwd=cwd)
