"""LoRA vs full fine-tune of the same SmolVLA (one JSON object): peak memory and samples/s.

Same model (a SmolVLA over the default tiny local SmolVLM backbone, ≥ 10 M parameters, so memory is
above allocator noise), same dataset, batch and steps. Each mode runs in a fresh subprocess; a thread
samples its resident set size (RSS) every 2 ms, since ``tracemalloc`` does not see torch's allocations.
``*_peak_mb`` is the peak RSS from just before the policy is built to the end of training, minus the RSS
at that point (imports and the opened dataset are the same in both modes and left out): weights,
gradients, optimizer state and activations. Full fine-tune = every parameter trainable (AdamW);
LoRA = LeRobot's ``wrap_with_peft`` defaults for SmolVLA with rank 16.

Usage: ``python bench/vla_lora.py [--steps 6] [--batch 8]`` (CPU; ``--device cuda`` measures CUDA's
peak allocation instead of RSS).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

IMAGE = 64


def make_inputs(tmp: Path) -> tuple[Path, Path]:
    """The tiny backbone folder and a 2-episode synthetic LeRobotDataset (both built locally)."""
    from embodied_ws.data.dataset import create_dataset, features_for
    from embodied_ws.vla.tiny import build_tiny_backbone

    vlm = build_tiny_backbone(tmp / "vlm", image_size=IMAGE)
    joints = ["base_yaw", "shoulder", "elbow"]
    rng = np.random.default_rng(0)
    with create_dataset(tmp / "ds", 25, features_for(joints, joints, {"overview": (IMAGE, IMAGE)}), "arm3") as ds:
        for ep in range(2):
            for k in range(40):
                q = 0.3 * np.sin(0.1 * k + ep + np.arange(3))
                ds.add_frame(
                    {
                        "observation.state": q.astype(np.float32),
                        "action": (q + 0.03).astype(np.float32),
                        "observation.images.overview": rng.integers(0, 255, (IMAGE, IMAGE, 3), dtype=np.uint8),
                        "task": "touch the red ball",
                    }
                )
            ds.save_episode()
    return vlm, tmp / "ds"


class RssPeak:
    """Background sampler of this process's resident set size."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.002)

    def stop(self) -> float:
        """Peak increase over the starting RSS, MB."""
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)
        return (self.peak - self.base) / 2**20


def child(mode: str, vlm: Path, dataset: Path, steps: int, batch: int, device: str) -> dict:
    """One mode in this (fresh) process: build, train ``steps`` (+1 warm-up), measure."""
    import torch

    from embodied_ws.config.loader import load_config
    from embodied_ws.data.dataset import open_dataset
    from embodied_ws.vla.finetune import prepare, train_steps
    from embodied_ws.vla.policies import trainable_share

    torch.manual_seed(0)
    torch.set_num_threads(2)
    sets = [
        f"vla.vlm_model_name={vlm}",
        "vla.load_vlm_weights=false",
        f"vla.image_size=[{IMAGE}, {IMAGE}]",
        "vla.chunk_size=50",
        f"vla.batch_size={batch}",
        f"vla.lora={'true' if mode == 'lora' else 'false'}",
    ]
    cfg = load_config("vla", sets)
    open_dataset(dataset)  # imports and dataset files loaded before the baseline
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    meter = RssPeak()
    with tempfile.TemporaryDirectory() as run:
        parts = prepare(dataset, cfg, Path(run), device)
        model = parts["model"]
        if mode == "full":
            for p in model.parameters():
                p.requires_grad_(True)
        n_train, n_all = trainable_share(model)
        optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        train_steps(model, parts["pre"], parts["loader"], optim, 1)
        t = time.perf_counter()
        train_steps(model, parts["pre"], parts["loader"], optim, steps + 1, start=1)
        elapsed = time.perf_counter() - t
    peak = meter.stop()
    if device.startswith("cuda"):
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return {"peak_mb": peak, "samples_per_s": steps * batch / elapsed, "params": n_all, "trainable": n_train}


def main() -> None:
    """Run both modes in fresh subprocesses and print one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--child", choices=["lora", "full"], help=argparse.SUPPRESS)
    ap.add_argument("--vlm", help=argparse.SUPPRESS)
    ap.add_argument("--dataset", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = child(args.child, Path(args.vlm), Path(args.dataset), args.steps, args.batch, args.device)
        print(json.dumps(res))
        return
    with tempfile.TemporaryDirectory() as tmp:
        vlm, dataset = make_inputs(Path(tmp))
        out = {}
        for mode in ("lora", "full"):
            cmd = [sys.executable, __file__, "--child", mode, "--vlm", str(vlm), "--dataset", str(dataset)]
            cmd += ["--steps", str(args.steps), "--batch", str(args.batch), "--device", args.device]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    lora, full = out["lora"], out["full"]
    print(
        json.dumps(
            {
                "model_params": full["params"],
                "lora_trainable_params": lora["trainable"],
                "batch": args.batch,
                "steps": args.steps,
                "device": args.device,
                "lora_peak_mb": round(lora["peak_mb"], 1),
                "full_peak_mb": round(full["peak_mb"], 1),
                "memory_ratio": round(lora["peak_mb"] / full["peak_mb"], 3),
                "lora_samples_per_s": round(lora["samples_per_s"], 2),
                "full_samples_per_s": round(full["samples_per_s"], 2),
                "speed_ratio": round(lora["samples_per_s"] / full["samples_per_s"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
