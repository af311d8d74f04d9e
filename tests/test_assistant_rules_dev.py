"""The rules describe failure classes: rules-only top-1 on the corpus's ``dev`` logs (the logs they were
written from; the ``heldout`` logs are only measured, by bench/triage_accuracy.py, never tested here).

The hand-written rules were written from the collections ``index_a`` … ``index_g``. Later collections
(``index_h``, ``index_i``: 200 logs from 150 more repositories, gathered to measure the assistant on
repositories nobody wrote rules from) are measured only, by the leave-repositories-out cross-validation of
bench/triage_accuracy.py: a rule written around one of their logs' wording would make that figure a lie."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied_ws.assistant.corpus import CorpusLog, read_corpus
from embodied_ws.assistant.rules import builtin_rules
from embodied_ws.assistant.sources import read_chunks
from embodied_ws.assistant.triage import Triage

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
WITH_PATTERNS = {r.id for r in builtin_rules().rules if r.patterns}
#: the collections the rules were written from (see the module docstring)
RULE_SOURCES = [CORPUS / f"index_{c}.tsv" for c in "abcdefg"]
_WRITTEN_FROM = {
    (CORPUS / line.split("\t", 1)[0]).resolve() for f in RULE_SOURCES for line in f.read_text().splitlines()[1:]
}
DEV = [
    r for r in read_corpus(CORPUS) if r.split == "dev" and r.id in WITH_PATTERNS and r.path.resolve() in _WRITTEN_FROM
]


def _rule_ids(*logs: CorpusLog) -> list[str]:
    t = Triage()
    for log in logs:
        for chunk in read_chunks(str(log.path)):
            t.feed(chunk)
    return [f.rule.id for f in t.findings(alternatives=0)]


def _dev(name: str) -> CorpusLog:
    return next(r for r in DEV if r.path.name == name)


def test_every_rule_id_has_dev_logs() -> None:
    covered = {r.id for r in DEV}
    assert covered == WITH_PATTERNS, f"rules without a dev log: {sorted(WITH_PATTERNS - covered)}"


@pytest.mark.parametrize("log", DEV, ids=[f"{r.id}:{r.path.stem}" for r in DEV])
def test_rules_alone_put_the_class_first_on_dev_logs(log: CorpusLog) -> None:
    ids = _rule_ids(log)
    assert ids[:1] == [log.id], f"{log.path.name}: rules gave {ids}"


def test_every_pattern_starts_with_a_literal() -> None:
    # Python's re locates the lines RE2 detected; a leading group/class/wildcard makes that ~10x slower
    for rule in builtin_rules().rules:
        for p in rule.patterns:
            assert p[0] not in "([.^$*+?{|", f"{rule.id}: {p!r}"
            assert not (p[0] == "\\" and p[1] in "wdsWDSb"), f"{rule.id}: {p!r}"


def test_benign_warning_ranks_after_the_real_failure_in_the_same_log() -> None:
    # a colcon build whose stderr holds setuptools deprecation noise and the real setup.py failure
    ids = _rule_ids(_dev("symlink-install-easy-install-pkgresources.log"), _dev("robostack-jazzy-setuptools-80.log"))
    assert ids[0] == "build.setup-py"
    assert "benign.ros-deprecation" in ids[1:]


def test_build_log_is_counter_evidence_for_the_driver_message() -> None:
    message = "RuntimeError: CUDA driver version is insufficient for CUDA runtime version\n"
    runtime, build = Triage(), Triage()
    runtime.feed_text('  File "train.py", line 3, in <module>\n' + message)
    build.feed_text("--- stderr: my_cuda_pkg\n" + message + "CMake Error at CMakeLists.txt:12 (message):\n")
    found = {t: next(f for f in t.findings(0) if f.rule.id == "cuda.driver-too-old") for t in (runtime, build)}
    assert found[build].raw < found[runtime].raw - 0.2  # the rule's score
    assert found[build].confidence < found[runtime].confidence  # and the calibrated one follows it down
