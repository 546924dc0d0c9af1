#!/usr/bin/env bash
# The GPU checks of one device call, each under its own time limit so that one hang or crash
# costs only its own part and the rest still reports:
#   1. the machine (nvidia-smi, driver, the libraries device_env.sh found);
#   2. every test case of hardy_gpu_tests in its own process (a crash names its case);
#   3. journey 3 on the GPU: `hardy train --backend cuda` on examples/tiny.ini to a checkpoint,
#      `hardy ckpt inspect` of it, a resume to the end; the same on the CPU backend, and the
#      difference of the two final checkpoints; --precision fp16 winning over HARDY_CUDA_PRECISION;
#   4. bench_gpu.py: the peak GEMM and the step against PyTorch tuned for speed (eager,
#      torch.compile, CUDA graphs; HARDY_DEVICE_CONFIGS, default small; HARDY_DEVICE_STEP_LIMIT);
#   5. compute-sanitizer's memcheck over the GPU tests;
#   6. with what time is left, the snapshot's price on the GPU step (bench/snapshot), NCCL on
#      one rank and the tiny job's convergence on both backends;
#   7. multirank (only when asked, HARDY_DEVICE_PARTS=multirank): several ranks on the one GPU
#      (bench/gpu/one_gpu_rank.sh, test only) through NCCL's recoveries and a slow rank timed by
#      its device spans (scenario slow_rank), bench/gpu/multi_rank_check.py;
#   8. feed (only when asked): `hardy train --backend cuda` at the climate size from DeepCAM and
#      packed files in /dev/shm beside the compute-only step (bench/gpu/feed_check.py), and an
#      older hardy on the same inputs first when HARDY_DEVICE_FEED_BEFORE names one;
#   9. networks (only when asked): the seed runs' networks at the climate fields' full size
#      (768x1152, local batch 2, bf16) under `hardy train --backend cuda`: DeepCAM's DeepLabv3+
#      trains to a checkpoint, is inspected and resumed, the Gordon Bell Tiramisu trains, and
#      CosmoFlow at 128^3 (local batch 4) trains, resumes and is scored; the device memory of
#      each job sampled by nvidia-smi every 100 ms (its peak includes the CUDA context and
#      cuDNN's workspaces); then their steps in hardy_gpu_bench (bench_gpu.py configs
#      deepcam,tiramisu,cosmoflow; part network-step, PyTorch beside them with
#      HARDY_DEVICE_NETWORK_TORCH=1).
# Run on the GPU machine, from the repository root, after build-cuda and bench/gpu/make_kit.sh:
#   bash bench/gpu/device_check.sh [KIT.tar.xz] [BUDGET_S]
# HARDY_DEVICE_PARTS picks parts (default tests,journey,step,sanitizer,snapshot,more; also
# feed, multirank, networks, network-step).
# Everything lands in $OUT (the device tool's folder) or /tmp/hardy-device-check.
set -uo pipefail

kit="${1:-build-cuda/gpu-kit.tar.xz}"
budget_s="${2:-360}"
out="${OUT:-/tmp/hardy-device-check}"
# What does not come back (a device call returns at most 8 files): run directories, lists.
work="${TMPDIR:-/tmp}/hardy-device-work"
mkdir -p "$out" "$work"
deadline=$((SECONDS + budget_s))
parts=",${HARDY_DEVICE_PARTS:-tests,journey,step,sanitizer,snapshot,more},"
wanted() { [[ "$parts" == *",$1,"* ]]; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp

left() { echo $((deadline - SECONDS)); }
# Runs a part for at most min(its limit, the time left), logging its status and seconds.
part() {
  local name="$1" limit="$2"
  shift 2
  local allowed=$(($(left) < limit ? $(left) : limit))
  if ((allowed < 10)); then
    echo "[$name] skipped: $(left) s left" | tee -a "$out/summary.txt"
    return 0
  fi
  local started=$SECONDS
  local log="${part_log_dir:-$out}/$name.txt"
  timeout --kill-after=5 "$allowed" "$@" > "$log" 2>&1
  local status=$?
  echo "[$name] exit $status in $((SECONDS - started)) s (limit $allowed s)" | tee -a "$out/summary.txt"
  tail -n 15 "$log"
  return 0
}

{
  source bench/gpu/device_env.sh "$kit"
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
} > "$work/machine.txt" 2>&1
cat "$work/machine.txt" >> "$out/summary.txt"
grep -v LD_LIBRARY_PATH "$work/machine.txt" | tail -n 8
source bench/gpu/device_env.sh "$kit" > /dev/null 2>&1

# 2. The test cases, one process each: Catch2 filters treat ',' and '[' specially.
# HARDY_DEVICE_TESTS: a grep -E pattern picking cases by name (default: all).
hardy_gpu_tests --list-test-names-only 2>&1 | grep -E "${HARDY_DEVICE_TESTS:-.}" > "$work/test-names.txt"
run_cases() {
  local failed=0
  : > "$work/gpu-tests-summary.txt"
  while IFS= read -r name; do
    [[ -z "$name" ]] && continue
    local escaped="${name//,/\\,}"
    escaped="${escaped//[/\\[}"
    local started=$SECONDS
    timeout --kill-after=5 90 hardy_gpu_tests "$escaped" --reporter compact --durations yes \
      >> "$out/gpu-tests.txt" 2>&1
    local status=$?
    ((status != 0)) && failed=$((failed + 1))
    echo "case exit $status in $((SECONDS - started)) s: $name" >> "$work/gpu-tests-summary.txt"
  done < "$work/test-names.txt"
  cat "$work/gpu-tests-summary.txt"
  return "$failed"
}
if wanted tests; then
  part_log_dir="$work" part gpu-tests 200 bash -c "$(declare -f run_cases); out='$out'; work='$work'; run_cases"
  grep -h "^case\|largest gradient" "$work/gpu-tests-summary.txt" "$out/gpu-tests.txt"
fi

# 3. Train, checkpoint, inspect, resume on the GPU; the same job on the CPU to compare.
journey() {
  set -e
  rm -rf "$work/run-cuda" "$work/run-cpu" /dev/shm/hardy-device-check
  local backend
  for backend in cuda cpu; do
    local run="$work/run-$backend"
    local common=(--config examples/tiny.ini --backend "$backend" --checkpoint-every 30
                  --snapshot-dir /dev/shm/hardy-device-check --run-dir "$run" --log-every 10)
    hardy train "${common[@]}" --steps 30
    hardy ckpt list "$run"
    hardy ckpt inspect "$(ls "$run"/checkpoints/*.h5 | tail -n 1)" | head -n 30
    hardy train "${common[@]}" --steps 60 --resume latest
    echo "== $backend: the last metrics"
    tail -n 2 "$run/metrics.jsonl"
    # The GPU's span of each step's kernels is in every line on cuda, in none on the CPU.
    python3 - "$run/metrics.jsonl" "$backend" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if '"step"' in line]
spans = [line.get("compute_device_s") for line in lines]
if sys.argv[2] == "cuda":
    assert all(isinstance(s, float) and s > 0 for s in spans), f"compute_device_s: {spans}"
    print(f"compute_device_s: median {1e3 * sorted(spans)[len(spans) // 2]:.2f} ms of compute_s "
          f"{1e3 * sorted(l['compute_s'] for l in lines)[len(lines) // 2]:.2f} ms")
else:
    assert all(s is None for s in spans), f"compute_device_s on the cpu: {spans}"
PY
  done
  hardy ckpt diff "$(ls "$work"/run-cuda/checkpoints/*.h5 | tail -n 1)" \
    "$(ls "$work"/run-cpu/checkpoints/*.h5 | tail -n 1)"
  # --precision does on the GPU what HARDY_CUDA_PRECISION did, and wins over it: fp16 asked for
  # with the variable saying bf16 trains in fp16 (its loss scaler active), recorded as such.
  local run="$work/run-cuda-fp16"
  rm -rf "$run"
  HARDY_CUDA_PRECISION=bf16 hardy train --config examples/tiny.ini --backend cuda --precision fp16 \
    --steps 20 --checkpoint-every 20 --run-dir "$run" --log-every 10
  grep -q '^precision = fp16$' "$run/config.ini"
  hardy ckpt inspect "$run/checkpoints/ckpt-20.h5" | grep -E '^ *precision: +fp16'
  python3 - "$run/events.jsonl" <<'PY'
import json, sys
started = [json.loads(l) for l in open(sys.argv[1]) if '"job_started"' in l][0]
assert started["precision"] == "fp16", started
print("--precision fp16 over HARDY_CUDA_PRECISION=bf16: job_started says", started["precision"])
PY
}
wanted journey && part journey 150 bash -c "$(declare -f journey); work='$work'; journey"

# 4. Speed, with what is left.
# PyTorch runs eager, torch.compile and CUDA graphs in bf16 (HARDY_DEVICE_TORCH_PRECISIONS);
# hardy also runs fp16 with its loss scaler, to compare with its own bf16.
if wanted step; then
  part step "${HARDY_DEVICE_STEP_LIMIT:-240}" python3 bench/gpu/bench_gpu.py \
    --bin "$hardy_kit/bin" --parts peak,step --configs "${HARDY_DEVICE_CONFIGS:-small}" \
    --precisions bf16,fp16 --torch-precisions "${HARDY_DEVICE_TORCH_PRECISIONS:-bf16}" \
    --rounds 1 --output "$out/gpu-step.json"
fi
# 5. Memory errors in kernels that had never run before this machine (HARDY_DEVICE_SANITIZER_SPEC:
# a Catch2 test spec, e.g. "*tiramisu*,*dropout*"; default all).
if wanted sanitizer; then
  sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)"
  if [[ -n "$sanitizer" ]]; then
    part sanitizer 240 env HARDY_CUDNN_ALGORITHMS=heuristic "$sanitizer" --tool memcheck --leak-check no --error-exitcode 9 \
      hardy_gpu_tests --reporter compact ${HARDY_DEVICE_SANITIZER_SPEC:+"$HARDY_DEVICE_SANITIZER_SPEC"}
    grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/sanitizer.txt" | head -n 20
  else
    echo "[sanitizer] skipped: compute-sanitizer not found" | tee -a "$out/summary.txt"
  fi
fi

# The node-local snapshot's price on a GPU step (the copy leaves the device every step).
if wanted snapshot; then
  part snapshot 120 python3 bench/snapshot/bench_snapshot.py --hardy "$hardy_kit/bin/hardy" \
    --backend cuda --configs tiny,large --steps tiny=200,large=100 --warmup 10 --repeats 2 \
    --json "$out/gpu-snapshot.json"
fi
if wanted more; then
  part more 120 python3 bench/gpu/bench_gpu.py --bin "$hardy_kit/bin" --parts nccl,converge \
    --output "$out/gpu-nccl-converge.json"
fi
if wanted feed; then
  part feed 240 python3 bench/gpu/feed_check.py --bin "$hardy_kit/bin" \
    --inputs "${HARDY_DEVICE_FEED_INPUTS:-deepcam,packed}" --samples 32 --steps 30 --skip 10 \
    --loader-threads "${HARDY_DEVICE_FEED_LOADERS:-auto}" \
    ${HARDY_DEVICE_FEED_BEFORE:+--before "$HARDY_DEVICE_FEED_BEFORE"} --json "$out/gpu-feed.json"
fi
# The seed runs' networks at full size (issue #42).
networks() {
  set -e
  local snap=/dev/shm/hardy-device-networks
  rm -rf "$work/run-deepcam" "$work/run-tiramisu" "$work/run-cosmoflow" "$snap"
  # Runs a job while nvidia-smi samples the device's memory; prints the peak in MiB.
  with_memory_peak() {
    local label="$1"
    shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$work/memory-$label.txt" &
    local sampler=$!
    local status=0
    "$@" || status=$?
    kill "$sampler" 2> /dev/null || true
    wait "$sampler" 2> /dev/null || true
    echo "== $label: exit $status, device memory peak $(sort -n "$work/memory-$label.txt" | tail -n 1) MiB"
    return "$status"
  }
  local size=(--synthetic --height 768 --width 1152 --samples 16 --eval-samples 2 --global-batch 2
              --backend cuda --snapshot-dir "$snap" --log-every 1)
  local deepcam=("${size[@]}" --model deepcam --run-dir "$work/run-deepcam" --checkpoint-every 5)
  with_memory_peak deepcam-10 hardy train "${deepcam[@]}" --steps 10
  hardy ckpt inspect "$(ls "$work"/run-deepcam/checkpoints/*.h5 | tail -n 1)" | head -n 12
  with_memory_peak deepcam-resume-20 hardy train "${deepcam[@]}" --steps 20 --resume latest
  with_memory_peak tiramisu-10 hardy train "${size[@]}" --model tiramisu --run-dir "$work/run-tiramisu" --steps 10
  # CosmoFlow as published (128^3, its local batch of 4): trains, checkpoints, resumes, and is
  # scored (held-out mean absolute error).
  local cosmoflow=(--synthetic --model cosmoflow --volume 128 --samples 16 --eval-samples 4 --global-batch 4
                   --backend cuda --snapshot-dir "$snap" --log-every 1 --run-dir "$work/run-cosmoflow"
                   --checkpoint-every 5)
  with_memory_peak cosmoflow-10 hardy train "${cosmoflow[@]}" --steps 10
  with_memory_peak cosmoflow-resume-20 hardy train "${cosmoflow[@]}" --steps 20 --resume latest
  local run
  for run in "$work/run-deepcam" "$work/run-tiramisu" "$work/run-cosmoflow"; do
    python3 - "$run" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl") if '"step"' in line]
rows = [r for r in rows if "step_s" in r]
later = [r for r in rows if r["step"] > 3]
print(sys.argv[1].rsplit("/", 1)[-1], "steps", len(rows), "loss", [round(r["loss"], 4) for r in rows],
      "median step_s after step 3", statistics.median(r["step_s"] for r in later) if later else None,
      "compute_s", statistics.median(r.get("compute_s", 0) for r in later) if later else None)
PY
  done
}
wanted networks && part networks 240 bash -c "$(declare -f networks); work='$work'; networks"
if wanted network-step; then
  torch_precisions=none
  [[ -n "${HARDY_DEVICE_NETWORK_TORCH:-}" ]] && torch_precisions=bf16
  part network-step "${HARDY_DEVICE_NETWORK_STEP_LIMIT:-200}" python3 bench/gpu/bench_gpu.py \
    --bin "$hardy_kit/bin" --parts step --configs "${HARDY_DEVICE_NETWORK_CONFIGS:-deepcam,tiramisu,cosmoflow}" \
    --precisions bf16 --torch-precisions "$torch_precisions" \
    --torch-modes "${HARDY_DEVICE_NETWORK_TORCH_MODES:-eager,compile,reduce-overhead}" \
    --rounds 1 --output "$out/gpu-network-step.json"
fi
if wanted multirank; then
  part multirank 540 python3 bench/gpu/multi_rank_check.py ${HARDY_DEVICE_SCENARIOS:+--only "$HARDY_DEVICE_SCENARIOS"} \
    --json "$out/gpu-multi-rank.json"
fi
echo "device_check.sh: done with $(left) s of $budget_s left" | tee -a "$out/summary.txt"
