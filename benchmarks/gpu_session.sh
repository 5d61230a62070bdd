#!/usr/bin/env bash
# Everything this project runs on the GPU machine, in one command (GPU time is scarce):
#   bash benchmarks/gpu_session.sh STAGE [STAGE ...]
# stages: env build tests arms probe kbench tbench sweep sweep2 moonshot
# Logs and JSON go to $OUT (the device tool's output folder) or ./gpu-out.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if [ -f .devsite/site-py312.tar.xz ] && [ ! -d /tmp/site/ray ]; then
  mkdir -p /tmp/site && tar -xJf .devsite/site-py312.tar.xz -C /tmp/site
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export TUNE_GEMS_EXTENSIONS_DIR=$PWD/.torch_extensions
export CUBLAS_WORKSPACE_CONFIG=:4096:8

stage() { echo; echo "=== $1 ($(date +%T))"; }
for s in "$@"; do
  case $s in
    env)
      stage env
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
      python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
      python3 -c "import ray, optuna, pydantic; print('ray', ray.__version__, 'optuna', optuna.__version__, 'pydantic', pydantic.__version__)"
      ;;
    build)
      stage build
      /usr/bin/time -f "build wall %es" python3 -c "import torch; from tune_gems.ops import load_extension; m = load_extension(torch.device('cuda')); print('loaded', m)" 2>&1 | tee "$OUT/build.log"
      ;;
    tests)
      stage tests
      timeout 300 python3 -m pytest tests/gpu -m gpu -q -rfE --timeout 240 -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
      ;;
    kbench)
      stage kbench
      timeout 200 python3 benchmarks/kernels.py --out "$OUT/kernels.json" 2>&1 | tee "$OUT/kernels.log"
      ;;
    tbench)
      stage tbench
      timeout 300 python3 benchmarks/train_step.py --profile --out "$OUT/train_step.json" 2>&1 | tee "$OUT/train_step.log"
      ;;
    sweep)
      stage "sweep (one GPU per trial)"
      rm -rf /tmp/gpu-exp
      timeout 300 python3 -m tune_gems sweep sweeps/measure_gems.yaml --storage /tmp/gpu-exp --name measure-gpu \
        num_samples=3 config.trainer.epochs=4 config.trainer.iterations_per_epoch=300 2>&1 | tee "$OUT/sweep.log" | grep -v "^\s*$" | tail -30
      python3 -m tune_gems analyze /tmp/gpu-exp/measure-gpu --n-boot 500 2>&1 | tee -a "$OUT/sweep.log" | tail -12
      cp /tmp/gpu-exp/measure-gpu/*.parquet "$OUT/" 2>/dev/null
      ;;
    sweep2)
      stage "sweep on every GPU of the machine, one GPU per trial"
      rm -rf /tmp/gpu-exp2
      timeout 300 python3 -m tune_gems sweep sweeps/measure_gems.yaml --storage /tmp/gpu-exp2 --name measure-2gpu \
        num_samples=4 config.trainer.epochs=4 config.trainer.iterations_per_epoch=300 2>&1 | tee "$OUT/sweep2.log" | grep -v "^\s*$" | tail -14
      python3 benchmarks/concurrency_report.py /tmp/gpu-exp2/measure-2gpu 2>&1 | tee "$OUT/concurrency.log"
      cp /tmp/gpu-exp2/measure-2gpu/trials.parquet "$OUT/trials_2gpu.parquet" 2>/dev/null
      ;;
    arms)
      stage "arms invariant on the GPU"
      timeout 240 python3 -m pytest tests/gpu/test_arms_gpu.py -m gpu -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/arms_gpu.log" | tail -15
      ;;
    moonshot)
      stage "moonshot: 3 configurations x 64 seeds x 50 epochs x 500 iterations as arms of one trial"
      rm -rf /tmp/gpu-moon
      start=$(date +%s.%N)
      timeout 560 python3 -m tune_gems sweep benchmarks/moonshot.yaml --storage /tmp/gpu-moon --name moonshot 2>&1 | tee "$OUT/moonshot.log" | grep -v "^\s*$" | tail -12
      end=$(date +%s.%N)
      wall=$(python3 -c "print(f'{$end - $start:.1f}')")
      echo "moonshot sweep wall: ${wall} s" | tee -a "$OUT/moonshot.log"
      python3 benchmarks/sweep_efficiency.py /tmp/gpu-moon/moonshot --sweep-wall "$wall" --out "$OUT/moonshot_efficiency.json" 2>&1 | tee -a "$OUT/moonshot.log"
      ;;
    probe)
      stage "which ops depend on the population size (issue 12)"
      timeout 200 python3 benchmarks/p_invariance_probe.py --out "$OUT/probe.json" 2>&1 | tee "$OUT/probe.log"
      ;;
    *) echo "unknown stage $s"; exit 2;;
  esac
done
