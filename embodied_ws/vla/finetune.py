"""``embodied-ws finetune DATASET``: pre-flight checks → LeRobot policy (+ PEFT LoRA) → memory check → train
with checkpoints (``--resume``) → adapter (and merged policy) → evaluation in sim.

Run folder ``runs/<name>/``: ``config.yaml``, ``base/`` (the policy LoRA was applied to, when it had no
checkpoint of its own), ``checkpoints/step_N/`` (trainable weights, optimizer, RNG, step; atomic),
``checkpoints/latest``, ``adapter/`` (PEFT adapter + LeRobot processors), ``merged/`` (adapter merged into
the base, a plain LeRobot policy), ``metrics.jsonl`` (loss per step), ``eval/`` (success rate, mp4).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from embodied_ws.config.loader import to_dict
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.atomic import write_bytes_atomic, write_dir_atomic, write_json_atomic
from embodied_ws.core.errors import UserError
from embodied_ws.data.dataset import IMAGE_PREFIX, open_dataset


def image_tokens(cfg: RunConfig, n_cams: int) -> int:
    """Sequence length the backbone sees per sample (for the memory estimate)."""
    h, w = cfg.vla.image_size
    return n_cams * max(h * w // (16 * 16 * 4), 1) + 48 + cfg.vla.chunk_size + 1


def _batches(loader: Any) -> Any:
    while True:
        yield from loader


def _save_checkpoint(ckpt_root: Path, step: int, model: Any, optim: Any) -> Path:
    import torch
    from safetensors.torch import save_file

    trainable = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}

    def fill(tmp: Path) -> None:
        save_file(trainable, str(tmp / "trainable.safetensors"))
        torch.save({"optimizer": optim.state_dict(), "rng": torch.get_rng_state()}, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step}))

    path = ckpt_root / f"step_{step}"
    write_dir_atomic(path, fill)
    write_bytes_atomic(ckpt_root / "latest", path.name.encode())
    return path


def _load_checkpoint(ckpt_root: Path, model: Any, optim: Any) -> int:
    import torch
    from safetensors.torch import load_file

    latest = ckpt_root / "latest"
    if not latest.is_file():
        raise UserError("no checkpoint to resume from", str(ckpt_root))
    path = ckpt_root / latest.read_text().strip()
    missing = set(load_file(str(path / "trainable.safetensors"))) - {n for n, _ in model.named_parameters()}
    if missing:
        raise UserError(f"checkpoint does not match the model ({sorted(missing)[0]})", str(path))
    model.load_state_dict(load_file(str(path / "trainable.safetensors")), strict=False)
    state = torch.load(path / "optimizer.pt", weights_only=False)
    optim.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    return int(json.loads((path / "state.json").read_text())["step"])


def prepare(dataset: Path, cfg: RunConfig, run_dir: Path, device: str) -> dict[str, Any]:
    """Dataset with action chunks, policy (+ LoRA), processors: everything a training step needs."""
    import torch
    from lerobot.datasets.factory import resolve_delta_timestamps

    from embodied_ws.vla.policies import build_policy, wrap_lora

    meta_ds = open_dataset(dataset)
    policy, pre, post = build_policy(cfg.vla, meta_ds.meta, device, base_dir=run_dir / "base")
    if cfg.vla.load_in_4bit:
        from embodied_ws.vla.quantize import quantize_backbone

        quantize_backbone(policy, device)  # after the full-precision base is saved, before LoRA
    delta = resolve_delta_timestamps(policy.config, meta_ds.meta)
    ds = open_dataset(dataset, delta_timestamps=delta)
    model = wrap_lora(policy, cfg.vla) if cfg.vla.lora else policy
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=cfg.vla.batch_size,
        shuffle=True,
        num_workers=cfg.vla.num_workers,
        drop_last=len(ds) >= cfg.vla.batch_size,
        generator=torch.Generator().manual_seed(cfg.vla.seed),
    )
    cams = [k for k in meta_ds.meta.features if k.startswith(IMAGE_PREFIX)]
    return {"model": model, "policy": policy, "pre": pre, "post": post, "loader": loader, "ds": ds, "n_cams": len(cams)}


def train_steps(
    model: Any, pre: Any, loader: Any, optim: Any, steps: int, start: int = 0, on_step: Any = None
) -> list[float]:
    """Run optimizer steps ``start..steps-1``; returns the losses. ``on_step(step, loss)`` after each."""
    import torch

    model.train()
    losses = []
    params = [p for p in model.parameters() if p.requires_grad]
    batches = _batches(loader)
    for step in range(start, steps):
        batch = pre(next(batches))
        loss, _ = model.forward(batch)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 10.0)
        optim.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step + 1, losses[-1])
    return losses


def finetune(
    dataset: Path,
    cfg: RunConfig,
    name: str,
    runs: Path,
    resume: bool = False,
    progress: bool = True,
    skip_checks: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``cfg.vla.policy`` on ``dataset`` into ``runs/<name>``; returns the run summary."""
    import torch
    from rich.progress import Progress

    from embodied_ws.vla.memory import estimate, refuse_if_too_big
    from embodied_ws.vla.policies import resolve_device, trainable_share

    run_dir = Path(runs) / name
    if not skip_checks:
        from embodied_ws.vla.preflight import preflight

        preflight(dataset, cfg)
    if (run_dir / "adapter").exists() and not resume:
        raise UserError("run already finished; use another --name or --resume", str(run_dir))
    device = resolve_device(cfg.vla.device)
    if cfg.vla.load_in_4bit:
        from embodied_ws.vla.quantize import require_4bit

        require_4bit(device)  # fail before anything is built
    torch.manual_seed(cfg.vla.seed)
    write_bytes_atomic(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False).encode())
    parts = prepare(dataset, cfg, run_dir, device)
    model, pre = parts["model"], parts["pre"]
    est = estimate(model, cfg.vla.batch_size, image_tokens(cfg, parts["n_cams"]), device)
    refuse_if_too_big(est, cfg.vla.memory_margin, cfg.vla.lora)
    trainable, total = trainable_share(model)
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.vla.learning_rate)
    ckpts = run_dir / "checkpoints"
    start = _load_checkpoint(ckpts, model, optim) if resume else 0
    metrics = (run_dir / "metrics.jsonl").open("a")
    t0 = time.perf_counter()
    with Progress(disable=not progress) as bar:
        task = bar.add_task("finetune", total=cfg.vla.steps, completed=start)

        def on_step(step: int, loss: float) -> None:
            metrics.write(json.dumps({"step": step, "loss": loss}) + "\n")
            bar.update(task, completed=step, description=f"finetune loss {loss:.3f}")
            if cfg.vla.checkpoint_every and step % cfg.vla.checkpoint_every == 0 and step < cfg.vla.steps:
                _save_checkpoint(ckpts, step, model, optim)

        losses = train_steps(model, pre, parts["loader"], optim, cfg.vla.steps, start, on_step)
    metrics.close()
    elapsed = time.perf_counter() - t0
    _save_checkpoint(ckpts, cfg.vla.steps, model, optim)
    export(model, parts, run_dir, cfg, dataset)
    summary: dict[str, Any] = {
        "name": name,
        "policy": cfg.vla.policy,
        "lora": cfg.vla.lora,
        "steps": cfg.vla.steps,
        "resumed_from": start,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "trainable_params": trainable,
        "total_params": total,
        "trainable_share": trainable / total,
        "memory": est.summary(),
        "samples_per_s": len(losses) * cfg.vla.batch_size / max(elapsed, 1e-9),
        "adapter": str(run_dir / ("adapter" if cfg.vla.lora else "policy")),
    }
    if cfg.vla.eval_episodes:
        from embodied_ws.vla.evaluate import evaluate_vla

        summary["eval"] = evaluate_vla(run_dir, cfg.vla.eval_episodes, progress=progress, device=device)
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def export(model: Any, parts: dict[str, Any], run_dir: Path, cfg: RunConfig, dataset: Path) -> None:
    """Save the adapter (or full policy) with its processors, and the merged policy for LoRA runs."""

    def save_processors(tmp: Path) -> None:
        parts["pre"].save_pretrained(tmp)
        parts["post"].save_pretrained(tmp)
        (tmp / "embodied_ws.json").write_text(
            json.dumps({"dataset": str(dataset), "robot": cfg.env.robot, "task": cfg.env.task, "lora": cfg.vla.lora})
        )

    if cfg.vla.lora:

        def fill(tmp: Path) -> None:
            model.save_pretrained(tmp)
            parts["policy"].config.save_pretrained(tmp)
            save_processors(tmp)

        write_dir_atomic(run_dir / "adapter", fill)
        from embodied_ws.vla.policies import load_adapter

        merged = load_adapter(run_dir / "adapter", "cpu", merge=True)

        def fill_merged(tmp: Path) -> None:
            merged.save_pretrained(tmp)
            save_processors(tmp)

        write_dir_atomic(run_dir / "merged", fill_merged)
    else:

        def fill_full(tmp: Path) -> None:
            model.save_pretrained(tmp)
            save_processors(tmp)

        write_dir_atomic(run_dir / "policy", fill_full)
