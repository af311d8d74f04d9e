"""The README and docs/ stay true: README length, links inside the repository, runnable blocks run, every verb shown.

Convention (docs/README.md): a fenced ``bash`` block whose previous line is exactly ``<!-- test: run -->`` is run
as written, the blocks of one page in order, in one fresh temporary folder per page, with the venv's ``bin/``
first on PATH and the repository's ``tests/`` and ``config/`` linked in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ws.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- test: run -->"
README_MAX_LINES = 300
BLOCK_TIMEOUT_S = 300
#: repository folders linked into each page's temporary folder, so relative paths work as from the root
LINKED = ("tests", "config")

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SHELL_OPS = {"|", "||", "&&", ";", "&"}
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` outside fenced code blocks."""
    out, fence = [], ""
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and (not fence or (m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence))):
            fence = "" if fence else m.group(2)
            continue
        if not fence:
            out.append((n, line))
    return out


def runnable_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of each fenced bash block right after the marker line."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(3) == "bash" and i > 0 and lines[i - 1].strip() == MARKER:
            start, fence = i, m.group(2)
            i += 1
            body = []
            while i < len(lines) and not lines[i].strip().startswith(fence):
                body.append(lines[i])
                i += 1
            blocks.append((start + 1, "\n".join(body) + "\n"))
        elif m:  # skip any other fenced block whole, so a marker inside it does not count
            fence = m.group(2)
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                i += 1
        i += 1
    return blocks


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to dashes."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text (repeated headings get ``-1``, ``-2`` ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(text):
        m = HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            k = seen.get(slug, 0)
            seen[slug] = k + 1
            out.add(slug if k == 0 else f"{slug}-{k}")
    return out


def link_problems(page: Path, text: str | None = None) -> list[str]:
    """Links of a page (its text, or ``text`` as if it were there) that leave the repository, or point at a
    missing file or heading."""
    problems = []
    text = page.read_text() if text is None else text
    if "../shared" in text:
        problems.append(f"{page.name}: mentions ../shared, which a clone does not have")
    for n, line in _prose_lines(text):
        for target in LINK.findall(line):
            where = f"{page.relative_to(ROOT)}:{n}: {target}"
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
                problems.append(f"{where}: links outside the repository")
                continue
            file_part, _, anchor = target.partition("#")
            if not file_part:
                if anchor not in anchors(text):
                    problems.append(f"{where}: no heading #{anchor} here")
                continue
            dest = (page.parent / file_part).resolve()
            if not dest.is_relative_to(ROOT):
                problems.append(f"{where}: leaves the repository")
            elif not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def cli_verbs() -> list[str]:
    """Every runnable verb path of the CLI (``train``, ``sysid fit``, ``vla check`` ...), walked from its parser."""
    out: list[str] = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs and prefix:
            out.append(prefix)
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, f"{prefix} {name}".strip())

    walk(build_parser(), "")
    return out


def test_readme_is_at_most_300_lines() -> None:
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move details into docs/"


def test_readme_keeps_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make train" in text and "make test" in text


def test_every_link_stays_inside_the_repository_and_resolves() -> None:
    problems = [p for page in PAGES for p in link_problems(page)]
    assert not problems, "\n".join(problems)


def test_link_checker_catches_bad_links() -> None:
    ok = "[a](training.md#the-run-folder) [b](../README.md) ![c](architecture.svg) [d](#top)\n\n# Top\n"
    assert link_problems(ROOT / "docs" / "probe.md", ok) == []
    bad = ["[a](../../shared/ARCHITECTURE.md)", "[b](https://example.org)", "[c](nope.md)", "[d](training.md#nope)"]
    text = "\n".join(bad) + "\n\n```text\n[e](inside-a-fence.md)\n```\n"
    found = link_problems(ROOT / "docs" / "probe.md", text)
    assert len(found) == 5, found  # the four links, and the mention of ../shared
    assert any("leaves the repository" in f for f in found) and any("no heading" in f for f in found)


def test_runnable_blocks_are_found_only_after_the_marker() -> None:
    nested = f"````markdown\n{MARKER}\n```bash\nx\n```\n````\n"
    text = f"{MARKER}\n```bash\necho one\n```\n\n```bash\necho not run\n```\n{nested}"
    assert runnable_blocks(text) == [(2, "echo one\n")]


def verbs_not_shown(verbs: list[str], code: str) -> list[str]:
    """The verbs no ``embodied-ws VERB ...`` command line in ``code`` runs."""
    commands = {" ".join(m.split()) for m in re.findall(r"embodied-ws((?:[ \t]+[a-z][\w-]*)+)", code)}
    return [v for v in verbs if not any(c == v or c.startswith(v + " ") for c in commands)]


def test_verb_check_sees_a_missing_verb() -> None:
    code = "embodied-ws robots\nembodied-ws sysid fit --help\nembodied-ws vla\ncheck data\n"
    assert verbs_not_shown(["robots", "robot", "sysid fit", "sysid collect", "vla check"], code) == [
        "robot",
        "sysid collect",
        "vla check",
    ]


def test_every_cli_verb_appears_in_a_runnable_block() -> None:
    code = "\n".join(block for page in PAGES for _, block in runnable_blocks(page.read_text()))
    verbs = cli_verbs()
    assert {"train", "sysid fit", "vla check"} <= set(verbs)
    missing = verbs_not_shown(verbs, code)
    assert not missing, f"no runnable docs block shows: {missing} (use `embodied-ws VERB --help` if it cannot run)"


def bash_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every fenced ``bash`` block (runnable or not), ``\\`` continuations joined."""
    lines = text.splitlines()
    out, fence, i = [], "", 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not fence and m:
            fence = m.group(2) if m.group(3) == "bash" else "-" + m.group(2)
        elif fence and lines[i].strip().startswith(fence.lstrip("-")):
            fence = ""
        elif fence and not fence.startswith("-"):
            start, line = i + 1, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            out.append((start, line))
        i += 1
    return out


def parse_problems(page: Path, parser: argparse.ArgumentParser, text: str | None = None) -> list[str]:
    """``embodied-ws`` command lines of a page's bash blocks that the real CLI parser rejects.

    ``[...]`` marks optional parts and is dropped; what follows ``#``, a pipe, ``&&``, ``||``, ``;`` or a
    redirection is not the command.
    """
    problems = []
    for n, line in bash_lines(page.read_text() if text is None else text):
        m = re.search(r"embodied-ws\s+(.*)$", line)
        if not m:
            continue
        args = shlex.split(re.sub(r"\[[^\]]*\]", "", m.group(1)), comments=True)
        ends = [i for i, a in enumerate(args) if a in SHELL_OPS or a.startswith((">", "2>"))]
        args = args[: ends[0]] if ends else args
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(args)
        except SystemExit as exc:
            if exc.code:
                why = (err.getvalue().strip().splitlines() or ["?"])[-1]
                problems.append(f"{page.relative_to(ROOT)}:{n}: embodied-ws {' '.join(args)}: {why}")
    return problems


def test_every_command_shown_parses_with_the_real_cli() -> None:
    """Commands that are not run (full budgets, ROS, GPU) still name real verbs and flags."""
    parser = build_parser()
    problems = [p for page in PAGES for p in parse_problems(page, parser)]
    assert not problems, "\n".join(problems)


def test_parse_check_sees_a_wrong_flag() -> None:
    text = (
        "```bash\nembodied-ws train --name a \\\n    --no-such-flag 1   # comment\n"
        "embodied-ws eval r [--json]   # fine\nls | embodied-ws doctor - && exit 1 || test $? -eq 2 > x\n```\n"
        "```text\nembodied-ws not-a-verb   # not bash: not checked\n```\n"
    )
    assert [n for n, _ in bash_lines(text)] == [2, 4, 5]
    found = parse_problems(ROOT / "docs" / "probe.md", build_parser(), text)
    assert len(found) == 1 and "docs/probe.md:2:" in found[0] and "--no-such-flag" in found[0], found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MUJOCO_GL", "egl")
    env["PYTHONUNBUFFERED"] = "1"
    return env


PAGES_WITH_BLOCKS = [p for p in PAGES if runnable_blocks(p.read_text())]
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES_WITH_BLOCKS]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_BLOCKS, ids=PAGE_IDS)
def test_runnable_blocks_run(page: Path, tmp_path: Path) -> None:
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    for line, code in runnable_blocks(page.read_text()):
        proc = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", code],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        where = f"{page.relative_to(ROOT)}:{line}"
        assert proc.returncode == 0, f"{where} exited {proc.returncode}\n{code}\n--- stderr\n{proc.stderr[-3000:]}"
