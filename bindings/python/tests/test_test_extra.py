"""The ``test`` extra of pyproject.toml lists every package the tests import, so that
``pip install "./bindings/python[test]"`` is all a contributor needs to run them."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

HERE = Path(__file__).resolve().parent
LOCAL = {"conftest", "fencelock"}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _imported_top_level_modules() -> set[str]:
    modules: set[str] = set()
    for path in HERE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - LOCAL - {"__future__"}


def test_the_test_extra_lists_every_package_the_tests_import():
    project = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"]["test"]
    extra = {_normalized(re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0]) for req in requirements}
    distributions = packages_distributions()
    missing = {}
    for module in sorted(_imported_top_level_modules()):
        names = {_normalized(name) for name in distributions.get(module, [module])}
        if not names & extra:
            missing[module] = sorted(names)
    assert not missing, f"the tests import packages the test extra lacks: {missing}"
