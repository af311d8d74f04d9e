"""ament_python package setup: installable with pip and buildable with colcon on ROS 2 Jazzy."""

from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "embodied_ws"


def tree(folder: str) -> list[tuple[str, list[str]]]:
    """data_files entries installing ``folder`` under share/embodied_ws, keeping its layout."""
    out: dict[str, list[str]] = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            out.setdefault(f"share/{PACKAGE}/{path.parent}", []).append(str(path))
    return sorted(out.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["tests", "tests.*"]),
    package_data={"embodied_ws.assistant": ["rules/*.yaml"], "embodied_ws.tui": ["*.tcss"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *tree("launch"),
        *tree("config"),
        *tree("models"),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="embodied_ws developers",
    maintainer_email="dev@embodied-ws.invalid",
    description="ROS 2 training-workstation toolkit for embodied robot learning",
    license="Apache-2.0",
    python_requires=">=3.12",
    entry_points={
        "console_scripts": [
            "embodied-ws = embodied_ws.cli:main",
            "mujoco_sim_node = embodied_ws.ros.nodes.mujoco_sim_node:main",
            "trainer_node = embodied_ws.ros.nodes.trainer_node:main",
            "lossy_relay = embodied_ws.ros.nodes.lossy_relay:main",
            "policy_node = embodied_ws.ros.nodes.policy_node:main",
        ]
    },
)
