# shellcheck shell=bash
# Sourced on the GPU machine before running the kit of bench/gpu/make_kit.sh:
#   source bench/gpu/device_env.sh [KIT_DIR | KIT.tar.xz]      (default build-cuda/gpu-kit)
# Puts the kit's libraries and the CUDA 13 libraries of the machine's Python packages (cuDNN,
# cuBLAS, NCCL from the nvidia-* wheels PyTorch depends on) on LD_LIBRARY_PATH, and lists any
# library a kit binary still cannot find. Leaves $hardy_kit naming the (unpacked) kit.

hardy_kit="${1:-build-cuda/gpu-kit}"
if [[ "$hardy_kit" == *.tar.xz ]]; then
  # The compressed kit (what a device call carries) unpacks next to the machine's temp files.
  mkdir -p "${TMPDIR:-/tmp}/hardy-kit" && tar -C "${TMPDIR:-/tmp}/hardy-kit" -xJf "$hardy_kit"
  hardy_kit="${TMPDIR:-/tmp}/hardy-kit/gpu-kit"
fi
hardy_kit="$(cd "$hardy_kit" && pwd)"
hardy_nvidia_libs="$("${HARDY_PYTHON:-python3}" - <<'EOF'
import glob, os, site

roots = list(site.getsitepackages()) + [site.getusersitepackages()]
found = []
for root in roots:
    # cu12 wheels: nvidia/<package>/lib; cu13 wheels: nvidia/cu13/lib and nvidia/<package>/lib.
    for pattern in ("nvidia/*/lib", "nvidia/*/*/lib"):
        for directory in sorted(glob.glob(os.path.join(root, pattern))):
            if glob.glob(os.path.join(directory, "lib*.so*")) and directory not in found:
                found.append(directory)
print(":".join(found))
EOF
)"
export LD_LIBRARY_PATH="$hardy_kit/lib:$hardy_kit/lib/hardy:$hardy_kit/lib-mpi:$hardy_kit/lib-mpi/openmpi${hardy_nvidia_libs:+:$hardy_nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$hardy_kit/bin:$PATH"
# Open MPI's launcher for multi-rank checks (relocatable: it finds its prefix from its own path).
[[ -x "$hardy_kit/mpi/bin/mpirun" ]] && export PATH="$hardy_kit/mpi/bin:$PATH"
echo "device_env.sh: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for hardy_binary in "$hardy_kit"/bin/*; do
  if ldd "$hardy_binary" | grep -q "not found"; then
    echo "device_env.sh: $(basename "$hardy_binary") cannot find:"
    ldd "$hardy_binary" | grep "not found"
  fi
done
unset hardy_binary hardy_nvidia_libs
