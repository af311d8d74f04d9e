"""The push task: scene added from the arm's own workspace, env checkers, staged reward terms under random and
scripted actions, the scripted pusher (``embodied_ws.data.contact_experts``) succeeding, off-table detection,
and the contact DR terms."""

from __future__ import annotations

import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest
from contact_helpers import run_episodes
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.data.expert import EXPERTS, PushExpert
from embodied_ws.randomization.appliers import APPLIERS, FieldApplier, select_rows
from embodied_ws.randomization.spec import parse_dr
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.scene import OBJECT, TABLE
from embodied_ws.sim.tasks.push import FLOOR_CLEARANCE

TERMS = {"reach", "push", "progress", "goal", "success_bonus", "still", "action", "off_table"}


@pytest.fixture(scope="module")
def scripted() -> RobotEnv:
    return RobotEnv(load_config("push", ["env.action_mode=absolute"]), load_dr("push"), seed=0)


def test_push_env_passes_gymnasium_and_sb3_checkers() -> None:
    env = RobotEnv(load_config("push"), load_dr("push"), render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env)
        sb3_check_env(env)
    _, info = env.reset(seed=1)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert set(info["reward_terms"]) == TERMS
    assert np.isclose(sum(info["reward_terms"].values()), reward)
    assert len(env.core.obs_names()) == env.observation_space.shape[0]
    assert env.render().std() > 0


def test_scene_sits_under_the_arm_and_spots_are_on_the_table(scripted: RobotEnv) -> None:
    task, model = scripted.core.task, scripted.core.robot.model  # the nominal model (DR changes the env's)
    sc = task.scene
    scripted.reset(seed=0)
    first_joint_z = scripted.data.xanchor[int(np.flatnonzero(model.jnt_qposadr == 0)[0]), 2]
    assert 0.0 < sc.table_top < first_joint_z  # above arm3's floor, under its first joint
    spots = np.column_stack([sc.spots, np.full(len(sc.spots), sc.table_top + sc.cube_half)])
    assert len(spots) >= 20 and sc.on_table(spots).all()
    table = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, TABLE)
    cube = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, OBJECT)
    assert model.geom_pos[table, 2] + model.geom_size[table, 2] == pytest.approx(sc.table_top)
    assert model.geom_size[cube] == pytest.approx([0.025] * 3)  # arm3 has no gripper: a 5 cm cube
    # the cube rests on the table at the start of an episode (settles by less than a millimetre)
    scripted.reset(seed=0)
    start = task.cube(scripted.data.qpos[None])[0].copy()
    mujoco.mj_step(scripted.model, scripted.data, nstep=50)
    assert np.linalg.norm(task.cube(scripted.data.qpos[None])[0] - start) < 1e-3


def test_scripted_pusher_succeeds_and_outscores_random(scripted: RobotEnv) -> None:
    assert EXPERTS.get("push") is PushExpert
    seeds = range(10)
    expert, ok, fired_expert = run_episodes(scripted, seeds, PushExpert(scripted), TERMS)
    random_env = RobotEnv(load_config("push"), load_dr("push"), seed=0)
    random_env.action_space.seed(0)
    rand, rand_ok, fired_random = run_episodes(random_env, seeds, None, TERMS)
    assert sum(ok) >= 8, (ok, expert)
    assert np.mean(expert) > np.mean(rand) + 100
    assert sum(rand_ok) <= 1
    # every staged term fires under the scripted push; reach, goal shaping and the action cost under random
    staged = ("reach", "push", "progress", "goal", "success_bonus", "still", "action")
    assert all(fired_expert[k] > 1e-3 for k in staged), fired_expert
    assert all(fired_random[k] > 0 for k in ("reach", "goal", "action")), fired_random


def test_success_bonus_is_the_success_test_and_push_is_gated(scripted: RobotEnv) -> None:
    task, env = scripted.core.task, scripted
    env.reset(seed=4)
    qpos = np.repeat(env.data.qpos[None], 3, axis=0)
    goal = np.repeat(env.core.goal[:1], 3, axis=0)
    qpos[0, task.scene.object_qpos : task.scene.object_qpos + 2] = goal[0, :2] + [0.01, 0.0]  # on the goal
    qpos[1, task.scene.object_qpos : task.scene.object_qpos + 2] = goal[0, :2] + [0.2, 0.0]  # far from it
    sens = np.repeat(env.data.sensordata[None], 3, axis=0)
    _, success, terms = task.evaluate(qpos, np.zeros((3, env.model.nv)), sens, goal, np.zeros((3, 3)))
    assert list(success) == [True, False, bool(success[2])]
    np.testing.assert_array_equal(terms["success_bonus"] > 0, success)
    far = np.linalg.norm(sens[:, task._ei] - task.push_pose(task.cube(qpos), goal), axis=1) > task.cfg.push_gate
    assert np.all(terms["push"][far] == 0)  # the push stage pays only with the end effector at the push pose


def test_progress_pays_the_cube_speed_towards_the_goal_at_the_push_pose(scripted: RobotEnv) -> None:
    """``progress``: + for the cube sliding towards the goal, − away from it, capped at the full weight, and 0
    with the end effector off the push pose or the cube already on the goal."""
    task, env = scripted.core.task, scripted
    env.reset(seed=4)
    n, lin = 5, slice(task.scene.object_qvel, task.scene.object_qvel + 3)
    qpos, goal = np.repeat(env.data.qpos[None], n, axis=0), np.repeat(env.core.goal[:1], n, axis=0)
    cube = task.cube(qpos)[0]
    u = (goal[0, :2] - cube[:2]) / np.linalg.norm(goal[0, :2] - cube[:2])
    assert np.linalg.norm(goal[0, :2] - cube[:2]) > task.cfg.success_threshold
    qvel = np.zeros((n, env.model.nv))
    for i, speed in enumerate([0.05, -0.05, 1.0, 0.05]):
        qvel[i, lin][:2] = speed * u
    qpos[4, task.scene.object_qpos : task.scene.object_qpos + 2] = goal[0, :2]  # on the goal, at rest
    sens = np.repeat(env.data.sensordata[None], n, axis=0)
    sens[:, task._ei] = task.push_pose(task.cube(qpos), goal)
    sens[3, task._ei] += [0.0, 0.0, 2 * task.cfg.push_gate]  # lifted off the push pose: the gate is shut
    paid = task.evaluate(qpos, qvel, sens, goal, np.zeros((n, 3)))[2]["progress"]
    w = task.cfg.progress_weight
    assert w > 0
    assert paid[0] == pytest.approx(0.5 * w) and paid[1] == pytest.approx(-0.5 * w)
    assert paid[2] == pytest.approx(w)  # faster than PROGRESS_SPEED pays no more
    assert paid[3] == 0.0 and paid[4] == 0.0


def test_push_observes_the_push_pose_relative_to_the_end_effector() -> None:
    """The reach stage's target is in the observation: ``push pose − ee``, which turns as the goal moves round
    the cube (the scene part, shared with lift, comes first)."""
    env = RobotEnv(load_config("push"), load_dr("none"), seed=0)  # no observation noise or latency
    task = env.core.task
    obs, _ = env.reset(seed=2)
    n = task.obs_dim
    assert env.core.obs_names()[n - 3 : n] == [f"push_pose_minus_ee/{a}" for a in "xyz"]
    qpos, qvel, sens = env.data.qpos[None], env.data.qvel[None], env.data.sensordata[None]
    cube, goal = task.cube(qpos), env.core.goal[:1]
    pose = task.push_pose(cube, goal)[0]
    np.testing.assert_allclose(obs[n - 3 : n], pose - sens[0, task._ei], atol=1e-6)
    mirrored = 2 * cube - goal  # the goal on the other side of the cube: the push pose swaps sides too
    other = task.observe(qpos, qvel, sens, mirrored)[0]
    np.testing.assert_allclose(other[n - 3 : n - 1] - obs[n - 3 : n - 1], 2 * (cube[0, :2] - pose[:2]), atol=1e-6)


def test_on_the_goal_disc_the_push_pose_keeps_the_tools_side() -> None:
    """A cube just past the goal's centre: the line goal → cube has flipped, and the plain push pose is on the
    far side (a reach through the cube). With the end effector given (observation and reward), the pose on the
    disc stays on the tool's side, so a tool at rest against the cube is at the push pose and the push gate holds;
    off the disc the goal's line rules again."""
    env = RobotEnv(load_config("push"), load_dr("none"), seed=0)
    task = env.core.task
    env.reset(seed=3)
    goal = env.core.goal[:1]
    reach = task.scene.cube_half + task.scene.push_radius
    u = np.array([np.cos(0.7), np.sin(0.7)])  # the push's direction
    for past, flips in ((0.01, True), (0.03, True), (task.cfg.success_threshold + 0.02, False)):
        cube = goal.copy()
        cube[0, :2] += past * u
        ee = cube.copy()
        ee[0, :2] -= reach * u  # touching the cube from the side it came from
        ee[0, 2] = task.scene.push_height
        plain, kept = task.push_pose(cube, goal)[0], task.push_pose(cube, goal, ee)[0]
        np.testing.assert_allclose(plain[:2], cube[0, :2] + reach * u, atol=1e-9)  # the far side
        if flips:
            np.testing.assert_allclose(kept, ee[0], atol=1e-9)
        else:
            np.testing.assert_allclose(kept, plain, atol=1e-9)
    qpos = env.data.qpos[None].copy()
    qpos[0, task.scene.object_qpos : task.scene.object_qpos + 2] = goal[0, :2] + 0.01 * u
    sens = env.data.sensordata[None].copy()
    sens[0, task._ei] = task.cube(qpos)[0] - [*(reach * u), 0.0]
    sens[0, task._ei][2] = task.scene.push_height
    _, success, terms = task.evaluate(qpos, np.zeros((1, env.model.nv)), sens, goal, np.zeros((1, 3)))
    assert success[0] and terms["push"][0] > 0.9 * task.cfg.push_weight and terms["reach"][0] > 0.99
    obs = task.observe(qpos, np.zeros((1, env.model.nv)), sens, goal)[0]
    np.testing.assert_allclose(obs[-3:], 0.0, atol=1e-9)  # the tool is at the observed push pose


def test_cube_leaving_the_table_is_detected_and_penalised(scripted: RobotEnv) -> None:
    task, env = scripted.core.task, scripted
    env.reset(seed=2)
    adr = task.scene.object_qpos
    env.data.qpos[adr : adr + 2] = env.core.goal[0, :2]
    env.data.qpos[adr + 2] = task.scene.table_top - 2 * task.scene.cube_half  # fallen through the edge
    mujoco.mj_forward(env.model, env.data)
    args = (env.data.qpos[None], env.data.qvel[None], env.data.sensordata[None], env.core.goal[:1])
    assert task.terminated(*args).tolist() == [True]
    _, success, terms = task.evaluate(*args, np.zeros((1, 3)))
    assert not success[0] and terms["off_table"][0] == task.cfg.off_table_penalty
    assert terms["push"][0] == 0 and terms["goal"][0] == 0
    env.reset(seed=2)
    args = (env.data.qpos[None], env.data.qvel[None], env.data.sensordata[None], env.core.goal[:1])
    assert task.terminated(*args).tolist() == [False]


def test_the_episode_ends_terminated_when_the_cube_falls(scripted: RobotEnv) -> None:
    """Off the table the episode can no longer be won: the env says *terminated* (not truncated), at once."""
    task, env = scripted.core.task, scripted
    env.reset(seed=2)
    _, _, terminated, truncated, _ = env.step(np.zeros(env.action_space.shape))
    assert not terminated and not truncated
    adr = task.scene.object_qpos
    env.data.qpos[adr + 2] = task.scene.table_top - 4 * task.scene.cube_half  # below the table top
    env.data.qpos[adr] += 5.0  # and far off its edge
    env.data.qvel[:] = 0.0
    mujoco.mj_forward(env.model, env.data)
    _, _, terminated, truncated, info = env.step(np.zeros(env.action_space.shape))
    assert terminated and not truncated and not info["is_success"]


CONTACT = {
    "object_mass": {"range": [0.5, 2.0]},
    "object_size": {"range": [0.8, 1.2]},
    "object_friction": {"range": [0.5, 1.5]},
    "table_friction": {"range": [0.5, 1.5]},
    "fingertip_friction": {"range": [0.5, 1.5]},
    "contact_solref": {"range": [0.5, 2.0]},
    "contact_solimp": {"range": [0.8, 0.99], "mode": "set"},
}


def test_every_contact_term_is_in_the_push_preset() -> None:
    assert set(CONTACT) <= {p.name for p in load_dr("push").params}


@pytest.mark.parametrize("name", sorted(CONTACT))
def test_contact_dr_term_changes_the_scene_model(name: str) -> None:
    env = RobotEnv(load_config("push"), parse_dr({"params": {name: CONTACT[name]}}), seed=0)
    applier = APPLIERS.get(name)
    assert isinstance(applier, FieldApplier)
    nominal = env.core.robot.model
    rows = select_rows(nominal, applier, ())
    assert rows.size >= 1
    env.reset(seed=1)
    first = applier.view(env.model)[rows].copy()
    assert not np.allclose(first, applier.view(nominal)[rows])
    env.reset()
    assert not np.allclose(first, applier.view(env.model)[rows])
    cube = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_GEOM, OBJECT)
    body = env.model.geom_bodyid[cube]
    size, mass = env.model.geom_size[cube], env.model.body_mass[body]
    assert size[0] == size[1] == size[2]  # a cube stays a cube
    np.testing.assert_allclose(env.model.body_inertia[body], mass * 2 * size[0] ** 2 / 3, rtol=1e-6)
    assert env.model.geom_rbound[cube] == pytest.approx(np.sqrt(3) * size[0])
    assert np.all(env.model.geom_solimp[:, 0] <= env.model.geom_solimp[:, 1])


def test_fingertip_friction_touches_only_the_tool() -> None:
    env = RobotEnv(load_config("push"), seed=0)
    rows = select_rows(env.model, APPLIERS.get("fingertip_friction"), ())
    names = {mujoco.mj_id2name(env.model, mujoco.mjtObj.mjOBJ_GEOM, int(g)) for g in rows}
    assert names == {"hand"}  # arm3's end effector body holds the hand sphere only


MENAGERIE_DIR = Path(__file__).parent / "fixtures" / "robots" / "menagerie"
MENAGERIE = sorted(MENAGERIE_DIR.glob("*.xml"))


@pytest.mark.parametrize("path", MENAGERIE, ids=[p.stem for p in MENAGERIE])
def test_every_menagerie_arm_gets_a_table_it_reaches_and_does_not_touch_at_rest(path: Path) -> None:
    env = RobotEnv(load_config("push", [f"env.robot={path}"]), load_dr("none"), seed=0)
    sc, m = env.core.task.scene, env.model
    assert len(sc.spots) >= 20 and 0.02 <= 2 * sc.cube_half <= 0.06
    scene_pair = {mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n) for n in (TABLE, OBJECT)}
    for seed in range(3):
        env.reset(seed=seed)
        mujoco.mj_step(m, env.data, nstep=100)
        contacts = [{int(c.geom1), int(c.geom2)} for c in env.data.contact[: env.data.ncon]]
        assert contacts and all(pair == scene_pair for pair in contacts)  # only the cube resting on the table
        cube = env.core.task.cube(env.data.qpos[None])
        assert sc.on_table(cube).all()


def test_an_arm_that_cannot_reach_a_table_is_refused_in_one_line(cli) -> None:
    robot = Path(__file__).parent / "fixtures" / "robots" / "grippers" / "single_jaw.xml"
    proc = cli("plan", "--steps-per-s", "1000", "--set", "env.task=push", "--set", f"env.robot={robot}")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "reaches no band of table" in proc.stderr


def test_object_mass_and_size_dr_keep_the_contact_solver_stable() -> None:
    """Mass and size draws recompute the solver's mass-derived constants (``mj_setConst``): without that, an arm
    pressing on a 0.1-0.2 kg cube blew up 10 times in these 16,000 steps (seeded: the same draws every run)."""
    from embodied_ws.sim.vec_env import MujocoVecEnv

    dr = parse_dr({"params": {"object_mass": {"range": [1.0, 2.0]}, "object_size": {"range": [0.9, 1.1]}}})
    env = MujocoVecEnv(load_config("push"), dr, 32, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(500):
        action = rng.uniform(-1, 1, (32, 3))
        action[:, 1:] = np.abs(action[:, 1:])  # shoulder and elbow forward/down: the hand presses on the table
        env.step(action)
    env.close()
    assert env.core.physics_resets == 0


@pytest.mark.parametrize(
    "robot,task,sets",
    [
        ("arm3", "push", []),
        (str(MENAGERIE_DIR / "panda.xml"), "lift", ["--set", "task.gripper=action"]),
        (str(MENAGERIE_DIR / "panda.xml"), "pick_place", ["--set", "task.gripper=action"]),
    ],
    ids=["arm3-push", "panda-lift", "panda-pick_place"],
)
def test_task_check_is_green(cli, robot: str, task: str, sets: list[str]) -> None:
    proc = cli("task", "check", robot, task, "--config", "push", *sets)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 blocking, 0 warnings" in proc.stdout
    assert "ok: success: scripted expert" in proc.stdout


def test_a_gripper_arm_pushes_with_its_fingers_closed() -> None:
    """The Panda with its gripper driven pushes with closed fingers (1.4 cm reach, not the open hand's 5.4 cm): the
    push pose touches the cube, and the scripted pusher (fingers closed) gets it to the goal."""
    sets = [f"env.robot={MENAGERIE_DIR / 'panda.xml'}", "task.gripper=action", "env.action_mode=absolute"]
    env = RobotEnv(load_config("push", sets), load_dr("none"), seed=0)
    sc = env.core.task.scene
    assert sc.push_radius == pytest.approx(0.014, abs=0.003) and sc.tool_radius == pytest.approx(0.054, abs=0.003)
    cube, goal = np.array([[0.5, 0.0, 0.02]]), np.array([[0.7, 0.0, 0.02]])
    pose = env.core.task.push_pose(cube, goal)[0]
    assert pose[0] == pytest.approx(0.5 - sc.cube_half - sc.push_radius)
    _, ok, _ = run_episodes(env, range(6), PushExpert(env), TERMS)
    # 16 no-DR episodes: 8 succeeded with the open hand's push pose (it stopped 4 cm short and went round through
    # the cube), 13 with the closed one and the go-round above the cube
    assert sum(ok) >= 4, ok


def test_a_driven_gripper_counts_in_the_push_pose_and_not_in_the_action_cost() -> None:
    """With the Panda's gripper driven (ee_delta: dx, dy, dz, gripper), the push pose is the closed tool's: fingers
    standing open add their opening to the distance (open wide, the push gate shuts at the exact pose), and the
    ``action`` cost charges the motion entries only (an absolute gripper command is a state, not an effort)."""
    env = RobotEnv(load_config("push", [f"env.robot={MENAGERIE_DIR / 'panda.xml'}", "task.gripper=action"]),
                   load_dr("none"), seed=0)  # fmt: skip
    task = env.core.task
    assert task.motion_actions.tolist() == [True, True, True, False]
    env.reset(seed=0)
    gaps = {}
    for command in (-1.0, 1.0):
        for _ in range(20):
            _, _, _, _, info = env.step(np.array([0.0, 0.0, 0.0, command]))
        assert info["reward_terms"]["action"] == 0.0  # a gripper held closed or open costs nothing
        qpos = env.data.qpos[None].copy()
        pose = task.push_pose(task.cube(qpos), env.core.goal[:1])
        gaps[command] = (task.gap(qpos)[0], task.tool_distance(pose, qpos, pose)[0])
    (closed_gap, closed_d), (open_gap, open_d) = gaps[-1.0], gaps[1.0]
    assert closed_gap < 0.01 < 0.07 < open_gap  # the Panda's fingertips: 4 mm closed, 8 cm open
    assert closed_d < 0.005 and open_d > task.cfg.push_gate  # at the exact pose, only the opening counts
    _, _, _, _, info = env.step(np.array([1.0, 0.0, 0.0, 1.0]))
    assert info["reward_terms"]["action"] == pytest.approx(-task.cfg.action_weight)


def test_ee_delta_keeps_the_tool_above_the_table() -> None:
    """``ee_delta`` on a table-top task has a floor: the tool's touch height plus the clearance. Driven straight
    down, the Panda's set-points stop there (without the floor they wound up 58 mm under it, the servos pressing
    the fingertips into the table with all their force), an end effector below a floor is stepped back up, and
    ``policy.json``'s mode records it."""
    env = RobotEnv(load_config("push", [f"env.robot={MENAGERIE_DIR / 'panda.xml'}", "task.gripper=action"]),
                   load_dr("none"), seed=0)  # fmt: skip
    task, ee = env.core.task, env.core.io.ee
    assert task.ee_floor == pytest.approx(task.scene.tool_floor + FLOOR_CLEARANCE)
    assert task.scene.table_top < task.scene.tool_floor < task.ee_floor < task.scene.push_height
    assert ee.floor == task.ee_floor and ee.describe()["floor"] == task.ee_floor
    env.reset(seed=0)
    low = np.inf
    for _ in range(60):
        env.step(np.array([0.0, 0.0, -1.0, -1.0]))
        low = min(low, env.data.sensordata[task._ei][2])
    assert task.ee_floor - 0.008 < low < task.ee_floor + 0.002  # the floor (less the servos' sag)
    q = env.data.qpos.copy()
    q[env.core.robot.qpos_idx] = env.core.io.ctrl_mid + env.core.io.ctrl_half * env.core.setpoint[0]
    assert abs(ee.ik.site_pose(q)[0][2] - task.ee_floor) < 0.01  # where the set-points ask the hand to be
    ee.floor = low + 0.05  # now 5 cm under a floor: idle actions step it back up
    for _ in range(40):
        env.step(np.array([0.0, 0.0, 0.0, -1.0]))
    assert env.data.sensordata[task._ei][2] > low + 0.04


def test_physics_dt_sets_the_timestep_of_the_arm_and_its_scene() -> None:
    """``env.physics_dt`` steps the robot and the contact scene its task adds at the set timestep (every DR copy
    too), and the control period is ``frame_skip`` of it; 0 keeps the model's own ``<option timestep>``."""
    own = RobotEnv(load_config("push", ["env.physics_dt=0", "env.frame_skip=20"]), load_dr("none"), seed=0).core
    assert own.robot.model.opt.timestep == pytest.approx(0.002)  # arm3's MJCF states 2 ms
    fast = RobotEnv(load_config("push", ["env.physics_dt=0.004", "env.frame_skip=10"]), load_dr("push"), seed=0)
    core = fast.core
    assert mujoco.mj_name2id(core.robot.model, mujoco.mjtObj.mjOBJ_BODY, OBJECT) >= 0  # the scene's model
    assert {m.opt.timestep for m in [core.robot.model, *core.models]} == {0.004}
    assert core.control_dt == pytest.approx(own.control_dt) == pytest.approx(0.04)
    fast.reset(seed=0)
    fast.step(np.zeros(fast.action_space.shape, dtype=np.float32))
    assert fast.data.time == pytest.approx(0.04) and fast.model.opt.timestep == 0.004
