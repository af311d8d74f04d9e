"""Nothing we did not write is deleted or overwritten; one writer per output folder (real files, real processes).

The rule (``embodied_ws/core/outputs.py``): a folder that is not ours (no ``.embodied_ws`` marker) and not
empty is refused and left untouched; a folder of ours is replaced only with ``--overwrite``; a writer holds
an exclusive lock for its whole run and a second one gets one line naming the holder's PID; the lock of a
dead PID is taken over; files are written with the umask's permissions.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, train_cmd

from embodied_ws.core.atomic import write_bytes_atomic, write_dir_atomic, write_json_atomic
from embodied_ws.core.errors import UserError
from embodied_ws.core.outputs import MARKER, FolderLock, claim, lock_path, output_folder, read_marker

HIDDEN = ROOT / "tests" / "fixtures" / "plants" / "hidden.yaml"


def _one_line_error(proc: subprocess.CompletedProcess, *fragments: str, info_before: bool = False) -> str:
    """Exit 2, one ``error:`` line (after ``train``'s informational lines when ``info_before``), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    if info_before:
        lines = lines[-1:] if sum(line.startswith("error") for line in lines) == 1 else lines
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def _user_folder(path: Path) -> Path:
    """A folder with a user's file in it (not written by us)."""
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("my notes, not yours\n")
    return path


def _intact(path: Path) -> None:
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"], list(path.iterdir())
    assert (path / "notes.txt").read_text() == "my notes, not yours\n"


# ----------------------------------------------------------------------------------------------- permissions
@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_files_and_folders_we_write_follow_the_umask(tmp_path: Path, umask: int, file_mode: int, dir_mode: int) -> None:
    old = os.umask(umask)
    try:
        write_bytes_atomic(tmp_path / "config.yaml", b"a: 1\n")
        write_json_atomic(tmp_path / "metrics.json", {"a": 1})
        write_dir_atomic(tmp_path / "policy", lambda d: (d / "policy.json").write_text("{}"))
        write_bytes_atomic(tmp_path / "token", b"secret", mode=0o600)  # a secret stays private
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "config.yaml").stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "metrics.json").stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "policy").stat().st_mode) == dir_mode
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600


# ----------------------------------------------------------------------------------------------- ownership
def test_claim_refuses_what_is_not_ours_and_replaces_ours_only_when_asked(tmp_path: Path) -> None:
    assert claim(tmp_path / "new", "gap") == "new"
    (tmp_path / "empty").mkdir()
    assert claim(tmp_path / "empty", "gap") == "empty"
    user = _user_folder(tmp_path / "user")
    for overwrite in (False, True):
        with pytest.raises(UserError, match="not written by embodied-ws"):
            claim(user, "gap", overwrite=overwrite)
    _intact(user)
    with output_folder(tmp_path / "mine", "gap") as out:
        (out / "report.md").write_text("first")
    assert read_marker(tmp_path / "mine")["verb"] == "gap"
    with pytest.raises(UserError, match="pass --overwrite"):
        claim(tmp_path / "mine", "gap")
    assert claim(tmp_path / "mine", "gap", overwrite=True) == "ours"
    with pytest.raises(UserError, match="output of `embodied-ws gap`, not `eval`"):
        claim(tmp_path / "mine", "eval", overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        claim(tmp_path / "file", "gap")


def test_a_failed_writer_removes_only_the_folder_it_created(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), output_folder(tmp_path / "fresh", "sysid fit"):
        raise RuntimeError("the fit failed")
    assert not (tmp_path / "fresh").exists() and not lock_path(tmp_path / "fresh").exists()
    with pytest.raises(RuntimeError), output_folder(tmp_path / "a" / "b" / "c", "gap"):
        raise RuntimeError("the report failed")
    assert not (tmp_path / "a").exists()  # nor the parents made for it
    (tmp_path / "theirs").mkdir()  # an empty folder the user made: used, never removed
    with pytest.raises(RuntimeError), output_folder(tmp_path / "theirs", "sysid fit"):
        raise RuntimeError("the fit failed")
    assert (tmp_path / "theirs").is_dir()


# ----------------------------------------------------------------------------------------------- locks
_HOLD = (
    "import sys, time; from pathlib import Path; from embodied_ws.core.outputs import FolderLock; "
    "FolderLock(Path(sys.argv[1]), 'train').acquire(); print('locked', flush=True); time.sleep(600)"
)


def _holder(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_gets_one_line_naming_the_pid_and_a_dead_holders_lock_is_taken_over(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = _holder(folder)
    try:
        with pytest.raises(UserError) as err:
            FolderLock(folder, "train").acquire()
        assert f"in use by PID {holder.pid} (embodied-ws train)" in err.value.line()
        assert len(err.value.line().splitlines()) == 1
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_path(folder).is_file()  # kill -9: the lock file stays, naming a dead PID
    with FolderLock(folder, "train") as lock:
        assert lock.took_over == holder.pid
        assert json.loads(lock_path(folder).read_text())["pid"] == os.getpid()
    assert not lock_path(folder).exists()  # released: the file goes with it


def test_two_trainings_with_one_name_the_second_gets_one_line_naming_the_first(tmp_path: Path, cli) -> None:
    """Two ``train --name X`` at once: the second exits 2 with the PID of the first, writing nothing."""
    sets = ["train.total_timesteps=10000000", "train.eval_every=0", "train.n_envs=2", "train.checkpoint_every=0"]
    first = subprocess.Popen(train_cmd(tmp_path, "x", sets), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lock = lock_path(tmp_path / "x")
    try:
        deadline = time.monotonic() + 240
        while not (lock.is_file() and f'"pid": {first.pid}' in lock.read_text()):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first training never took its lock"
            time.sleep(0.2)
        second = subprocess.run(train_cmd(tmp_path, "x", sets), cwd=ROOT, capture_output=True, text=True, timeout=240)
        _one_line_error(second, str(tmp_path / "x"), f"in use by PID {first.pid}", info_before=True)
        assert second.stdout == ""
        assert first.poll() is None  # the first keeps training
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert read_marker(tmp_path / "x")["verb"] == "train"
    with FolderLock(tmp_path / "x", "train") as taken:  # the dead trainer's lock is taken over
        assert taken.took_over == first.pid


def test_train_refuses_a_folder_that_is_not_a_run(tmp_path: Path, cli) -> None:
    user = _user_folder(tmp_path / "x")
    proc = cli("train", "--name", "x", "--runs", str(tmp_path), "--set", "train.total_timesteps=64")
    _one_line_error(proc, str(user), "not written by embodied-ws", info_before=True)
    _intact(user)


# ----------------------------------------------------------------------------------------------- verbs
def test_record_demos_and_bag2lerobot_refuse_a_folder_holding_a_users_file(tmp_path: Path, cli) -> None:
    user = _user_folder(tmp_path / "data")
    for args in (
        ("record-demos", "--episodes", "1", "--out", str(user)),
        ("record-demos", "--episodes", "1", "--out", str(user), "--overwrite"),
        ("bag2lerobot", str(tmp_path / "somebag"), "--out", str(user)),
        ("bag2lerobot", str(tmp_path / "somebag"), "--out", str(user), "--overwrite"),
    ):
        _one_line_error(cli(*args), str(user), "not written by embodied-ws", "left untouched")
        _intact(user)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no lock or temp folder left


def test_record_demos_replaces_its_own_dataset_only_with_overwrite(tmp_path: Path, cli) -> None:
    out = tmp_path / "demos"
    args = ("record-demos", "--episodes", "1", "--image-size", "32", "32", "--dr", "none", "--out", str(out), "--json")
    old = os.umask(0o022)
    try:
        first = cli(*args)
    finally:
        os.umask(old)
    assert first.returncode == 0, first.stderr
    assert read_marker(out)["verb"] == "record-demos"
    assert stat.S_IMODE((out / "meta" / "embodied_ws.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / MARKER).stat().st_mode) == 0o644
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    info = (out / "meta" / "info.json").stat().st_mtime_ns
    _one_line_error(cli(*args), str(out), "pass --overwrite")
    assert (out / "meta" / "info.json").stat().st_mtime_ns == info  # untouched
    again = cli(*args, "--overwrite")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["episodes"] == 1 and read_marker(out)["verb"] == "record-demos"
    assert not [p.name for p in tmp_path.iterdir() if p.name != "demos"]  # no temp, old or lock folder left


def test_gap_reports_of_a_plant_and_a_bag_go_to_their_own_folders(tmp_path: Path, cli) -> None:
    from deploy_helpers import untrained_run
    from sysid_helpers import record_plant

    from embodied_ws.randomization.plant import load_plant
    from embodied_ws.sim.robot import load_robot

    run = untrained_run(tmp_path / "run")
    bag = tmp_path / "deploy1"
    record_plant(load_robot("arm3", need_ee=False), load_plant(HIDDEN), 6.0, bag, task_every=2.0)
    plant = cli("gap", str(run), "--plant", str(HIDDEN), "--episodes", "2", "--json")
    assert plant.returncode == 0, plant.stderr
    report = run / "gap" / "plant-hidden" / "report.md"
    text = report.read_text()
    real = cli("gap", str(run), "--real", str(bag), "--json")
    assert real.returncode == 0, real.stderr
    assert (run / "gap" / "real-deploy1" / "report.md").is_file()
    assert report.read_text() == text  # the plant report is still there, unchanged
    assert json.loads(real.stdout)["files"]["report.md"] == str(run / "gap" / "real-deploy1" / "report.md")
    _one_line_error(cli("gap", str(run), "--plant", str(HIDDEN), "--episodes", "2"), "plant-hidden", "--overwrite")
    again = cli("gap", str(run), "--plant", str(HIDDEN), "--episodes", "2", "--overwrite", "--json")
    assert again.returncode == 0, again.stderr
    user = _user_folder(tmp_path / "report")
    _one_line_error(cli("gap", str(run), "--plant", str(HIDDEN), "--out", str(user), "--overwrite"), str(user))
    _intact(user)


def test_eval_fit_tune_finetune_and_download_refuse_a_users_folder(tmp_path: Path, cli) -> None:
    from deploy_helpers import untrained_run

    run = untrained_run(tmp_path / "run")
    _user_folder(run / "eval")
    _one_line_error(cli("eval", str(run), "--episodes", "1", "--overwrite"), str(run / "eval"), "not written")
    _intact(run / "eval")
    user = _user_folder(tmp_path / "fit")
    _one_line_error(cli("sysid", "fit", str(tmp_path / "nobag"), "--robot", "arm3", "--out", str(user)), str(user))
    _intact(user)
    _one_line_error(cli("vla", "eval", str(run), "--overwrite"), str(run / "eval"), "not written")
    _intact(run / "eval")
    models = _user_folder(tmp_path / "models")
    _one_line_error(cli("vla", "download", "lerobot/smolvla_base", "--out", str(models)), str(models))  # no network
    _intact(models)
    study = _user_folder(tmp_path / "runs" / "study1")
    _one_line_error(cli("tune", "--name", "study1", "--runs", str(tmp_path / "runs"), "--trials", "1"), str(study))
    _intact(study)
    user = _user_folder(tmp_path / "runs" / "vla1")
    _one_line_error(
        cli("finetune", str(tmp_path / "nodata"), "--name", "vla1", "--runs", str(tmp_path / "runs")), str(user)
    )
    _intact(user)


def test_deploy_takes_a_run_name_under_runs_like_eval_and_gap(tmp_path: Path, cli) -> None:
    from deploy_helpers import untrained_run

    untrained_run(tmp_path / "runs" / "r1")
    proc = cli("deploy", "r1", "--runs", str(tmp_path / "runs"), "--check", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["robot"] == "arm3"
    _one_line_error(cli("deploy", "ghost", "--runs", str(tmp_path / "runs"), "--check"), "ghost")


def test_record_to_an_unwritable_place_is_one_line(tmp_path: Path, cli) -> None:
    (tmp_path / "file").write_text("x")
    _one_line_error(cli("record", "--out", str(tmp_path / "file" / "bag"), "--duration", "1"), "not a folder")
    if Path("/sys").is_dir():  # a pseudo file system refuses folders even to root
        _one_line_error(
            cli("record", "--out", "/sys/embodied_ws_bag", "--duration", "1"), "/sys/embodied_ws_bag", "cannot"
        )
        _one_line_error(cli("record-demos", "--out", "/sys/embodied_ws_demos"), "/sys/embodied_ws_demos")


@pytest.mark.ros
def test_record_with_nothing_publishing_says_so_and_leaves_no_bag(tmp_path: Path, cli) -> None:
    """Nothing publishes in this test's ROS domain: one line, non-zero, no folder left."""
    proc = cli("record", "--out", str(tmp_path / "bag"), "--duration", "1.5")
    _one_line_error(proc, "nothing was published", "/joint_states")
    assert not (tmp_path / "bag").exists()


@pytest.mark.ros
def test_record_of_a_topic_not_in_the_graph_leaves_no_folder(tmp_path: Path, cli) -> None:
    proc = cli("record", "--out", str(tmp_path / "bag"), "--topics", "/no_such_topic", "--duration", "1")
    _one_line_error(proc, "--topics", "/no_such_topic")
    assert not (tmp_path / "bag").exists()


def test_robot_show_replaces_a_users_file_only_with_overwrite(tmp_path: Path, cli) -> None:
    """``robot show --out DIR`` writes single files into a folder that may be the user's."""
    png = tmp_path / "arm3_home.png"
    png.write_bytes(b"my own picture")
    _one_line_error(cli("robot", "show", "arm3", "--out", str(tmp_path)), str(png), "--overwrite")
    assert png.read_bytes() == b"my own picture"
    ok = cli("robot", "show", "arm3", "--out", str(tmp_path), "--overwrite", "--json")
    assert ok.returncode == 0, ok.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    again = cli("robot", "show", "arm3", "--out", str(tmp_path), "--json")  # the same picture again: no flag needed
    assert again.returncode == 0, again.stderr


def test_eval_writes_its_folder_once_and_again_with_overwrite(tmp_path: Path, cli) -> None:
    from deploy_helpers import untrained_run

    run = untrained_run(tmp_path / "run")
    first = cli("eval", str(run), "--episodes", "1", "--no-video", "--json")
    assert first.returncode == 0, first.stderr
    assert read_marker(run / "eval")["verb"] == "eval" and (run / "eval" / "metrics.json").is_file()
    _one_line_error(cli("eval", str(run), "--episodes", "1", "--no-video"), str(run / "eval"), "--overwrite")
    again = cli("eval", str(run), "--episodes", "2", "--no-video", "--overwrite", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads((run / "eval" / "metrics.json").read_text())["episodes"] == 2


def test_eval_draws_its_episodes_from_the_seed_and_reports_the_interval_of_its_rate(tmp_path: Path, cli) -> None:
    """``--seed``: the same seed replays the same episodes, another seed draws others; the metrics carry the
    95 % Wilson interval of the success rate, which holds the rate."""
    from deploy_helpers import untrained_run

    from embodied_ws.rl.vec import success_interval

    run = untrained_run(tmp_path / "run", "task.init_noise=0.3")
    out = []
    for seed in ("7", "7", "8"):
        proc = cli("eval", str(run), "--episodes", "2", "--no-video", "--seed", seed, "--overwrite", "--json")
        assert proc.returncode == 0, proc.stderr
        out.append(json.loads(proc.stdout))
    assert out[0] == out[1] and out[0]["mean_return"] != out[2]["mean_return"]
    assert out[0]["seed"] == 7 and out[2]["seed"] == 8
    low, high = out[0]["success_ci95"]
    assert low <= out[0]["success_rate"] <= high and high > low
    assert success_interval(230, 256) == pytest.approx([0.8553, 0.9297], abs=1e-4)
    _one_line_error(cli("eval", str(run), "--seed", "-1"), "--seed")


@pytest.mark.ros
def test_a_second_recorder_into_the_same_bag_gets_the_pid_of_the_first(tmp_path: Path, cli) -> None:
    bag = tmp_path / "bag"
    cmd = [sys.executable, "-m", "embodied_ws.cli", "record", "--out", str(bag), "--duration", "6"]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (lock_path(bag).is_file() and f'"pid": {first.pid}' in lock_path(bag).read_text()):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        _one_line_error(cli("record", "--out", str(bag), "--duration", "1"), str(bag), f"in use by PID {first.pid}")
    finally:
        _, err = first.communicate(timeout=60)
    assert first.returncode == 2 and "nothing was published" in err  # and the first says why it wrote no bag
    assert not bag.exists() and not lock_path(bag).exists()
