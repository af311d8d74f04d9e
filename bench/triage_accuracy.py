"""Triage accuracy on the real-log corpus (tests/fixtures/corpus): one JSON object.

``dev_top1``: right id first on the ``dev`` logs (the rules and the similarity examples were written from
these, so this is the optimistic number); ``heldout_top1`` / ``heldout_top3``: on the ``heldout`` logs, from
repositories never used for rules or examples; ``heldout_empty``: share of held-out logs with no finding at
all; ``rules_only_heldout_top1``: the same with the similarity stage off; ``per_family``: held-out top-1 by
taxonomy family; ``misses``: the held-out logs whose first id was wrong (for reading, not for tuning on).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from embodied_ws.assistant.corpus import CorpusLog, read_corpus
from embodied_ws.assistant.sources import read_chunks
from embodied_ws.assistant.triage import Triage

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "corpus"


def ranked_ids(log: CorpusLog, second_stage: bool) -> list[str]:
    """Finding ids for one log, best first."""
    t = Triage()
    for chunk in read_chunks(str(log.path)):
        t.feed(chunk)
    return [f.rule.id for f in t.findings(alternatives=3 if second_stage else 0)]


def share(hits: list[bool]) -> float | None:
    """Fraction of True, rounded; None for an empty list."""
    return round(sum(hits) / len(hits), 3) if hits else None


def main() -> None:
    """Print the accuracy JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    corpus = read_corpus(args.corpus)
    dev, held = [r for r in corpus if r.split == "dev"], [r for r in corpus if r.split == "heldout"]
    dev_top1 = [ranked_ids(r, True)[:1] == [r.id] for r in dev]
    held_ids = [ranked_ids(r, True) for r in held]
    rules_only = [ranked_ids(r, False)[:1] == [r.id] for r in held]
    families: dict[str, list[bool]] = defaultdict(list)
    misses = []
    for r, ids in zip(held, held_ids, strict=True):
        families[r.family].append(ids[:1] == [r.id])
        if ids[:1] != [r.id]:
            misses.append({"file": str(r.path.relative_to(args.corpus)), "want": r.id, "got": ids[:3]})
    out = {
        "logs": len(corpus),
        "dev_logs": len(dev),
        "heldout_logs": len(held),
        "dev_top1": share(dev_top1),
        "heldout_top1": share([ids[:1] == [r.id] for r, ids in zip(held, held_ids, strict=True)]),
        "heldout_top3": share([r.id in ids[:3] for r, ids in zip(held, held_ids, strict=True)]),
        "heldout_empty": share([not ids for ids in held_ids]),
        "rules_only_heldout_top1": share(rules_only),
        "per_family": {f: {"n": len(h), "top1": share(h)} for f, h in sorted(families.items())},
        "misses": misses,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
