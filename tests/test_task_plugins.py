"""Your own task, in your own package: ``env.task`` as a ``module:attr`` path or an ``embodied_ws.tasks`` entry point.

The in-process tests write small task modules (and a distribution's metadata, the way pip installs one) into a
temporary folder on ``sys.path``. The venv tests install ``tests/fixtures/task_plugin`` with pip into a fresh
venv layered over the test venv (the test venv is not modified) and train its task through the CLI: by
``module:attr``, by entry-point name (with ``subproc`` workers), evaluated, resumed, and through the ROS-topic env.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "task_plugin"

#: a task that follows the protocol without subclassing Task (optional members come from Task)
PROTOCOL_TASK = """
import numpy as np

class Hold:
    needs_ee = False
    free_space = True

    def __init__(self, robot, cfg):
        self.robot, self.cfg = robot, cfg
        self.obs_dim = {obs_dim}
        self.goal_dim = 1

    def sample_goal(self, rng):
        return np.array([rng.uniform(-0.5, 0.5)])

    def initial_qpos(self, rng):
        return self.robot.home_qpos.copy()

    def observe(self, qpos, qvel, sensordata, goal):
        return np.concatenate([qpos[:, self.robot.qpos_idx], goal], axis=1)

    def evaluate(self, qpos, qvel, sensordata, goal, action):
        err = np.abs(qpos[:, self.robot.qpos_idx[0]] - goal[:, 0])
        return -err, err < 0.1, {terms}
"""


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _core(task: str, n: int = 2) -> EnvCore:
    cfg = load_config("reach", [f"env.task={task}", "dr=none"])
    return EnvCore(cfg, load_dr(cfg.dr), n, 0)


def _refused(task: str) -> str:
    with pytest.raises(UserError) as err:
        _core(task)
    line = err.value.line()
    assert "\n" not in line and line.startswith("error: env.task: "), line
    return line


def _step(core: EnvCore) -> dict[str, np.ndarray]:
    for i in range(core.n):
        core.begin_episode(i)
    q = np.tile(core.robot.home_qpos, (core.n, 1))
    z = np.zeros((core.n, core.robot.model.nv))
    s = np.zeros((core.n, core.robot.model.nsensordata))
    a, bad = np.zeros((core.n, core.robot.nu)), np.zeros(core.n, bool)
    obs, reward, success, _, _, terms = core.finish_step(q, z, s, a, bad)
    assert obs.shape == (core.n, core.obs_dim) and reward.shape == (core.n,) and success.dtype == bool
    return terms


def test_a_protocol_class_by_module_attr_runs_with_task_defaults(tmp_path, monkeypatch) -> None:
    terms = '{"error": -err}'
    mod = _module(tmp_path, monkeypatch, "my_hold", PROTOCOL_TASK.format(obs_dim=4, terms=terms))
    core = _core(f"{mod}:Hold")
    assert list(_step(core)) == ["error"]
    assert core.obs_names()[:4] == ["obs_0", "obs_1", "obs_2", "obs_3"]  # Task's default
    assert core.task.goal_markers(np.zeros(1)) == {}
    assert not TASKS.is_builtin(f"{mod}:Hold") and TASKS.reference(f"{mod}:Hold") == f"{mod}:Hold"


def test_the_fixture_task_subclass_by_module_attr(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURE))
    core = _core("plugin_pkg.tasks:HoldPose")
    assert set(_step(core)) == {"pose_error", "velocity", "success"}
    assert core.obs_names()[0] == "q/base_yaw" and core.task.goal_dim == core.robot.nu


@pytest.mark.parametrize(
    ("source", "ref", "expect"),
    [
        ("def Hold(robot, cfg):\n    return None\n", "Hold", "is a function, not a task class"),
        ("class Hold:\n    def observe(self):\n        pass\n", "Hold",
         "does not follow the Task protocol: missing sample_goal, initial_qpos, evaluate"),
        ("from embodied_ws.sim.tasks import Task\nclass Hold(Task):\n    pass\n", "Hold",
         "missing evaluate, initial_qpos, observe, sample_goal"),
        ("X = 1\n", "Hold", "has no attribute 'Hold'"),
        ("import not_installed_dependency_xyz\n", "Hold",
         "failed: ModuleNotFoundError: No module named 'not_installed_dependency_xyz'"),
        ("raise RuntimeError('no\\nlicence')\n", "Hold", "failed: RuntimeError: no licence"),
        (PROTOCOL_TASK.format(obs_dim=5, terms='{"error": -err}'), "Hold",
         "observe's observation has shape (1, 4), expected (1, 5)"),
        (PROTOCOL_TASK.format(obs_dim=4, terms="{}"), "Hold", "evaluate's terms must be a non-empty dict naming"),
        (PROTOCOL_TASK.format(obs_dim=4, terms='{"error": err[:, None]}'), "Hold",
         "reward term 'error' has shape (1, 1), expected (1,)"),
        (PROTOCOL_TASK.format(obs_dim="None", terms='{"error": -err}'), "Hold", "obs_dim must be an int >= 1"),
        (PROTOCOL_TASK.format(obs_dim=4, terms="{}").replace("self.robot, self.cfg = robot, cfg",
                                                             "raise ValueError('needs a gripper')"),
         "Hold", "failed to start: ValueError: needs a gripper"),
        (PROTOCOL_TASK.format(obs_dim=4, terms="{}").replace("return self.robot.home_qpos.copy()", "return [0.0]"),
         "Hold", "initial_qpos has shape (1,), expected (3,)"),
    ],
)  # fmt: skip
def test_a_bad_task_class_is_one_line_naming_what_is_wrong(tmp_path, monkeypatch, source, ref, expect) -> None:
    name = f"bad_task_{abs(hash((source, ref))) % 10**8}"
    mod = _module(tmp_path, monkeypatch, name, source)
    line = _refused(f"{mod}:{ref}")
    assert expect in line and f"{mod}:{ref}" in line, line


@pytest.mark.parametrize("ref", ["nope_module_xyz:Task", "a:b:c", "mod:1x", ".rel:Task", "m:os.system('x')"])
def test_a_path_that_cannot_be_imported_is_refused_in_one_line(ref: str) -> None:
    line = _refused(ref)
    assert "no module named 'nope_module_xyz'" in line or "is not a module:attr path" in line, line


def _install_metadata(site: Path, dist: str, entries: dict[str, str]) -> None:
    """What pip writes for a package declaring ``embodied_ws.tasks`` entry points (a ``.dist-info`` folder)."""
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[embodied_ws.tasks]\n{lines}")


def test_entry_points_are_names_and_a_broken_one_breaks_nothing_else(tmp_path, monkeypatch) -> None:
    mod = _module(tmp_path, monkeypatch, "ep_tasks", PROTOCOL_TASK.format(obs_dim=4, terms='{"error": -err}'))
    (tmp_path / "ep_broken.py").write_text("raise ImportError('needs libfoo.so')\n")
    entries = {"ep_hold": f"{mod}:Hold", "ep_broken": "ep_broken:Task", "reach": "x:Y", "ep_dup": f"{mod}:Hold"}
    _install_metadata(tmp_path, "ep_pkg", entries)
    assert {"ep_hold", "ep_broken"} <= set(TASKS.plugin_names()) and "reach" not in TASKS.plugin_names()
    assert list(_step(_core("ep_hold"))) == ["error"]
    assert TASKS.reference("ep_hold") == f"{mod}:Hold"  # what the run's config.yaml records
    line = _refused("ep_broken")
    assert "entry point ep_broken = ep_broken:Task in embodied_ws.tasks, package ep_pkg 1.0" in line, line
    assert "ImportError: needs libfoo.so" in line
    assert type(_core("reach").task).__name__ == "ReachTask"  # the built-in wins over a plugin of its name
    assert "unknown task 'ep_nothing'" in _refused("ep_nothing")
    _install_metadata(tmp_path / "other", "other_pkg", {"ep_dup": "other:Hold"})
    monkeypatch.syspath_prepend(str(tmp_path / "other"))
    line = _refused("ep_dup")
    assert "task 'ep_dup' is declared by several packages" in line and "package other_pkg 1.0: other:Hold" in line


def test_the_cli_imports_a_task_module_from_the_current_folder_and_refuses_bad_ones(tmp_path: Path) -> None:
    (tmp_path / "cwd_tasks.py").write_text("class NotATask:\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", "train", "--task", "cwd_tasks:NotATask", "--runs", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: env.task: 'cwd_tasks:NotATask' does not follow the Task protocol: "
        "missing sample_goal, initial_qpos, observe, evaluate"
    ]


# ---------------------------------------------------------------------- the fixture package, pip-installed
#: a .pth line: the test venv's packages (and their own .pth hooks) visible in the plugin venv
BRIDGE = "import site; site.addsitedir({site!r})\n"
TINY = ["train.n_envs=4", "ppo.n_steps=64", "ppo.batch_size=128", "ppo.n_epochs=1", "train.eval_every=0",
        "train.checkpoint_every=256", "train.curriculum_steps=0", "train.final_eval_episodes=0", "dr=none"]  # fmt: skip


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv over the test venv holding ``plugin-pkg`` installed the way a user installs it (``pip install -e``)."""
    import sysconfig

    work = tmp_path_factory.mktemp("plugin")
    src = work / "task_plugin"  # a copy: the editable install writes its metadata next to the sources
    shutil.copytree(FIXTURE, src, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz_test_venv_packages.pth").write_text(BRIDGE.format(site=sysconfig.get_paths()["purelib"]))
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
         "--no-build-isolation", "--no-index", "-q", "-e", str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return venv


def _cli(venv: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``embodied-ws ARGS`` with the plugin venv's python, from ``cwd`` (the fixture's sources nowhere on the path)."""
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "embodied_ws.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _train(venv: Path, runs: Path, name: str, task: str | None, *sets: str) -> subprocess.CompletedProcess:
    args = ["train", "--name", name, "--runs", str(runs), "--json"]
    args += ["--task", task] if task else ["--resume"]
    return _cli(venv, runs, *args, *[a for s in sets for a in ("--set", s)])


@pytest.mark.slow
def test_plugin_task_by_module_attr_trains_evaluates_and_resumes(plugin_venv: Path, tmp_path: Path) -> None:
    proc = _train(plugin_venv, tmp_path, "hold", "plugin_pkg.tasks:HoldPose", *TINY, "train.total_timesteps=512")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["steps"] >= 512
    run = tmp_path / "hold"
    assert yaml.safe_load((run / "config.yaml").read_text())["env"]["task"] == "plugin_pkg.tasks:HoldPose"
    meta = json.loads((run / "policy" / "policy.json").read_text())
    assert meta["task"] == "plugin_pkg.tasks:HoldPose"
    ev = _cli(plugin_venv, tmp_path, "eval", "hold", "--runs", str(tmp_path), "--episodes", "2", "--no-video", "--json")
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads(ev.stdout)["episodes"] == 2
    proc = _train(plugin_venv, tmp_path, "hold", None, "train.total_timesteps=1024")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["steps"] >= 1024


@pytest.mark.slow
def test_plugin_task_by_entry_point_name_with_subprocess_workers(plugin_venv: Path, tmp_path: Path) -> None:
    listed = _cli(plugin_venv, tmp_path, "robots", "--json")
    assert listed.returncode == 0 and "hold_pose" in json.loads(listed.stdout)["task_plugins"], listed.stderr
    sets = [*TINY, "train.vec_env=subproc", "train.n_envs=2", "train.total_timesteps=256"]
    proc = _train(plugin_venv, tmp_path, "byname", "hold_pose", *sets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = yaml.safe_load((tmp_path / "byname" / "config.yaml").read_text())
    assert saved["env"]["task"] == "plugin_pkg.tasks:HoldPose"  # the entry point's target, found again on resume
    broken = _train(plugin_venv, tmp_path, "broken", "broken_task", *TINY, "train.total_timesteps=256")
    assert broken.returncode == 2 and "Traceback" not in broken.stderr, broken.stderr[-3000:]
    (line,) = broken.stderr.strip().splitlines()
    assert "entry point broken_task = plugin_pkg.broken:Task" in line and "package plugin-pkg 0.1.0" in line, line
    assert "ImportError: plugin_pkg.broken needs a library this machine lacks" in line
    code = "from embodied_ws.sim.tasks import TASKS; print(TASKS.get('reach').__name__)"
    builtin = subprocess.run([str(plugin_venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    assert builtin.stdout.strip() == "ReachTask", builtin.stderr  # the broken plugin breaks no built-in task


@pytest.mark.slow
@pytest.mark.ros
def test_plugin_task_trains_through_the_ros_topic_env(plugin_venv: Path, tmp_path: Path) -> None:
    from ros_helpers import stop

    task = "plugin_pkg.tasks:HoldPose"
    node = [str(plugin_venv / "bin" / "python"), "-m", "embodied_ws.ros.nodes.mujoco_sim_node", "--ros-args"]
    params = ["mode:=lockstep", "seed:=0", f"env.task:={task}"]
    sim = subprocess.Popen(
        [*node, *[a for p in params for a in ("-p", p)]],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        sets = ["train.vec_env=ros", "train.n_envs=1", "ppo.n_steps=128", "ppo.batch_size=64", "ppo.n_epochs=1",
                "train.eval_every=0", "train.curriculum_steps=0", "train.final_eval_episodes=0",
                "train.total_timesteps=256"]  # fmt: skip
        proc = _train(plugin_venv, tmp_path, "rosrun", task, *sets)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout)["steps"] >= 256
    finally:
        out = stop(sim)
    assert f"arm3/{task} in lockstep mode" in out, out[-3000:]


@pytest.mark.slow
def test_a_task_module_in_the_current_folder_reaches_ray_workers(tmp_path: Path) -> None:
    """``--task my_tasks:Cls`` next to the run, not installed, started like the ``embodied-ws`` console script
    (whose folder, not the current one, is ``sys.path[0]``): the Ray actors import it too."""
    pytest.importorskip("ray")
    source = (FIXTURE / "plugin_pkg" / "tasks.py").read_text().replace("class HoldPose", "class HereHold")
    (tmp_path / "here_tasks.py").write_text(source)
    script = tmp_path / "bin" / "embodied-ws"
    script.parent.mkdir()
    script.write_text(  # what pip writes for a console script
        "import sys\nfrom embodied_ws.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n"
    )
    sets = [*TINY, "train.vec_env=ray", "train.ray.actors=2", "train.ray.cpus_per_actor=1", "train.total_timesteps=256"]
    args = ["train", "--task", "here_tasks:HereHold", "--name", "ray", "--runs", str(tmp_path), "--json"]
    proc = subprocess.run(
        [sys.executable, str(script), *args, *[a for s in sets for a in ("--set", s)]],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["steps"] >= 256 and out["actor_restarts"] == 0
