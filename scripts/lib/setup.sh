# Sourced by scripts/demo and scripts/test: installs what hardy needs on Debian 12 (when root),
# creates the Python venv at .venv, and configures and builds into build/. Idempotent: a second
# run installs nothing and rebuilds only what changed.
set -euo pipefail

HARDY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HARDY_BUILD=${HARDY_BUILD:-$HARDY_ROOT/build}
HARDY_VENV=$HARDY_ROOT/.venv

hardy_log() { printf '\033[1m[hardy setup]\033[0m %s\n' "$*" >&2; }

HARDY_APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev ocl-icd-opencl-dev libhdf5-dev hdf5-tools libboost-program-options-dev catch2
  libfmt-dev libspdlog-dev libxxhash-dev nlohmann-json3-dev
  python3-venv python3-numpy python3-h5py python3-torch python3-matplotlib
)

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
}

hardy_build() {
  # The build runs where it is used, so it may use every instruction of this CPU (AVX-512 here).
  local cmake_args=(-S "$HARDY_ROOT" -B "$HARDY_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHARDY_NATIVE=ON
    "${HARDY_MPI_CMAKE_ARGS[@]}")
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
  cmake --build "$HARDY_BUILD" -j "$(nproc)"
}

hardy_setup() {
  hardy_install_packages
  hardy_make_venv
  if [ -f "$HARDY_ROOT/scripts/lib/openmpi.sh" ]; then
    # shellcheck source=/dev/null
    source "$HARDY_ROOT/scripts/lib/openmpi.sh"
  fi
  hardy_build
}
