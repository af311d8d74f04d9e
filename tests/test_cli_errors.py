"""Every class of bad input gets one line ``error: <where>: <what>`` and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

#: a plant file (stand-in robot) that is valid
ROOT_PLANT = Path(__file__).resolve().parent / "fixtures" / "plants" / "hidden.yaml"


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
        ("ppo:\n  gamma: 1.5\n", "ppo.gamma", "> 0 and <= 1"),
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
    for verb in ("train", "eval", "robots", "deploy", "record", "sysid", "sysid collect", "sysid fit", "gap"):
        out = cli(*verb.split(), "--help")
        assert out.returncode == 0 and f"example: embodied-ws {verb}" in out.stdout, verb


# ---------------------------------------------------------------- deploy, record, sysid, gap (issue 9)
@pytest.fixture(scope="module")
def arm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An exported (untrained) arm3 reach policy in a run folder."""
    from deploy_helpers import untrained_run

    return untrained_run(tmp_path_factory.mktemp("cli_errors") / "arm")


@pytest.fixture(scope="module")
def foreign_run(arm_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The arm3 policy in a run whose config says cartpole: a policy for another robot."""
    import shutil

    run = tmp_path_factory.mktemp("cli_errors_foreign") / "cartpole"
    shutil.copytree(arm_run, run)
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text().replace("robot: arm3", "robot: cartpole").replace("task: reach", "task: swingup"))
    return run


def _other_robot_bag(path: Path) -> Path:
    """A short bag of a two-joint robot (joints a, b)."""
    from test_bag import FA, JS, float_array, joint_state

    from embodied_ws.data.bag import BagWriter, typestore

    store = typestore()
    with BagWriter(path, {"/joint_states": JS, "/x/commands": FA}) as w:
        for i in range(30):
            w.write_message("/joint_states", 10**9 + i * 40_000_000, joint_state(store, i * 0.04, [0.0, 0.0]))
            w.write_message("/x/commands", 10**9 + i * 40_000_000 + 1, float_array(store, [0.0, 0.0]))
    return path


def test_new_verbs_reject_bad_input_with_one_line(cli, tmp_path: Path) -> None:
    """Inputs checked before any ROS node or simulation starts."""
    taken = tmp_path / "taken"
    taken.mkdir()
    gone = str(tmp_path / "gone")
    cases = [
        (("record", "--out", str(taken), "--duration", "3"), ("taken", "bag already exists")),
        (("record", "--out", gone, "--duration", "0"), ("--duration", "must be > 0")),
        (("sysid", "collect", "--robot", "nosuchbot", "--out", gone), ("env.robot", "unknown robot 'nosuchbot'")),
        (("sysid", "collect", "--robot", "arm3", "--out", str(taken)), ("taken", "bag already exists")),
        (("sysid", "fit", gone, "--robot", "arm3", "--out", str(tmp_path / "o")), ("gone", "bag not found")),
        (("sysid", "fit", str(taken), "--robot", "arm3", "--out", str(tmp_path / "o")), ("taken", "not a rosbag2")),
        (("deploy", gone), ("gone", "no such run or policy folder")),
        (("deploy", str(taken)), ("taken", "not a run or policy folder")),
        (("gap", "ghost", "--runs", str(tmp_path), "--plant", "x.yaml", "--real", gone), ("gap", "exactly one of")),
        (("gap", gone, "--real", gone), ("gone", "not a run folder")),
        (("eval", gone, "--plant", str(ROOT_PLANT)), ("gone", "not a run folder")),
    ]
    for args, fragments in cases:
        _assert_one_line_error(cli(*args), *fragments)


def test_deploy_bad_settings_are_one_line(cli, arm_run: Path, tmp_path: Path) -> None:
    _assert_one_line_error(
        cli("deploy", str(arm_run), "--set", "deploy.max_speed=1"), "deploy.max_speed", "unknown key"
    )
    _assert_one_line_error(cli("deploy", str(arm_run), "--set", "deploy.max_velocity=-1"), "deploy.max_velocity")
    _assert_one_line_error(cli("deploy", str(arm_run), "--duration", "-1"), "--duration", "must be >= 0")
    limits = tmp_path / "limits.yaml"
    limits.write_text("joints:\n  elbw: {lower: -0.5}\n")
    _assert_one_line_error(cli("deploy", str(arm_run), "--check", "--set", f"deploy.limits_file={limits}"),
                           "limits.yaml:2", "unknown joint 'elbw'")  # fmt: skip


def test_a_policy_for_another_robot_is_one_line_in_every_verb(cli, foreign_run: Path) -> None:
    for args in (("deploy", str(foreign_run), "--check"), ("eval", str(foreign_run), "--plant", str(ROOT_PLANT)),
                 ("gap", str(foreign_run), "--plant", str(ROOT_PLANT))):  # fmt: skip
        _assert_one_line_error(cli(*args), "policy.json", "action field 0 is 'base_yaw'", "another robot")


def test_gap_with_a_missing_bag_or_a_bag_of_another_robot_is_one_line(cli, arm_run: Path, tmp_path: Path) -> None:
    _assert_one_line_error(cli("gap", str(arm_run), "--real", str(tmp_path / "nobag")), "nobag", "bag not found")
    bag = _other_robot_bag(tmp_path / "two_joints")
    _assert_one_line_error(cli("gap", str(arm_run), "--real", str(bag)), "two_joints", "a bag of another robot")
    _assert_one_line_error(cli("sysid", "fit", str(bag), "--robot", "arm3", "--out", str(tmp_path / "o")),
                           "two_joints", "a bag of another robot")  # fmt: skip
