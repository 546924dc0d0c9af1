#!/usr/bin/env python3
"""A rank takes the CPUs it was allowed, not the host's: Slurm's cpusets, LSF's affinity and a
launcher's binding restrict where a rank may run, and threads beyond that set only contend.

Usage: cpu_binding.py HARDY SOURCE_DIR MPIRUN [MPIRUN FLAGS...]

- `taskset -c 0 hardy train`: 1 kernel thread (job_started's threads_per_rank), where the host
  has more than one CPU;
- unrestricted, the same job takes every CPU of the host;
- two ranks started inside one single-CPU set share it: 1 thread each, not 2.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, skip  # noqa: E402

hardy, source, mpirun = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
check = Checks()
cpus = os.cpu_count() or 1
if shutil.which("taskset") is None:
    skip("taskset (util-linux) is missing")


def threads(run, prefix=(), ranks=1):
    command = [hardy, "train", "--config", str(source / "examples/tiny.ini"), "--run-dir", str(run),
               "--steps", "3", "--warmup-steps", "1", "--eval-samples", "0",
               "--snapshot-dir", str(run.parent / "node-local")]
    if ranks > 1:
        command = [*mpirun, "-n", str(ranks), *command]
    subprocess.run([*prefix, *command], check=True, timeout=300, stdout=subprocess.DEVNULL)
    started = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_started"]
    return started[-1]["threads_per_rank"]


with tempfile.TemporaryDirectory(prefix="hardy-cpus-") as tmp:
    tmp = Path(tmp)
    whole = threads(tmp / "whole")
    check(whole == cpus, f"unrestricted, one rank takes the host's {cpus} CPUs: {whole}")
    if cpus > 1:
        one = threads(tmp / "one", ["taskset", "-c", "0"])
        check(one == 1, f"under taskset -c 0 one rank takes 1 thread: {one}")
        shared = threads(tmp / "shared", ["taskset", "-c", "0"], ranks=2)
        check(shared == 1, f"two ranks in one single-CPU set take 1 thread each: {shared}")
    else:
        print("one CPU: only the unrestricted case says anything")
check.finish("cpu binding")
