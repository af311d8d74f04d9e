"""The Ray backend on a local 2-CPU cluster: batched actors, training, a killed actor, checkpoint/resume."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.rl.backends import env_hooks, make_vec_env
from embodied_ws.rl.checkpoint import latest_checkpoint, read_state
from embodied_ws.rl.ray_vec import connect
from embodied_ws.rl.run import TrainingRun
from embodied_ws.sim.hooks import EnvHooks

pytestmark = pytest.mark.slow

SETS = [
    "dr=default",
    "train.vec_env=ray",
    "train.n_envs=4",
    "train.ray.actors=2",
    "train.ray.cpus_per_actor=0.5",  # two backends' actors at once fit on the 2-CPU cluster
    "ppo.n_steps=32",
    "ppo.batch_size=64",
    "ppo.n_epochs=2",
    "train.eval_every=0",
    "train.final_eval_episodes=0",
    "train.checkpoint_every=256",
    "train.curriculum_steps=0",
]


def _ray_processes(psutil) -> list:  # type: ignore[no-untyped-def]
    """This test process's descendants that belong to Ray (GCS, raylet, workers, log monitor ...).

    Python's own multiprocessing helpers are not Ray's: SB3's ``SubprocVecEnv`` (the ``subproc`` backend, run by
    other tests in the same xdist worker) starts a forkserver that lives as long as this process, and its command
    line carries ``sys.path``, Ray's ``thirdparty_files`` included (a false "left behind", 2026-12-08)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(p.cmdline())
            if "ray" in cmdline.lower() and "from multiprocessing." not in cmdline:
                out.append(p)
        except psutil.Error:  # exited meanwhile
            pass
    return out


@pytest.fixture(scope="module")
def ray_cluster():  # type: ignore[no-untyped-def]
    """A local Ray cluster with 2 CPUs for this module (no dashboard, small object store), shut down after it."""
    ray = pytest.importorskip("ray")
    import psutil

    connect(None, num_cpus=2, object_store_mb=100)
    yield ray
    ray.shutdown()
    # ray.shutdown() stops them all, but on a loaded machine (the parallel `make test`) a worker took over 15 s to
    # notice its raylet was gone (CI, 2026-12-06): a minute before one counts as left behind
    _, alive = psutil.wait_procs(_ray_processes(psutil), timeout=60)
    left = []
    for p in alive:  # never leave one behind whatever happened
        with contextlib.suppress(psutil.Error):
            left.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
            p.kill()
    assert not left, f"Ray left processes behind: {left}"


def _cfg(*extra: str):  # type: ignore[no-untyped-def]
    return load_config("reach", [*SETS, *extra])


def test_registered_backend_steps_batches_and_implements_env_hooks(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg("train.n_envs=5")
    venv = make_vec_env(cfg, load_dr(cfg.dr), 5, 3)  # through the registry: train.vec_env=ray
    try:
        assert type(venv).__name__ == "RayVecEnv" and isinstance(env_hooks(venv), EnvHooks)
        assert venv.sizes == [3, 2]
        obs = venv.reset()
        assert obs.shape == (5, venv.observation_space.shape[0])
        trips, ended = venv.round_trips, 0
        for _ in range(60):  # past the 50-step episode end: auto-reset inside the actors
            obs, rew, done, infos = venv.step(np.zeros((5, venv.action_space.shape[0])))
            ended += int(done.sum())
        assert venv.round_trips - trips == 60, "one round trip per control step, whatever the env count"
        assert obs.shape == (5, venv.observation_space.shape[0]) and rew.shape == (5,) and len(infos) == 5
        assert ended >= 5, "every env's episode ended (and restarted) inside its actor"
        assert venv.env_method("set_dr_scale", 0.5, indices=[0, 4]) == [None, None]
        venv.set_dr_scale(0.25)
        scales = {d["scale"] for s in venv.get_env_state()["streams"]["actors"] for d in s["dr"]}
        assert scales == {0.25}
        assert venv.env_core().obs_dim == obs.shape[1]
    finally:
        venv.close()
    assert ray_cluster.is_initialized(), "a backend that joined a running cluster leaves it running"


def _wait_dead(ray, actor, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Block until calls to ``actor`` fail (a killed actor can still answer for a moment)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def test_actor_found_dead_outside_a_step_is_replaced_and_its_episodes_end(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    """An actor dead when the curriculum or a checkpoint calls (between rollouts) does not stop training."""
    cfg = _cfg("train.n_envs=2")
    venv = make_vec_env(cfg, load_dr(cfg.dr), 2, 0)
    try:
        nu = venv.action_space.shape[0]
        venv.reset()
        before, _, _, _ = venv.step(np.zeros((2, nu)))
        ray_cluster.kill(venv.actors[1], no_restart=True)
        _wait_dead(ray_cluster, venv.actors[1])  # ray.kill returns before the actor is gone
        venv.set_dr_scale(0.5)  # the curriculum at a rollout start
        assert venv.actor_restarts == 1 and venv.restart_events[0]["actor"] == 1
        state = venv.get_env_state()  # a checkpoint
        assert [d["scale"] for s in state["streams"]["actors"] for d in s["dr"]] == [0.5, 0.5]
        obs, rew, done, infos = venv.step(np.zeros((2, nu)))
        assert done.tolist() == [False, True], "the replaced actor's env ended its episode"
        assert infos[1]["actor_restart"] and infos[1]["TimeLimit.truncated"]
        np.testing.assert_allclose(infos[1]["terminal_observation"], before[1])
        obs, _, done, _ = venv.step(np.zeros((2, nu)))
        assert not done.any() and venv.actor_restarts == 1
    finally:
        venv.close()


def test_env_state_restores_into_fresh_actors(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    """The saved RNG/DR state of every actor decides the next episodes' goals and DR draws."""
    cfg = _cfg()
    dr = load_dr(cfg.dr)
    a = make_vec_env(cfg, dr, 4, 0)
    b = make_vec_env(cfg, dr, 4, 99)
    try:
        a.reset()
        for _ in range(10):
            a.step(np.zeros((4, a.action_space.shape[0])))
        state = json.loads(json.dumps(a.get_env_state()))  # as checkpoints store it
        expected = a.reset()
        assert not np.allclose(b.reset(), expected), "different seeds draw different episodes"
        b.seed(7)  # a seed pending for the next reset (SB3 sets one when a model loads) must not win
        b.set_env_state(state, "test")
        np.testing.assert_allclose(b.reset(), expected)
        state["streams"]["sizes"] = [1, 3]
        with pytest.raises(UserError, match=r"train\.ray\.actors"):
            b.set_env_state(state, "ckpt")
        with pytest.raises(UserError, match="saved env state is batched"):
            b.set_env_state({"layout": "batched", "n_envs": 4, "streams": {}}, "ckpt")
    finally:
        a.close()
        b.close()


def test_training_survives_a_killed_actor_and_the_report_counts_it(ray_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from stable_baselines3.common.callbacks import BaseCallback

    class KillOne(BaseCallback):
        """Kill sampler actor 0 once, mid-rollout."""

        killed = False

        def _on_step(self) -> bool:
            if not self.killed and self.num_timesteps >= 300:
                ray_cluster.kill(self.model.get_env().unwrapped.actors[0], no_restart=True)
                self.killed = True
            return True

    killer = KillOne()
    with TrainingRun(_cfg("train.total_timesteps=768"), "ray-kill", tmp_path, progress=False) as run:
        summary = run.finish(run.learn([killer]))
    assert killer.killed
    assert summary["steps"] >= 768 and not summary["interrupted"]
    assert summary["ray"]["actor_restarts"] == 1 and summary["ray"]["actors"] == 2
    assert summary["ray"]["restart_events"][0]["actor"] == 0
    assert 0.0 <= summary["data_wait"]["share"] <= 1.0
    report = (tmp_path / "ray-kill" / "report.md").read_text()
    assert "sampler actors replaced: 1" in report
    assert "data wait" in report
    saved = read_state(latest_checkpoint(tmp_path / "ray-kill" / "checkpoints"))
    assert saved["actor_restarts"] == 1, "the count is run state: a resumed run keeps it"


def test_resume_restores_every_actors_env_state(ray_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from stable_baselines3.common.callbacks import BaseCallback

    from embodied_ws.rl.train import train

    train(_cfg("train.total_timesteps=256"), "ray-resume", tmp_path, progress=False)
    saved = read_state(latest_checkpoint(tmp_path / "ray-resume" / "checkpoints"))["env"]
    assert saved["layout"] == "ray" and len(saved["streams"]["actors"]) == 2

    class Probe(BaseCallback):
        """Read the actors' env state as training resumes (after SB3's first reset, before any step)."""

        state = None

        def _on_training_start(self) -> None:
            self.state = env_hooks(self.model.get_env()).get_env_state()

        def _on_step(self) -> bool:
            return True

    probe = Probe()
    cfg = _cfg("train.total_timesteps=384")
    summary = train(cfg, "ray-resume", tmp_path, resume=True, progress=False, extra_callbacks=[probe])
    assert summary["steps"] >= 384
    # resuming restores the saved streams, then SB3 resets the envs once: replay that on fresh actors
    replay = make_vec_env(cfg, load_dr(cfg.dr), 4, 12345)
    try:
        replay.set_env_state(saved, "checkpoint")
        replay.reset()
        expected = replay.get_env_state()["streams"]["actors"]
    finally:
        replay.close()
    assert json.loads(json.dumps(probe.state["streams"]["actors"])) == json.loads(json.dumps(expected))


def test_ray_address_joins_the_running_cluster(ray_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``embodied-ws train --ray-address`` (``train.ray.address``) trains on that cluster and leaves it running."""
    import subprocess

    from conftest import ROOT, train_cmd

    address = ray_cluster.get_runtime_context().gcs_address
    sets = [*SETS, "train.total_timesteps=128", "train.checkpoint_every=0"]
    cmd = train_cmd(tmp_path, "joined", sets, "--ray-address", address)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    brief = json.loads(proc.stdout.strip().splitlines()[-1])
    assert brief["steps"] >= 128 and brief["actor_restarts"] == 0 and 0.0 <= brief["data_wait_share"] <= 1.0
    assert "data wait" in proc.stderr, "the console states the data-wait share"
    saved = load_config(tmp_path / "joined" / "config.yaml")
    assert saved.train.ray.address == address
    assert ray_cluster.is_initialized() and ray_cluster.cluster_resources().get("CPU") == 2.0, "still running"


# ---------------------------------------------------------------------- token authentication (docker/compose.yaml)
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any Ray token setting, HOME an empty folder (no ~/.ray/auth_token)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), **extra}


@pytest.fixture(scope="module")
def auth_head(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real ``ray start --head`` with token auth (the compose settings), its token made by docker/ray_token.sh.

    One CPU, no dashboard UI, free ports, its own temp dir; stopped (and every process it left killed) after.
    """
    import shutil
    import subprocess
    import sys
    import tempfile
    import time

    import psutil

    pytest.importorskip("ray")
    from conftest import ROOT

    work = tmp_path_factory.mktemp("ray_auth")
    (work / "home").mkdir()
    token = work / "ray_auth_token"
    subprocess.run(["bash", str(ROOT / "docker" / "ray_token.sh"), str(token)], check=True, capture_output=True)
    temp = tempfile.mkdtemp(prefix="rayauth", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    ray_exe = str(Path(sys.executable).parent / "ray")
    cmd = [ray_exe, "start", "--head", "--block", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
           f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}",
           f"--dashboard-agent-listen-port={_free_port()}", "--disable-usage-stats", f"--temp-dir={temp}"]  # fmt: skip
    env = _clean_env(work / "home", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    log = (work / "head.log").open("w")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in (work / "head.log").read_text():
            assert head.poll() is None and time.monotonic() < deadline, (work / "head.log").read_text()[-3000:]
            time.sleep(0.5)
        yield {"address": f"127.0.0.1:{port}", "token": token, "home": work / "home"}
    finally:
        head.terminate()
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            head.kill()
        left = []
        for p in psutil.process_iter(["cmdline"]):
            if temp in " ".join(p.info["cmdline"] or []):
                left.append(p)
        for p in left:  # processes of this head only (its temp dir in their command line)
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(left, timeout=15)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


#: a client joining the head through embodied_ws's connect() (what --ray-address / train.ray.address use)
CLIENT = """
import sys, ray
from embodied_ws.core.errors import UserError
from embodied_ws.rl.ray_vec import connect
try:
    connect(sys.argv[1], token_file=sys.argv[2] or None)
except UserError as exc:
    print(exc.line(), file=sys.stderr)
    sys.exit(2)
print(ray.cluster_resources().get("CPU"))
ray.shutdown()
"""


def _client(head: dict, token_file: str = "", **env: str):  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", CLIENT, head["address"], token_file],
        env=_clean_env(head["home"], **env),
        capture_output=True,
        text=True,
        timeout=180,
    )


def _one_error_line(proc) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --ray-address: ") and "RAY_AUTH_TOKEN_PATH" in line, proc.stderr
    return line


def test_token_auth_head_refuses_a_client_without_the_token(auth_head) -> None:  # type: ignore[no-untyped-def]
    """The GCS itself refuses: no token, or a wrong one, is one line naming how to give it."""
    line = _one_error_line(_client(auth_head))
    assert "requires a token and none was given" in line
    line = _one_error_line(_client(auth_head, RAY_AUTH_TOKEN="0" * 64))
    assert "refused this client's token" in line
    wrong = auth_head["home"] / "wrong_token"
    wrong.write_text("f" * 64)
    assert "refused this client's token" in _one_error_line(_client(auth_head, RAY_AUTH_TOKEN_PATH=str(wrong)))


def test_token_auth_head_accepts_the_token_from_a_file(auth_head) -> None:  # type: ignore[no-untyped-def]
    """Ray's RAY_AUTH_TOKEN_PATH alone (no RAY_AUTH_MODE) joins, and so does an explicit token file."""
    proc = _client(auth_head, RAY_AUTH_TOKEN_PATH=str(auth_head["token"]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) == 1.0, "joined the head (its one CPU)"
    wrong = auth_head["home"] / "wrong_token"
    wrong.write_text("e" * 64)
    proc = _client(auth_head, str(auth_head["token"]), RAY_AUTH_TOKEN_PATH=str(wrong))
    assert proc.returncode == 0, "the token file given wins over the environment: " + proc.stderr[-2000:]
    missing = _client(auth_head, str(auth_head["home"] / "nope"))
    assert missing.returncode == 2 and "--ray-token-file: Ray token file" in missing.stderr, missing.stderr


def test_train_ray_token_file_reaches_the_cluster(auth_head, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``train --ray-address A --ray-token-file F`` sends F's token: a wrong one is refused by the head, in one line."""
    import subprocess

    from conftest import ROOT, train_cmd

    wrong = tmp_path / "wrong_token"
    wrong.write_text("d" * 64)
    sets = [*SETS, "train.total_timesteps=64", "train.checkpoint_every=0"]
    for token_file, expected in ((wrong, "refused this client's token"), (tmp_path / "nope", "--ray-token-file")):
        cmd = train_cmd(
            tmp_path, "refused", sets, "--ray-address", auth_head["address"], "--ray-token-file", str(token_file)
        )
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=_clean_env(auth_head["home"])
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert expected in proc.stderr.strip().splitlines()[-1], proc.stderr[-3000:]
