#!/usr/bin/env bash
# The learning loop on a GPU (issue 12, items 2 and 8), as one device run:
#   Stage 3 step cost on CUDA beside the same machine's CPU, Stage 2 step cost (sampling,
#   verification, update) with and without verifier processes, then a Stage 2 run of
#   STEPS steps (default 1000, at most MINUTES minutes) from the shipped checkpoint on the
#   corpus train split, packed as $OUT/s2.tar.* (15 MB parts: tar is split for the transfer).
# Needs: datasets/s2-train (`tasmopt corpus build --no-real -o datasets/s2-train --budget 2
# --min-pairs 0`), var/eval (the real rows' cache) and the real data at ../shared or .devshare/.
# Usage: OUT=/tmp/out bash benchmarks/gpu_learning.sh [STEPS] [MINUTES]
# (2026-11-26, H100: a first run with --temperature 2.0 0.5 --no-anchors (the design's)
# drifted to invalid samples; the defaults are now 1.0 -> 0.5 with anchors.)
set -euo pipefail
STEPS=${1:-1000}
MINUTES=${2:-5}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
export PYTHONPATH=$PWD
if [ ! -d ../shared/data/trident-std ]; then
  mkdir -p ../shared/data && cp -r .devshare/trident-std ../shared/data/
fi
CK=model_store/s1-corpus-v1
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'cpus', __import__('os').cpu_count())"
$PY benchmarks/model.py --checkpoint $CK --stage3 20 --device cuda
$PY benchmarks/model.py --checkpoint $CK --stage3 5 --device cpu
$PY benchmarks/model.py --checkpoint $CK --stage2 10 --device cuda
$PY benchmarks/model.py --checkpoint $CK --stage2 10 --device cuda --verify-workers 8
mkdir -p "$OUT/ck"
$PY -m tasmopt.cli train stage2 --checkpoint $CK --data datasets/s2-train --version s2-gflownet-v1 \
  --out "$OUT/ck" --steps "$STEPS" --partial-steps 100 --max-minutes "$MINUTES" --device cuda \
  --verify-workers 8
tar -C "$OUT/ck" -cf - s2-gflownet-v1 | split -b 15m - "$OUT/s2.tar."
rm -rf "$OUT/ck"
ls -la "$OUT"
