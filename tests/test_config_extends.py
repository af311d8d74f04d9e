"""A train preset can build on another with ``extends:``: the base fills first, the file's own keys override."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import ConfigError


def test_a_users_preset_extends_a_shipped_one_key_by_key(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: push\nenv:\n  episode_steps: 77\nppo:\n  net_arch: [32]\n")
    push, cfg = load_config("push"), load_config(mine)
    assert cfg.env.episode_steps == 77 and cfg.ppo.net_arch == [32]
    # every key the file leaves alone is the base preset's, not the schema default
    assert cfg.env.frame_skip == push.env.frame_skip and cfg.train.n_envs == push.train.n_envs
    assert cfg.task.object_mass == push.task.object_mass and cfg.dr == push.dr
    assert load_config(mine, ["env.episode_steps=5"]).env.episode_steps == 5  # --set still comes last


def test_extends_a_path_beside_the_file_and_chains(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("extends: push\ntrain:\n  n_envs: 3\n")
    (tmp_path / "top.yaml").write_text("extends: base.yaml\ntrain:\n  seed: 9\n")
    cfg = load_config(tmp_path / "top.yaml")
    assert (cfg.train.n_envs, cfg.train.seed, cfg.env.task) == (3, 9, "push")


@pytest.mark.parametrize(
    "files,fragments",
    [
        (
            {"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: a.yaml\n"},
            ("b.yaml:1: extends loops back", "a.yaml -> "),
        ),
        ({"a.yaml": "extends: nosuchpreset\n"}, ("no train preset 'nosuchpreset'",)),
        ({"a.yaml": "extends: [push]\n"}, ("a.yaml:1", "extends must name")),
        ({"a.yaml": "extends: push\nenv:\n  nope: 1\n"}, ("a.yaml:3", "unknown key 'nope'")),
    ],
)
def test_a_bad_extends_is_one_error_naming_the_file(tmp_path: Path, files: dict[str, str], fragments) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "a.yaml")
    for f in fragments:
        assert f in str(err.value), str(err.value)
