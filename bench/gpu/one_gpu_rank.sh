#!/usr/bin/env bash
# FOR TESTS ONLY: lets several MPI ranks share one GPU under NCCL, so that the multi-rank NCCL
# paths (the gradient allreduce, the restore broadcast, ncclCommShrink, ncclCommAbort) can be
# tested on a machine with one GPU (bench/gpu/multi_rank_check.py; docs/gpu.md).
#
#   mpirun -n 3 bench/gpu/one_gpu_rank.sh hardy train --backend cuda ...
#
# NCCL refuses two ranks on one GPU ("Duplicate GPU detected": it compares each rank's host hash
# and bus id). The host hash comes from NCCL_HOSTID when set, so a distinct value per rank (this
# process's pid, which exec keeps) passes the check, and NCCL then treats the ranks as separate
# hosts joined by its socket transport over loopback. Never use this in production: it turns
# off NVLink, shared memory and InfiniBand inside a node. NCCL 2.30 and later have a supported
# switch instead, NCCL_MULTI_RANK_GPU_ENABLE=1.
export NCCL_HOSTID="hardy-one-gpu-$(hostname)-$$"
export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0
exec "$@"
