#!/bin/bash
# Runs the kill test under mpirun and judges it by the survivors: usage
#   run_kill_test.sh <survivors> <mpirun> [mpirun flags...] <hardy_comm_tests> "[kill]"
# It passes when <survivors> ranks printed SUCCESS and mpirun exited 0. (Open MPI 5.0.11 with
# --with-ft ulfm exits 0 when the survivors do, although one rank died of SIGKILL; a launcher
# without ULFM aborts the whole job instead.)
set -u
survivors=$1
shift
# Bounded below CTest's timeout, so that a hang still shows what the ranks printed.
output=$(timeout --kill-after=5 45 "$@" 2>&1)
rc=$?
printf '%s\n' "$output"
successes=$(grep -c ': SUCCESS' <<<"$output")
echo "run_kill_test.sh: mpirun exit status $rc, $successes of $survivors survivors reported SUCCESS"
[[ $rc == 0 && $successes == "$survivors" ]]
