#!/usr/bin/env bash
# The GPU measurements, for a lent GPU machine (under 10 minutes): LLM decode vs the bandwidth bound,
# an image policy's PPO on CUDA vs CPU, and VLA LoRA vs full fine-tune peak memory on CUDA.
# Each prints one JSON line (or {"skipped": reason}); results also land in ${OUT:-gpu_check}/.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-gpu_check}
mkdir -p "$OUT"
export MUJOCO_GL=${MUJOCO_GL:-egl}
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv | tee "$OUT/nvidia-smi.csv" \
  || echo '{"skipped": "nvidia-smi not found"}'
$PY -m embodied_ws.cli doctor --env --json > "$OUT/doctor_env.json" || true
run() {  # name, timeout (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" | tail -n 1 | tee "$OUT/$name.json"
}
MODEL=${MODEL:-}
if [ -z "$MODEL" ]; then  # no downloaded model: a small public-shape model is not fetched here; use any GGUF given
  MODEL=$($PY -c "from embodied_ws.assistant.download import default_model_path as p; print(p())")
fi
run llm_decode 240 $PY bench/llm_decode.py --model "$MODEL" --decode 128
run train_image_cuda 150 $PY bench/train_throughput.py --device cuda --steps 4096
if [ -f bench/vla_lora.py ]; then
  run vla_lora_cuda 180 $PY bench/vla_lora.py --device cuda
fi
