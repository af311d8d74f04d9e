"""``embodied-ws finetune DATASET``: pre-flight checks → LeRobot policy (+ PEFT LoRA) → memory check → train
with checkpoints (``--resume``) → adapter (and merged policy) → evaluation in sim.

Run folder ``runs/<name>/``: ``config.yaml``, ``base/`` (the policy LoRA was applied to, when it had no
checkpoint of its own), ``checkpoints/step_N/`` (trainable weights, optimizer, RNG states, step, data order; atomic:
:mod:`resume`),
``checkpoints/latest``, ``adapter/`` (PEFT adapter + LeRobot processors), ``merged/`` (adapter merged into
the base, a plain LeRobot policy), ``metrics.jsonl`` (loss per step, flushed each step), ``eval/`` (success
rate, mp4). A resumed run gives the losses of an uninterrupted one; a non-finite loss stops the run (exit 2)
before anything is exported.
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
from embodied_ws.data.dataset import IMAGE_PREFIX
from embodied_ws.vla.datafiles import open_local
from embodied_ws.vla.resume import EpochBatches, keep_metrics_until, load_checkpoint, save_checkpoint


def image_tokens(cfg: RunConfig, n_cams: int) -> int:
    """Sequence length the backbone sees per sample (for the memory estimate)."""
    h, w = cfg.vla.image_size
    return n_cams * max(h * w // (16 * 16 * 4), 1) + 48 + cfg.vla.chunk_size + 1


def prepare(dataset: Path, cfg: RunConfig, run_dir: Path, device: str) -> dict[str, Any]:
    """Dataset with action chunks, policy (+ LoRA), processors: everything a training step needs."""
    import torch
    from lerobot.datasets.factory import resolve_delta_timestamps

    from embodied_ws.vla.policies import build_policy, wrap_lora

    meta_ds = open_local(dataset)
    policy, pre, post = build_policy(cfg.vla, meta_ds.meta, device, base_dir=run_dir / "base")
    if cfg.vla.load_in_4bit:
        from embodied_ws.vla.quantize import quantize_backbone

        quantize_backbone(policy, device)  # after the full-precision base is saved, before LoRA
    delta = resolve_delta_timestamps(policy.config, meta_ds.meta)
    ds = open_local(dataset, delta_timestamps=delta)
    model = wrap_lora(policy, cfg.vla) if cfg.vla.lora else policy
    sampler = EpochBatches(len(ds), cfg.vla.batch_size, len(ds) >= cfg.vla.batch_size, cfg.vla.seed)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_sampler=sampler,
        num_workers=cfg.vla.num_workers,
        generator=torch.Generator().manual_seed(cfg.vla.seed),  # worker seeds; the global RNG is left alone
    )
    cams = [k for k in meta_ds.meta.features if k.startswith(IMAGE_PREFIX)]
    return {
        "model": model,
        "policy": policy,
        "pre": pre,
        "post": post,
        "loader": loader,
        "sampler": sampler,
        "ds": ds,
        "n_cams": len(cams),
    }


def describe_batch(batch: dict[str, Any]) -> str:
    """The samples of a batch as ``episode:frame``, those holding a non-finite value first (and named so)."""
    import torch

    ep, fr = batch.get("episode_index"), batch.get("frame_index")
    if ep is None or fr is None:
        return "episode/frame not in the batch"
    pairs = [f"{int(e)}:{int(f)}" for e, f in zip(ep.reshape(-1).tolist(), fr.reshape(-1).tolist(), strict=True)]
    bad: dict[int, list[str]] = {}
    for key, v in batch.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.ndim and v.shape[0] == len(pairs):
            rows = (~torch.isfinite(v.reshape(v.shape[0], -1))).any(dim=1)
            for i in torch.nonzero(rows).flatten().tolist():
                bad.setdefault(i, []).append(key)
    if bad:
        named = [f"{pairs[i]} ({', '.join(keys)})" for i, keys in sorted(bad.items())]
        return f"non-finite values in episode:frame {', '.join(named[:8])}" + (
            f" and {len(named) - 8} more" if len(named) > 8 else ""
        )
    more = f" and {len(pairs) - 16} more" if len(pairs) > 16 else ""
    return f"batch episode:frame {' '.join(pairs[:16])}{more}"


class NonFiniteLoss(UserError):
    """Training produced a NaN or infinite loss (or gradient): the run stops, nothing is exported."""


def train_steps(
    model: Any, pre: Any, loader: Any, optim: Any, steps: int, start: int = 0, on_step: Any = None
) -> list[float]:
    """Run optimizer steps ``start..steps-1``; returns the losses. ``on_step(step, loss)`` after each.

    The loader's batch sampler must start at batch ``start`` (one batch per step).

    :raises NonFiniteLoss: the loss or the gradient norm of a step is NaN or infinite (no update made)
    """
    import torch

    model.train()
    losses = []
    params = [p for p in model.parameters() if p.requires_grad]
    batches = iter(loader)
    for step in range(start, steps):
        raw = next(batches)
        loss, _ = model.forward(pre(raw))
        if not torch.isfinite(loss.detach()).all():
            raise NonFiniteLoss(f"loss is {float(loss.detach())} at step {step + 1}; {describe_batch(raw)}")
        optim.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 10.0)
        if not torch.isfinite(norm):
            raise NonFiniteLoss(f"gradient norm is {float(norm)} at step {step + 1}; {describe_batch(raw)}")
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
    ckpts, sampler = run_dir / "checkpoints", parts["sampler"]
    start = load_checkpoint(ckpts, model, optim, sampler) if resume else 0
    keep_metrics_until(run_dir / "metrics.jsonl", start)  # steps after the checkpoint are trained again
    t0 = time.perf_counter()
    with Progress(disable=not progress) as bar, (run_dir / "metrics.jsonl").open("a") as metrics:
        task = bar.add_task("finetune", total=cfg.vla.steps, completed=start)

        def on_step(step: int, loss: float) -> None:
            metrics.write(json.dumps({"step": step, "loss": loss}) + "\n")
            metrics.flush()  # a run killed after step N leaves N lines
            bar.update(task, completed=step, description=f"finetune loss {loss:.3f}")
            if cfg.vla.checkpoint_every and step % cfg.vla.checkpoint_every == 0 and step < cfg.vla.steps:
                save_checkpoint(ckpts, step, model, optim, sampler)

        try:
            losses = train_steps(model, pre, parts["loader"], optim, cfg.vla.steps, start, on_step)
        except NonFiniteLoss as exc:
            done = (ckpts / "latest").read_text().strip() if (ckpts / "latest").is_file() else "none"
            raise NonFiniteLoss(
                f"{exc.what}; stopped, nothing exported (last checkpoint: {done}); fix: `embodied-ws vla check` "
                "the dataset, or lower vla.learning_rate",
                str(dataset),
            ) from None
    elapsed = time.perf_counter() - t0
    save_checkpoint(ckpts, cfg.vla.steps, model, optim, sampler)
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
