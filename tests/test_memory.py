"""One memory planner: ``embodied-ws plan``'s figures and the fine-tune's check use the same constants and formulas,
and nothing else in the package does its own bytes-per-parameter arithmetic."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ws.core import memory

ROOT = Path(__file__).resolve().parents[1]


def test_core_memory_imports_no_heavy_module() -> None:
    heavy = "{'torch', 'psutil', 'gguf', 'llama_cpp'}"
    code = f"import sys, embodied_ws.core.memory; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_fine_tune_estimate_of_a_full_fp32_model_equals_the_plan_without_overhead() -> None:
    """A full fine-tune of an fp32 model: the check's weights + optimizer state is the plan's Adam
    bytes per parameter (the plan adds only the 1.2 overhead); activations follow the one formula."""
    torch = pytest.importorskip("torch")
    from embodied_ws.vla.memory import estimate

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ModuleList([torch.nn.Linear(48, 48)] * 3))
    n = sum(p.numel() for p in model.parameters())
    est = estimate(model, batch_size=4, tokens=10, device="cpu")
    assert est.weights + est.optimizer == memory.ADAM_BYTES_PER_PARAM * n == 16 * n
    assert memory.vla_memory_bytes(n)["full"] == pytest.approx((est.weights + est.optimizer) * 1.2)
    assert est.activations == 34 * 4 * 10 * 48 * 3 == memory.activation_bytes(4, 10, 48, 3)
    assert est.free > 0


def test_no_second_copy_of_the_memory_constants() -> None:
    """GiB/overhead/bytes-per-parameter arithmetic lives in core/memory.py only (``2**20`` for MiB
    reporting of measured numbers is fine)."""
    pattern = re.compile(
        r"^\s*\w*(GIB|MIB|MB|OVERHEAD|BYTES_PER_PARAM|TRAINABLE_FRACTION)\s*=|1024\s*\*\*\s*3|2\s*\*\*\s*30|1024\s*\*\s*1024"
    )
    found = [
        f"{f.relative_to(ROOT)}:{i}"
        for f in sorted((ROOT / "embodied_ws").rglob("*.py"))
        if f.name != "memory.py" or f.parent.name != "core"
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found
    src = (ROOT / "embodied_ws" / "rl" / "hwplan.py").read_text()
    assert "embodied_ws.assistant" not in src
