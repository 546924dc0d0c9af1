#!/usr/bin/env bash
# Submits the climate job to a Summit-like LSF machine: 32 nodes x 6 GPUs, 2 hours, jsrun, from
# a login node where hardy is built (module names: see examples/lsf/summit.bsub).
# What to change: --account (your project), --queue (batch, debug), --nodes and --time; keep
# global-batch in summit.ini in step with --nodes. On a generic LSF cluster use the built-in
# template with mpirun instead: drop --template and pass --lsf-launcher mpirun. Add --dry-run to
# see the script without submitting it.
#   hardy status RUN_DIR    the job's state, step, newest valid checkpoint, failures survived
#   hardy cancel RUN_DIR    bkill
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hardy=${HARDY:-$here/../../build/bin/hardy}
"$hardy" submit --scheduler lsf --lsf-launcher jsrun --template "$here/summit.bsub" --config "$here/summit.ini" \
  --nodes 32 --ranks-per-node 6 --gpus-per-node 6 --cpus-per-rank 7 --time 02:00:00 \
  --account CSC4242 --queue batch --job-name climate-summit \
  --run-dir "${MEMBERWORK:-$PWD}/hardy-runs/climate-summit" "$@"
