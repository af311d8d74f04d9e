"""Per-tool message templates (issue 22): each tool's templates classify one synthetic message per failure
class, built from the string in the tool's source; a template match is never answered with another family."""

from __future__ import annotations

import io
import re

import pytest
import re2
import yaml

from embodied_ws.assistant.crossval import without_rule_patterns
from embodied_ws.assistant.rules import builtin_rules
from embodied_ws.assistant.sources import _chunks_of
from embodied_ws.assistant.templates import builtin_templates, parse_templates, tools
from embodied_ws.assistant.triage import Triage, triage_chunks
from embodied_ws.core.errors import ConfigError

CLAIMED = {"mujoco", "rcl", "ros2-launch", "colcon", "cmake", "pip", "apt", "cuda", "nccl", "pytorch", "gazebo",
           "llama.cpp", "huggingface", "lerobot", "numpy", "rosdep", "dds", "ros2cli", "rviz", "controller_manager",
           "catkin", "roslaunch", "ollama"}  # fmt: skip


def _triage(text: str):
    return triage_chunks(_chunks_of(io.BytesIO(text.encode()), "t"))


def test_every_tool_we_claim_to_read_has_templates_with_a_source() -> None:
    assert set(tools()) == CLAIMED
    known = set(builtin_rules().ids())
    for t in builtin_templates():
        assert t.id in known, t
        assert "/" in t.source and len(t.source.split()) >= 2, f"{t.id}: source must name repo and path"
        re2.compile(t.pattern)  # the RE2 set and Python's re both accept it
        re.compile(t.pattern)


@pytest.mark.parametrize("tool", sorted(CLAIMED))
def test_each_template_classifies_its_tools_message(tool: str) -> None:
    templates = [t for t in builtin_templates() if t.tool == tool]
    assert templates
    for t in templates:
        f = _triage(t.example + "\n").findings()
        assert f, t.example
        assert f[0].rule.id == t.id, (tool, t.pattern, [x.rule.id for x in f])
        assert f[0].stage in ("rule", "template")


# A tool message inside text that the similarity stage (or another family's rule) would pull elsewhere.
CROSS = [
    # MuJoCo rejects an old model; the rest of the log talks about tokens and context
    ("mujoco.xml-parse", "loading prompt tokens into the context window for the agent\n"
     "ValueError: XML Error: Schema violation: unrecognized attribute: 'solreflimit'\nElement 'default', line 9\n"),
    # CUDA forward compatibility in a container: also mentions memory
    ("cuda.driver-too-old", "torch.cuda.is_available() False, out of memory? no:\n"
     "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 804: forward "
     "compatibility was attempted on non supported HW\n"),
    ("build.setup-py", "Starting >>> my_pkg\nERROR:colcon.colcon_core.entry_point:Exception loading extension "
     "'colcon_core.package_identification.python': No module named 'setuptools.config'\n"),
    ("gazebo.install", "ros2 run fails: executable not found?\nE: Unable to locate package ros-humble-gz-sim-vendor\n"),
    ("llm.model-format", "CUDA driver 535, cuda 12.2\nsafetensors_rust.SafetensorError: Error while deserializing "
     "header: HeaderTooLarge\n"),
    ("cuda.cpu-only-torch", "after pip install -U torch, rclpy node starts:\n"
     "  File \"/ws/src/policy/policy/node.py\", line 40, in __init__\n"
     "AssertionError: Torch not compiled with CUDA enabled\n"),
    ("mujoco.file-missing", "Error opening file '/ws/models/scene.xml': No such file or directory\n"
     "ValueError: XML Error: Error=XML_ERROR_FILE_NOT_FOUND ErrorID=3 (0x3) Line number=0\n"),
    # ROS-side classes answered with another family before the templates from these tools' sources:
    # ros2cli's daemon port (11511 + ROS_DOMAIN_ID) past 65535, with a traceback the build/cuda ids liked
    ("ros.dds-discovery", "$ ROS_DOMAIN_ID=60000 ros2 node list\nTraceback (most recent call last):\n"
     "  File \"/usr/lib/python3/dist-packages/pkg_resources/__init__.py\", line 12, in <module>\n"
     "  File \"/opt/ros/humble/lib/python3.10/site-packages/ros2cli/node/strategy.py\", line 27, in __init__\n"
     "    if use_daemon and is_daemon_running(args):\n"
     "  File \"/opt/ros/humble/lib/python3.10/site-packages/ros2cli/node/daemon.py\", line 36, in is_daemon_running\n"
     "    s.bind(addr)\nOverflowError: bind(): port must be 0-65535.\n"),
    ("ros.dds-discovery", "CUDA_VISIBLE_DEVICES=0 ros2 launch policy deploy.launch.py\n[policy_node-1] [RTPS Error] "
     "Calculated port number is too high. Probably the domainId is over 232, there are too much participants "
     "created or portBase is too high. -> Function calculate_well_known_port\n"),
    ("ros.rclpy-import", ">>> import rclpy\nTraceback (most recent call last):\n"
     "  File \"<stdin>\", line 1, in <module>\n"
     "  File \"/opt/ros/ardent/lib/python3.5/site-packages/rclpy/__init__.py\", line 30\n"
     "    def init(*, args=None, context=None):\n              ^\nSyntaxError: invalid syntax\n"),
    ("ros.rclpy-import", "pip install torch numpy\nTraceback (most recent call last):\n"
     "  File \"/opt/ros/eloquent/lib/python3.6/site-packages/rclpy/impl/implementation_singleton.py\", line 31\n"
     "ModuleNotFoundError: No module named 'rclpy._rclpy'\n"),
    ("ros.package-not-found", "Starting >>> arm_bringup\n--- stderr: ament_cmake_core\n"
     "[0.5s] ERROR:colcon.colcon_cmake.task.cmake.build:Failed to find the following files:\n"
     "- /ws/install/arm_msgs/share/arm_msgs/package.sh\nCheck that the following packages have been built:\n"
     "- arm_msgs\nFailed   <<< arm_bringup [0.00s, exited with code 1]\n"),
    ("ros.package-not-found", "ERROR: the following packages/stacks could not have their rosdep keys resolved\n"
     "to system dependencies (ROS distro is not set. Make sure `ROS_DISTRO` environment variable is set, or use "
     "`--rosdistro` option to specify the distro, e.g. `--rosdistro indigo`):\n"
     "arm_sim: Cannot locate rosdep definition for [gazebo_ros_pkgs]\narm_sim: Cannot locate rosdep definition for "
     "[ros_gz_bridge]\n"),
    ("gazebo.install", "-- Using these message generators: gencpp;genpy\n"
     "-- Could NOT find gazebo_ros (missing: gazebo_ros_DIR)\n-- Could not find the required component "
     "'gazebo_ros'. The following CMake error indicates that you either need to install the package\n"
     "CMake Error at /opt/ros/noetic/share/catkin/cmake/catkinConfig.cmake:83 (find_package):\n"
     "  Could not find a package configuration file provided by \"gazebo_ros\" with any of the following names:\n"),
    ("gazebo.install", "The following packages have unmet dependencies:\n"
     " ros-humble-gazebo-ros : Depends: gazebo11 but it is not installable\n"
     "                         Depends: libgazebo11-dev but it is not going to be installed\n"
     "E: Unable to correct problems, you have held broken packages.\n"),
    ("gazebo.resource-path", "huggingface hub download of the world assets\n"
     "[Err] [ModelDatabase.cc:408] Unable to download model[model://warehouse_shelf/meshes/shelf.dae]\n"),
    ("benign.ros-deprecation", "[INFO] [spawner.py-4]: process started with pid [812]\n"
     "[spawner.py-4] /opt/ros/humble/lib/controller_manager/spawner.py:254: DeprecationWarning: "
     "'spawner.py' is deprecated, please use 'spawner' (without .py extension)\n"),
    # GPU/ML-side classes from the tools' sources (glibc's loader, Ollama's runner, CMake's wrapped message)
    ("cuda.library-missing", "colcon build finished; ros2 run fails:\n/ws/install/det/lib/det/det_node: error "
     "while loading shared libraries: libcudnn.so.8: cannot open shared object file: No such file or directory\n"),
    ("llm.context-overflow", "[planner_node-1] [INFO] [planner]: sending the scene description\n"
     "time=2025-01-05T17:16:18.172-08:00 level=WARN source=runner.go:129 msg=\"truncating input prompt\" "
     "limit=2048 prompt=3940 keep=5 new=2048\n"),
    ("build.package-config-missing", "--- stderr: arm_planning\nCMake Error at CMakeLists.txt:19 (find_package):\n"
     "  Could not find a package configuration file provided by\n  \"moveit_ros_move_group\" with any of the "
     "following names:\n    moveit_ros_move_groupConfig.cmake\n"),
    ("hub.offline", "torch 2.3 with CUDA 12.1\n"
     "ConnectionError: Couldn't reach 'lerobot/pusht' on the Hub (ProxyError)\n"),
]  # fmt: skip


@pytest.mark.parametrize(("want", "text"), CROSS, ids=[w for w, _ in CROSS])
def test_a_template_match_is_never_answered_with_another_family(want: str, text: str) -> None:
    f = _triage(text).findings()
    assert f[0].rule.id == want, [x.rule.id for x in f]
    family = want.split(".", 1)[0]
    rules_and_templates = [x for x in f if x.stage != "similarity"]
    first_other = next((i for i, x in enumerate(f) if x.rule.category != family), len(f))
    assert all(x.rule.category == family for x in f[:first_other]) and first_other >= 1
    assert rules_and_templates[0].rule.category == family


def test_a_rule_of_another_family_ranks_after_the_template_family() -> None:
    # the gazebo.install rule (a shell's "command not found", no tool template) fires too; the MuJoCo
    # template decides the family
    text = "bash: gz: command not found\nValueError: XML Error: Schema violation: unrecognized element\n"
    f = _triage(text).findings()
    ids = [x.rule.id for x in f]
    assert ids[0] == "mujoco.xml-parse" and "gazebo.install" in ids
    assert f[ids.index("gazebo.install")].stage == "rule"


def test_a_broken_templates_file_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="bad pattern"):
        parse_templates(
            yaml.safe_load("tool: x\ntemplates:\n  - {id: a.b, pattern: '(', source: s p, example: e}"), "t"
        )
    with pytest.raises(ConfigError, match="missing key 'source'"):
        parse_templates({"tool": "x", "templates": [{"id": "a.b", "pattern": "x", "example": "x"}]}, "t")
    with pytest.raises(ConfigError, match="symptom must be true or false"):
        parse_templates(
            {
                "tool": "x",
                "templates": [{"id": "a.b", "pattern": "x", "source": "s p", "example": "x", "symptom": "yes"}],
            },
            "t",
        )


def test_a_symptom_template_proposes_its_id_but_does_not_decide_the_family() -> None:
    # `ros2 topic list` with only the two topics every node creates: nothing else discovered
    alone = _triage("$ ros2 topic list\n/parameter_events\n/rosout\n").findings()
    assert alone[0].rule.id == "ros.dds-discovery" and alone[0].stage == "template"
    # another topic listed: discovery works, the symptom template stays silent
    for listing in ("/cmd_vel\n/parameter_events\n/rosout\n", "/parameter_events\n/rosout\n/scan\n"):
        more = _triage(f"$ ros2 topic list\n{listing}").findings()
        assert "ros.dds-discovery" not in [x.rule.id for x in more if x.stage != "similarity"], listing
    typed = "$ ros2 topic list -t\n/parameter_events [rcl_interfaces/msg/ParameterEvent]\n"
    typed += "/rosout [rcl_interfaces/msg/Log]\n"
    assert _triage(typed).findings()[0].rule.id == "ros.dds-discovery"
    assert _triage("/parameter_events\n/rosout").findings()[0].rule.id == "ros.dds-discovery"  # the whole paste
    # a real error line of another family in the same log comes first (a CUDA OOM crashed the node)
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    text += "$ ros2 topic list\n/parameter_events\n/rosout\n"
    t = _triage(text)
    ids = [x.rule.id for x in t.findings()]
    assert ids[0] == "cuda.oom" and "ros.dds-discovery" in ids
    assert t.template_family() == "cuda"  # the CUDA template decides; the symptom never does
    assert _triage("$ ros2 topic list\n/parameter_events\n/rosout\n").template_family() is None


def test_rviz_with_nothing_received_proposes_qos() -> None:
    f = _triage("PointCloud2 display status: Points: Showing [0] points from [0] messages\n").findings()
    assert f[0].rule.id == "ros.qos-incompatible"
    received = _triage("Points: Showing [2048] points from [1] messages\n").findings()
    assert all(x.stage == "similarity" for x in received)  # messages arrived: the template stays silent


def test_a_template_across_lines_matches_when_the_log_ends_without_a_newline() -> None:
    # the last line of a pasted traceback rarely ends with "\n": it joins the lines before it in one chunk
    text = (
        '  File "/opt/ros/humble/lib/python3.10/site-packages/ros2cli/node/daemon.py", line 36, in is_daemon_running\n'
        "    s.bind(addr)\nOverflowError: bind(): port must be 0-65535."
    )
    assert _triage(text).findings()[0].rule.id == "ros.dds-discovery"
    chunks = list(_chunks_of(io.BytesIO(b"a\nb\nc"), "t", size=2))
    assert b"".join(c.data for c in chunks) == b"a\nb\nc\n"
    assert chunks[-1].data.endswith(b"b\nc\n") and chunks[-1].first_line == 2


@pytest.mark.parametrize(("want", "text"), CROSS, ids=[w for w, _ in CROSS])
def test_the_templates_alone_answer_the_cross_family_cases(want: str, text: str) -> None:
    # the hand-written rules switched off (as in the bench's cv_no_rules): the tool's template decides
    t = Triage(without_rule_patterns(builtin_rules()), templates=builtin_templates())
    for chunk in _chunks_of(io.BytesIO(text.encode()), "t"):
        t.feed(chunk)
    f = t.findings()
    assert f[0].rule.id == want and f[0].stage == "template", [(x.rule.id, x.stage) for x in f]
