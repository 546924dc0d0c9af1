#!/usr/bin/env bash
# Bad input gets a message naming the problem and exit status 2; --help exits 0.
# Usage: cli_errors.sh HARDY_BINARY
set -u
hardy=$1
results=$(cd "$(dirname "$0")/../../bench/results" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect() {  # expect STATUS PATTERN -- ARGS...
  local want=$1 pattern=$2
  shift 3
  local output status
  output=$("$hardy" "$@" 2>&1)
  status=$?
  if [ "$status" -ne "$want" ] || ! grep -qi -- "$pattern" <<<"$output"; then
    echo "FAILED: hardy $* -> status $status (want $want), output:"
    echo "$output" | head -5
    failures=$((failures + 1))
  else
    echo "ok: hardy $* -> $status"
  fi
}

expect 0 "Usage: hardy" -- --help
expect 0 "global-batch" -- train --help
expect 0 "run-dir" -- eval --help
expect 0 "--out" -- data generate --help
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 2 "no command" --
expect 0 "picture" -- report --help
expect 2 "run directory is required" -- report
expect 2 "bash only" -- completion zsh
expect 2 "interval must be positive" -- status "$tmp" --follow --interval 0
expect 2 "neither a run directory nor the job id" -- status 99999999 --runs "$tmp"
expect 2 "global-batch" -- train --global-batch 0 --run-dir "$tmp/a"
# Options are checked before MPI starts: a bad one or --help answers at once, whatever MPI would
# make of the machine (here a transport that does not exist, which MPI_Init refuses).
OMPI_MCA_pml=no-such-pml expect 2 "unrecognised option '--bogus'" -- train --bogus
OMPI_MCA_pml=no-such-pml expect 0 "global-batch" -- train --help
expect 2 "unrecognised option\|unknown option\|unrecognized" -- train --bogus
expect 2 "/nonexistent.ini" -- train --config /nonexistent.ini
expect 2 "height" -- train --height 30 --run-dir "$tmp/b"
expect 2 "multiples of 16 for --model tiramisu" -- train --model tiramisu --height 40 --run-dir "$tmp/b"
expect 2 "unknown model 'resnet'" -- train --model resnet --run-dir "$tmp/b"
expect 2 "--model-width, --norm set another network's shape, not --model deepcam's" -- \
  train --model deepcam --model-width 8 --norm batch --run-dir "$tmp/b"
expect 2 "--growth sets another network's shape, not --model compact's" -- train --growth 8 --run-dir "$tmp/b"
expect 2 "dropout must be in" -- train --model tiramisu --dropout 1 --run-dir "$tmp/b"
expect 0 "onnx" -- export --help
expect 2 "does not exist" -- export "$tmp/no-such-run" --onnx "$tmp/m.onnx"
expect 2 "domain-sync-every must be at least 1" -- train --domain-sync-every 0 --run-dir "$tmp/c"
expect 2 "loader-threads takes auto or a number of at least 1, got '0'" -- train --loader-threads 0 --run-dir "$tmp/d"
expect 2 "overlap-input must be on, off or auto, not 'always'" -- train --overlap-input always --run-dir "$tmp/d"
expect 2 "cpus-per-rank and --gpus-per-rank must not be negative" -- run --cpus-per-rank -1 --run-dir "$tmp/e" -- --steps 1
expect 2 "hang-timeout takes auto, off or a positive number of seconds, got 'soon'" -- train --hang-timeout soon --run-dir "$tmp/c"
expect 2 "snapshot-every takes auto or a number of steps (0: never), got 'often'" -- train --snapshot-every often --run-dir "$tmp/c"
expect 2 "snapshot-every takes auto or a number of steps (0: never), got '-2'" -- train --snapshot-every -2 --run-dir "$tmp/c"
expect 2 "sample-cache-mib must be between 0 and 1e9" -- train --sample-cache-mib -1 --run-dir "$tmp/c"
expect 2 "hang-io-timeout must be positive" -- train --hang-io-timeout 0 --run-dir "$tmp/c"
expect 2 "precision: precision 'int8' is not one of f32, bf16, fp16" -- train --precision int8 --run-dir "$tmp/c"
expect 2 "fp16 training needs --backend cuda" -- train --precision fp16 --run-dir "$tmp/c"
expect 2 "--straggler 'kick' is not one of off, detect, rebalance or evict" -- train --straggler kick --run-dir "$tmp/c"
expect 2 "straggler-slowdown must be a positive fraction" -- train --straggler-slowdown 0 --run-dir "$tmp/c"
expect 2 "straggler-window must be at least 1" -- train --straggler-window 0 --run-dir "$tmp/c"
expect 2 "slow=F takes a factor of at least 1" -- train --inject-failure rank=1@step=3:slow=0.5 --run-dir "$tmp/c"
expect 2 "noise=A takes an amplitude of at least 0" -- train --inject-failure rank=1@step=3:noise=1.2.3 --run-dir "$tmp/c"
expect 0 "straggler-confirm" -- train --help
# A CPU without native bf16 (oneDNN held below AVX512-BF16) is told what it lacks.
ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI expect 2 "needs a CPU with the AVX512-BF16 or AMX instructions.*AVX-512 with VNNI" -- \
  train --precision bf16 --run-dir "$tmp/c"
expect 2 "gradient-lag must be 0 or 1" -- train --gradient-lag 2 --run-dir "$tmp/c"
# The GPU takes lagged updates and fault domains (#39): the options pass their checks. On a machine
# without a GPU what stops the job is the missing device (status 1); with one, the checks stop here.
accepted() {  # accepted ARGS...: not refused as bad input
  local output status
  output=$("$hardy" "$@" 2>&1)
  status=$?
  # A build without the CUDA backend (HARDY_CUDA=OFF: the sanitizer builds, a CPU-only machine)
  # refuses --backend cuda by name before any of these checks.
  if [ "$status" -eq 2 ] && grep -q "unknown backend 'cuda'" <<<"$output"; then
    echo "skip: hardy $* (this build has no CUDA backend)"
    return
  fi
  if [ "$status" -eq 2 ] || grep -qi "not supported" <<<"$output"; then
    echo "FAILED: hardy $* was refused -> status $status, output:"
    echo "$output" | head -5
    failures=$((failures + 1))
  else
    echo "ok: hardy $* -> $status (accepted)"
  fi
}
if ! command -v nvidia-smi >/dev/null 2>&1; then
  accepted train --gradient-lag 1 --backend cuda --synthetic --steps 1 --run-dir "$tmp/lag-cuda"
  accepted train --backend cuda --synthetic --steps 1 --domain 0 --domains 2 --domain-store "$tmp/store" \
    --run-dir "$tmp/domains-cuda"
fi
# The network the domains exchange over: named by interface or subnet, refused when absent.
expect 2 "domain-interface is the network fault domains exchange over" -- run --nodes 2 \
  --domain-interface lo --run-dir "$tmp/f" -- --synthetic --steps 2
expect 2 "domain-interface 'hsn-nonexistent0': this host has no such interface" -- run --nodes 2 \
  --nodes-per-domain 1 --domain-interface hsn-nonexistent0 --run-dir "$tmp/f" -- --synthetic --steps 2
expect 2 "domain-interface '203.0.113.0/24': this host has no address in that subnet" \
  -- run --nodes 2 --nodes-per-domain 1 --rendezvous redis --domain-interface 203.0.113.0/24 \
  --run-dir "$tmp/f" -- --synthetic --steps 2
expect 2 "rendezvous etcd: choose file or redis" -- run --nodes 2 --nodes-per-domain 1 --rendezvous etcd \
  --run-dir "$tmp/g" -- --synthetic --steps 2
expect 2 "rendezvous redis is where fault domains meet" -- run --nodes 2 --rendezvous redis --run-dir "$tmp/g" \
  -- --synthetic --steps 2
# A store that cannot start (no redis-server on PATH) ends the run before any launch, leaving nothing.
output=$(PATH=/nonexistent "$hardy" run --nodes 2 --nodes-per-domain 1 --rendezvous redis --run-dir "$tmp/h" \
  -- --synthetic --steps 2 2>&1)
status=$?
if [ "$status" -ne 2 ] || ! grep -q "rendezvous store cannot start" <<<"$output" ||
  [ -n "$(find "$tmp/h/rendezvous" -mindepth 1 2>/dev/null)" ]; then
  echo "FAILED: hardy run --rendezvous redis without redis-server -> $status, left: $(find "$tmp/h/rendezvous" 2>/dev/null)"
  echo "$output" | head -3
  failures=$((failures + 1))
else
  echo "ok: hardy run --rendezvous redis without redis-server -> 2, nothing left"
fi
expect 2 "sleep=S takes a positive number of seconds" -- train --inject-failure rank=1@step=2:sleep=0 --run-dir "$tmp/c"
# Options every domain would refuse end the job of domains with their message, not in relaunches.
expect 2 "domain-sync-every must be at least 1" -- run --nodes 2 --nodes-per-domain 1 --run-dir "$tmp/d" \
  -- --synthetic --steps 2 --domain-sync-every 0
expect 2 "unknown domain exchange 'ring' (choose leader or sharded)" -- run --nodes 2 \
  --nodes-per-domain 1 --run-dir "$tmp/d" -- --synthetic --steps 2 --domain-exchange ring
expect 2 "multiple of --domain-sync-every" -- run --nodes 2 --nodes-per-domain 1 --run-dir "$tmp/e" \
  -- --synthetic --steps 2 --domain-sync-every 4 --checkpoint-every 25
expect 2 "does not exist" -- eval --run-dir "$tmp/none"
expect 2 "node-local" -- clean
expect 2 "older-than" -- clean --node-local --older-than -1 --snapshot-dir "$tmp"
# A crashed run's snapshots idle for 3 hours go with --older-than 2; a fresh run's stay.
mkdir -p "$tmp/shm/00000000000000aa/node0" "$tmp/shm/00000000000000bb/node0"
echo x > "$tmp/shm/00000000000000aa/node0/ckpt-1.h5"
echo x > "$tmp/shm/00000000000000bb/node0/ckpt-1.h5"
touch -d "3 hours ago" "$tmp/shm/00000000000000aa/node0/ckpt-1.h5" "$tmp/shm/00000000000000aa/node0" \
  "$tmp/shm/00000000000000aa"
expect 0 "1 stale run" -- clean --node-local --snapshot-dir "$tmp/shm" --older-than 2
if [ -e "$tmp/shm/00000000000000aa" ] || [ ! -e "$tmp/shm/00000000000000bb/node0/ckpt-1.h5" ]; then
  echo "FAILED: hardy clean --node-local removed the wrong runs: $(ls "$tmp/shm")"
  failures=$((failures + 1))
fi
expect 2 "--out" -- data generate --samples 3
expect 2 "samples" -- data generate --out "$tmp/d" --samples -4
expect 2 "'netcdf'" -- data generate --out "$tmp/d" --format netcdf
expect 2 "format deepcam" -- data generate --out "$tmp/d" --validation-samples 2
expect 2 "one per file" -- data generate --out "$tmp/d" --format deepcam --samples-per-file 4
expect 2 "at least 16" -- data generate --out "$tmp/d" --format deepcam --height 8 --width 8
expect 0 "DeepCAM dataset of 2 training, 1 validation and 1 test" -- data generate --format deepcam \
  --out "$tmp/deepcam" --samples 2 --validation-samples 1 --test-samples 1 --height 16 --width 24
[ -f "$tmp/deepcam/stats.h5" ] && [ -f "$tmp/deepcam/test/data-2000-01-01-03-1.h5" ] ||
  { echo "FAILED: data generate --format deepcam wrote no stats.h5 or test split"; failures=$((failures + 1)); }
expect 2 "already holds" -- data generate --format deepcam --out "$tmp/deepcam" --samples 2 --height 16 --width 24
expect 2 "$tmp/missing" -- train --dataset "$tmp/missing" --run-dir "$tmp/c" --steps 1
printf 'steps = 2\nbogus-key = 1\n' >"$tmp/bad.ini"
expect 2 "bogus-key" -- train --config "$tmp/bad.ini"

# A submission that cannot reach the scheduler (no sbatch on PATH) fails naming it and leaves
# no run directory behind.
printf 'steps = 2\n' >"$tmp/job.ini"
output=$(PATH=/nonexistent "$hardy" submit --scheduler slurm --time 00:10:00 --config "$tmp/job.ini" \
  --run-dir "$tmp/never" 2>&1)
status=$?
if [ "$status" -eq 0 ] || ! grep -q "sbatch" <<<"$output" || [ -e "$tmp/never" ]; then
  echo "FAILED: submit without sbatch -> status $status, run directory left: $([ -e "$tmp/never" ] && echo yes || echo no)"
  echo "$output" | head -3
  failures=$((failures + 1))
else
  echo "ok: submit without sbatch -> $status, no run directory left"
fi

# hardy simulate: the goodput model and the projection name what they cannot read.
expect 2 "cannot read" -- simulate --goodput "$tmp/no-such.json"
echo '{"steps": 3}' >"$tmp/not-goodput.json"
expect 2 "not a result of bench/cluster/goodput_bench.py" -- simulate --goodput "$tmp/not-goodput.json"
expect 2 "give it too" -- simulate --ettr --scale-from "$results/cluster-scale-2026-11-26.json" --failure-mix node_crash=1
expect 2 "is not KIND=SHARE" -- simulate --ettr --scale-from "$results/cluster-scale-2026-11-26.json" \
  --costs-from "$results/goodput-2026-11-30.json" --failure-mix node_crash=x
expect 2 "no cost was measured for failures of kind 'hang'" -- simulate --ettr \
  --scale-from "$results/cluster-scale-2026-11-26.json" --costs-from "$results/goodput-2026-11-30.json" \
  --failure-mix hang=1

# A dataset written by `hardy data generate` trains, and a run directory evaluates.
"$hardy" data generate --out "$tmp/data" --samples 24 --height 32 --width 32 --seed 3 --samples-per-file 10 >/dev/null ||
  { echo "FAILED: data generate"; failures=$((failures + 1)); }
expect 0 "run directory" -- train --dataset "$tmp/data" --height 32 --width 32 --steps 2 --global-batch 4 \
  --eval-samples 8 --model-width 4 --aspp-channels 8 --decoder-channels 8 --low-level-channels 4 --run-dir "$tmp/run"
expect 0 "mean IoU" -- eval --run-dir "$tmp/run"
expect 2 "does not exist" -- eval --run-dir "$tmp/run" --model "$tmp/none.h5"
expect 2 "needs --onnx FILE" -- export "$tmp/run"
expect 2 "does not exist" -- export "$tmp/run" --onnx "$tmp/m.onnx" --model "$tmp/none.h5"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed" >/dev/null
[ "$failures" -eq 0 ] && echo "cli errors: all checks passed"
exit $((failures > 0))
