"""Every class of bad input gets one line ``error: <where>: <what>`` and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest


def _assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_unknown_robot(cli) -> None:
    _assert_one_line_error(cli("train", "--robot", "nosuchbot"), "env.robot", "unknown robot 'nosuchbot'", "arm3")


def test_unknown_task(cli) -> None:
    _assert_one_line_error(cli("train", "--task", "juggle"), "env.task", "unknown task 'juggle'", "reach")


def test_missing_mjcf(cli, tmp_path: Path) -> None:
    _assert_one_line_error(cli("train", "--robot", str(tmp_path / "gone.xml")), "gone.xml", "not found")


def test_malformed_mjcf(cli, tmp_path: Path) -> None:
    bad = tmp_path / "broken.xml"
    bad.write_text("<mujoco><worldbody><body name='a'><geom type='sphere'</body></worldbody></mujoco>")
    _assert_one_line_error(cli("train", "--robot", str(bad)), "broken.xml")


def test_mjcf_without_actuators(cli, tmp_path: Path) -> None:
    bad = tmp_path / "passive.xml"
    bad.write_text("<mujoco><worldbody><body><joint/><geom size='0.1'/></body></worldbody></mujoco>")
    _assert_one_line_error(cli("train", "--robot", str(bad)), "passive.xml", "no actuators")


def _yaml(tmp_path: Path, text: str) -> str:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (
            "env:\n  robot: arm3\ntrain:\n  n_envs: 4\n  totl_timesteps: 10\n",
            "cfg.yaml:5",
            "unknown key 'totl_timesteps'",
        ),
        ("train:\n  n_envs: four\n", "cfg.yaml:2", "n_envs must be int"),
        ("ppo:\n  gamma: 1.5\n", "ppo.gamma", "(0, 1]"),
        ("env:\n  robot: [arm3\n", "cfg.yaml:", "invalid YAML"),
    ],
    ids=["unknown-key-names-file-and-line", "bad-type", "bad-range", "syntax-error"],
)
def test_bad_yaml_gives_one_line(cli, tmp_path: Path, text: str, where: str, what: str) -> None:
    _assert_one_line_error(cli("train", "--config", _yaml(tmp_path, text)), where, what)


def test_dr_bad_distribution(cli, tmp_path: Path) -> None:
    dr = tmp_path / "dr.yaml"
    dr.write_text("params:\n  body_mass:\n    dist: gaussian\n    range: [0.8, 1.2]\n")
    _assert_one_line_error(cli("train", "--set", f"dr={dr}"), "dr.yaml:3", "dist must be one of")


def test_dr_unknown_parameter(cli, tmp_path: Path) -> None:
    dr = tmp_path / "dr.yaml"
    dr.write_text("params:\n  wind_speed: {range: [0, 1]}\n")
    _assert_one_line_error(cli("train", "--set", f"dr={dr}"), "dr.yaml:2", "unknown DR parameter 'wind_speed'")


@pytest.mark.parametrize(
    "item,fragments",
    [
        ("train.total_timesteps", ("--set", "expected key=value")),
        ("train.nope=3", ("--set train.nope", "unknown key 'nope'")),
        ("train.total_timesteps=lots", ("--set train.total_timesteps", "must be int")),
        ("train.n_envs=0", ("train.n_envs", "must be > 0")),
    ],
)
def test_bad_set_override(cli, item: str, fragments: tuple[str, ...]) -> None:
    _assert_one_line_error(cli("train", "--set", item), *fragments)


def test_unknown_preset(cli) -> None:
    _assert_one_line_error(cli("train", "--config", "nosuchpreset"), "no train preset", "reach")


def test_resume_without_run(cli, tmp_path: Path) -> None:
    _assert_one_line_error(cli("train", "--resume", "--name", "ghost", "--runs", str(tmp_path)), "ghost")


def test_eval_missing_run(cli, tmp_path: Path) -> None:
    _assert_one_line_error(cli("eval", "ghost", "--runs", str(tmp_path)), "ghost", "not a run folder")


def test_help_has_examples(cli) -> None:
    for verb in ("train", "eval", "robots"):
        out = cli(verb, "--help")
        assert out.returncode == 0 and "example: embodied-ws" in out.stdout
