#!/usr/bin/env bash
# One prepared accelerator command for issue 33 item 7 and issue 31 items 2 and 6 (GPU rows).
#
#   bash experiments/gpu/training_and_beyond.sh OUTDIR [BUDGET_S]
#
# Runs, in this order, each under the time left of BUDGET_S (default 560 s), and writes
# everything under OUTDIR (at most four files: the log and three results):
#   A. experiments/gpu/accelerator_check.py --only beyond (issue 33's methods on the device);
#   B. experiments/bench_training.py, 5 runs per cell, SmallCNN and TinySegNet (issue 31 item 2:
#      a 5-seed cell as one vmapped program against 5 sequential runs, target >= 4x on a GPU);
#   C. experiments/train_dac.py --dataset mnist --config different_lambda at the thesis'
#      schedule, 2^15 steps of batch 64, every run of the table as one vmapped program
#      (subset_per_seed=False: the seeds share one labelled subset; issue 31 item 6);
#   D. bench_training for WideResNet-28-2 and UNet-ResNet34, in the time left.
# Missing packages (mlxtend, nilearn, ml_collections, dm-pix, nibabel) travel as wheels in
# .whl/ (see /work/.library/device/README.md); nothing is downloaded.
set -u
OUT=${1:?usage: training_and_beyond.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-560}
START=$(date +%s)
mkdir -p "$OUT"
LOG="$OUT/all.log"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
PY=${PY:-python3}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
stage() {  # stage NAME MAX_S CMD...
  local name=$1 max=$2; shift 2
  local t; t=$(left); (( t > max )) && t=$max
  if (( t < 20 )); then echo "== $name: skipped, ${t}s left" >>"$LOG"; return; fi
  echo "== $name (timeout ${t}s) $(date -u +%T): $*" >>"$LOG"
  timeout "$t" "$@" >>"$LOG" 2>&1
  echo "== $name: exit $? after $(( $(date +%s) - START ))s in all" >>"$LOG"
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__)"
} >>"$LOG" 2>&1
stage A 150 $PY experiments/gpu/accelerator_check.py --only beyond --out "$OUT/accelerator_beyond.json"
stage B 150 $PY experiments/bench_training.py --steps small_cnn tiny_segnet --out /tmp/bt_small
stage C 300 $PY experiments/train_dac.py --dataset mnist --config different_lambda \
  --set total_steps=32768 --set batch_size=64 --set subset_per_seed=False --set batching=vmap \
  --set log_every=1024 --out /tmp/dac_gpu
stage D 600 $PY experiments/bench_training.py --steps wrn_28_2 unet_resnet34 --out /tmp/bt_large
tar -czf "$OUT/bench_training.tar.gz" -C /tmp bt_small bt_large 2>>"$LOG"
tar -czf "$OUT/train_dac_gpu.tar.gz" -C /tmp dac_gpu 2>>"$LOG"
echo "== done after $(( $(date +%s) - START ))s" >>"$LOG"
