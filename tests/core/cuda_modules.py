#!/usr/bin/python3
"""The CUDA backend and the NCCL transport are modules that hardy loads when a run uses them
(CTest labels `unit`, `e2e`; only in a CUDA build).

Usage: cuda_modules.py HARDY CUDA_MODULE NCCL_MODULE

  - hardy itself needs none of CUDA's libraries (cudart, cuBLAS, cuBLASLt, cuDNN, NCCL): each cost
    a rank its relocations at every start, about 80 ms of CPU for cuBLASLt alone, on CPU nodes too;
  - each module finds in the hardy executable every hardy symbol it needs (loaded with every
    reference bound at once, LD_BIND_NOW, before hardy runs);
  - `hardy train --backend cuda` loads the backend's module and gets as far as the device: on a
    machine without one its error is the device's, not the module's;
  - a module that is not where hardy looks is an error naming the module and each place tried.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
from hardy_test import Checks  # noqa: E402

hardy, modules = sys.argv[1], sys.argv[2:4]
check = Checks()

needed = [line.split("[", 1)[1].rstrip("]") for line in
          subprocess.run(["readelf", "-d", hardy], capture_output=True, text=True, check=True).stdout.splitlines()
          if "(NEEDED)" in line]
cuda = [lib for lib in needed if lib.startswith(("libcudart", "libcublas", "libcudnn", "libnccl", "libcuda."))]
check(not cuda, f"hardy needs none of CUDA's libraries: {cuda or 'none among ' + ', '.join(needed)}")
check(not any(lib.startswith("libhardy_") for lib in needed), f"nor the modules: {needed}")

for module in modules:
    result = subprocess.run([hardy, "--version"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "LD_BIND_NOW": "1", "LD_PRELOAD": module})
    check(result.returncode == 0,
          f"{Path(module).name}: every reference bound in hardy (exit {result.returncode}: {result.stderr[-400:]})")

with tempfile.TemporaryDirectory(prefix="hardy-modules-") as tmp:
    def train(env_extra, name):
        return subprocess.run([hardy, "train", "--backend", "cuda", "--steps", "1", "--synthetic",
                               "--run-dir", str(Path(tmp) / name)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, **env_extra})

    result = train({}, "loaded")
    if "needs a CUDA device" in result.stderr:
        check(result.returncode != 0 and "module" not in result.stderr,
              f"without a device: the device's error, the module loaded ({result.stderr.strip()[-300:]})")
    else:
        check(result.returncode == 0, f"with a device: one step on the cuda backend (exit {result.returncode}: "
                                      f"{result.stderr[-400:]})")

    empty = Path(tmp) / "no-modules"
    empty.mkdir()
    result = train({"HARDY_MODULE_DIR": str(empty)}, "missing")
    check(result.returncode == 1 and "libhardy_core_cuda.so" in result.stderr and "did not load" in result.stderr
          and str(empty) in result.stderr,
          f"a missing module: exit 1 naming the module and where it was looked for "
          f"(exit {result.returncode}: {result.stderr.strip()[-300:]})")

check.finish("cuda_modules")
