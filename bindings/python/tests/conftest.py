"""Shared fixtures. The tests import the *installed* package (run_tests.sh runs pytest from
outside the source tree); test_install.py checks that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

import fencelock

PACKAGE_SOURCE = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_SOURCE.parents[1]
HEADER = REPO_ROOT / "include" / "fencelock.h"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[fencelock.Store]:
    with fencelock.Store(store_path) as opened:
        yield opened


@pytest.fixture
def other_store(store_path: Path) -> Iterator[fencelock.Store]:
    """A second open of the store, as another process would have: a wait of this thread for a
    lease held through it waits (for one held through ``store`` it is refused at once)."""
    with fencelock.Store(store_path) as opened:
        yield opened


def _default_sigint() -> None:
    # A process started in the background of a non-interactive shell (`cmd &`) has SIGINT
    # ignored, its children too, and Python then installs no KeyboardInterrupt handler: the
    # tests that send SIGINT to a child would see it ignored. The child starts with SIGINT's
    # default, as from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(code: str, *args: str, **kwargs) -> subprocess.Popen:
    """Starts `python -c code args...` with pipes for stdin/stdout, text mode."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=_default_sigint,
        **kwargs,
    )


def run(code: str, *args: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env if env is not None else dict(os.environ),
        cwd=cwd,
        timeout=120,
    )
