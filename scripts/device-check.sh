#!/usr/bin/env bash
# Everything the CUDA backend needs checked on a GPU machine, in one go:
#
#   scripts/device-check.sh [OUT_DIR] [STAGES]      (OUT_DIR default: $OUT, else ./device-check)
#
# STAGES (comma-separated, default "build,test,calibrate,bench,runtime,gemm,loop,torch"; they run in
# this order; "sustained" runs only when named):
#   build      Release build for this GPU's architecture only (nvidia-smi compute_cap) in
#              build-device/: the GPU test binary, the CUDA benchmarks, the trainplan CLI
#   test       the GPU tests: every CUDA kernel vs the CPU reference, the tiny GPT step and loss
#              curves, the runtime's plans on the GPU, NCCL on the GPUs present, event timing,
#              out-of-memory message                               -> gpu-tests.xml (JUnit)
#   calibrate  microbenchmarks (GEMMs of the catalog's models, attention, norms, elementwise,
#              loss, AdamW; NCCL collectives 1 KiB .. 1 GiB)      -> calibration-<gpu>-<prec>.json,
#                                                                     microbench-<gpu>.json
#   bench      GPT-2 124M / 355M training steps (tokens/s, MFU), GEMM, attention and LayerNorm
#              benchmarks                                          -> bench-cuda.json
#   runtime    `trainplan execute` of the dp2 x tp2 x pp2 tiny plan on the GPU (8 ranks sharing
#              it through the staging communicator), measured timeline -> timeline-cuda.json
#   gemm       bf16 GEMMs of transformer layers (hidden 2048..12288, tp 1..8, three layouts) and
#              causal attention (seq 1024..16384) through PyTorch, for checking the compute model
#                                                                  -> gemm-attention.json
#   sustained  8192^3 GEMMs back to back, bf16 then FP8 (20 s each), from an idle GPU: the burst
#              and the power-limited rate the catalog's sustained_matmul holds
#                                                        -> gemm-sustained-bf16.json, -fp8.json
#   loop       the calibration loop on the GPU (tests/calibration/loop.py --backend cuda):
#              execute set A, trainplan bench + calibrate, predict and execute set B
#              (results, and its inputs for a built-in profile in calibration-data/)
#                                                                  -> calibration-loop-cuda.tar.gz
#   torch      the PyTorch baseline, when torch imports            -> pytorch-baseline.json
# A summary of every stage (exit codes, log tails, nvidia-smi) goes to summary.txt: 9 files in
# OUT_DIR when every stage runs (the device tool brings back 8: pack them, or run two calls).
# Each stage runs even when an earlier one failed; the exit code is the number of failed stages.
# On a machine where one call may run 10 minutes, run "build" first, then the other stages (the
# build folder is kept), or build elsewhere and point BUILD_DIR at the binaries.
#
# Time limits (seconds, optional): STAGE_TIMEOUT stops any one stage after that long (exit 124 in
# the summary); DEADLINE stops the whole check that long after it started: a stage gets at most
# what is left, and a stage with under 15 s left is not started (noted as "not run").
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/device-check}}
cd "$root"  # plan files name their model relative to the repository
stages=${2:-build,test,calibrate,bench,runtime,gemm,loop,torch}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${BUILD_DIR:-$root/build-device}
summary=$out/summary.txt
failed=0

note() { echo "$*" | tee -a "$summary"; }
want() { [[ ",$stages," == *",$1,"* ]]; }
# run NAME CMD...: runs a stage, logs its tail into the summary, counts failures (77 = skipped).
run() {
  local name=$1; shift
  local log=$build/logs/$name.log
  mkdir -p "$build/logs"
  local limit=${STAGE_TIMEOUT:-0}
  if [[ -n ${DEADLINE:-} ]]; then
    local left=$((DEADLINE - SECONDS))
    if ((left < 15)); then
      note "== $name: not run (${left} s left of DEADLINE=${DEADLINE})"
      failed=$((failed + 1))
      return 124
    fi
    if ((limit == 0 || left < limit)); then limit=$left; fi
  fi
  local t0=$SECONDS
  if ((limit > 0)); then
    timeout -k 5 "$limit" "$@" >"$log" 2>&1
  else
    "$@" >"$log" 2>&1
  fi
  local rc=$?
  note "== $name: exit $rc in $((SECONDS - t0)) s ($*)"
  tail -n 40 "$log" >>"$summary"
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then failed=$((failed + 1)); fi
  return $rc
}

: >"$summary"
note "device-check $(date -u +%FT%TZ) commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! command -v nvidia-smi >/dev/null; then
  note "no nvidia-smi: not a GPU machine"
  exit 77
fi
nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv >>"$summary" 2>&1
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')

if want build; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  run configure cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DTRAINPLAN_CUDA_ARCHITECTURES="${arch}-real"
  run build cmake --build "$build" -j "$(nproc)" --target trainplan_tests_executor_gpu \
    trainplan_bench_executor_cuda trainplan
fi

bin_tests=$build/tests/trainplan_tests_executor_gpu
bin_bench=$build/benches/trainplan_bench_executor_cuda
bin_cli=$build/trainplan

if want test; then
  run gpu-tests "$bin_tests" -r junit -o "$out/gpu-tests.xml"
  grep -o 'tests="[0-9]*" failures="[0-9]*"\|errors="[0-9]*" failures="[0-9]*" tests="[0-9]*"' \
    "$out/gpu-tests.xml" 2>/dev/null | head -1 >>"$summary"
fi
if want calibrate; then
  run calibrate "$bin_bench" --calibrate="$out"
fi
if want bench; then
  run bench "$bin_bench" --benchmark_out="$out/bench-cuda.json" --benchmark_out_format=json \
    --benchmark_context=git_commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
fi
if want runtime; then
  run runtime "$bin_cli" execute "$root/tests/executor/data/plan-tiny-gpt-dp2-tp2-pp2.json" \
    --backend cuda --steps 3 --timeline "$out/timeline-cuda.json"
fi
if want gemm; then
  if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    run gemm python3 "$root/benches/baselines/gemm_attention_torch.py" --out "$out/gemm-attention.json"
  else
    note "== gemm: skipped (torch with CUDA does not import here)"
  fi
fi
if want sustained; then
  if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    for dt in bf16 fp8; do
      run "sustained-$dt" python3 "$root/benches/baselines/gemm_sustained_torch.py" --dtype "$dt" --seconds 20 \
        --out "$out/gemm-sustained-$dt.json"
    done
  else
    note "== sustained: skipped (torch with CUDA does not import here)"
  fi
fi
if want loop; then
  # The catalog GPU this device is (the profile of a GPU type is keyed by its catalog name);
  # CATALOG_GPU overrides.
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case "$gpu_name" in
    *H200*) catalog_gpu=H200-SXM-141GB ;;
    *H100*HBM3*|*H100*SXM*) catalog_gpu=H100-SXM5-80GB ;;
    *A100*80GB*) catalog_gpu=A100-SXM4-80GB ;;
    *A100*) catalog_gpu=A100-SXM4-40GB ;;
    *) catalog_gpu="" ;;
  esac
  catalog_gpu=${CATALOG_GPU:-$catalog_gpu}
  # --keep: bench and set A's timelines, for calibration/data/<name>/ (scripts/builtin-profiles.sh
  # makes a built-in profile from them); one archive with the loop's results (8 files at most in OUT).
  rm -rf "$build/calibration-loop-cuda"
  mkdir -p "$build/calibration-loop-cuda"
  run loop python3 "$root/tests/calibration/loop.py" "$bin_cli" "$build/calibration-loop" --backend cuda \
    --results "$build/calibration-loop-cuda/calibration-loop-cuda.json" \
    --keep "$build/calibration-loop-cuda/calibration-data" ${catalog_gpu:+--catalog-gpu "$catalog_gpu"}
  tar -C "$build" -czf "$out/calibration-loop-cuda.tar.gz" calibration-loop-cuda
fi

if want torch; then
  if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    run torch python3 "$root/benches/baselines/gpt2_torch.py" --out "$out/pytorch-baseline.json"
  else
    note "== torch: skipped (torch with CUDA does not import here)"
  fi
fi

note "== $failed stage(s) failed; results in $out"
exit "$failed"
