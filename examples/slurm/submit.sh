#!/usr/bin/env bash
# Submits the climate job to a Perlmutter-like Slurm machine: 16 nodes x 4 GPUs, 6 hours, from a
# login node where hardy is built (module names: see examples/slurm/perlmutter.sbatch).
# What to change: --account (your project, with Perlmutter's _g suffix for GPU hours), --queue
# (the QOS: regular, debug, preempt), --nodes and --time; keep global-batch in perlmutter.ini in
# step with --nodes. Add --dry-run to see the script without submitting it.
#   hardy status RUN_DIR    the job's state, step, newest valid checkpoint, failures survived
#   hardy cancel RUN_DIR    scancel
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hardy=${HARDY:-$here/../../build/bin/hardy}
"$hardy" submit --scheduler slurm --template "$here/perlmutter.sbatch" --config "$here/perlmutter.ini" \
  --nodes 16 --ranks-per-node 4 --gpus-per-node 4 --time 06:00:00 \
  --account m4242_g --queue regular --job-name climate-perlmutter \
  --run-dir "${SCRATCH:-$PWD}/hardy-runs/climate-perlmutter" "$@"
