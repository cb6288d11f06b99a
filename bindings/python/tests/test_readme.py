"""The README's walkthrough runs as written (in one process, with its own store file)."""

from __future__ import annotations

import re

from conftest import PACKAGE_SOURCE


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
