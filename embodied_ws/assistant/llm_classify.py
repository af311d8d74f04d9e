"""The LLM stage on the misses: the local model picks one taxonomy id (or "none") for an unsure log.

Only when the calibrated confidence is below the threshold (``Triage.is_unsure``): the model gets the
log's error lines (redacted), the tool templates that matched, and the top-3 candidates with their
titles and causes, and must answer with exactly one taxonomy id or ``none``. The answer is parsed
strictly (the first known id in the reply, ``none`` if it says so first); anything else counts as no
answer, so a chatty or small model cannot invent a cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embodied_ws.assistant.redact import redact

if TYPE_CHECKING:
    from embodied_ws.assistant.triage import Finding, Triage

SYSTEM = (
    "You classify robotics and ML tool error logs into a fixed taxonomy of root causes. "
    "Reply with exactly one taxonomy id from the lists given, or the word none if no id fits. "
    "No other words."
)
MAX_LINES = 12
ANSWER_TOKENS = 24
CONTEXT_MARGIN = 128  # chat template, BOS/stop tokens, tokenizer differences at the joins
_NONE = re.compile(r"\bnone\b", re.I)


@dataclass(frozen=True)
class Verdict:
    """The model's pick: a taxonomy id, or None (it said none, or no known id was in the reply)."""

    id: str | None
    answer: str

    def to_dict(self) -> dict[str, Any]:
        """The ``doctor --json`` form."""
        return {"id": self.id, "answer": self.answer[:200]}


def build_prompt(
    triage: Triage, findings: list[Finding], max_lines: int = MAX_LINES, others: bool = True
) -> tuple[str, str]:
    """The (system, user) prompt for one log: error lines, template matches, top-3 candidates, other ids."""
    lines = [redact(ln.text.strip())[:300] for ln in triage.errors.lines()[-max_lines:]]
    out = ["Error lines of the log:", *[f"  {x}" for x in lines or ["(none)"]], ""]
    matches = triage.template_matches()
    if matches:
        out.append("Tool message templates that matched (the tool's own failure messages):")
        out += [f"  {tool}: {tid}" for tool, tid in matches]
        out.append("")
    out.append("Closest known causes:")
    for f in findings[:3]:
        out.append(f"  {f.rule.id}: {f.rule.title}. {f.rule.cause[:300]}")
    if others:
        shown = {f.rule.id for f in findings[:3]}
        rest = [i for i in triage.matcher.rules.ids() if i not in shown]
        out += ["", "Other taxonomy ids: " + ", ".join(rest)]
    out += ["", "Answer with one taxonomy id, or none."]
    return SYSTEM, "\n".join(out)


def fitted_prompt(llm: Any, triage: Triage, findings: list[Finding]) -> tuple[str, str]:
    """The fullest prompt that fits the model's context with room for the answer: the list of other ids
    goes first, then error lines (the most recent kept); at the end the text is cut."""
    budget = max(64, llm.n_ctx - ANSWER_TOKENS - CONTEXT_MARGIN)
    system, user = SYSTEM, ""
    for others, lines in ((True, MAX_LINES), (False, MAX_LINES), (False, 6), (False, 3), (False, 1)):
        system, user = build_prompt(triage, findings, lines, others)
        if llm.count_tokens(f"{system}\n\n{user}") <= budget:
            return system, user
    while user and llm.count_tokens(f"{system}\n\n{user}") > budget:
        user = user[: len(user) * 3 // 4]
    return system, user


def parse_answer(text: str, known: list[str]) -> str | None:
    """The first known taxonomy id in ``text`` (after any ``<think>`` part); None when ``none`` comes first
    or no id is named."""
    from embodied_ws.assistant.llm import split_think

    answer = split_think(text).answer
    hits = [(m.start(), i) for i in known for m in [re.search(rf"(?<![\w.-]){re.escape(i)}(?![\w-])", answer)] if m]
    none = _NONE.search(answer)
    if not hits or (none and none.start() < min(hits)[0]):
        return None
    return min(hits)[1]


def classify(llm: Any, triage: Triage, findings: list[Finding]) -> Verdict:
    """Ask ``llm`` (a :class:`embodied_ws.assistant.llm.LocalLLM`) for one id; greedy, short answer."""
    system, user = fitted_prompt(llm, triage, findings)
    try:
        text = "".join(llm.stream(system, user, max_tokens=ANSWER_TOKENS, temperature=0.0))
    except (RuntimeError, ValueError) as exc:  # llama.cpp refused the prompt (context): no pick, said so
        return Verdict(None, f"model error: {exc}")
    return Verdict(parse_answer(text, triage.matcher.rules.ids()), text.strip())
