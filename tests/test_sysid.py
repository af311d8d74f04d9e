"""Plants (stand-in robots), the excitation, and the sysid fit on a recording of known parameters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from sysid_helpers import record_plant
from test_cli_errors import _assert_one_line_error

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.randomization.plant import load_plant, parse_plant
from embodied_ws.randomization.spec import DRSpec
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.robot import load_robot
from embodied_ws.sysid.excitation import Excitation
from embodied_ws.sysid.standin import StandInEnv

HIDDEN = ROOT / "tests" / "fixtures" / "plants" / "hidden.yaml"


def test_plant_values_are_applied_and_kept_every_episode() -> None:
    cfg = load_config("reach")
    plant = load_plant(HIDDEN)
    env = StandInEnv(cfg, plant, seed=0)
    nominal = env.core.robot.model
    for ep in range(3):
        env.reset(seed=ep)
        np.testing.assert_allclose(env.model.dof_damping, 2.3 * nominal.dof_damping)
        np.testing.assert_allclose(env.model.dof_armature, 1.5 * nominal.dof_armature)
        np.testing.assert_allclose(env.model.actuator_gainprm[:, 0], 0.78 * nominal.actuator_gainprm[:, 0])
        np.testing.assert_allclose(env.model.actuator_biasprm[:, 1], -0.78 * nominal.actuator_gainprm[:, 0])
        np.testing.assert_allclose(env.model.body_mass, 1.15 * nominal.body_mass)


def test_stand_in_delays_commands_by_the_plant_latency() -> None:
    # joint deltas: a command is a function of the actions alone (ee_delta solves IK at the measured joints, and a
    # late arm stands elsewhere)
    cfg = load_config("reach", ["env.action_mode=delta"])
    plant = parse_plant({"params": {"action_latency": {"range": [2, 2], "mode": "set"}}})
    late, ref = StandInEnv(cfg, plant, seed=3), RobotEnv(cfg, DRSpec(enabled=False), seed=3)
    late.reset(seed=3)
    ref.reset(seed=3)
    held = late.data.ctrl.copy()
    ctrl_late, ctrl_ref = [], []
    for a in np.random.default_rng(0).uniform(-1, 1, (8, 3)):
        late.step(a)
        ref.step(a)
        ctrl_late.append(late.data.ctrl.copy())
        ctrl_ref.append(ref.data.ctrl.copy())
    np.testing.assert_allclose(ctrl_late[0], held)
    np.testing.assert_allclose(ctrl_late[1], held)
    np.testing.assert_allclose(ctrl_late[2:], ctrl_ref[:-2])


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("params:\n  joint_dampin: {range: [2, 2]}\n", "p.yaml:2", "unknown DR parameter 'joint_dampin'"),
        ("params:\n  joint_damping: {range: [1, 2]}\n", "p.yaml:2", "use range: [v, v]"),
        ("params:\n  action_latency: {range: [1.5, 1.5], mode: set}\n", "p.yaml:2", "whole number"),
        ("params:\n  joint_damping: {rnage: [2, 2]}\n", "p.yaml:2", "unknown key 'rnage'"),
    ],
    ids=["typo-name", "not-fixed", "fractional-latency", "typo-key"],
)
def test_plant_typos_are_one_line_errors(cli, tmp_path: Path, text: str, where: str, what: str) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(text)
    with pytest.raises(UserError):
        load_plant(bad)
    _assert_one_line_error(cli("eval", "somerun", "--plant", str(bad)), where, what)
    _assert_one_line_error(cli("gap", "somerun", "--plant", str(bad)), where, what)


def test_excitation_stays_inside_limits_and_saturates_the_servos() -> None:
    robot = load_robot("arm3", need_ee=False)
    low, high = robot.joint_low, robot.joint_high
    sig = Excitation(low, high, 30.0, seed=1)
    start = robot.home_qpos[robot.qpos_idx]
    t = np.arange(0, 30, 0.04)
    sp = np.array([sig(x, start) for x in t])
    assert (sp >= low).all() and (sp <= high).all()
    np.testing.assert_allclose(sp[0], start)
    # step sizes well above the saturation threshold (force limit / kp = 0.2 rad on arm3) occur
    jumps = np.abs(np.diff(sig.levels[0]))
    assert (jumps > 0.26).mean() > 0.3


@pytest.mark.slow
@pytest.mark.parametrize("commands_from", [0.0, 6.0], ids=["whole", "recorder-joined-late"])
def test_fit_recovers_a_known_plant_from_an_in_process_recording(tmp_path: Path, cli, commands_from: float) -> None:
    """The fit recovers the hidden plant; a recording whose first 6 s have states but no commands (the recorder
    discovered the command topic late) is fitted from its first command on, not as 6 s of held commands."""
    robot = load_robot("arm3", need_ee=False)
    bag = tmp_path / "rec"
    record_plant(robot, load_plant(HIDDEN), 30.0 + commands_from, bag, commands_from=commands_from)
    proc = cli("sysid", "fit", str(bag), "--robot", "arm3", "--out", str(tmp_path / "fit"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    print({k: out[k] for k in ("params", "rmse_before", "rmse_after", "weakly_identifiable", "seconds")})
    assert out["action_latency"] == 2
    assert out["rmse_after"] <= 0.2 * out["rmse_before"]
    assert abs(out["params"]["joint_damping"] / 2.3 - 1) < 0.15
    assert abs(out["params"]["actuator_gain"] / 0.78 - 1) < 0.15
    for f in ("fit.yaml", "dr.yaml", "overlay_before.png", "overlay_after.png", "fit.json"):
        assert (tmp_path / "fit" / f).is_file()
    fitted = load_plant(tmp_path / "fit" / "fit.yaml")  # the fit is a valid plant file ...
    assert fitted.action_latency == 2
    dr = load_dr(str(tmp_path / "fit" / "dr.yaml"))  # ... and dr.yaml a valid DR file centred on it
    gain = dr.get("actuator_gain")
    assert gain.low < out["params"]["actuator_gain"] < gain.high
    assert dr.get("action_latency").low == 2
    # identifiability from the Jacobian: the four parameters the plant changed are pinned down (relative std
    # error under 5 %), their DR ranges narrow around the truth; only the friction loss the excitation
    # hardly moves may be flagged
    _assert_pinned_down(out, dr, tmp_path / "fit" / "dr.yaml")
    # the overlays show the whole recording and say where the replay starts
    span = out["overlays"]
    assert span["from_s"] == 0.0 and span["to_s"] >= 30.0 + commands_from - 0.1, span
    assert abs(span["replayed_from_s"] - commands_from) < 0.1, span


#: the hidden plant's true scales of the parameters it changes
TRUE = {"joint_damping": 2.3, "joint_armature": 1.5, "actuator_gain": 0.78, "body_mass": 1.15}


def _assert_pinned_down(out: dict, dr: DRSpec, dr_file: Path) -> None:
    """The four changed parameters are identified (not flagged, small std error) and their dr.yaml range
    contains the truth and is narrower than the default DR's."""
    assert set(out["weakly_identifiable"]) <= {"joint_frictionloss"}, out["identifiability"]
    base = load_dr("default")
    for name, true in TRUE.items():
        info = out["identifiability"][name]
        assert not info["weak"] and info["std_log"] < 0.05 and info["inflation"] < 10, (name, info)
        got, wide = dr.get(name), base.get(name)
        assert got.low < true < got.high, (name, got, dr_file.read_text())
        assert np.log(got.high / got.low) < np.log(wide.high / wide.low), (name, got, wide)


def _noisy_plant(tmp_path: Path, obs_noise: float) -> Path:
    """The hidden plant measured through encoders with Gaussian noise of ``obs_noise`` rad (and rad/s)."""
    path = tmp_path / "noisy.yaml"
    path.write_text(HIDDEN.read_text() + f"  obs_noise: {{range: [{obs_noise}, {obs_noise}]}}\n")
    return path


@pytest.mark.slow
def test_a_noisy_recording_flags_only_what_the_jacobian_says(tmp_path: Path, cli) -> None:
    """Encoder noise of 0.03 rad leaves a fit RMSE above the motion a 20 % error in any parameter causes (the old
    rule, effect < RMSE, flagged all five and kept every DR range wide) while 750 states pin the scales to ~1 %:
    only what the Jacobian cannot pin down is flagged, and dr.yaml narrows around the truth."""
    robot = load_robot("arm3", need_ee=False)
    bag = tmp_path / "rec"
    record_plant(robot, load_plant(_noisy_plant(tmp_path, 0.03)), 30.0, bag)
    proc = cli("sysid", "fit", str(bag), "--robot", "arm3", "--out", str(tmp_path / "fit"), "--max-latency", "3",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    print({k: out[k] for k in ("params", "rmse_after", "rmse_systematic", "weakly_identifiable", "identifiability")})
    assert out["action_latency"] == 2
    effects = [v["rmse_from_20pct_error"] for v in out["identifiability"].values()]
    assert out["rmse_after"] > max(effects)  # the situation of the issue: the fit's error exceeds every effect ...
    for name, true in TRUE.items():  # ... on a fit whose values are within 5 %
        assert abs(out["params"][name] / true - 1) < 0.05, (name, out["params"])
    assert out["rmse_systematic"] < 0.2 * out["rmse_after"]  # the remaining error is the white encoder noise
    _assert_pinned_down(out, load_dr(str(tmp_path / "fit" / "dr.yaml")), tmp_path / "fit" / "dr.yaml")


@pytest.mark.slow
def test_a_recording_that_does_not_excite_a_parameter_flags_it(tmp_path: Path) -> None:
    """Slow sinusoids (0.1 Hz): almost no acceleration, so the rotor armature barely moves the joints
    (sensitivity) and only the damping/gain and mass/gain ratios show (collinear columns: variance inflation)."""
    from embodied_ws.sysid.fit import fit
    from embodied_ws.sysid.replay import load_recording

    robot = load_robot("arm3", need_ee=False)

    def slow(t: float, start: np.ndarray) -> np.ndarray:
        return start + 0.3 * np.sin(2 * np.pi * 0.1 * t + np.arange(len(start))) * (1 - np.exp(-t))

    bag = tmp_path / "slow"
    record_plant(robot, load_plant(HIDDEN), 20.0, bag, signal=slow)
    res = fit(robot, load_recording(bag, robot), range(3))
    print(res.scales, res.condition, {k: v["why"] for k, v in res.identifiability.items()})
    ident = res.identifiability
    assert "sensitivity" in ident["joint_armature"]["why"], ident["joint_armature"]
    for name in ("actuator_gain", "body_mass"):
        assert "variance inflation" in ident[name]["why"], (name, ident[name])
    assert {"joint_armature", "actuator_gain", "body_mass"} <= set(res.weak)
    assert res.condition > 1000


def test_a_missing_or_wrong_base_dr_is_one_line_before_the_fit(tmp_path: Path, cli) -> None:
    """--base-dr is read and checked before the bag is even opened (a fit takes a minute): the bag here does not
    exist either, and the line names the --base-dr file; no output folder is left behind."""
    out = tmp_path / "fit"
    args = ("sysid", "fit", str(tmp_path / "no_bag"), "--robot", "arm3", "--out", str(out))
    _assert_one_line_error(cli(*args, "--base-dr", str(tmp_path / "missing.yaml")), "--base-dr", "missing.yaml",
                           "file not found")  # fmt: skip
    _assert_one_line_error(cli(*args, "--base-dr", "nosuchpreset"), "--base-dr nosuchpreset", "no dr preset")
    bad = tmp_path / "dr.yaml"
    bad.write_text("params:\n  joint_dampin: {range: [0.5, 2.0]}\n")
    _assert_one_line_error(cli(*args, "--base-dr", str(bad)), "dr.yaml:2", "unknown DR parameter 'joint_dampin'")
    assert not out.exists()
    # the bag's own error comes once the options are right
    _assert_one_line_error(cli(*args), "no_bag")


def test_eval_and_gap_on_a_plant_write_metrics_report_and_figures(cli, tmp_path: Path) -> None:
    """``eval RUN --plant`` and ``gap RUN --plant``: the run's policy in-process on nominal sim and on the stand-in."""
    from deploy_helpers import untrained_run

    run = untrained_run(tmp_path / "run")
    proc = cli("eval", str(run), "--plant", str(HIDDEN), "--episodes", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    ev = json.loads(proc.stdout)
    assert ev["episodes"] == 3 and 0.0 <= ev["success_rate"] <= 1.0 and ev["plant"] == str(HIDDEN)
    proc = cli("gap", str(run), "--plant", str(HIDDEN), "--episodes", "3", "--out", str(tmp_path / "gap"), "--json")
    assert proc.returncode == 0, proc.stderr
    gap = json.loads(proc.stdout)
    assert gap["sim"]["episodes"] == gap["real"]["episodes"] == 3 and gap["trajectory_rmse_rad"] > 0
    for f in ("report.md", "gap_joints.png", "gap_metrics.png", "gap.json"):
        assert (tmp_path / "gap" / f).stat().st_size > 0, f
    report = (tmp_path / "gap" / "report.md").read_text()
    assert "| success rate |" in report and "stand-in (hidden.yaml)" in report
    for row in report.splitlines():  # every table row has exactly the three columns
        if row.startswith("|"):
            assert row.count("|") == 4, row


def test_gap_on_a_bag_leaves_out_episodes_the_recorder_saw_no_commands_for(cli, tmp_path: Path) -> None:
    """A recorder that discovered the command topic 4 s late: the episodes begun before are left out (replaying a
    hold there would report a made-up gap), the later ones are compared; a bag with no commands after its states
    is one line."""
    from deploy_helpers import untrained_run

    run = untrained_run(tmp_path / "run")
    robot = load_robot("arm3", need_ee=False)
    bag = tmp_path / "late"
    record_plant(robot, load_plant(HIDDEN), 10.0, bag, commands_from=4.0, task_every=2.0)
    proc = cli(
        "gap", str(run), "--real", str(bag), "--sim-plant", str(HIDDEN), "--out", str(tmp_path / "gap"), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    gap = json.loads(proc.stdout)
    assert gap["real"]["episodes"] == 3 and gap["left_out"].startswith("2 episode(s)"), gap
    assert gap["trajectory_rmse_rad"] < 0.01, gap  # the plant itself replays the kept episodes
    assert "left_out" in (tmp_path / "gap" / "report.md").read_text()
    none = tmp_path / "none"
    record_plant(robot, load_plant(HIDDEN), 3.0, none, commands_from=2.5, task_every=2.0)
    proc = cli("gap", str(run), "--real", str(none), "--out", str(tmp_path / "gap2"), "--json")
    _assert_one_line_error(proc, str(none), "after the first recorded command")
