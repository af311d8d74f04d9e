"""The LLM stage on unsure logs (issue 22): prompt contents, strict answer parsing, tiny-GGUF plumbing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from tiny_gguf import build_tiny_gguf

from embodied_ws.assistant.llm_classify import build_prompt, classify, parse_answer
from embodied_ws.assistant.sources import _chunks_of
from embodied_ws.assistant.triage import triage_chunks

KNOWN = ["cuda.oom", "cuda.driver-too-old", "mujoco.xml-parse", "ros.package-not-found"]
ODD = "[planner-2] what():  camera device /dev/video3 is busy\n[ERROR] [planner-2]: process has died\n"


def _triage(text: str):
    return triage_chunks(_chunks_of(io.BytesIO(text.encode()), "t"))


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        ("cuda.oom", "cuda.oom"),
        ("The cause is mujoco.xml-parse.", "mujoco.xml-parse"),
        ("<think>maybe cuda.oom</think>cuda.driver-too-old", "cuda.driver-too-old"),
        ("none", None),
        ("None of these; not cuda.oom", None),
        ("cuda.oomx or cuda", None),  # no exact id
        ("I think it is a driver problem", None),
    ],
)
def test_answers_are_parsed_strictly(reply: str, want: str | None) -> None:
    assert parse_answer(reply, KNOWN) == want


def test_the_prompt_has_error_lines_template_matches_and_top3_causes() -> None:
    t = _triage("x\nRuntimeError: Error 804: forward compatibility was attempted on non supported HW\n")
    f = t.findings()
    system, user = build_prompt(t, f)
    assert "one taxonomy id" in system and "none" in system
    assert "forward compatibility" in user and "cuda: cuda.driver-too-old" in user
    assert all(x.rule.id in user for x in f[:3]) and f[0].rule.cause[:40] in user
    assert "Other taxonomy ids:" in user and "ros.qos-incompatible" in user


def test_tiny_model_plumbing_returns_an_id_or_none(tmp_path: Path) -> None:
    from embodied_ws.assistant.llm import LocalLLM

    model = build_tiny_gguf(tmp_path / "tiny.gguf", n_layer=2, n_head_kv=2, n_ctx=1024)
    t = _triage(ODD)
    f = t.findings()
    assert t.is_unsure(f)
    llm = LocalLLM(model, n_ctx=1024)
    v = classify(llm, t, f)
    llm.close()
    assert v.id is None or v.id in t.matcher.rules.ids()  # a random model: any answer, but never an unknown id
    assert isinstance(v.answer, str)


def test_doctor_llm_asks_for_a_pick_only_when_unsure(cli, tmp_path: Path) -> None:
    model = build_tiny_gguf(tmp_path / "tiny.gguf", n_layer=2, n_head_kv=2, n_ctx=1024)
    odd = tmp_path / "odd.log"
    odd.write_text(ODD)
    # a short answer: llama-cpp-python's streaming re-detokenizes the whole completion at each token, and the random
    # model's byte tokens (invalid UTF-8) make it hold text back and do so again per held token: 768 took 170 s
    args = ("doctor", str(odd), "--json", "--llm", "--model", str(model), "--max-tokens", "32")
    out = json.loads(cli(*args).stdout)
    assert out["unsure"] is True and set(out["llm"]["verdict"]) == {"id", "answer"}
    assert out["llm"]["verdict"]["id"] in (None, *[f["id"] for f in out["findings"]], *_known())
    # a sure answer asks no pick: tests/test_assistant_llm.py::test_doctor_llm_with_tiny_model


def _known() -> list[str]:
    from embodied_ws.assistant.rules import builtin_rules

    return builtin_rules().ids()


def test_max_tokens_is_checked_and_its_default_documented(cli) -> None:
    from embodied_ws.assistant.doctor import ANSWER_TOKENS

    assert f"(default: {ANSWER_TOKENS})" in " ".join(cli("doctor", "--help").stdout.split())
    proc = cli("doctor", "-", "--llm", "--max-tokens", "0")
    assert proc.returncode == 2 and "--max-tokens" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
