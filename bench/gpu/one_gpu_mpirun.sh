#!/usr/bin/env bash
# FOR TESTS ONLY: mpirun, each of whose ranks starts through one_gpu_rank.sh (its own
# NCCL_HOSTID, NCCL's loopback socket transport), for launchers that start the ranks themselves:
#
#   hardy run --launcher-path bench/gpu/one_gpu_mpirun.sh --nodes-per-domain 1 ... -- --backend cuda
#
# puts every fault domain's ranks on the one GPU (bench/gpu/multi_rank_check.py). The program is
# the first argument named `hardy`; the real mpirun is $HARDY_ONE_GPU_MPIRUN, else the one on PATH.
here=$(dirname "$(readlink -f "$0")")
mpirun=${HARDY_ONE_GPU_MPIRUN:-$(command -v mpirun)}
if [ -z "$mpirun" ]; then
  echo "one_gpu_mpirun.sh: no mpirun on PATH (set HARDY_ONE_GPU_MPIRUN)" >&2
  exit 2
fi
args=()
wrapped=0
for arg in "$@"; do
  if [ "$wrapped" = 0 ] && [ "$(basename -- "$arg")" = hardy ]; then
    args+=("$here/one_gpu_rank.sh")
    wrapped=1
  fi
  args+=("$arg")
done
exec "$mpirun" "${args[@]}"
