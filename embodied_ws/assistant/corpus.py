"""The real-log corpus (``tests/fixtures/corpus/``): its index rows, read the same way by the tests, the
similarity-model builder and ``bench/triage_accuracy.py``."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from embodied_ws.core.errors import UserError

COLUMNS = ("file", "id", "split", "repo", "source", "root_cause", "fix")


@dataclass(frozen=True)
class CorpusLog:
    """One indexed log (``path`` is absolute)."""

    path: Path
    id: str
    split: str
    repo: str
    source: str
    root_cause: str
    fix: str

    @property
    def family(self) -> str:
        """The taxonomy family (``cuda`` of ``cuda.oom``)."""
        return self.id.split(".", 1)[0]


def read_corpus(root: Path) -> list[CorpusLog]:
    """Every row of every ``index*.tsv`` under ``root``."""
    rows: list[CorpusLog] = []
    indexes = sorted(root.glob("index*.tsv"))
    if not indexes:
        raise UserError("no index*.tsv here: not a log corpus", str(root))
    for index in indexes:
        with open(index, newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            if tuple(reader.fieldnames or ()) != COLUMNS:
                raise UserError(f"header must be {'\t'.join(COLUMNS)!r}", str(index))
            for n, row in enumerate(reader, 2):
                if None in row or any(v is None for v in row.values()):
                    raise UserError("wrong number of fields", f"{index}:{n}")
                rows.append(CorpusLog(root / row["file"], row["id"], row["split"], row["repo"], row["source"],
                                      row["root_cause"], row["fix"]))  # fmt: skip
    return rows
