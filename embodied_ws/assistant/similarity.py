"""Second stage: rank the taxonomy by similarity to a log's error lines when the rules say little.

The model is scikit-learn's TF-IDF (word uni/bigrams plus character n-grams, so ``libcudart.so.12`` and
``libcudart.so.11`` still share most features) and a nearest-neighbour score per taxonomy id: the best
cosine similarity between the log's error-line document and that id's examples. The examples are the
error lines of the corpus's ``dev`` logs plus each id's own title and cause (so an id with few logs still
has a description to match), shipped as a small JSON file (``similarity_examples.json``, built by
``scripts/build_similarity_model.py``) and fitted when first used (tens of milliseconds). No pickle, so the
file does not depend on the installed scikit-learn version.

Scores are similarities, not probabilities: a finding from this stage carries ``confidence = 0.2 + 0.5 ×
similarity`` (at most 0.7, below every rule's confidence) and ``stage = "similarity"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from embodied_ws.assistant.corpus import CorpusLog
    from embodied_ws.assistant.rules import RuleSet

EXAMPLES_FILE = "similarity_examples.json"
MAX_CONFIDENCE = 0.7


@dataclass(frozen=True)
class Candidate:
    """A taxonomy id and its similarity to the log (0..1)."""

    id: str
    similarity: float

    @property
    def confidence(self) -> float:
        """Reported confidence, kept below rule findings."""
        return min(MAX_CONFIDENCE, 0.2 + 0.5 * self.similarity)


class SimilarityRanker:
    """TF-IDF nearest-neighbour ranking over labelled example documents.

    :param examples: ``(taxonomy id, document)`` pairs (documents from :func:`error_lines.document`)
    """

    def __init__(self, examples: list[tuple[str, str]]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.pipeline import make_union

        if not examples:
            raise ValueError("the similarity model needs examples")
        self.ids = [i for i, _ in examples]
        self.vectorizer = make_union(
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1, token_pattern=r"[A-Za-z_][\w.+\-]+"),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=1, max_features=60000),
        )
        self.matrix = self._normalize(self.vectorizer.fit_transform([d for _, d in examples]))

    @staticmethod
    def _normalize(m: Any) -> Any:
        from sklearn.preprocessing import normalize

        return normalize(m)

    def rank(self, doc: str, k: int = 3) -> list[Candidate]:
        """The ``k`` most similar taxonomy ids, best first (one entry per id)."""
        if not doc.strip():
            return []
        v = self._normalize(self.vectorizer.transform([doc]))
        sims = (self.matrix @ v.T).toarray().ravel()
        best: dict[str, float] = {}
        for i in sims.argsort()[::-1]:
            tid = self.ids[i]
            if tid not in best:
                best[tid] = float(sims[i])
                if len(best) == k:
                    break
        return [Candidate(t, s) for t, s in best.items() if s > 0.0]


def log_document(path: Path) -> str:
    """The similarity document of one log file (its error lines, tagged)."""
    from embodied_ws.assistant.error_lines import ErrorLineCollector, document

    c = ErrorLineCollector()
    c.feed(path.read_bytes().replace(b"\r\n", b"\n"), 1)
    return document(c.lines())


def build_examples(logs: Iterable[CorpusLog], rules: RuleSet) -> list[dict[str, str]]:
    """Example records ``{id, doc, source}``: one per log of ``logs`` plus one per rule (its title and cause).

    The shipped file is built from the corpus's ``dev`` logs; the cross-validation builds one per training
    fold, so a held-out log never sees examples from its own repository.
    """
    examples = [{"id": r.id, "doc": log_document(r.path), "source": r.source} for r in logs]
    examples += [{"id": r.id, "doc": f"{r.title} {r.cause}", "source": f"rule {r.id}"} for r in rules.rules]
    return [e for e in examples if e["doc"].strip()]


def load_examples() -> list[tuple[str, str]]:
    """The shipped examples: ``[(id, document), ...]``."""
    text = resources.files("embodied_ws.assistant").joinpath(EXAMPLES_FILE).read_text()
    return [(e["id"], e["doc"]) for e in json.loads(text)["examples"]]


@lru_cache(maxsize=1)
def default_ranker() -> SimilarityRanker:
    """The ranker over the shipped examples (fitted once per process)."""
    return SimilarityRanker(load_examples())
