"""The figures the docs show from a command that needs no build (``ncrtl run`` of a shipped
example, ``ncrtl timing``): each shown line is what the command prints now."""

import re
import shlex
from pathlib import Path

import pytest

from ncrtl.cli import main

ROOT = Path(__file__).resolve().parent.parent
#: The commands whose shown output a test checks: deterministic, seconds, no build.
CHECKED = ("ncrtl run --example", "ncrtl timing matmul")
#: Options that write files and do not change what is printed above their own lines.
WRITERS = ("--trace", "--plot", "--out")


def shown_runs():
    """``(where, argv, lines)`` of every ``$ ncrtl ...`` line of a fenced block in README.md and
    docs/*.md that starts with one of :data:`CHECKED`, with the lines shown after it (up to
    the next ``$`` line or the block's end; a ``  # note`` after a line is the docs' own)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text().splitlines()
        fenced, current = False, None
        for n, line in enumerate(text, 1):
            if line.startswith("```"):
                fenced, current = not fenced, None
                continue
            if not fenced:
                continue
            if line.startswith("$ "):
                current = None
                command = line[2:].split("#")[0].strip()
                if command.startswith(CHECKED):
                    current = (f"{path.name}:{n}", command, [])
                    out.append(current)
            elif current is not None and line.strip():
                current[2].append(re.split(r"\s{2,}# ", line)[0])  # a note beside the line
    return out


def _argv(command):
    words = shlex.split(command)[1:]
    argv = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in WRITERS:
            skip = True
        else:
            argv.append(w)
    return argv


def _pattern(line):
    """A shown line as a pattern: ``...`` stands for what the docs leave out (a path's folders,
    a list's middle), runs of spaces for any spacing."""
    parts = [re.escape(" ".join(p.split())) for p in line.split("...")]
    return re.compile(".*?".join(parts))


RUNS = shown_runs()


@pytest.mark.parametrize("where, command, lines", RUNS, ids=[r[0] for r in RUNS])
def test_docs_show_what_the_command_prints(where, command, lines, capsys):
    assert main(_argv(command)) == 0
    printed = [" ".join(p.split()) for p in capsys.readouterr().out.splitlines()]
    at = 0
    for line in lines:
        pattern = _pattern(line)
        for i in range(at, len(printed)):
            if pattern.fullmatch(printed[i]):
                at = i + 1
                break
        else:
            pytest.fail(
                f"{where}: `{command}` no longer prints\n  {line}\nbut:\n  " + "\n  ".join(printed)
            )


def test_the_docs_show_checked_runs():
    """The scan finds the docs' runs (a change of the docs' form would empty it silently)."""
    assert any("matmul_tiled" in c for _, c, _ in RUNS)
    assert sum(c.startswith("ncrtl timing") for _, c, _ in RUNS) >= 4
