#!/usr/bin/env python3
"""Resuming from a checkpoint continues the same training (CTest label `mpi`).

Usage: resume_equivalence.py [--deepcam | --tiramisu] HARDY MPIRUN [MPIRUN FLAGS...]

With --deepcam the same on a generated set in the published DeepCAM layout, cropped (the crop
of a sample is fixed, so a resumed job sees the same pixels) and staged to node-local storage.
With --tiramisu the same with a small --model tiramisu, whose dropout masks follow the sample and
the step: the 4 -> 3 resume draws the same masks for samples that moved to another rank.

20 steps straight against 10 steps, a resume from the step-10 checkpoint, and 10 more steps
(`--steps 20` is the job's total): final parameters bit-identical on 1 rank, and within 1e-5
relative on 4 ranks and when 4 ranks resume as 3. The learning rate must not decay here: a decay
spans the job's total steps, which the first launch (--steps 10) sets differently. A 3-rank
gradient sum differs from a 4-rank one in its last bits, and training amplifies that: Adam turns
it into full-size steps wherever a gradient is nearly zero (1e-3 on some normalization shifts by
step 20) and a large SGD step into chaos, so this compares SGD with a moderate rate, over the
whole parameter vector. Also: the resumed sampler continues at the saved
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
from hardy_test import SMALL_TIRAMISU, Checks  # noqa: E402

variant = sys.argv[1] if sys.argv[1] in ("--deepcam", "--tiramisu") else ""
deepcam = variant == "--deepcam"
hardy, mpirun = sys.argv[1 + bool(variant)], sys.argv[2 + bool(variant):]
DATA = ["--synthetic", "--samples", "36", "--height", "64", "--width", "64"]
MODEL = SMALL_TIRAMISU if variant == "--tiramisu" else []
TRAIN = [*MODEL, "--global-batch", "12",
         "--eval-samples", "0", "--seed", "3", "--warmup-steps", "3", "--lr-decay", "none",
         "--optimizer", "sgd", "--lr", "0.01",
         "--checkpoint-every", "10", "--audit-samples", "--log-every", "100"]
check = Checks()


def train(run, ranks, steps, *extra):
    command = [hardy, "train", *DATA, *TRAIN, "--run-dir", str(run), "--steps", str(steps), *extra]
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
    if deepcam:
        subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", str(tmp / "deepcam"),
                        "--samples", "36", "--validation-samples", "1", "--height", "64", "--width", "96"],
                       check=True, stdout=subprocess.DEVNULL)
        DATA = ["--dataset", str(tmp / "deepcam"), "--crop", "48,64", "--stage-to", str(tmp / "stage")]
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
        # Relative difference of the whole parameter vector (and the worst single tensor, for
        # the record: small tensors such as normalization shifts show rounding first).
        difference = sum(float(((a[k].astype(np.float64) - b[k]) ** 2).sum()) for k in a)
        size = sum(float((a[k].astype(np.float64) ** 2).sum()) for k in a)
        relative = (difference / size) ** 0.5
        worst = max(float(np.linalg.norm(a[k] - b[k]) / max(np.linalg.norm(a[k]), 1e-30)) for k in a)
        identical = all(np.array_equal(a[k], b[k]) for k in a)
        if tolerance == 0:
            check(identical, f"{name}: parameters bit-identical after resuming (relative difference {relative:.2e})")
        else:
            check(relative <= tolerance,
                  f"{name}: parameters within {tolerance} relative ({relative:.2e}; worst tensor {worst:.2e})")
        check(audit(straight) == audit(resumed), f"{name}: the resumed job saw the same samples at every step")

check.finish("resume equivalence" + {"--deepcam": " (DeepCAM layout)", "--tiramisu": " (tiramisu)"}.get(variant, ""))
