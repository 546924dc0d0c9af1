#!/usr/bin/env python3
"""Resuming from a checkpoint continues the same training (CTest label `mpi`).

Usage: resume_equivalence.py HARDY MPIRUN [MPIRUN FLAGS...]

20 steps straight against 10 steps, a resume from the step-10 checkpoint, and 10 more steps
(`--steps 20` is the job's total): final parameters bit-identical on 1 rank, and within 1e-5
relative on 4 ranks and when 4 ranks resume as 3. The learning rate must not decay here: a decay
spans the job's total steps, which the first launch (--steps 10) sets differently. The model is
the default one: much narrower models (group normalization over single channels) are chaotic
enough that the last-bit differences between a 3-rank and a 4-rank gradient sum grow past 1e-5
within 20 steps. Also: the resumed sampler continues at the saved
cursor, so the audit of the two runs is the same.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks  # noqa: E402

hardy, mpirun = sys.argv[1], sys.argv[2:]
TRAIN = ["--synthetic", "--samples", "36", "--height", "64", "--width", "64", "--global-batch", "12",
         "--eval-samples", "0", "--seed", "3", "--warmup-steps", "3", "--lr-decay", "none",
         "--checkpoint-every", "10", "--audit-samples", "--log-every", "100"]
check = Checks()


def train(run, ranks, steps, *extra):
    command = [hardy, "train", *TRAIN, "--run-dir", str(run), "--steps", str(steps), *extra]
    if ranks > 1:
        command = [*mpirun, "-n", str(ranks), *command]
    subprocess.run(command, check=True, timeout=300, stdout=subprocess.DEVNULL)


def parameters(path):
    with h5py.File(path, "r") as f:
        return {name: np.array(data) for name, data in f["model"].items()}


def audit(run):
    last = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        last[record["step"]] = record["samples"]
    return last


with tempfile.TemporaryDirectory(prefix="hardy-resume-") as tmp:
    tmp = Path(tmp)
    for name, first, second, tolerance in (("1 rank", 1, 1, 0.0), ("4 ranks", 4, 4, 1e-5), ("4 -> 3 ranks", 4, 3, 1e-5)):
        straight, resumed = tmp / f"straight-{first}", tmp / f"resumed-{first}-{second}"
        if not straight.exists():
            train(straight, first, 20)
        train(resumed, first, 10)
        train(resumed, second, 20, "--resume", "latest")
        events = [json.loads(line) for line in (resumed / "events.jsonl").read_text().splitlines()]
        restored = [e for e in events if e["event"] == "state_restored"]
        check(restored and restored[-1]["step"] == 10 and restored[-1]["world_size"] == second,
              f"{name}: resumed at step 10 on {second} rank(s)")
        a, b = parameters(straight / "model.h5"), parameters(resumed / "model.h5")
        worst = max(float(np.abs(a[k] - b[k]).max() / max(np.abs(a[k]).max(), 1e-30)) for k in a)
        identical = all(np.array_equal(a[k], b[k]) for k in a)
        if tolerance == 0:
            check(identical, f"{name}: parameters bit-identical after resuming (worst relative difference {worst:.2e})")
        else:
            check(worst <= tolerance, f"{name}: parameters within {tolerance} relative (worst {worst:.2e})")
        check(audit(straight) == audit(resumed), f"{name}: the resumed job saw the same samples at every step")

check.finish("resume equivalence")
