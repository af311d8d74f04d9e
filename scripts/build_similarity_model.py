#!/usr/bin/env python3
"""Build ``embodied_ws/assistant/similarity_examples.json`` (the second stage's examples) from the corpus.

Examples are the error-line documents of the corpus's ``dev`` logs only (``heldout`` logs are for
measuring), plus one document per taxonomy id from its rule title and cause. Run it after changing the
corpus or the rules:  python scripts/build_similarity_model.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from embodied_ws.assistant.corpus import read_corpus
from embodied_ws.assistant.rules import builtin_rules
from embodied_ws.assistant.similarity import EXAMPLES_FILE, build_examples
from embodied_ws.core.atomic import write_bytes_atomic

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    """Write the examples file; prints how many examples per split went in."""
    corpus = read_corpus(ROOT / "tests" / "fixtures" / "corpus")
    examples = build_examples([r for r in corpus if r.split == "dev"], builtin_rules())
    out = ROOT / "embodied_ws" / "assistant" / EXAMPLES_FILE
    write_bytes_atomic(out, (json.dumps({"version": 1, "examples": examples}, indent=0) + "\n").encode())
    print(f"{len(examples)} examples ({sum(r.split == 'dev' for r in corpus)} dev logs) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
