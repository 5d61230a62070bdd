#!/usr/bin/env bash
# Everything this project runs on the GPU machine, in one command (GPU time is scarce):
#   bash benchmarks/gpu_session.sh STAGE [STAGE ...]
# stages: env build tests (GPU_TESTS=files to run a part, TESTS_BUDGET_S=540) blocks43 eight layers floor43 startup startup-sweep tests-nokernels arms folds-gpu probe kbench tbench efficiency sweep sweep2 moonshot perf triton triton-perf triton-tests
#         blocks1 blocks (issue 25: the moonshot shape as seed blocks, one GPU, then every visible GPU;
#         BLOCKS_EPOCHS=50 by default; run blocks1 first, in its own call: each takes about 5 minutes)
# perf (issue 22, about 8 minutes): build, the fused-head and tensor-core GPU tests, kernels.py
# (dueling_c51, c51_loss, all at P=1,8,64,256), train_step.py (P=1,64,256 x fp32/tf32/bf16, P=768
# as 12x64 blocks, profiles per precision); one log (perf.log) and two JSON files in $OUT, a short
# table printed last.
# triton (issue 40 item 3, one call of at most 9.5 minutes, TRITON_BUDGET_S=540): the extension build, train_step.py with
# model.layer_kernel torch and triton side by side (P=1,64,256 and the moonshot's iteration, tf32, graphed; the
# first triton case compiles the kernels), one profile per layer kernel at P=1 and 64 (launch counts), then the
# GPU tests of the triton path (tests/gpu/test_triton_*_gpu.py: kernel invariants at real shapes, the noise factors
# bit for bit against the torch path's, the learner's
# seed-block and arms invariants, bits, resume, tf32 agreement) in the time left; triton.log, train_step_triton.json
# and a short table last. triton-tests / triton-perf: the two halves alone.
# layers (issue 43, about 6 minutes, PROBE_BUDGET_S=240): benchmarks/layer_gemm_probe.py (every layer product of the
# P=64 and moonshot iterations: Triton launch variants against bmm, tf32 and bf16, each compiled kernel's dot, registers,
# spills), then tests/gpu/test_triton_layers_gpu.py; layer_gemm_probe.{log,json}, triton_layers_gpu.log, tables last.
# eight (about 4 minutes, EIGHT_BUDGET_S=360): sweeps/eight_histories.yaml on the GPU, its experiment (no checkpoints)
# as $OUT/eight-gpu.tgz, analysed there unless EIGHT_NO_ANALYSIS is set.
# floor43 (issue 43, one call of at most 9 minutes, FLOOR_BUDGET_S=530): the extension build in the background while
# layer_gemm_probe.py runs (PROBE_BUDGET_S=150), then train_step.py with model.layer_kernel torch and triton
# side by side (P=1,64,256 and the moonshot, tf32, graphed), then the triton path's GPU tests
# (tests/gpu/test_triton_*_gpu.py: the optimizer kernel against torch's fused Adam, noise, layers, the learner's
# invariants) in the time left; floor43.log, layer_gemm_probe.{log,json}, train_step_triton.json, a short table last.
# Logs and JSON go to $OUT (the device tool's output folder) or ./gpu-out.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/gpu-out}
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
      timeout ${TESTS_BUDGET_S:-540} python3 -m pytest ${GPU_TESTS:-tests/gpu} -m gpu -v -rfE --durations=15 --timeout 240 -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | grep -v " PASSED" | tail -40
      ;;
    tests-nokernels)
      stage "tests (all but the kernel file)"
      timeout 300 python3 -m pytest tests/gpu -m gpu -q -rfE --timeout 240 -p no:cacheprovider --ignore=tests/gpu/test_kernels_gpu.py 2>&1 | tee "$OUT/gpu_tests_nokernels.log" | tail -15
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
      cp /tmp/gpu-exp2/measure-2gpu/trials.parquet "$OUT/trials_2gpu.parquet" 2>/dev/null
      ;;
    arms)
      stage "arms invariant on the GPU"
      timeout 240 python3 -m pytest tests/gpu/test_arms_gpu.py -m gpu -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/arms_gpu.log" | tail -15
      ;;
    folds-gpu)
      stage "folds invariant on the GPU (issue 20)"
      timeout 240 python3 -m pytest tests/gpu/test_folds_gpu.py -m gpu -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/folds_gpu.log" | tail -15
      ;;
    blocks43)
      stage "P = 768 at batch 128 as 32 blocks of 24 seeds and 192 of 4, Triton path (tf32, graphed)"
      timeout ${BLOCKS_BUDGET_S:-240} python3 benchmarks/train_step.py --core --precisions tf32 --populations 1 --blocks 32,192 \
        --layer-kernels triton --reps 20 --rounds 2 --warmup 3 --out "$OUT/blocks.json" 2>&1 | tee "$OUT/blocks.log" | tail -12
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
    efficiency)
      stage "sweep efficiency: measure_gems-shaped trials one per GPU, then packed 3 per GPU (issue 15)"
      for how in "1" "0.34"; do
        rm -rf /tmp/gpu-eff
        start=$(date +%s.%N)
        timeout 280 python3 -m tune_gems sweep sweeps/measure_gems.yaml --storage /tmp/gpu-eff --name eff \
          num_samples=3 resources.gpu=$how config.trainer.epochs=5 2>&1 | tee "$OUT/efficiency_gpu$how.log" | grep -v "^\s*$" | tail -6
        end=$(date +%s.%N)
        wall=$(python3 -c "print(f'{$end - $start:.1f}')")
        echo "sweep wall (resources.gpu=$how): ${wall} s" | tee -a "$OUT/efficiency_gpu$how.log"
        python3 benchmarks/sweep_efficiency.py /tmp/gpu-eff/eff --sweep-wall "$wall" --out "$OUT/efficiency_gpu$how.json" 2>&1 | tee -a "$OUT/efficiency_gpu$how.log"
      done
      ;;
    perf)
      stage "perf: fused dueling-C51 head, tensor cores (issue 22)"
      log="$OUT/perf.log"
      : > "$log"
      step() { echo "=== $1 ($(date +%T))" >> "$log"; }
      step build
      timeout 110 python3 -c "import torch; from tune_gems.ops import load_extension; print('loaded', load_extension(torch.device('cuda')))" >> "$log" 2>&1
      step "gpu tests (fused head, tensor cores, the learner with the fused head: arms invariant, bits, resume)"
      timeout 150 python3 -m pytest tests/gpu/test_tensor_cores_gpu.py tests/gpu/test_dueling_head_gpu.py \
        tests/gpu/test_arms_gpu.py tests/gpu/test_trainer_gpu.py -m gpu -q -rfE -p no:cacheprovider >> "$log" 2>&1
      step kernels.py
      timeout 40 python3 benchmarks/kernels.py --ops dueling_c51 c51_loss all --populations 1 8 64 256 --reps 100 --out "$OUT/kernels.json" >> "$log" 2>&1
      step train_step.py
      timeout 240 python3 benchmarks/train_step.py --populations 1,64,256 --blocks 12 --moonshot --reps 50 --rounds 3 --profile \
        --profile-precisions fp32,tf32,bf16 --out "$OUT/train_step.json" >> "$log" 2>&1
      step done
      echo "--- stage times"; grep "^=== " "$log"
      echo "--- tests"; grep -E "passed|failed|error|FAILED|ERROR" "$log" | grep -v "^E " | tail -8
      echo "--- fused head (kernels.py, graph rows)"; grep -E "^dueling_c51 .* graph" "$log"
      echo "--- SIMT GEMMs per profile"; grep -E "^profile P=" "$log" | sed 's/ kernel launches, / launches, /'
      echo "--- op census (dispatched ops per iteration; where/copy_/cat/fill_ counts)"
      grep -E "^op census|aten\.(where|copy_|_to_copy|clone|cat|fill_|sum)\.|tune_gems\." "$log" | head -60
      ;;
    triton|triton-perf|triton-tests)
      stage "Triton layer kernels against the torch path (issue 40 item 3): $s"
      log="$OUT/triton.log"
      [ "$s" = triton-tests ] || : > "$log"
      step() { echo "=== $1 ($(date +%T))" >> "$log"; }
      t0=$SECONDS
      if [ "$s" != triton-tests ]; then
        step build
        timeout 110 python3 -c "import torch, triton; from tune_gems.ops import load_extension; print('loaded', load_extension(torch.device('cuda')), 'triton', triton.__version__)" >> "$log" 2>&1
        step "train_step.py, layer kernels side by side"
        timeout 240 python3 benchmarks/train_step.py --core --populations 1,64,256 --precisions tf32 --moonshot \
          --layer-kernels torch,triton --reps 50 --rounds 3 --out "$OUT/train_step_triton.json" >> "$log" 2>&1
        step "profiles (launches per iteration)"
        timeout 90 python3 benchmarks/train_step.py --core --populations 1 --precisions tf32 --reps 5 --rounds 1 --profile \
          --profile-precisions tf32 --layer-kernels torch,triton --out "$OUT/train_step_triton_profile.json" >> "$log" 2>&1
      fi
      if [ "$s" != triton-perf ]; then
        step "gpu tests of the triton path"
        left=$(( ${TRITON_BUDGET_S:-540} - (SECONDS - t0) ))  # the tests get what the one call has left
        [ "$left" -lt 60 ] && left=60
        timeout "$left" python3 -m pytest tests/gpu/test_triton_noise_gpu.py tests/gpu/test_triton_layers_gpu.py tests/gpu/test_torch_path_gpu.py \
          -m gpu -q -rfE --timeout 200 -p no:cacheprovider >> "$log" 2>&1
      fi
      step done
      echo "--- stage times"; grep "^=== " "$log"
      echo "--- tests"; grep -E "passed|failed|error|FAILED|ERROR" "$log" | grep -v "^E " | tail -30
      echo "--- iteration us, torch vs triton layers (graph, tf32)"; grep -E "^(train_step|moonshot) " "$log"
      echo "--- triton / torch"; grep -E "^summary:" "$log" | tr ',' '\n' | grep -E "triton|moonshot"
      echo "--- launches per iteration"; grep -E "^profile P=" "$log" | sed 's/ kernel launches, / launches, /'
      ;;
    eight)
      stage "eight histories x 2 folds x 2 arms x 24 seeds on one GPU (sweeps/eight_histories.yaml), then its analysis"
      rm -rf /tmp/eexp
      start=$(date +%s)
      timeout ${EIGHT_BUDGET_S:-360} python3 -m tune_gems sweep sweeps/eight_histories.yaml --storage /tmp/eexp --name eight-gpu \
        > "$OUT/eight_histories_sweep.log" 2>&1
      echo "sweep rc $? wall $(( $(date +%s) - start )) s"; grep -vE "HEALTH_DIAG|^\s*$" "$OUT/eight_histories_sweep.log" | tail -8
      tar -C /tmp/eexp --exclude='*checkpoint*' --exclude='*.pkl' -czf "$OUT/eight-gpu.tgz" eight-gpu  # one file back
      [ -z "${EIGHT_NO_ANALYSIS:-}" ] && timeout 120 python3 -m tune_gems analyze /tmp/eexp/eight-gpu 2>&1 | tail -30
      ;;
    layers)
      stage "layer GEMMs: the Triton layer kernels' launch variants against bmm, per layer shape (issue 43)"
      timeout $(( ${PROBE_BUDGET_S:-240} + 120 )) python3 benchmarks/layer_gemm_probe.py --budget "${PROBE_BUDGET_S:-240}" \
        --out "$OUT/layer_gemm_probe.json" > "$OUT/layer_gemm_probe.log" 2>&1
      echo "probe exit $?"
      timeout 240 python3 -m pytest tests/gpu/test_triton_layers_gpu.py -m gpu -q -rfE --timeout 200 -p no:cacheprovider \
        > "$OUT/triton_layers_gpu.log" 2>&1
      echo "--- tests"; grep -E "passed|failed|error|FAILED|ERROR" "$OUT/triton_layers_gpu.log" | grep -v "^E " | tail -12
      echo "--- probe: GEMM us per iteration per variant (ratio to torch's bmm)"; grep -E "GEMM us per iteration|^probe|compiled the variants|failed" "$OUT/layer_gemm_probe.log"
      echo "--- probe: tf32 TF/s per product"; sed -n '/^== tf32/,/^== bf16/p' "$OUT/layer_gemm_probe.log" | grep -vE "^== bf16|GEMM us" | cut -c1-190 | head -75
      ;;
    floor43)
      stage "issue 43: layer probe, torch vs triton iterations, the triton path's GPU tests"
      log="$OUT/floor43.log"
      : > "$log"
      step() { echo "=== $1 ($(date +%T))" >> "$log"; }
      t0=$SECONDS
      timeout 150 python3 -c "import torch; from tune_gems.ops import load_extension; print('loaded', load_extension(torch.device('cuda')))" \
        > "$OUT/build.log" 2>&1 &
      build=$!
      step "layer_gemm_probe.py (the build beside it)"
      timeout $(( ${PROBE_BUDGET_S:-150} + 60 )) python3 benchmarks/layer_gemm_probe.py --budget "${PROBE_BUDGET_S:-150}" \
        --out "$OUT/layer_gemm_probe.json" > "$OUT/layer_gemm_probe.log" 2>&1
      echo "probe exit $?" >> "$log"
      wait $build; echo "build exit $?" >> "$log"
      step "train_step.py, layer kernels side by side"
      timeout 200 python3 benchmarks/train_step.py --core --populations 1,64,256 --precisions tf32 --moonshot \
        --layer-kernels torch,triton --reps 50 --rounds 3 --out "$OUT/train_step_triton.json" >> "$log" 2>&1
      step "gpu tests of the triton path"
      left=$(( ${FLOOR_BUDGET_S:-530} - (SECONDS - t0) ))
      [ "$left" -lt 60 ] && left=60
      timeout "$left" python3 -m pytest tests/gpu/test_triton_optim_gpu.py tests/gpu/test_triton_noise_gpu.py \
        tests/gpu/test_triton_layers_gpu.py tests/gpu/test_torch_path_gpu.py -m gpu -q -rfE --timeout 200 -p no:cacheprovider >> "$log" 2>&1
      step done
      echo "--- stage times"; grep "^=== \|exit" "$log"
      echo "--- probe: GEMM us per iteration per variant (ratio to torch's bmm)"; grep -E "GEMM us per iteration|^probe|compiled the variants" "$OUT/layer_gemm_probe.log"
      echo "--- iteration us (graph, tf32)"; grep -E "^(train_step|moonshot) " "$log"
      echo "--- triton / torch"; grep -E "^summary:" "$log" | tr ',' '\n' | grep -E "over_torch|moonshot"
      echo "--- tests"; grep -E "passed|failed|skipped|error|FAILED|ERROR|clip\+adam vs" "$log" | grep -v "^E " | tail -24
      ;;
    startup)
      stage "a trial's fixed start-up, phase by phase: cold (a fresh process), then warm trials in it (issue 33 item 4)"
      timeout 240 python3 benchmarks/startup.py --trials 3 --out "$OUT/startup.json" 2>&1 | tee "$OUT/startup.log" | tail -32
      ;;
    startup-sweep)
      stage "a real 4-trial sweep: each trial's gap, start-up and worker process (reused actors, issue 33 item 4)"
      timeout 300 python3 benchmarks/startup.py --trials 1 --sweep 4 --out "$OUT/startup_sweep.json" 2>&1 | tee "$OUT/startup_sweep.log" | tail -40
      ;;
    blocks1|blocks)
      # One block per GPU (sweeps/seed_blocks.yaml: 3 arms x 64 seeds per block, the moonshot's
      # shape); blocks1 = one block on GPU 0 (the reference), blocks = one block on every visible GPU.
      (  # a subshell: blocks1's CUDA_VISIBLE_DEVICES stays inside it
      if [ "$s" = blocks1 ]; then g=1; first=${CUDA_VISIBLE_DEVICES:-0}; export CUDA_VISIBLE_DEVICES=${first%%,*}
      else g=$(python3 -c "import torch; print(torch.cuda.device_count())"); fi
      stage "seed blocks: $g block(s) of 3 arms x 64 seeds on $g GPU(s)"
      rm -rf /tmp/gpu-blocks$g
      start=$(date +%s.%N)
      timeout 560 python3 -m tune_gems sweep sweeps/seed_blocks.yaml --storage /tmp/gpu-blocks$g --name blocks$g \
        blocks.seed_blocks=$g config.trainer.epochs=${BLOCKS_EPOCHS:-50} \
        config.trainer.checkpoint_every=0 config.trainer.checkpoint_interval_s=0 2>&1 | tee "$OUT/blocks$g.log" | grep -v "^\s*$" | tail -12
      end=$(date +%s.%N)
      wall=$(python3 -c "print(f'{$end - $start:.1f}')")
      echo "blocks sweep wall ($g GPU): ${wall} s" | tee -a "$OUT/blocks$g.log"
      ref=""; [ "$g" != 1 ] && [ -f "$OUT/blocks1.json" ] && ref="--reference $OUT/blocks1.json"
      python3 benchmarks/seed_blocks.py /tmp/gpu-blocks$g/blocks$g --sweep-wall "$wall" $ref --out "$OUT/blocks$g.json" 2>&1 | tee -a "$OUT/blocks$g.log"
      python3 -m tune_gems analyze /tmp/gpu-blocks$g/blocks$g --n-boot 500 2>&1 | tee -a "$OUT/blocks$g.log" | tail -8
      )
      ;;
    *) echo "unknown stage $s"; exit 2;;
  esac
done
