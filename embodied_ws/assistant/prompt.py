"""Context packing: rule findings, log excerpts and code snippets under the model's token budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from embodied_ws.assistant.redact import redact
from embodied_ws.assistant.triage import Finding

SYSTEM = (
    "You are a robotics debugging assistant for ROS 2, colcon, CUDA, PyTorch, MuJoCo and Gazebo. "
    "Explain the most likely root cause of the failure in the log, then list concrete checks the user "
    "can run. Never claim a command was run. Be brief."
)


@dataclass
class Packed:
    """The prompt parts that fit, and what was left out."""

    system: str
    user: str
    tokens: int
    dropped: int


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (~4 characters per token) for when no model is loaded."""
    return max(1, len(text) // 4)


def pack_context(
    question: str,
    findings: list[Finding],
    excerpts: list[str],
    snippets: list[str] | None = None,
    budget: int = 3000,
    count: Callable[[str], int] = approx_tokens,
) -> Packed:
    """Build the user message in priority order until ``budget`` tokens are used.

    Order: the question, the rule findings (id, cause, evidence), log excerpts, code snippets.
    Everything is redacted first. Parts that do not fit are dropped whole and counted.
    """
    parts = [f"Question: {question.strip() or 'What is wrong and how do I fix it?'}"]
    for f in findings[:5]:
        ev = "\n".join(f"  line {e.line}: {e.text}" for e in f.evidence[:3])
        parts.append(f"Rule finding {f.rule.id} (confidence {f.confidence:.2f}): {f.rule.cause}\n{ev}")
    parts += [f"Log excerpt:\n{x}" for x in excerpts]
    parts += [f"Code:\n{s}" for s in snippets or []]
    used = count(SYSTEM)
    kept, dropped = [], 0
    for part in parts:
        part = redact(part)
        n = count(part)
        if used + n <= budget:
            kept.append(part)
            used += n
        else:
            dropped += 1
    return Packed(SYSTEM, "\n\n".join(kept), used, dropped)


def error_excerpts(lines: list[str], is_error: Callable[[str], bool], context: int = 3, limit: int = 6) -> list[str]:
    """Up to ``limit`` windows of ``context`` lines around error lines (the most relevant log parts)."""
    out, last_end = [], -1
    for i, line in enumerate(lines):
        if is_error(line) and i > last_end:
            lo, hi = max(0, i - context), min(len(lines), i + context + 1)
            out.append("\n".join(lines[lo:hi]))
            last_end = hi
            if len(out) >= limit:
                break
    return out
