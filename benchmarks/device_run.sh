#!/usr/bin/env bash
# The one prepared check for the GPU machine (NVIDIA H200; it has JAX + CUDA, numpy, scipy,
# pytest, but no MuJoCo, and cannot reach any package index).
#
#   1. Here, with PyPI access, fetch the wheels it lacks (Python 3.12, Linux x86_64; ~35 MB):
#        bash benchmarks/device_run.sh fetch          # -> build/gpu-wheels/ (git-ignored)
#   2. Run it there (device tool), carrying the wheels:
#        run(command="bash benchmarks/device_run.sh", carry=["build/gpu-wheels"], timeout_s=590)
#
# It installs the wheels into /tmp/site, records the machine, checks MJX against CPU MuJoCo
# (tests/test_gpu_backends.py on the GPU), then runs benchmarks/gpu_rollout.py for the CPU
# and MJX twins, K = 4096 first (the goal), writing into $OUT (local default:
# twinloop-out/device): env.txt, tests.txt, gpu_rollout.txt, gpu_rollout.json.
# KS, BACKENDS, REPEATS override the benchmark's lists (e.g. KS="16" for a dry run on a CPU).
#
# MuJoCo-Warp is skipped there: its warp-lang wheel is ~149 MB, over the 64 MiB one device
# call can carry, so the Warp rows must be measured on a machine that can install it
# (pip install 'twinloop[warp]'; python benchmarks/gpu_rollout.py --backends warp).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-build/gpu-wheels}

if [[ "${1:-}" == "fetch" ]]; then
  mkdir -p "$WHEELS"
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 -d "$WHEELS" \
    mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 glfw pyopengl websockets \
    mujoco-mjx==3.17.0 trimesh shapely
  du -sh "$WHEELS"
  exit $?
fi

OUT=${OUT:-twinloop-out/device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# a warm machine keeps compiled programs between calls, so a rerun skips most compiling
export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache

if ! python3 -c "import mujoco, mujoco.mjx" 2>/dev/null; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run 'bash $0 fetch' here first" | tee "$OUT/env.txt"; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || { echo "wheel install failed" | tee "$OUT/env.txt"; exit 3; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  python3 -c "import sys, jax, mujoco, mujoco.mjx, numpy; print('python', sys.version.split()[0], 'jax', jax.__version__, jax.devices(), 'mujoco', mujoco.__version__, 'numpy', numpy.__version__)" 2>&1
} | tee "$OUT/env.txt"

# 1. agreement on the GPU (MJX vs CPU MuJoCo; the Warp tests skip without mujoco_warp)
timeout 170 python3 -m pytest tests/test_gpu_backends.py -m "slow or not slow" -p no:cacheprovider -rs 2>&1 \
  | tee "$OUT/tests.txt"

# 2. throughput and refine latency; each row is written to the JSON as soon as it is measured
timeout 380 python3 benchmarks/gpu_rollout.py --backends ${BACKENDS:-mjx mujoco} --ks ${KS:-4096 1024 16384 256} \
  --repeats "${REPEATS:-10}" \
  --out "$OUT/gpu_rollout.json" 2>&1 | grep -v "^Module " | tee "$OUT/gpu_rollout.txt"
echo "device_run done: $(ls "$OUT")"
