"""``embodied-ws doctor``: non-interactive triage of a log (rules, then optionally the local LLM)."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

from embodied_ws.assistant.parsers import is_error
from embodied_ws.assistant.rules import load_rules
from embodied_ws.assistant.sources import read_chunks
from embodied_ws.assistant.triage import Finding, Triage
from embodied_ws.core.errors import UserError

TAIL_LINES = 40
SNIFF_BYTES = 1 << 16
CONTROL_OK = "\t\n\r\f\b\x1b"


def is_error_line(line: str) -> bool:
    """Error or fatal line in any known format (used to pick excerpts for the model)."""
    return is_error(line)


def looks_binary(data: bytes) -> bool:
    """True when the start of ``data`` is not text: a NUL byte, or over 5 % bytes that are neither UTF-8 nor
    printable (a log in another 8-bit encoding stays text)."""
    sample = data[:SNIFF_BYTES]
    if b"\0" in sample:
        return True
    text = sample.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in CONTROL_OK))
    return odd > 0.05 * max(len(text), 1)


def triage_source(source: str, rule_files: list[Path] | None = None) -> tuple[Triage, list[str]]:
    """Run the rules over a source; also keep the log's last lines (for the LLM's context).

    :raises UserError: the source is empty, or a file of it is not text (binary data)
    """
    t = Triage(load_rules(rule_files) if rule_files else None)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    seen: set[str] = set()
    for chunk in read_chunks(source):
        if chunk.source not in seen:
            seen.add(chunk.source)
            if looks_binary(chunk.data):
                raise UserError("not a text log (binary data); give the text log, or its .gz", chunk.source)
        t.feed(chunk)
        tail.extend(chunk.data[-(1 << 16) :].decode("utf-8", "replace").splitlines())
    if not seen:
        raise UserError("empty log (0 bytes): nothing to triage", "<stdin>" if source == "-" else source)
    return t, list(tail)


#: answer length of ``doctor --llm`` (a report: R1 reasons in <think> first); ``--max-tokens`` sets another
#: (its help text names this default)
ANSWER_TOKENS = 768


def explain_with_llm(
    findings: list[Finding],
    tail: list[str],
    model: Path,
    question: str = "",
    unsure: Triage | None = None,
    max_tokens: int = ANSWER_TOKENS,
) -> dict[str, Any]:
    """Ask the local model about the log; returns the plan, the answer and the (hidden) reasoning.

    :param unsure: the triage of a log whose answer is "unsure": the model first picks one taxonomy id or
        "none" from its error lines, template matches and top-3 candidates (``verdict``, see
        :mod:`embodied_ws.assistant.llm_classify`)
    :param max_tokens: longest answer (tokens, the ``<think>`` part included)
    """
    from embodied_ws.assistant.llm import load_llm, split_think
    from embodied_ws.assistant.llm_classify import classify
    from embodied_ws.assistant.prompt import error_excerpts, pack_context

    llm = load_llm(model)
    verdict = classify(llm, unsure, findings).to_dict() if unsure is not None else None
    excerpts = error_excerpts(tail, is_error_line) or ["\n".join(tail[-15:])]
    budget = llm.prompt_budget(max_tokens)
    packed = pack_context(question, findings, excerpts, budget=budget, count=llm.count_tokens)
    text = "".join(llm.stream(packed.system, packed.user, max_tokens=max_tokens))
    llm.close()
    parts = split_think(text)
    return {
        "model": str(model),
        "plan": llm.describe(),
        "n_gpu_layers": llm.n_gpu_layers,
        "n_ctx": llm.n_ctx,
        "prompt_tokens": packed.tokens,
        "answer": parts.answer,
        "think": parts.think,
        "verdict": verdict,
    }


NO_ERROR_LINE = "No error line in this log (nothing failed that the log shows)."


UNSURE_LINES = 5


def unsure_summary(findings: list[Finding], error_lines: list[str], threshold: float) -> list[str]:
    """The "unsure" answer: the log's error lines and the closest known causes, no id named as the cause."""
    best = findings[0].confidence if findings else 0.0
    out = [f"unsure: no known cause fits with enough confidence (best {best:.0%}, below {threshold:.0%})."]
    out.append("  the error lines are:")
    out += [f"    {x.strip()[:200]}" for x in error_lines[-UNSURE_LINES:]]
    out.append("  closest known causes: " + "; ".join(f"{f.rule.id} ({f.confidence:.0%})" for f in findings[:3]))
    out.append("  (details below; `--llm` asks the local model)\n")
    return out


def render_text(
    findings: list[Finding],
    llm: dict[str, Any] | None,
    has_errors: bool = True,
    unsure: list[str] | None = None,
) -> str:
    """Human-readable report: the "unsure" summary when no cause is likely enough, rule and template
    findings, then the similarity stage's (marked as such)."""
    if not findings:
        out = [NO_ERROR_LINE if not has_errors else "No known failure pattern found. Try `--llm`."]
    else:
        out = list(unsure or [])
        for i, f in enumerate(findings, 1):
            r = f.rule
            if f.stage == "similarity":
                how, mark = f"similar to known cases; {f.count} error line(s)", "~ "
            else:
                how, mark = f"{f.count} match(es)" + (f", {f.tool} message" if f.tool else ""), ""
            out.append(f"{i}. {mark}[{r.id}] {r.title}  (confidence {f.confidence:.0%}, {how})")
            out.append(f"   cause: {r.cause}")
            out += [f"   line {e.line}: {e.text.strip()[:200]}" for e in f.evidence[:3]]
            out += [f"   fix: {x}" for x in r.fix]
            out += [f"   verify: {x}" for x in r.verify]
    if llm:
        if llm.get("verdict"):
            out.append(f"\nLLM pick for this unsure log: {llm['verdict']['id'] or 'none of the known causes'}")
        out.append(f"\nLLM ({llm['plan']}):")
        if llm["think"]:
            out.append(f"  [reasoning hidden: {len(llm['think'])} characters; --json shows it]")
        out.append(llm["answer"])
    return "\n".join(out)


def run(
    source: str,
    as_json: bool,
    use_llm: bool,
    model: Path | None,
    rule_files: list[Path] | None,
    max_tokens: int | None = None,
) -> int:
    """The ``doctor LOG`` verb (``max_tokens``: the model's answer length, default :data:`ANSWER_TOKENS`)."""
    t, tail = triage_source(source, rule_files)
    findings = t.findings()
    unsure = t.is_unsure(findings)
    error_lines = [ln.text for ln in t.errors.lines()]
    llm = None
    if use_llm:
        from embodied_ws.assistant.download import default_model_path

        answer = max_tokens or ANSWER_TOKENS
        path = model or default_model_path()
        llm = explain_with_llm(findings, tail, path, unsure=t if unsure else None, max_tokens=answer)
    if as_json:
        out = {"findings": [f.to_dict() for f in findings], "llm": llm, "lines": t.lines}
        out |= {"error_lines": t.errors.n_error, "warning_lines": t.errors.n_warn}
        out |= {"unsure": unsure, "unsure_threshold": t.calibration.threshold}
        if unsure:
            out["unsure_error_lines"] = [x[:500] for x in error_lines[-UNSURE_LINES:]]
            out["closest"] = [f.rule.id for f in findings[:3]]
        if not findings:
            out["message"] = NO_ERROR_LINE
        print(json.dumps(out))
    else:
        summary = unsure_summary(findings, error_lines, t.calibration.threshold) if unsure else None
        print(render_text(findings, llm, t.has_error_lines, summary))
    return 0
