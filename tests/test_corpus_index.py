"""The real-log corpus (tests/fixtures/corpus): every log indexed, sourced, in the taxonomy, split by repo."""

from __future__ import annotations

import csv
import hashlib
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "fixtures" / "corpus"
RULES = ROOT / "embodied_ws" / "assistant" / "rules"
HEADER = ["file", "id", "split", "repo", "source", "root_cause", "fix"]


def expected_split(repo: str) -> str:
    """The split of a source repository (the rule both collectors and the bench use).

    :param repo: ``owner/name`` or a forum host.
    :return: ``"heldout"`` or ``"dev"``.
    """
    return "heldout" if int(hashlib.sha1(repo.lower().encode()).hexdigest(), 16) % 10 < 3 else "dev"


def taxonomy() -> set[str]:
    """Rule ids from the rule YAML files plus the extra ids with descriptions."""
    ids = {rule["id"] for path in RULES.glob("*.yaml") for rule in yaml.safe_load(path.read_text())}
    extra_path = CORPUS / "taxonomy_extra.yaml"
    if extra_path.is_file():
        for entry in yaml.safe_load(extra_path.read_text()) or []:
            assert str(entry.get("description", "")).strip(), f"taxonomy_extra.yaml: {entry['id']} has no description"
            ids.add(entry["id"])
    return ids


def rows() -> list[tuple[str, int, dict[str, str]]]:
    """Every row of every ``index*.tsv``, with the file it came from and its line number."""
    found = []
    for index in sorted(CORPUS.glob("index*.tsv")):
        with index.open(newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(reader)
            assert header == HEADER, f"{index.name}: header {header} != {HEADER}"
            for line_no, fields in enumerate(reader, start=2):
                assert len(fields) == len(HEADER), f"{index.name}:{line_no}: {len(fields)} fields, want {len(HEADER)}"
                found.append((index.name, line_no, dict(zip(HEADER, fields, strict=True))))
    return found


pytestmark = pytest.mark.skipif(not list(CORPUS.glob("index*.tsv")), reason="no corpus index yet")


def test_every_row_points_to_a_log_with_a_source_and_a_known_id() -> None:
    known = taxonomy()
    problems = []
    for index, line, row in rows():
        where = f"{index}:{line} ({row['file']})"
        path = CORPUS / row["file"]
        if not path.is_file():
            problems.append(f"{where}: file missing")
        elif not path.read_text(errors="replace").strip():
            problems.append(f"{where}: empty log")
        if not row["source"].startswith(("https://", "http://")):
            problems.append(f"{where}: no source link")
        if row["id"] not in known:
            problems.append(f"{where}: id {row['id']!r} not in the taxonomy")
        if Path(row["file"]).parent.name != row["id"]:
            problems.append(f"{where}: file is not under logs/{row['id']}/")
        if not row["repo"].strip() or not row["root_cause"].strip() or not row["fix"].strip():
            problems.append(f"{where}: empty repo/root_cause/fix")
    assert not problems, "\n".join(problems)


def test_split_follows_the_repository_rule_and_no_repo_is_in_both() -> None:
    splits: dict[str, set[str]] = defaultdict(set)
    problems = []
    for index, line, row in rows():
        splits[row["repo"].lower()].add(row["split"])
        if row["split"] != expected_split(row["repo"]):
            problems.append(f"{index}:{line}: {row['repo']} is {expected_split(row['repo'])}, row says {row['split']}")
    problems += [f"{repo} is in both splits" for repo, seen in splits.items() if len(seen) > 1]
    assert not problems, "\n".join(problems)


def test_every_log_is_indexed_once() -> None:
    indexed = [row["file"] for _, _, row in rows()]
    duplicates = sorted({f for f in indexed if indexed.count(f) > 1})
    on_disk = {str(p.relative_to(CORPUS)) for p in (CORPUS / "logs").rglob("*.log")}
    assert not duplicates, f"indexed more than once: {duplicates}"
    assert not on_disk - set(indexed), f"logs without an index row: {sorted(on_disk - set(indexed))}"
