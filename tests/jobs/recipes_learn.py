#!/usr/bin/env python3
"""Nightly, end to end: each network trained with no optimizer options (its published recipe,
docs/training.md) on its own small generated data learns, through a lost rank. Per network: 2
ranks, global batch 8, rank 1 killed at step 80 (the job shrinks to 1 rank and trains on), and the
held-out score compared with the untrained network's (the same job for 1 step at a rate too small
to move it): CosmoFlow's mean absolute error below half the untrained one, the tiramisu's and
DeepCAM's mean IoU above all-background's (< 1/3) by the margins of jobs/networks_learns (0.45,
0.40). No job is reported as diverging.

Usage: recipes_learn.py HARDY MPIRUN [MPIRUN FLAGS...] [--only NAME] [--steps N]
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

args = sys.argv[1:]
only = args[args.index("--only") + 1] if "--only" in args else None
steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 200
for flag in ("--only", "--steps"):
    if flag in args:
        del args[args.index(flag):args.index(flag) + 2]
hardy, mpirun = args[0], args[1:]
check = Checks()

# The networks at the sizes of jobs/networks_learns and jobs/cosmoflow_learns (the tiramisu with
# every part of the published one on 3x3 kernels and 8 maps per layer; DeepCAM's and CosmoFlow's
# at their published sizes), each on data `hardy data generate` writes.
NETWORKS = {
    "cosmoflow": {"generate": ["--format", "cosmoflow", "--samples", "256", "--volume", "32"],
                  "model": ["--model", "cosmoflow", "--volume", "32"], "score": "mae"},
    "tiramisu": {"generate": ["--samples", "320", "--height", "32", "--width", "32"],
                 "model": ["--model", "tiramisu", "--dense-layers", "2,2,3", "--growth", "8",
                           "--first-channels", "16", "--dense-kernel", "3", "--dropout", "0.1"],
                 "score": "mean_iou", "above": 0.45},
    "deepcam": {"generate": ["--samples", "320", "--height", "64", "--width", "64"],
                "model": ["--model", "deepcam"], "score": "mean_iou", "above": 0.40},
}
JOB = ["--global-batch", "8", "--seed", "7", "--log-every", "20", "--eval-samples", "64", "--snapshot-every", "0"]


def train(run, ranks, *options):
    command = [hardy, "train", *options, "--run-dir", str(run)]
    if ranks > 1:
        command = [*mpirun, "-n", str(ranks), *command]
    started = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=1800)
    return read_jsonl(run / "events.jsonl"), time.time() - started


with tempfile.TemporaryDirectory(prefix="hardy-recipes-") as tmp:
    tmp = Path(tmp)
    for name, network in NETWORKS.items():
        if only and name != only:
            continue
        data = tmp / f"{name}-data"
        subprocess.run([hardy, "data", "generate", "--out", str(data), "--seed", "3", *network["generate"]],
                       check=True, stdout=subprocess.DEVNULL)
        job = [*network["model"], "--dataset", str(data), *JOB]
        events, seconds = train(tmp / name, 2, *job, "--steps", str(steps), "--inject-failure", "rank=1@step=80")
        untrained, _ = train(tmp / f"{name}-untrained", 1, *job, "--steps", "1", "--lr", "1e-12")
        finished, before = events[-1], untrained[-1]
        score = network["score"]
        shrunk = [e for e in events if e["event"] == "communicator_shrunk"]
        check(finished["event"] == "job_finished" and finished["status"] == "completed" and finished["steps"] == steps
              and shrunk, f"{name}: {steps} steps on 2 ranks, rank 1 lost at step 80, completed on "
              f"{finished.get('world_size')} ({seconds:.0f} s)")
        check(not [e for e in events if e["event"] == "training_diverging"], f"{name}: not reported as diverging")
        after, untrained_score = finished.get(score), before.get(score)
        if score == "mae":
            check(after < 0.5 * untrained_score, f"{name}: held-out mean absolute error {after:.4f} below half "
                  f"the untrained network's {untrained_score:.4f}")
        else:
            check(after > network["above"] and after > untrained_score,
                  f"{name}: held-out mean IoU {after:.4f} above {network['above']} (untrained "
                  f"{untrained_score:.4f}; all-background < 1/3)")
        print(f"{name}: {score} untrained {untrained_score:.4f} -> trained {after:.4f} in {seconds:.0f} s", flush=True)
check.finish("each network learns with its recipe through a lost rank")
