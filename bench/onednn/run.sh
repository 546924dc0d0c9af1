#!/bin/bash
# Build conv_bench against Debian oneDNN 2.6.3 and PyPI oneDNN 3.x, then run A/B/A/B.
#   ./run.sh build              build bench26 / bench3x (/ bench3s)
#   ./run.sh run [filters...]   ROUNDS (2) x THREADS ("2 1") x {2.6, 3.x} alternating; RES lines to stdout
#   ./run.sh isa                effect of ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA=AVX512_CORE on impl choice
#   ./run.sh all                build + run
#   python3 analyze.py full.txt t2   -> markdown table (t1 for 1 thread)
# env: BENCH_REPS (20), BENCH_REPS_BIG (3, for the 128^3 layers), ROUNDS, THREADS
# filters: substrings of "net:shape", e.g. cosmo:4x32 tiramisu deepcam misc:bn cosmo128
#
# bench26: Debian libdnnl-dev 2.6.3 (GNU OpenMP, libgomp)
# bench3x: PyPI onednn-devel-cpu-gomp 2023.2.0 = oneDNN 3.2.0 (GNU OpenMP) in /tmp/onednn-venv-gomp
# bench3s: PyPI onednn-devel 2026.1.0 = oneDNN v3.13.2, DNNL_CPU_RUNTIME=SYCL + TBB, in /tmp/onednn-venv;
#          cannot create a CPU engine on this machine (no UR OpenCL adapter in the wheels) -> built only
#          to demonstrate that ("could not create an engine").
set -e
cd "$(dirname "$0")"
# The wheels go into venvs of their own (outside the checkout, never hardy's .venv).
V=${ONEDNN_GOMP_VENV:-/tmp/onednn-venv-gomp}
VS=${ONEDNN_SYCL_VENV:-/tmp/onednn-venv}
OUT=${ONEDNN_BENCH_OUT:-/tmp/onednn-bench}
mkdir -p "$OUT"
venvs() {
  [ -d $V/include ] || { /usr/bin/python3 -m venv $V && $V/bin/pip install -q onednn-devel-cpu-gomp==2023.2.0; }
  [ -d $VS/include ] || { /usr/bin/python3 -m venv $VS && $VS/bin/pip install -q onednn-devel==2026.1.0 || true; }
}
build() {
  venvs
  g++ -std=c++20 -O2 -o $OUT/bench26 conv_bench.cpp -ldnnl
  g++ -std=c++20 -O2 -I$V/include -o $OUT/bench3x conv_bench.cpp -L$V/lib -ldnnl -Wl,-rpath,$V/lib -Wl,--disable-new-dtags
  if [ -d $VS/include ]; then
    g++ -std=c++20 -O2 -I$VS/include -o $OUT/bench3s conv_bench.cpp -L$VS/lib -ldnnl -Wl,-rpath,$VS/lib -Wl,--disable-new-dtags || true
  fi
}
# both libs use libgomp: OMP_NUM_THREADS applies; taskset additionally pins to cores 0 / 0,1.
run1() { # lib threads args...
  local lib=$1 nt=$2; shift 2
  local cpus=0; [ "$nt" = 2 ] && cpus=0,1
  echo "### $lib threads=$nt load: $(cat /proc/loadavg)"
  OMP_NUM_THREADS=$nt taskset -c $cpus $OUT/bench$lib "$@" | sed "s/^RES|/RES|t$nt|/"
}
runall() { for r in $(seq 1 ${ROUNDS:-2}); do for nt in ${THREADS:-2 1}; do
             run1 26 $nt "$@"; run1 3x $nt "$@"; done; done; }
isa() {
  local F="cosmo:4x32->64 deepcam:2x64 tiramisu:2x304->32@32 misc:bn cosmo:pool_max2_4x32"
  for cap in "" AVX512_CORE AVX512_CORE_VNNI; do
    echo "### 2.6 DNNL_MAX_CPU_ISA=$cap";   DNNL_MAX_CPU_ISA=$cap   BENCH_REPS=5 OMP_NUM_THREADS=1 taskset -c 0 $OUT/bench26 $F
    echo "### 2.6 ONEDNN_MAX_CPU_ISA=$cap"; ONEDNN_MAX_CPU_ISA=$cap BENCH_REPS=5 OMP_NUM_THREADS=1 taskset -c 0 $OUT/bench26 $F
    echo "### 3.x ONEDNN_MAX_CPU_ISA=$cap"; ONEDNN_MAX_CPU_ISA=$cap BENCH_REPS=5 OMP_NUM_THREADS=1 taskset -c 0 $OUT/bench3x $F
  done
}
case "${1:-all}" in
  build) build ;;
  run) shift; runall "$@" ;;
  isa) isa ;;
  all) build; shift || true; runall "$@" ;;
esac
