"""The docs' commands and code run, and print what the docs show.

Convention (docs/index.md, "Docs that run"): every ```sh and ```python block of README.md and
docs/*.md runs, unless the line just above it is ``<!-- not run: REASON -->``. The blocks of one
file run in order in one scratch directory (so a later block reads what an earlier one wrote),
where ``examples/``, ``experiments/``, ``hardware/`` and ``intrinsics/`` of the checkout are linked
in. A ```text block right after a block is its output: each of its lines must match a line of what
the block printed, in order, ``...`` standing for anything (a line of only ``...`` matches nothing).
Tuning budgets are capped: ``--trials N`` runs with at most DOCS_TRIALS trials.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# pages being rewritten elsewhere: their blocks are not marked yet (remove a name once it is)
PENDING: set[str] = set()
DOCS_TRIALS = int(os.environ.get("DOCS_TRIALS", "4"))
LINKED = ("examples", "experiments", "hardware", "intrinsics")
NOT_RUN = re.compile(r"<!--\s*not run:\s*\S.*-->")


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    run: bool
    expected: str | None


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        code = "\n".join(lines[i + 1 : j]) + "\n"
        prev = next((lines[p] for p in range(start - 1, -1, -1) if lines[p].strip()), "")
        i = j + 1
        if lang == "text" and out and out[-1].expected is None and out[-1].lang in ("sh", "python"):
            between = lines[out[-1].line + out[-1].code.count("\n") + 1 : start]
            if all(not s.strip() for s in between):
                out[-1].expected = code
                continue
        if lang in ("sh", "python"):
            out.append(Block(path, start + 1, lang, code, not NOT_RUN.search(prev), None))
    return out


def cap_trials(code: str) -> str:
    return re.sub(r"--trials(\s+|=)(\d+)", lambda m: f"--trials{m.group(1)}{min(int(m.group(2)), DOCS_TRIALS)}", code)


def matches(expected: str, output: str) -> str | None:
    """None when every expected line matches an output line in order, else the first that did not."""
    got = [s.rstrip() for s in output.splitlines()]
    pos = 0
    for want in expected.splitlines():
        want = want.rstrip()
        if not want.strip() or want.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + "$")
        while pos < len(got) and not pattern.match(got[pos]):
            pos += 1
        if pos == len(got):
            return want
        pos += 1
    return None


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_skipped_block_says_why():
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"<!--\s*not run\b(.*?)-->", text):
            assert NOT_RUN.match(m.group(0)), f"{rel(path)}: '{m.group(0)}' needs a reason: <!-- not run: REASON -->"


def test_no_stop_or_issue_numbers():
    """The repository speaks of itself: no stop or issue numbers, no file named by a stop."""
    pattern = re.compile(r"\bstops? [0-9]+|\bissues? [0-9]+", re.IGNORECASE)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    files = tracked.stdout.split()
    assert not [f for f in files if re.search(r"_s[0-9]+[._]|stop[0-9]", Path(f).name)]
    roots = ("README.md", "docs/", "tensorsearch/", "experiments/", "examples/", "hardware/", "intrinsics/")
    found = []
    for f in files:
        if f.startswith(roots) and f not in PENDING and not f.endswith((".png", ".csv")):
            for n, line in enumerate((ROOT / f).read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{f}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in DOCS if rel(p) not in PENDING], ids=rel)
def test_doc_blocks_run(path: Path, tmp_path: Path):
    todo = [b for b in blocks(path) if b.run]
    if not todo:
        pytest.skip(f"{rel(path)} has no runnable block")
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, RAY_AUTH_MODE="disabled", MPLBACKEND="Agg", COLUMNS="100")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for b in todo:
        if b.lang == "sh":
            cmd = ["bash", "-eo", "pipefail", "-c", cap_trials(b.code)]
        else:
            cmd = [sys.executable, "-c", b.code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        where = f"{rel(path)}:{b.line} ({b.lang} block)"
        assert r.returncode == 0, (
            f"{where} failed ({r.returncode}):\n{b.code}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
        )
        if b.expected is not None:
            missing = matches(b.expected, r.stdout + r.stderr)
            assert missing is None, (
                f"{where}: no output line matches {missing!r}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
            )


CLI_REFERENCE = ROOT / "docs" / "reference-cli.md"
CLI_COMMANDS = [(), ("workloads",), ("show",), ("match",), ("tune",), ("experiment",), ("model",)]
CLI_COMMANDS += [("model", "tasks"), ("model", "tune"), ("model", "run")]


def cli_help_sections() -> str:
    """Every command's ``--help`` at 100 columns, one ``## tensorsearch ...`` section each."""
    env = dict(os.environ, COLUMNS="100")
    out = []
    for cmd in CLI_COMMANDS:
        r = subprocess.run(
            [sys.executable, "-m", "tensorsearch", *cmd, "--help"], capture_output=True, text=True, env=env, timeout=120
        )
        assert r.returncode == 0, r.stderr
        out.append(f"## {' '.join(['tensorsearch', *cmd])}\n\n```text\n{r.stdout.rstrip()}\n```\n")
    return "\n".join(out)


@pytest.mark.slow
def test_the_cli_reference_is_the_commands_help():
    """docs/reference-cli.md's sections are what ``--help`` prints now; with
    ``TENSORSEARCH_WRITE_DOCS=1`` the test rewrites them instead."""
    text = CLI_REFERENCE.read_text()
    start, end = text.index("## tensorsearch\n"), text.index("## Checked here")
    want = cli_help_sections() + "\n"
    if os.environ.get("TENSORSEARCH_WRITE_DOCS") == "1":
        CLI_REFERENCE.write_text(text[:start] + want + text[end:])
    assert text[start:end] == want, "docs/reference-cli.md is stale: rerun with TENSORSEARCH_WRITE_DOCS=1"
