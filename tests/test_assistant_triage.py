"""Rule triage on real logs (shared/data/errorlogs) and on a realistic log for every taxonomy id."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import re2

from embodied_ws.assistant.rules import builtin_rules
from embodied_ws.assistant.sources import _chunks_of, read_chunks, strip_ansi
from embodied_ws.assistant.triage import triage_chunks

ROOT = Path(__file__).resolve().parents[1]
SHARED_LOGS = ROOT.parent / "shared" / "data" / "errorlogs"
FIXTURES = Path(__file__).parent / "fixtures" / "logs"
TAXONOMY = [
    "build.ament-not-found",
    "build.setup-py",
    "build.python-deps",
    "build.package-config-missing",
    "ros.executable-not-found",
    "ros.package-not-found",
    "ros.rclpy-import",
    "ros.tf-extrapolation",
    "ros.qos-incompatible",
    "ros.dds-discovery",
    "ros.parameter-type",
    "cuda.oom",
    "cuda.arch-mismatch",
    "cuda.driver-too-old",
    "cuda.cpu-only-torch",
    "cuda.library-missing",
    "cuda.nccl",
    "mujoco.xml-parse",
    "mujoco.file-missing",
    "mujoco.unstable",
    "mujoco.gl-backend",
    "gazebo.bridge",
    "gazebo.install",
    "gazebo.plugin",
    "gazebo.resource-path",
    "llm.model-format",
    "python.numpy-version",
    "python.dependency-conflict",
]


def _top(path: Path) -> str | None:
    findings = triage_chunks(read_chunks(str(path))).findings()
    return findings[0].rule.id if findings else None


def test_every_taxonomy_id_has_a_rule_and_patterns_compile_in_re2_and_python() -> None:
    rules = builtin_rules()
    assert set(TAXONOMY) <= set(rules.ids())
    for r in rules.rules:
        for p in list(r.patterns) + [c.regex for c in r.context]:
            re.compile(p)
            re2.compile(p)


def test_shared_error_logs_top_finding_share() -> None:
    index = SHARED_LOGS / "index.tsv"
    if not index.is_file():
        pytest.skip(f"shared error logs not present at {SHARED_LOGS}")
    rows = list(csv.DictReader(index.open(), delimiter="\t"))
    hits = [(_top(SHARED_LOGS / r["file"]) == r["id"], r["file"], r["id"]) for r in rows]
    share = sum(h for h, _, _ in hits) / len(hits)
    print(f"shared errorlogs: top finding has the documented id in {share:.0%} of {len(hits)} logs")
    for ok, f, rid in hits:
        if not ok:
            print(f"  miss: {f} (want {rid}, got {_top(SHARED_LOGS / f)})")
    assert share >= 0.8


@pytest.mark.parametrize("rule_id", TAXONOMY)
def test_each_taxonomy_id_on_a_realistic_log(rule_id: str) -> None:
    candidates = [FIXTURES / f"{rule_id}.log"]
    if SHARED_LOGS.is_dir():
        candidates += [
            SHARED_LOGS / r["file"]
            for r in csv.DictReader((SHARED_LOGS / "index.tsv").open(), delimiter="\t")
            if r["id"] == rule_id
        ]
    logs = [p for p in candidates if p.is_file()]
    assert logs, f"no test log for {rule_id}"
    for log in logs:
        assert _top(log) == rule_id, log.name


def test_clean_log_has_no_findings() -> None:
    text = "\n".join(f"[INFO] [1700000000.{i:06d}] [talker]: Publishing: 'Hello World: {i}'" for i in range(2000))
    t = triage_chunks(_chunks_of(__import__("io").BytesIO(text.encode()), "clean"))
    assert t.findings() == [] and t.lines == 2000


def test_line_numbers_survive_chunk_boundaries_and_ansi() -> None:
    body = [f"\x1b[32m[INFO] line {i}\x1b[0m" for i in range(1, 5000)]
    body[3333] = "\x1b[31mRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\x1b[0m"
    data = ("\n".join(body) + "\n").encode()
    import io

    t = triage_chunks(_chunks_of(io.BytesIO(data), "x.log", size=4096))
    (f,) = t.findings(alternatives=0)  # the rule finding alone (no similarity alternatives)
    assert f.rule.id == "cuda.oom" and f.evidence[0].line == 3334
    assert f.evidence[0].text.startswith("RuntimeError") and "\x1b" not in f.evidence[0].text
    assert strip_ansi(b"\x1b[1;31mred\x1b[0m") == b"red"


def test_folder_source_reads_every_log(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "launch.log").write_text("[WARN] requesting incompatible QoS. No messages will be sent to it.\n")
    (tmp_path / "b.log").write_text("RuntimeError: CUDA out of memory.\n")
    ids = {f.rule.id for f in triage_chunks(read_chunks(str(tmp_path))).findings(alternatives=0)}
    assert ids == {"ros.qos-incompatible", "cuda.oom"}


def test_doctor_json_from_stdin(cli) -> None:
    import subprocess
    import sys

    log = (FIXTURES / "gazebo.plugin.log").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", "doctor", "-", "--json"],
        input=log,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["llm"] is None
    f = out["findings"][0]
    assert f["id"] == "gazebo.plugin"
    assert set(f) >= {"id", "title", "cause", "fix", "verify", "confidence", "evidence"}
    assert f["evidence"][0]["line"] == 1 and "Failed to load system plugin" in f["evidence"][0]["text"]
    confidences = [x["confidence"] for x in out["findings"]]
    assert confidences == sorted(confidences, reverse=True)


def test_doctor_missing_log_is_a_one_line_error(cli, tmp_path: Path) -> None:
    proc = cli("doctor", str(tmp_path / "nope.log"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "nope.log" in proc.stderr


def test_doctor_env_json(cli) -> None:
    proc = cli("doctor", "--env", "--json")
    assert proc.returncode == 0, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert set(checks) >= {"python", "ros", "torch", "mujoco_gl", "glibc", "video", "llama_cpp"}
    assert all(c["status"] in ("ok", "warn", "fail") for c in checks.values())
