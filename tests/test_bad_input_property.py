"""Values are checked where they enter (issue 18, item 5): generated bad input over every verb and config field.

The cases are not written by hand: the tests walk the real ``embodied-ws`` argument parser (every verb, nested
sub-commands too) and the config schema (every section, every field), read the range each numeric option or
field declares, and feed values just and far outside it, NaN, the infinities, 1e300 and a non-number. Every one
must give exit code 2 (a :class:`ConfigError` for the config) and one line naming the option or key, never a
traceback; the bounds themselves (and the defaults) must be accepted, so a declaration says what is accepted.
DR and plant files are generated from the DR parameter registry the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_ws.cli import build_parser, main
from embodied_ws.cli.argtypes import Number
from embodied_ws.config.loader import check_ranges, load_config
from embodied_ws.config.schema import RunConfig, declared_range
from embodied_ws.core.errors import ConfigError
from embodied_ws.core.ranges import Range
from embodied_ws.randomization.appliers import APPLIERS, EnvApplier
from embodied_ws.randomization.plant import load_plant, parse_plant
from embodied_ws.randomization.spec import parse_dr

#: values no numeric option or field accepts
NOT_NUMBERS = ("nan", "inf", "-inf", "1e300", "-1e300", "abc", "")


# ------------------------------------------------------------------ walking the parser
def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every parser reachable from ``parser`` (sub-commands, nested), with the words that select it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases share a parser
                    seen.add(id(sub))
                    yield from _parsers(sub, (*path, name))


def _is_numeric(action: argparse.Action) -> bool:
    if isinstance(action.type, Number) or action.type in (int, float):
        return True
    plain = action.type is None and action.nargs != 0 and not isinstance(action, argparse._SubParsersAction)
    default = action.default
    return plain and isinstance(default, (int, float)) and not isinstance(default, bool)


def _numeric_options() -> list[tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action]]:
    out = []
    for path, parser in _parsers(build_parser()):
        out.extend((path, parser, a) for a in parser._actions if _is_numeric(a))
    return out


OPTIONS = _numeric_options()


def _option_id(case: tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action]) -> str:
    path, _, action = case
    return " ".join((*path, action.option_strings[-1] if action.option_strings else action.dest))


def _placeholder(action: argparse.Action) -> list[str]:
    """A value argparse accepts for a required argument (never run: the tested value fails first)."""
    if isinstance(action.type, Number):
        value = _text(_inside(action.type, action.type.kind)[0])
    elif action.choices:
        value = str(next(iter(action.choices)))
    else:
        value = "x"
    n = action.nargs if isinstance(action.nargs, int) else 1
    return [value] * n


def _required(parser: argparse.ArgumentParser, skip: argparse.Action) -> list[str]:
    """The arguments ``parser`` requires besides ``skip``, each with a placeholder value."""
    words: list[str] = []
    for action in parser._actions:
        if action is skip or not action.required:
            continue
        if isinstance(action, argparse._SubParsersAction):
            name, sub = next(iter(action.choices.items()))
            words += [name, *_required(sub, skip)]
        elif action.option_strings:
            words += [action.option_strings[-1], *_placeholder(action)]
        else:
            words += _placeholder(action)
    return words


def _text(v: float) -> str:
    return str(v) if isinstance(v, int) else repr(float(v))


def _outside(r: Range, kind: type) -> list[float]:
    """Values just and far outside the declared range."""
    out: list[float] = []
    if r.low is not None:
        just = r.low if r.low_open else (r.low - 1 if kind is int else math.nextafter(r.low, -math.inf))
        out += [just, r.low - 1000 if kind is int else r.low - abs(r.low) - 1.0]
    if r.high is not None:
        just = r.high if r.high_open else (r.high + 1 if kind is int else math.nextafter(r.high, math.inf))
        out += [just, r.high * 10 + 1000]
    return out


def _inside(r: Range, kind: type) -> list[float]:
    """Values the declared range accepts: its closed bounds, or the nearest numbers inside open ones."""
    out: list[float] = []
    for bound, is_open, direction in ((r.low, r.low_open, math.inf), (r.high, r.high_open, -math.inf)):
        if bound is None:
            continue
        if not is_open:
            out.append(bound)
        elif kind is int:
            out.append(bound + (1 if direction > 0 else -1))
        else:
            out.append(math.nextafter(bound, direction))
    return [kind(v) for v in out]


def _accepted(r: Range, kind: type, text: str) -> bool:
    """The oracle: what the declaration says about ``text`` (written out here, apart from the code under test)."""
    try:
        v = int(text) if kind is int else float(text)
    except ValueError:
        return False
    if v != v or v in (math.inf, -math.inf):
        return False
    above = r.low is None or (v > r.low if r.low_open else v >= r.low)
    below = r.high is None or (v < r.high if r.high_open else v <= r.high)
    return above and below


def _numbers(r: Range) -> st.SearchStrategy[str]:
    """Texts of numbers anywhere, and near the declared bounds, NaN and the infinities included."""
    near = [st.floats(b - 2.0, b + 2.0) for b in (r.low, r.high) if b is not None]
    floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), *near).map(repr)
    ints = st.one_of(st.integers(-(10**20), 10**20), *[st.integers(int(b) - 3, int(b) + 3) for b in (r.low, r.high)
                                                       if b is not None]).map(str)  # fmt: skip
    return st.one_of(floats, ints)


def _run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    return int(stop.value.code), capsys.readouterr().err


def _assert_one_line(code: int, err: str, *fragments: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


# ------------------------------------------------------------------ the CLI
def test_the_walk_finds_every_verb_and_the_options_the_issue_names() -> None:
    """The walk reaches nested sub-commands and the options whose bad values were accepted before."""
    ids = {_option_id(c) for c in OPTIONS}
    named = [
        *("sysid collect --max-step", "sysid collect --wait", "sysid fit --segment", "gap --episodes"),
        *("plan --steps-per-s", "plan --llm-ctx", "plan --vla-params", "vla eval --episodes", "deploy --duration"),
    ]
    for expected in named:
        assert expected in ids, sorted(ids)
    verbs = {path[0] for path, _ in _parsers(build_parser()) if path}
    assert {"train", "eval", "plan", "tune", "sysid", "gap", "record", "record-demos", "vla", "deploy"} <= verbs


@pytest.mark.parametrize("case", OPTIONS, ids=_option_id)
def test_every_numeric_option_declares_its_range(case) -> None:
    _, _, action = case
    assert isinstance(action.type, Number), f"{_option_id(case)}: declare a range (embodied_ws.cli.argtypes)"
    assert action.type.low is not None and action.type.high is not None, "both bounds are declared"
    if action.default is not None:
        values = action.default if isinstance(action.default, list) else [action.default]
        values = [action.type(v) if isinstance(v, str) else v for v in values]  # argparse parses a str default
        assert all(action.type.contains(v) for v in values), f"default {action.default} outside its own range"


@pytest.mark.parametrize("case", OPTIONS, ids=_option_id)
def test_every_numeric_option_refuses_values_outside_its_range(case, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 and one line naming the option for each generated bad value, in-process (the real ``main``)."""
    path, parser, action = case
    kind = action.type.kind
    bad = [_text(v) for v in _outside(action.type, kind)] + list(NOT_NUMBERS)
    if kind is int:
        bad += ["1.5", "1e3"]
    base = [*path, *_required(parser, action)]
    option = action.option_strings[-1]
    n = action.nargs if isinstance(action.nargs, int) else 1
    good = _text(_inside(action.type, kind)[0])
    checked = 0
    for value in bad:
        if n == 1:
            argv = [*base, f"{option}={value}"]  # '=': a value like -inf is not taken for an option
        elif not value or (value.startswith("-") and not parser._negative_number_matcher.match(value)):
            continue  # argparse itself takes it for an option; the = form does not exist for nargs > 1
        else:
            argv = [*base, option, value, *[good] * (n - 1)]
        code, err = _run_in_process(argv, capsys)
        _assert_one_line(code, err, option, action.type.describe(), repr(value))  # the line states the range
        checked += 1
    assert checked >= len(bad) - 3  # nargs > 1: '', '-inf' and '-1e300' are taken for options by argparse


@pytest.mark.parametrize("case", OPTIONS, ids=_option_id)
def test_every_numeric_option_accepts_its_bounds(case) -> None:
    """The declared bounds are the accepted ones (parsing only: no verb runs)."""
    path, parser, action = case
    n = action.nargs if isinstance(action.nargs, int) else 1
    option = action.option_strings[-1]
    for value in _inside(action.type, action.type.kind):
        words = [f"{option}={_text(value)}"] if n == 1 else [option, *[_text(value)] * n]
        ns = build_parser().parse_args([*path, *_required(parser, action), *words])
        assert getattr(ns, action.dest) == ([value] * n if n > 1 else value)


PARSER = build_parser()


@pytest.mark.parametrize("case", OPTIONS, ids=_option_id)
@settings(max_examples=60, deadline=None, database=None)
@given(data=st.data())
def test_random_values_are_accepted_exactly_inside_the_declared_range(case, data) -> None:
    """Hypothesis: any number (near the bounds, huge, NaN, inf) parses iff the declaration says it is inside."""
    path, parser, action = case
    text = data.draw(_numbers(action.type))
    n = action.nargs if isinstance(action.nargs, int) else 1
    option = action.option_strings[-1]
    if n > 1 and text.startswith("-") and not parser._negative_number_matcher.match(text):
        text = text[1:]  # argparse itself would take it for an option
    words = [f"{option}={text}"] if n == 1 else [option, *[text] * n]
    try:
        ns = PARSER.parse_args([*path, *_required(parser, action), *words])
    except SystemExit:
        ok = False
    else:
        ok = True
        got = getattr(ns, action.dest)
        assert (got[0] if n > 1 else got) == action.type.kind(float(text))
    assert ok == _accepted(action.type, action.type.kind, text), (option, text)


def test_argparse_errors_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    """Missing and unknown arguments, bad choices: the same one-line form."""
    cases = [
        ([], "required"),
        (["train", "--bogus"], "--bogus"),
        (["sysid"], "required"),
        (["sysid", "collect", "--robot", "arm3"], "--out"),
        (["robot", "draw", "x"], "invalid choice"),
        (["vla", "check", "d", "--policy", "gpt"], "--policy"),
    ]
    for argv, fragment in cases:
        code, err = _run_in_process(argv, capsys)
        _assert_one_line(code, err, fragment)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["sysid", "collect", "--robot", "arm3", "--out", "{tmp}/b", "--max-step", "-1"], ["--max-step", "> 0"]),
        (["sysid", "collect", "--robot", "arm3", "--out", "{tmp}/b", "--wait", "-1"], ["--wait", "> 0"]),
        (["sysid", "fit", "{tmp}/bag", "--robot", "arm3", "--out", "{tmp}/o", "--segment", "0"], ["--segment"]),
        (["gap", "run", "--plant", "p.yaml", "--episodes", "0"], ["--episodes", ">= 1"]),
        (["plan", "--steps-per-s", "inf"], ["--steps-per-s", "'inf'"]),
        (["plan", "--steps-per-s", "1000", "--llm-ctx", "-5"], ["--llm-ctx", "'-5'"]),
        (["deploy", "run", "--duration", "nan"], ["--duration", "'nan'"]),
        (["plan", "--steps-per-s", "1000", "--set", "ppo.gamma=.nan"], ["ppo.gamma", "got nan"]),
        (["plan", "--steps-per-s", "1000", "--set", "deploy.max_step=1.0e+300"], ["deploy.max_step", "<= 10"]),
    ],
    ids=[
        "collect-max-step",
        "collect-wait",
        "fit-segment",
        "gap-episodes",
        "plan-inf",
        "llm-ctx",
        "deploy-nan",
        "set-nan",
        "set-1e300",
    ],
)
def test_the_reported_cases_in_a_subprocess(cli, tmp_path: Path, argv: list[str], fragments: list[str]) -> None:
    """The values the issue found accepted, the way users run them: one line, exit 2, nothing created."""
    proc = cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    _assert_one_line(proc.returncode, proc.stderr, *fragments)
    assert proc.stdout == ""
    assert not any(tmp_path.iterdir()), "nothing is written for bad input"


# ------------------------------------------------------------------ the config schema
_NUMBER_TYPES = (int, float)


def _numeric_kind(tp: Any) -> tuple[type, bool] | None:
    """``(int|float, is_list)`` for a numeric annotation (``float | None`` too); None otherwise."""
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        kind = _numeric_kind(item)
        return (kind[0], True) if kind and not kind[1] else None
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        return _numeric_kind(arms[0]) if len(arms) == 1 else None
    return (tp, False) if tp in _NUMBER_TYPES else None


def _fields(cls: type = RunConfig, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, type, bool]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _fields(tp, key)
            continue
        kind = _numeric_kind(tp)
        if kind is not None:
            yield key, f, kind[0], kind[1]


FIELDS = list(_fields())


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).split("\n")[0]


def _default_list(key: str) -> list[Any]:
    obj: Any = RunConfig()
    for part in key.split("."):
        obj = getattr(obj, part)
    return list(obj)


def test_the_schema_walk_finds_every_section() -> None:
    sections = {key.split(".")[0] for key, *_ in FIELDS}
    assert sections == {"env", "task", "ppo", "train", "ros", "vla", "deploy"}
    assert {"train.ray.actors", "deploy.max_step", "env.image_size", "task.target_min_z"} <= {k for k, *_ in FIELDS}


@pytest.mark.parametrize(("key", "f", "kind", "is_list"), FIELDS, ids=[k for k, *_ in FIELDS])
def test_every_numeric_config_field_declares_its_range(key: str, f: dataclasses.Field, kind: type, is_list: bool):
    declared = declared_range(f)
    assert declared is not None, f"{key}: declare its range in embodied_ws/config/ (num(...) or within(...))"
    assert declared.low is not None and declared.high is not None, f"{key}: both bounds are declared"


@pytest.mark.parametrize(("key", "f", "kind", "is_list"), FIELDS, ids=[k for k, *_ in FIELDS])
def test_every_numeric_config_field_refuses_values_outside_its_range(
    key: str, f: dataclasses.Field, kind: type, is_list: bool, tmp_path: Path
) -> None:
    """``--set key=value`` and the same value in a YAML file: a one-line ConfigError naming the key."""
    declared = declared_range(f)
    assert declared is not None
    bad: list[Any] = [*_outside(declared, kind), math.nan, math.inf, -math.inf, 1e300, -1e300, "abc"]
    if kind is int:
        bad.append(1.5)
    section, _, name = key.rpartition(".")
    for value in bad:
        if is_list:
            items = _default_list(key) or [0]
            value = [value, *items[1:]]
        text = _yaml(value)
        with pytest.raises(ConfigError) as err:
            load_config(None, [f"{key}={text}"])
        line = err.value.line()
        assert "\n" not in line and line.startswith("error: ")
        assert key in line, line
        nested: Any = {name: value}
        for part in reversed(section.split(".")):
            nested = {part: nested}
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(yaml.safe_dump(nested))
        with pytest.raises(ConfigError) as err:
            load_config(cfg)
        assert "\n" not in err.value.line()
        assert key in err.value.line() or f"{cfg}:" in err.value.line(), err.value.line()


@pytest.mark.parametrize(("key", "f", "kind", "is_list"), FIELDS, ids=[k for k, *_ in FIELDS])
def test_every_numeric_config_field_accepts_its_bounds(key: str, f: dataclasses.Field, kind: type, is_list: bool):
    """The declared bounds are what the range check accepts (the default too)."""
    declared = declared_range(f)
    assert declared is not None
    check_ranges(RunConfig())
    for value in _inside(declared, kind):
        cfg = RunConfig()
        obj: Any = cfg
        *parents, name = key.split(".")
        for part in parents:
            obj = getattr(obj, part)
        setattr(obj, name, [value] if is_list else value)
        check_ranges(cfg)


@pytest.mark.parametrize(("key", "f", "kind", "is_list"), FIELDS, ids=[k for k, *_ in FIELDS])
@settings(max_examples=60, deadline=None, database=None)
@given(data=st.data())
def test_random_config_values_pass_the_range_check_exactly_inside_the_declared_range(
    key: str, f: dataclasses.Field, kind: type, is_list: bool, data
) -> None:
    """Hypothesis: :func:`check_ranges` accepts a value iff the schema's declaration says it is inside."""
    declared = declared_range(f)
    assert declared is not None
    text = data.draw(_numbers(declared))
    if kind is int and not _accepted(Range(), int, text):
        return  # not an int: the loader's type check refuses it before any range check
    value = int(text) if kind is int else float(text)
    cfg = RunConfig()
    obj: Any = cfg
    *parents, name = key.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, name, [value] if is_list else value)
    try:
        check_ranges(cfg)
    except ConfigError as err:
        assert key in err.line() and "\n" not in err.line()
        ok = False
    else:
        ok = True
    assert ok == _accepted(declared, kind, text), (key, text)


# ------------------------------------------------------------------ plant files
@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "sets at least one parameter"),
        ("params: {}\n", "sets at least one parameter"),
        ("# only a comment\n", "sets at least one parameter"),
        ("enabled: false\nparams:\n  joint_damping: {range: [2, 2]}\n", "always applied"),
        ("params:\n  joint_damping: {range: [-1, -1], mode: scale}\n", "a scale must be > 0"),
        ("params:\n  body_mass: {range: [0, 0]}\n", "a scale must be > 0"),
        ("params:\n  actuator_gain: {range: [.nan, .nan]}\n", "finite"),
        ("params:\n  body_mass: {range: [.inf, .inf], mode: set}\n", "finite"),
    ],
    ids=["empty", "no-params", "comment-only", "disabled", "negative-scale", "zero-scale", "nan", "inf"],
)
def test_bad_plant_files_are_one_line(cli, tmp_path: Path, text: str, fragment: str) -> None:
    plant = tmp_path / "p.yaml"
    plant.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        load_plant(plant)
    _assert_one_line(*_proc(cli("eval", "somerun", "--plant", str(plant))), "p.yaml", fragment)


def _proc(proc: Any) -> tuple[int, str]:
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("name", APPLIERS.names())
def test_every_dr_parameter_refuses_non_finite_ranges_and_a_plant_its_non_positive_scales(name: str) -> None:
    """Generated from the DR registry: NaN/inf in any DR range, a scale <= 0 in a plant, one line naming the entry."""
    for bad in ([math.nan, 1.0], [0.0, math.inf], [-math.inf, 0.0], [math.nan, math.nan]):
        with pytest.raises(ConfigError, match="must be finite") as err:
            parse_dr({"params": {name: {"range": bad}}}, "dr.yaml")
        assert err.value.line() == f"error: dr.yaml:params.{name}.range: 'range' must be finite numbers, got {bad!r}"
    if isinstance(APPLIERS.get(name), EnvApplier):
        return  # latency and noise are values, not scales of a model quantity
    for scale in (0.0, -1.0, -1e300):
        with pytest.raises(ConfigError, match="a scale must be > 0") as err:
            parse_plant({"params": {name: {"range": [scale, scale], "mode": "scale"}}}, "p.yaml")
        assert name in err.value.line() and "\n" not in err.value.line()


def test_a_dr_file_with_nan_is_one_line_in_a_subprocess(cli, tmp_path: Path) -> None:
    dr = tmp_path / "dr.yaml"
    dr.write_text("params:\n  body_mass: {range: [.nan, 1.2]}\n")
    proc = cli("plan", "--steps-per-s", "1000", "--set", f"dr={dr}")
    _assert_one_line(proc.returncode, proc.stderr, "dr.yaml:2", "must be finite")


def test_a_plant_keeps_what_is_valid() -> None:
    """Zero noise and latency are values (not scales); an offset may be negative."""
    plant = parse_plant(
        {
            "params": {
                "action_noise": {"range": [0, 0]},
                "action_latency": {"range": [0, 0], "mode": "set"},
                "body_com": {"range": [-0.01, -0.01], "mode": "offset"},
            }
        }
    )
    assert plant.action_noise == 0.0 and plant.action_latency == 0 and plant.value("body_com") == -0.01
