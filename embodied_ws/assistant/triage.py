"""Rule-based triage over a log, streaming in chunks with bounded memory.

One RE2 ``Set`` (a single DFA over every rule pattern) scans each chunk once and says which patterns
occur in it; only those are then located with Python's ``re`` to collect line numbers and evidence.
Hand-rolling this instead of looping Python regexes per line is what makes a 100 MB log take seconds
(``bench/triage.py`` measures it against ``grep -E`` over the same patterns).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from embodied_ws.assistant.error_lines import ErrorLineCollector, document
from embodied_ws.assistant.rules import Rule, RuleSet, builtin_rules
from embodied_ws.assistant.sources import Chunk

MAX_EVIDENCE = 5


@dataclass
class Evidence:
    """A log line that matched."""

    line: int
    text: str
    source: str = ""


@dataclass
class Finding:
    """A taxonomy id with its confidence and evidence lines.

    ``stage`` is ``rule`` when a rule's pattern fired, ``similarity`` when the second stage ranked the
    id from the log's error lines (lower confidence; ``count`` is then the number of error lines read).
    """

    rule: Rule
    confidence: float
    count: int
    evidence: list[Evidence] = field(default_factory=list)
    stage: str = "rule"

    def to_dict(self) -> dict[str, Any]:
        """The ``doctor --json`` form."""
        r = self.rule
        return {
            "id": r.id,
            "title": r.title,
            "cause": r.cause,
            "fix": list(r.fix),
            "verify": list(r.verify),
            "links": list(r.links),
            "confidence": round(self.confidence, 3),
            "stage": self.stage,
            "count": self.count,
            "evidence": [{"line": e.line, "text": e.text[:500], "source": e.source} for e in self.evidence],
        }


class Matcher:
    """Compiled form of a rule set: one RE2 set for detection, Python regexes for locating."""

    def __init__(self, rules: RuleSet) -> None:
        import re2

        self.rules = rules
        self.index: list[tuple[Rule, str, float]] = []  # (rule, "trigger" | "context", boost)
        self._set = re2.Set.SearchSet()
        self._py: list[re.Pattern[bytes]] = []
        for rule in rules.rules:
            for p in rule.patterns:
                self._add(rule, "trigger", 0.0, p)
            for c in rule.context:
                self._add(rule, "context", c.boost, c.regex)
        self._set.Compile()

    def _add(self, rule: Rule, kind: str, boost: float, pattern: str) -> None:
        self._set.Add(pattern.encode())
        self._py.append(re.compile(pattern.encode(), re.MULTILINE))
        self.index.append((rule, kind, boost))

    def hits(self, data: bytes) -> list[int]:
        """Indices of the patterns that occur somewhere in ``data``."""
        return self._set.Match(data) or []

    def locate(self, i: int, data: bytes) -> Iterable[re.Match[bytes]]:
        """Every match of pattern ``i`` in ``data``."""
        return self._py[i].finditer(data)


class Triage:
    """Accumulates findings over the chunks of one or more logs.

    :param rules: the rule set (built-in rules by default)
    """

    def __init__(self, rules: RuleSet | None = None) -> None:
        self.matcher = Matcher(rules or builtin_rules())
        self._count: dict[str, int] = {}
        self._evidence: dict[str, list[Evidence]] = {}
        self._patterns: dict[str, set[int]] = {}
        self._context: dict[str, dict[int, float]] = {}
        self.lines = 0
        self.bytes = 0
        self.errors = ErrorLineCollector()

    def feed(self, chunk: Chunk) -> None:
        """Scan one chunk of whole lines."""
        data = chunk.data
        self.lines += data.count(b"\n")
        self.bytes += len(data)
        self.errors.feed(data, chunk.first_line)
        for i in self.matcher.hits(data):
            rule, kind, boost = self.matcher.index[i]
            if kind == "context":
                self._context.setdefault(rule.id, {})[i] = boost
                continue
            self._patterns.setdefault(rule.id, set()).add(i)
            ev = self._evidence.setdefault(rule.id, [])
            n = 0
            line_no, counted_to = chunk.first_line, 0
            for m in self.matcher.locate(i, data):
                n += 1
                if len(ev) < MAX_EVIDENCE:
                    start = data.rfind(b"\n", 0, m.start()) + 1
                    end = data.find(b"\n", m.start())
                    line_no += data.count(b"\n", counted_to, start)
                    counted_to = start
                    text = data[start : end if end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
                    if not any(e.line == line_no and e.source == chunk.source for e in ev):
                        ev.append(Evidence(line_no, text, chunk.source))
            self._count[rule.id] = self._count.get(rule.id, 0) + n

    def feed_text(self, text: str, source: str = "<text>") -> None:
        """Scan a string (pasted text, a TUI buffer)."""
        data = text.encode("utf-8", "replace")
        self.feed(Chunk(source, 1, data if data.endswith(b"\n") else data + b"\n"))

    def findings(self, alternatives: int = 3) -> list[Finding]:
        """Rule findings, most likely first (confidence, then the earliest evidence), then the second stage's.

        :param alternatives: fill the list up to this many entries with similarity-stage findings (ids the
            rules did not find); when no rule fires and the log has error lines, there is always at least one
        """
        out = []
        for rule_id, count in self._count.items():
            rule = self.matcher.rules.by_id(rule_id)
            distinct = len(self._patterns.get(rule_id, ()))
            conf = rule.confidence + 0.02 * (distinct - 1) + sum(self._context.get(rule_id, {}).values())
            ev = sorted(self._evidence.get(rule_id, []), key=lambda e: (e.source, e.line))
            out.append(Finding(rule, min(conf, 0.99), count, ev))
        # harmless-noise ids explain a log only when nothing in it failed
        noise_last = self.has_error_lines
        out.sort(
            key=lambda f: (
                noise_last and f.rule.category == "benign",
                -f.confidence,
                f.evidence[0].line if f.evidence else 0,
            )
        )
        return out + self.similar(max(alternatives - len(out), 0), exclude={f.rule.id for f in out})

    def similar(self, k: int, exclude: set[str] | None = None) -> list[Finding]:
        """The second stage: up to ``k`` taxonomy ids ranked by similarity to the log's error lines."""
        lines = self.errors.lines()
        if k <= 0 or not lines:
            return []
        from embodied_ws.assistant.similarity import default_ranker

        known = set(self.matcher.rules.ids())
        ranked = [c for c in default_ranker().rank(document(lines), k + len(exclude or ())) if c.id in known]
        ranked = [c for c in ranked if c.id not in (exclude or set())][:k]
        evidence = [Evidence(ln.line, ln.text, "") for ln in lines[-MAX_EVIDENCE:]]
        return [
            Finding(self.matcher.rules.by_id(c.id), c.confidence, len(lines), evidence, stage="similarity")
            for c in ranked
        ]

    @property
    def has_error_lines(self) -> bool:
        """Whether the log holds any error line (warnings do not count)."""
        return self.errors.has_errors


def triage_chunks(chunks: Iterable[Chunk], rules: RuleSet | None = None) -> Triage:
    """Run the rules over ``chunks`` (from :func:`embodied_ws.assistant.sources.read_chunks`)."""
    t = Triage(rules)
    for c in chunks:
        t.feed(c)
    return t
