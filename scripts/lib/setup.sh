# Sourced by scripts/demo and scripts/test: installs what hardy needs on Debian 12 (when root),
# creates the Python venv at .venv, and configures and builds into build/. Idempotent: a second
# run installs nothing and rebuilds only what changed.
set -euo pipefail

HARDY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HARDY_BUILD=${HARDY_BUILD:-$HARDY_ROOT/build}
HARDY_VENV=$HARDY_ROOT/.venv
HARDY_CMAKE_EXTRA=()

hardy_log() { printf '\033[1m[hardy setup]\033[0m %s\n' "$*" >&2; }

HARDY_APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev ocl-icd-opencl-dev libhdf5-dev hdf5-tools libboost-program-options-dev catch2
  libfmt-dev libspdlog-dev libxxhash-dev nlohmann-json3-dev
  python3-venv python3-numpy python3-h5py python3-torch python3-matplotlib
  python3-netcdf4
  mpich libmpich-dev slurm-wlm munge iproute2 ccache
  libgloo-dev redis-server
)

# Python packages Debian lacks, pip-installed into .venv (tools and tests only).
HARDY_PIP_PACKAGES=(tensorboardX==2.6.5 tensorboard==2.21.0 onnxruntime==1.23.2)

# Compiler cache: a fresh clone or a second worktree on the same machine recompiles only what
# differs (CI builds a fresh clone each time). CCACHE_BASEDIR makes paths relative, so checkouts
# in different folders share entries.
hardy_compiler_launcher() {
  command -v ccache >/dev/null 2>&1 || return 0
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$HARDY_ROOT")}
  printf '%s\n' -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
}

hardy_install_packages() {
  local missing=()
  for package in "${HARDY_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  if [ ${#missing[@]} -eq 0 ]; then return; fi
  if [ "$(id -u)" -ne 0 ]; then
    hardy_log "missing Debian packages: ${missing[*]}"
    hardy_log "install them (sudo apt-get install ${missing[*]}) or see README.md for a build against your cluster's modules"
    exit 1
  fi
  hardy_log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

hardy_make_venv() {
  # The venv sees Debian's numpy, h5py and torch (system site packages) so that nothing large is
  # downloaded twice; pip installs only what Debian lacks.
  if [ ! -x "$HARDY_VENV/bin/python" ]; then
    hardy_log "creating $HARDY_VENV"
    /usr/bin/python3 -m venv --system-site-packages "$HARDY_VENV"
  fi
  # `hardy report --tensorboard` writes with tensorboardX; its test reads the files back with
  # TensorBoard's own reader (and `tensorboard --logdir` shows them). Tools only: training never
  # imports them. Debian packages neither. onnxruntime runs the networks `hardy export` writes,
  # in the test that checks them against hardy's own predictions.
  if ! "$HARDY_VENV/bin/python" -c "import tensorboardX, tensorboard, onnxruntime" >/dev/null 2>&1; then
    hardy_log "installing tensorboardX, tensorboard and onnxruntime into $HARDY_VENV"
    "$HARDY_VENV/bin/python" -m pip install --quiet "${HARDY_PIP_PACKAGES[@]}"
  fi
}

# A second hardy linked against Debian's MPICH (no working ULFM there): the supervisor's relaunch
# path is tested with it. Only the executable is built, unoptimised: its one test trains a few
# dozen tiny steps, and -O0 saves a minute of every fresh setup on two cores.
hardy_build_mpich() {
  local dir=$HARDY_ROOT/build-mpich
  [ -x /usr/bin/mpicxx.mpich ] || return 0
  mkdir -p "$dir"
  local launcher
  mapfile -t launcher < <(hardy_compiler_launcher)
  cmake -S "$HARDY_ROOT" -B "$dir" -G Ninja "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
    -DCMAKE_C_FLAGS_DEBUG=-O0 -DHARDY_BUILD_TESTS=OFF \
    -DHARDY_BUILD_BENCHMARKS=OFF -DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
    -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log" >&2
    exit 1
  }
  hardy_log "building hardy against MPICH (build-mpich/)"
  cmake --build "$dir" -j "$(nproc)" --target hardy
  HARDY_CMAKE_EXTRA+=("-DHARDY_MPICH_HARDY=$dir/bin/hardy")
}

hardy_build() {
  # The build runs where it is used, so it may use every instruction of this CPU (AVX-512 here).
  local launcher
  mapfile -t launcher < <(hardy_compiler_launcher)
  local cmake_args=(-S "$HARDY_ROOT" -B "$HARDY_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHARDY_NATIVE=ON
    "${launcher[@]}" "${HARDY_MPI_CMAKE_ARGS[@]}" "${HARDY_CMAKE_EXTRA[@]}")
  if [ -n "${HARDY_CMAKE_ARGS:-}" ]; then
    # shellcheck disable=SC2206
    cmake_args+=($HARDY_CMAKE_ARGS)
  fi
  if [ ! -f "$HARDY_BUILD/build.ninja" ]; then
    hardy_log "configuring $HARDY_BUILD"
  fi
  mkdir -p "$HARDY_BUILD"
  cmake "${cmake_args[@]}" >"$HARDY_BUILD/configure.log" 2>&1 || {
    cat "$HARDY_BUILD/configure.log" >&2
    exit 1
  }
  hardy_log "building (ninja, $(nproc) jobs)"
  # shellcheck disable=SC2086
  cmake --build "$HARDY_BUILD" -j "$(nproc)" ${HARDY_BUILD_TARGETS:+--target $HARDY_BUILD_TARGETS}
}

hardy_setup() {
  hardy_install_packages
  hardy_make_venv
  if [ -f "$HARDY_ROOT/scripts/lib/openmpi.sh" ]; then
    # shellcheck source=/dev/null
    source "$HARDY_ROOT/scripts/lib/openmpi.sh"
  fi
  if [ "${1:-}" = "--with-mpich" ]; then hardy_build_mpich; fi
  hardy_build
}

# An instrumented copy of hardy in build-sanitize-<names>/ (scripts/test --sanitize, scripts/fuzz):
# no CUDA (nvcc's host code and the driver do not mix with the sanitizers' runtimes), no
# benchmarks, -O1 with assertions. Clang builds it: its sanitizers and libFuzzer come from one
# Debian package, and an address build also carries the fuzz targets. Exports the sanitizers'
# options, with the suppressions for third-party libraries in tests/sanitizers/.
hardy_sanitizer_setup() {
  local sanitize=$1
  HARDY_APT_PACKAGES+=(clang libclang-rt-14-dev)
  HARDY_BUILD="$HARDY_ROOT/build-sanitize-${sanitize//,/-}"
  HARDY_CMAKE_ARGS="${HARDY_CMAKE_ARGS:-} -DHARDY_SANITIZE=$sanitize -DHARDY_CUDA=OFF
    -DHARDY_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1
    -DCMAKE_C_FLAGS_RELEASE=-O1 -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++"
  if [[ ",$sanitize," == *",address,"* ]]; then HARDY_CMAKE_ARGS+=" -DHARDY_FUZZ=ON"; fi
  hardy_setup
  local supp="$HARDY_ROOT/tests/sanitizers"
  # fast_unwind_on_malloc=0: the frame-pointer unwinder stops in libc (vasprintf and friends),
  # before the library that allocated, so lsan.supp could not name Open MPI's allocations.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
  export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
  # PMIx (Open MPI's runtime) maps its shared-memory store at a fixed address, which falls in
  # the sanitizers' reserved ranges: every rank's MPI_Init then fails. Its hash store has no such
  # address.
  export PMIX_MCA_gds=hash
}
