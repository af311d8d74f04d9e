"""Triage accuracy on the real-log corpus (tests/fixtures/corpus): one JSON line.

The headline is **leave-repositories-out cross-validation** (``embodied_ws/assistant/crossval.py``): the
corpus's repositories are dealt into ``--folds`` folds; for each fold the similarity examples (and, nested,
the confidence calibration) are rebuilt from the other folds only, and every log is scored once, when its
repository is held out. ``cv_top1_mean`` / ``cv_top1_worst_fold``: right id first, mean over folds and the
worst fold; ``cv_family_top1``: right family (``ros``/``build``/``cuda``...) first; ``ece``: expected
calibration error of the displayed (calibrated) top-1 confidence, 10 bins, with ``reliability`` the
per-bin confidence vs accuracy; ``unsure_share`` / ``top1_when_sure``: answers below the unsure threshold
and the accuracy of the rest.

Caveat printed as ``note``: the cross-validation removes leakage from the learned parts only. The
hand-written rules were written by people who had read the corpus, and the tool templates come from the
tools' sources; neither is rebuilt per fold, so rule-driven answers may still be optimistic.

``cv_no_rules``: the same cross-validation with every hand-written rule pattern switched off (tool templates
from the tools' sources and the similarity stage only): the parts not written from the corpus, so the nearer
figure for logs from repositories nobody here has read.

``heldout_top1`` is the old single-split figure (shipped model, built from ``dev``), for comparison.
``--llm GGUF`` also measures the LLM stage (``assistant/llm_classify.py``) on the unsure logs: the model picks
one id or "none" from the error lines, template matches and top-3 candidates (``llm_on_unsure``: asked,
right before/after, pooled top-1 after). With the tests' tiny GGUF this checks the plumbing only; on a GPU
workstation run it with the real model (e.g. ``bench/triage_accuracy.py --llm ~/.cache/embodied_ws/<model>.gguf``).
``--write-calibration`` stores the curves fitted on all cross-validated scores in the package.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from embodied_ws.assistant.calibration import CALIBRATION_FILE, DEFAULT_THRESHOLD, IDENTITY
from embodied_ws.assistant.corpus import CorpusLog, read_corpus
from embodied_ws.assistant.crossval import (
    cross_validate,
    final_calibration,
    llm_on_unsure,
    summary,
    without_rule_patterns,
)
from embodied_ws.assistant.rules import builtin_rules
from embodied_ws.assistant.sources import read_chunks
from embodied_ws.assistant.triage import Triage
from embodied_ws.core.atomic import write_bytes_atomic

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
NOTE = (
    "cross-validation rebuilds the learned parts (similarity examples, calibration) per fold; the hand-written "
    "rules were written by people who read the corpus and are not rebuilt, so rule-driven answers may be optimistic"
)


def ranked_ids(log: CorpusLog, second_stage: bool) -> list[str]:
    """Finding ids for one log with the shipped model, best first."""
    t = Triage(calibration=IDENTITY)
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
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="unsure below this confidence")
    parser.add_argument("--write-calibration", action="store_true", help="store the fitted curves in the package")
    parser.add_argument("--misses", action="store_true", help="list the cross-validation misses")
    parser.add_argument("--llm", type=Path, metavar="GGUF", help="also measure the LLM stage on the unsure logs")
    args = parser.parse_args()
    corpus = read_corpus(args.corpus)
    scored = cross_validate(corpus, args.folds)
    out: dict[str, object] = {"logs": len(corpus), "repos": len({r.repo for r in corpus})}
    out |= summary(scored, args.threshold)
    ablation = summary(cross_validate(corpus, args.folds, rules=without_rule_patterns(builtin_rules())), args.threshold)
    out["cv_no_rules"] = {k: ablation[k] for k in ("cv_top1_mean", "cv_top1_worst_fold", "cv_family_top1", "ece")}
    held = [r for r in corpus if r.split == "heldout"]
    out["heldout_top1"] = share([ranked_ids(r, True)[:1] == [r.id] for r in held])
    out["heldout_logs"] = len(held)
    out["note"] = NOTE
    if args.llm:
        from embodied_ws.assistant.llm import load_llm

        llm = load_llm(args.llm)
        out["llm_on_unsure"] = {"model": args.llm.name, "plan": llm.describe()}
        out["llm_on_unsure"] |= llm_on_unsure(corpus, scored, llm, args.threshold, args.folds)
        llm.close()
    if args.misses:
        out["misses"] = [
            {"file": str(s.log.path.relative_to(args.corpus)), "want": s.log.id, "got": s.ids[:3],
             "stage": s.stages[:1], "confidence": s.confidence}
            for s in scored if not s.right
        ]  # fmt: skip
    if args.write_calibration:
        cal = final_calibration(scored, args.threshold)
        path = ROOT / "embodied_ws" / "assistant" / CALIBRATION_FILE
        write_bytes_atomic(path, (json.dumps(cal.to_json(), indent=1) + "\n").encode())
        print(f"calibration -> {path}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
