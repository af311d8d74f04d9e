"""Leave-repositories-out cross-validation of the triage over the real-log corpus.

The corpus's repositories are dealt into ``k`` folds (by a hash of the repository name, so a repository's
logs are always in one fold). For each fold, everything learned from data is rebuilt from the *other*
folds only — the similarity stage's examples and, one level further in, the confidence calibration — and
every log of the fold is scored once. What is not rebuilt: the hand-written rules and tool templates (the
templates come from the tools' sources, the rules were written by people who had read part of the corpus,
so rule-driven answers may still be optimistic; the numbers say so).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from embodied_ws.assistant.calibration import IDENTITY, Calibration, fit, reliability
from embodied_ws.assistant.corpus import CorpusLog
from embodied_ws.assistant.rules import RuleSet, builtin_rules
from embodied_ws.assistant.similarity import SimilarityRanker, build_examples
from embodied_ws.assistant.sources import read_chunks
from embodied_ws.assistant.triage import Triage


@dataclass
class Scored:
    """One log's ranked answer when its repository was held out."""

    log: CorpusLog
    fold: int
    ids: list[str]
    stages: list[str]
    raws: list[float]
    confidence: float = 0.0  # calibrated top-1 confidence (nested: calibration fitted without this fold)

    @property
    def right(self) -> bool:
        """Whether the first id is the labelled one."""
        return self.ids[:1] == [self.log.id]

    @property
    def family_right(self) -> bool:
        """Whether the first id's family is the labelled one's."""
        return bool(self.ids) and self.ids[0].split(".", 1)[0] == self.log.family


def fold_of(repo: str, k: int) -> int:
    """The fold of a repository (stable across runs and machines)."""
    return int(hashlib.sha1(repo.lower().encode()).hexdigest(), 16) % k


def score_log(
    log: CorpusLog, ranker: SimilarityRanker | None, rules: RuleSet
) -> tuple[list[str], list[str], list[float]]:
    """Ids, stages and raw scores for one log, best first (uncalibrated)."""
    t = Triage(rules, ranker=ranker, calibration=IDENTITY)
    for chunk in read_chunks(str(log.path)):
        t.feed(chunk)
    f = t.findings(alternatives=3)
    return [x.rule.id for x in f], [x.stage for x in f], [x.raw for x in f]


def calibration_pairs(scored: list[Scored]) -> list[tuple[str, float, bool]]:
    """``(curve key, raw score, was right)`` for every listed finding (first: its stage; others: alternative)."""
    pairs = []
    for s in scored:
        for rank, (tid, stage, raw) in enumerate(zip(s.ids, s.stages, s.raws, strict=True)):
            pairs.append((IDENTITY.key(stage, rank), raw, tid == s.log.id))
    return pairs


def without_rule_patterns(rules: RuleSet) -> RuleSet:
    """The same taxonomy with every hand-written pattern and context removed (templates and the similarity
    stage only): the parts not written from the corpus, for an ablation."""
    return RuleSet([replace(r, patterns=(), context=()) for r in rules.rules])


def cross_validate(
    corpus: list[CorpusLog],
    k: int = 5,
    progress: Callable[[int], None] | None = None,
    rules: RuleSet | None = None,
) -> list[Scored]:
    """Score every log once with a similarity model built without its fold; then calibrate each fold's
    top-1 confidences with curves fitted on the other folds' scores (``rules``: the built-in set)."""
    rules = rules or builtin_rules()
    out: list[Scored] = []
    for fold in range(k):
        train = [r for r in corpus if fold_of(r.repo, k) != fold]
        test = [r for r in corpus if fold_of(r.repo, k) == fold]
        if not test:
            continue
        examples = build_examples(train, rules)
        ranker = SimilarityRanker([(e["id"], e["doc"]) for e in examples])
        for log in test:
            ids, stages, raws = score_log(log, ranker, rules)
            out.append(Scored(log, fold, ids, stages, raws))
        if progress:
            progress(fold)
    for fold in {s.fold for s in out}:
        cal = fit(calibration_pairs([s for s in out if s.fold != fold]))
        for s in out:
            if s.fold == fold and s.ids:
                s.confidence = cal.apply(s.raws[0], s.stages[0], 0)
    return out


def summary(scored: list[Scored], threshold: float) -> dict[str, object]:
    """The cross-validation figures: per-fold and pooled top-1, family top-1, calibration error."""
    folds = sorted({s.fold for s in scored})
    per_fold = [sum(s.right for s in scored if s.fold == f) / sum(1 for s in scored if s.fold == f) for f in folds]
    conf = [s.confidence for s in scored]
    ece, diagram = reliability(conf, [s.right for s in scored])
    sure = [s for s in scored if s.confidence >= threshold]
    families: dict[str, list[bool]] = {}
    for s in scored:
        families.setdefault(s.log.family, []).append(s.right)
    return {
        "cv_folds": len(folds),
        "cv_logs": len(scored),
        "cv_repos": len({s.log.repo for s in scored}),
        "cv_top1_mean": round(sum(per_fold) / len(per_fold), 3),
        "cv_top1_worst_fold": round(min(per_fold), 3),
        "cv_top1_per_fold": [round(x, 3) for x in per_fold],
        "cv_top1_pooled": round(sum(s.right for s in scored) / len(scored), 3),
        "cv_top3": round(sum(s.log.id in s.ids[:3] for s in scored) / len(scored), 3),
        "cv_family_top1": round(sum(s.family_right for s in scored) / len(scored), 3),
        "ece": ece,
        "reliability": diagram,
        "unsure_threshold": threshold,
        "unsure_share": round(1 - len(sure) / len(scored), 3),
        "top1_when_sure": round(sum(s.right for s in sure) / len(sure), 3) if sure else None,
        "cv_per_family": {f: {"n": len(h), "top1": round(sum(h) / len(h), 3)} for f, h in sorted(families.items())},
        "by_stage": {
            st: {"n": n, "top1": round(sum(s.right for s in scored if s.stages[:1] == [st]) / n, 3)}
            for st in ("rule", "template", "similarity")
            if (n := sum(1 for s in scored if s.stages[:1] == [st]))
        },
    }


def final_calibration(scored: list[Scored], threshold: float) -> Calibration:
    """The calibration to ship: curves fitted on every fold's cross-validated scores."""
    return fit(calibration_pairs(scored), threshold)


def llm_on_unsure(
    corpus: list[CorpusLog], scored: list[Scored], llm: object, threshold: float, k: int = 5
) -> dict[str, object]:
    """The LLM stage measured on the cross-validation: every log whose calibrated top-1 confidence is below
    ``threshold`` is given to the model (its fold's similarity model, as when it was scored); the model's
    id replaces the first answer, "none" keeps it. Returns counts before and after."""
    from embodied_ws.assistant.llm_classify import classify

    rules = builtin_rules()
    rankers: dict[int, SimilarityRanker] = {}
    asked = right_before = right_after = said_none = 0
    for s in scored:
        if s.confidence >= threshold:
            continue
        if s.fold not in rankers:
            train = [r for r in corpus if fold_of(r.repo, k) != s.fold]
            rankers[s.fold] = SimilarityRanker([(e["id"], e["doc"]) for e in build_examples(train, rules)])
        t = Triage(rules, ranker=rankers[s.fold], calibration=IDENTITY)
        for chunk in read_chunks(str(s.log.path)):
            t.feed(chunk)
        v = classify(llm, t, t.findings(alternatives=3))
        asked += 1
        said_none += v.id is None
        right_before += s.right
        right_after += (v.id or (s.ids[0] if s.ids else None)) == s.log.id
    total_right = sum(x.right for x in scored)
    return {
        "asked": asked,
        "said_none": said_none,
        "right_before": right_before,
        "right_after": right_after,
        "cv_top1_pooled_after": round((total_right - right_before + right_after) / len(scored), 3),
    }
