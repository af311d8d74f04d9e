"""Leave-repositories-out cross-validation and the calibrated confidence (issue 22)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from embodied_ws.assistant.calibration import IDENTITY, Calibration, default_calibration, fit, reliability
from embodied_ws.assistant.corpus import read_corpus
from embodied_ws.assistant.crossval import cross_validate, fold_of, summary

CORPUS = Path(__file__).parent / "fixtures" / "corpus"


def test_every_log_is_scored_once_and_no_repository_is_in_two_folds() -> None:
    corpus = read_corpus(CORPUS)
    scored = cross_validate(corpus, k=5)
    assert sorted(str(s.log.path) for s in scored) == sorted(str(r.path) for r in corpus)
    folds_of_repo: dict[str, set[int]] = {}
    for s in scored:
        folds_of_repo.setdefault(s.log.repo, set()).add(s.fold)
        assert s.fold == fold_of(s.log.repo, 5)
    assert all(len(f) == 1 for f in folds_of_repo.values())
    out = summary(scored, 0.8)
    assert out["cv_logs"] == len(corpus) and out["cv_top1_worst_fold"] <= out["cv_top1_mean"]
    assert 0.0 <= out["ece"] <= 1.0 and sum(b["n"] for b in out["reliability"]) == len(corpus)


def test_the_similarity_model_of_a_fold_never_holds_that_folds_logs(monkeypatch) -> None:
    from embodied_ws.assistant import crossval

    seen: list[set[str]] = []
    real = crossval.build_examples

    def spy(logs, rules):
        logs = list(logs)
        seen.append({r.repo for r in logs})
        return real(logs, rules)

    monkeypatch.setattr(crossval, "build_examples", spy)
    corpus = read_corpus(CORPUS)
    scored = crossval.cross_validate(corpus, k=3)
    for fold, repos in enumerate(seen):
        held = {s.log.repo for s in scored if s.fold == fold}
        assert held and not held & repos


def test_fitted_curves_are_monotone_and_capped() -> None:
    pairs = [("rule", 0.8 + i / 100, i % 5 != 0) for i in range(20)] + [
        ("similarity", i / 30, i > 12) for i in range(30)
    ]
    cal = fit(pairs)
    xs = [i / 20 for i in range(21)]
    for key in ("rule", "similarity"):
        ys = [cal.apply(x, key, 0) for x in xs]
        assert all(b >= a for a, b in itertools.pairwise(ys)) and max(ys) <= 0.97
    assert cal.apply(0.05, "similarity", 0) < cal.apply(0.95, "similarity", 0)
    one_class = fit([("similarity", 0.6, True)] * 4)
    assert one_class.apply(0.6, "similarity", 0) == round(5 / 6, 4)  # Laplace: (4 + 1) / (4 + 2)
    assert one_class.apply(0.3, "similarity", 0) == round(5 / 6 / 2, 4)  # below the data: scaled down
    # a rule's raw score is its author's probability: with few logs the curve stays near it
    few = fit([("rule", 0.9, True)] * 3)
    assert abs(few.apply(0.5, "rule", 0) - 0.5) < 0.15 and few.apply(0.9, "rule", 0) > few.apply(0.5, "rule", 0)
    assert Calibration.from_json(json.loads(json.dumps(cal.to_json()))) == cal
    assert IDENTITY.apply(0.42, "rule", 0) == 0.42


def test_expected_calibration_error_of_a_known_diagram() -> None:
    ece, rows = reliability([0.9] * 10 + [0.3] * 10, [True] * 9 + [False] + [True] * 5 + [False] * 5)
    assert ece == round(0.5 * 0.0 + 0.5 * 0.2, 4)
    assert [(r["n"], r["accuracy"]) for r in rows] == [(10, 0.5), (10, 0.9)]


def test_the_shipped_calibration_is_loaded_and_has_a_threshold() -> None:
    cal = default_calibration()
    assert "rule" in cal.curves and "similarity" in cal.curves and 0 < cal.threshold < 1
