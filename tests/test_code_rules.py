"""Rules of the code base that a tool checks: every ``type: ignore`` names its error code and
says why (``# type: ignore[code]  # reason``), so that a silenced finding is a decision."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[a-z-]+(?:,\s*[a-z-]+)*\])?(?P<rest>.*)$")


def _unexplained(text: str) -> list[int]:
    bad = []
    for k, line in enumerate(text.splitlines(), 1):
        m = _IGNORE.search(line)
        if m and (m.group("code") is None or not re.match(r"\s+#\s*\S", m.group("rest"))):
            bad.append(k)
    return bad


def test_every_type_ignore_has_a_code_and_a_reason():
    offenders = []
    for package in ("tasmopt", "service", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            offenders += [f"{path.relative_to(ROOT)}:{k}" for k in _unexplained(path.read_text())]
    assert not offenders, "type: ignore without [code] and '# reason':\n" + "\n".join(offenders)


def test_the_rule_can_fail():
    assert _unexplained("x = f()  # type: ignore\ny = g()  # type: ignore[arg-type]\n") == [1, 2]
    assert _unexplained("z = h()  # type: ignore[arg-type]  # the parser checked it\n") == []
