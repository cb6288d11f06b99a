"""The README's walkthrough runs as written (in one process, with its own store file)."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import PACKAGE_SOURCE, REPO_ROOT


def test_readme_walkthrough_runs(tmp_path, capsys):
    readme = (PACKAGE_SOURCE / "README.md").read_text()
    section = readme[readme.index("## The seed walkthrough") :]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    assert '"/tmp/locks.db"' in code
    code = code.replace('"/tmp/locks.db"', repr(str(tmp_path / "locks.db")))
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "refused: token" in out
    assert "A's lease is gone" in out


@pytest.mark.parametrize(
    "readme", [REPO_ROOT / "README.md", PACKAGE_SOURCE / "README.md"], ids=["root", "python"]
)
def test_readme_examples_never_drop_a_holder(readme):
    """A bare ``store.acquire(...)`` statement releases at once: no example may show one."""
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr):
                value = node.value.value if isinstance(node.value, ast.Await) else node.value
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                    assert value.func.attr not in ("acquire", "acquire_async", "acquire_and_put"), (
                        f"{readme.name}: a bare {ast.unparse(node)!r} drops the holder"
                    )
