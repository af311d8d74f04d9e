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


def package_data(package: str) -> dict[str, list[str]]:
    """Every non-Python file inside ``package`` (rules, examples, styles), listed under its nearest package.

    The package opens these at run time (``importlib.resources``), so a wheel or a colcon install must carry
    them all; listing them by walking the tree means a new data file cannot be forgotten here.
    """
    out: dict[str, list[str]] = {}
    for path in sorted(Path(package).rglob("*")):
        if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        owner = next(p for p in path.parents if (p / "__init__.py").is_file())
        out.setdefault(".".join(owner.parts), []).append(str(path.relative_to(owner)))
    return out


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["tests", "tests.*"]),
    package_data=package_data(PACKAGE),
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
