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
from typing import TYPE_CHECKING, Any

from embodied_ws.assistant.calibration import Calibration, default_calibration
from embodied_ws.assistant.error_lines import ErrorLineCollector, document
from embodied_ws.assistant.rules import Rule, RuleSet, builtin_rules
from embodied_ws.assistant.sources import Chunk
from embodied_ws.assistant.templates import Template, builtin_templates

if TYPE_CHECKING:
    from embodied_ws.assistant.similarity import SimilarityRanker

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

    ``stage`` is ``rule`` when a rule's pattern fired, ``template`` when only a tool's message template
    matched, ``similarity`` when the second stage ranked the id from the log's error lines (``count`` is
    then the number of error lines read). ``raw`` is the stage's score; ``confidence`` is the calibrated
    one (``calibration.py``): the measured chance that this id is the cause.
    """

    rule: Rule
    confidence: float
    count: int
    evidence: list[Evidence] = field(default_factory=list)
    stage: str = "rule"
    raw: float = 0.0
    tool: str = ""

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
            "raw_score": round(self.raw, 3),
            "tool": self.tool,
            "count": self.count,
            "evidence": [{"line": e.line, "text": e.text[:500], "source": e.source} for e in self.evidence],
        }


class Matcher:
    """Compiled form of a rule set and the tool templates: one RE2 set for detection, Python regexes for
    locating."""

    def __init__(self, rules: RuleSet, templates: Iterable[Template] = ()) -> None:
        import re2

        self.rules = rules
        # (rule, "trigger" | "context" | "template" | "symptom", boost)
        self.index: list[tuple[Rule, str, float]] = []
        self.tools: dict[int, str] = {}  # pattern index -> tool, for templates
        self._set = re2.Set.SearchSet()
        self._py: list[re.Pattern[bytes]] = []
        for rule in rules.rules:
            for p in rule.patterns:
                self._add(rule, "trigger", 0.0, p)
            for c in rule.context:
                self._add(rule, "context", c.boost, c.regex)
        known = set(rules.ids())
        for t in templates:
            if t.id in known:
                self.tools[len(self.index)] = t.tool
                self._add(rules.by_id(t.id), "symptom" if t.symptom else "template", t.confidence, t.pattern)
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
    :param ranker: the similarity stage's model (the shipped one by default; the cross-validation passes
        one built from its training folds)
    :param templates: the tool templates (the shipped ones by default)
    :param calibration: raw score → displayed confidence (the shipped map by default; ``IDENTITY``: raw)
    """

    def __init__(
        self,
        rules: RuleSet | None = None,
        ranker: SimilarityRanker | None = None,
        templates: Iterable[Template] | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.matcher = Matcher(rules or builtin_rules(), builtin_templates() if templates is None else templates)
        self.ranker = ranker
        self.calibration = calibration or default_calibration()
        self._templates: dict[str, tuple[float, str]] = {}  # id -> (best template confidence, tool)
        self._locks: dict[str, float] = {}  # id -> best confidence of its error-line (non-symptom) templates
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
            if kind in ("template", "symptom"):
                if boost > self._templates.get(rule.id, (0.0, ""))[0]:
                    self._templates[rule.id] = (boost, self.matcher.tools[i])
                if kind == "template":
                    self._locks[rule.id] = max(boost, self._locks.get(rule.id, 0.0))
            else:
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
        """Rule and template findings, most likely first, then the second stage's; confidences calibrated.

        Order: harmless-noise (``benign``) ids last when the log has error lines; then, when a tool
        template matched, the ids of that template's family first (a log whose error line is a known
        tool message is never answered with another family); then by raw score and earliest evidence.

        :param alternatives: fill the list up to this many entries with similarity-stage findings (ids the
            rules did not find); when no rule fires and the log has error lines, there is always at least one
        """
        out = []
        for rule_id, count in self._count.items():
            rule = self.matcher.rules.by_id(rule_id)
            distinct = len(self._patterns.get(rule_id, ()))
            context = sum(self._context.get(rule_id, {}).values())
            t_conf, tool = self._templates.get(rule_id, (0.0, ""))
            if distinct:
                conf, stage = rule.confidence + 0.02 * (distinct - 1) + context + (0.03 if tool else 0.0), "rule"
            else:
                conf, stage = t_conf + context, "template"
            ev = sorted(self._evidence.get(rule_id, []), key=lambda e: (e.source, e.line))
            out.append(Finding(rule, 0.0, count, ev, stage, raw=max(min(conf, 0.99), 0.01), tool=tool))
        # harmless-noise ids explain a log only when nothing in it failed
        noise_last = self.has_error_lines
        lock = self.template_family()
        out.sort(
            key=lambda f: (
                noise_last and f.rule.category == "benign",
                lock is not None and f.rule.category != lock,
                -f.raw,
                f.evidence[0].line if f.evidence else 0,
            )
        )
        out += self.similar(max(alternatives - len(out), 0), exclude={f.rule.id for f in out})
        for rank, f in enumerate(out):
            f.confidence = self.calibration.apply(f.raw, f.stage, rank)
        return out

    def template_matches(self) -> list[tuple[str, str]]:
        """``(tool, taxonomy id)`` of every tool template that matched, strongest first."""
        return [(tool, tid) for tid, (_c, tool) in sorted(self._templates.items(), key=lambda kv: -kv[1][0])]

    def template_family(self) -> str | None:
        """The family of the strongest tool template that matched (harmless-noise ones only in a log with
        no error line; ``symptom`` templates never), or None."""
        best: tuple[float, str] | None = None
        for rule_id, conf in self._locks.items():
            family = rule_id.split(".", 1)[0]
            if family == "benign" and self.has_error_lines:
                continue
            if best is None or conf > best[0]:
                best = (conf, family)
        return best[1] if best else None

    def is_unsure(self, findings: list[Finding]) -> bool:
        """Whether ``findings`` (from :meth:`findings`) name no cause with enough confidence: the first
        finding's calibrated confidence is below the calibration's threshold."""
        return bool(findings) and findings[0].confidence < self.calibration.threshold

    def similar(self, k: int, exclude: set[str] | None = None) -> list[Finding]:
        """The second stage: up to ``k`` taxonomy ids ranked by similarity to the log's error lines."""
        lines = self.errors.lines()
        if k <= 0 or not lines:
            return []
        from embodied_ws.assistant.similarity import default_ranker

        known = set(self.matcher.rules.ids())
        ranked = [
            c for c in (self.ranker or default_ranker()).rank(document(lines), k + len(exclude or ())) if c.id in known
        ]
        ranked = [c for c in ranked if c.id not in (exclude or set())][:k]
        evidence = [Evidence(ln.line, ln.text, "") for ln in lines[-MAX_EVIDENCE:]]
        return [
            Finding(self.matcher.rules.by_id(c.id), c.confidence, len(lines), evidence, "similarity", raw=c.confidence)
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
