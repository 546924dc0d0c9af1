#!/usr/bin/env python3
"""End to end: `hardy train --model tiramisu` (the Gordon Bell run's FC-DenseNet, small) trains on
small synthetic crops, checkpoints, and `hardy eval` reproduces its score; a run directory of one
network refuses to resume as another, naming both. `--model deepcam` (MLPerf HPC's DeepLabv3+ at
its published 56M parameters) resumes bit-identically from a checkpoint on 64x64 crops. With
--learn (nightly, about 2 minutes on 2 cores) both networks learn instead: the tiramisu over 200
steps, the DeepCAM network over 30 (the loss falls, the held-out mean IoU beats all-background's).

Usage: networks.py HARDY [--learn]
"""
import json
import subprocess
import time
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

hardy = sys.argv[1]
learn = "--learn" in sys.argv[2:]
# Every part of the network (two dense blocks down, the bottleneck, two up, transitions, skips,
# dropout) on 3x3 kernels and 8 maps per layer: seconds per run on two cores.
TIRAMISU = ["--model", "tiramisu", "--dense-layers", "2,2,3", "--growth", "8", "--first-channels", "16",
            "--dense-kernel", "3", "--dropout", "0.1"]
# Per submission the job sets its optimizer (the checks are about checkpoints and resumes); with
# --learn it gives none and trains with the network's recipe (docs/training.md).
OPTIMIZER = ["--optimizer", "adam", "--lr", "0.003", "--warmup-steps", "10", "--lr-decay", "cosine"]
JOB = ["--synthetic", "--samples", "256", "--height", "32", "--width", "32", "--eval-samples", "64",
       "--global-batch", "8", "--seed", "7", "--log-every", "10", *([] if learn else OPTIMIZER)]
check = Checks()

with tempfile.TemporaryDirectory(prefix="hardy-networks-") as tmp:
    # Per submission 20 steps, checkpointed at 10 and 20; --learn 200, at 50, 100, 150 and 200.
    steps = 200 if learn else 20
    checkpoint_every = ["--checkpoint-every", str(steps // 4 if learn else steps // 2)]
    run = Path(tmp) / "tiramisu"
    subprocess.run([hardy, "train", *JOB, *TIRAMISU, *checkpoint_every, "--steps", str(steps), "--run-dir", str(run)],
                   check=True, stdout=subprocess.DEVNULL)
    metrics, events = read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "events.jsonl")
    finished = events[-1]
    check(finished["event"] == "job_finished" and "mean_iou" in finished,
          f"tiramisu: job_finished reports the held-out mean IoU: {finished}")
    if learn:
        first = sum(m["loss"] for m in metrics[:3]) / 3
        last = sum(m["loss"] for m in metrics[-5:]) / 5
        check(last <= 0.6 * first, f"tiramisu: loss fell from {first:.4f} to {last:.4f}")
        # Predicting background everywhere scores that class's IoU (its share of the pixels) and 0
        # for the other two: a mean below 1/3.
        check(finished.get("mean_iou", 0) > 0.45,
              f"tiramisu: held-out mean IoU {finished.get('mean_iou')} is above all-background's (< 1/3)")
        check(not [e for e in events if e["event"] == "training_diverging"], "tiramisu: not reported as diverging")
    started = [e for e in events if e["event"] == "job_started"]
    check(started and started[0].get("model") == "tiramisu", f"tiramisu: job_started names the network: {started[:1]}")
    written = [e for e in events if e["event"] == "checkpoint_written"]
    check(len(written) >= 2, f"tiramisu: {len(written)} checkpoints written")
    scored = json.loads(subprocess.run([hardy, "eval", "--run-dir", str(run), "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    check(abs(scored["mean_iou"] - finished["mean_iou"]) < 1e-9,
          f"tiramisu: hardy eval reproduces the mean IoU ({scored['mean_iou']:.6f})")

    # The same run directory, resumed as the compact network: refused, both networks named.
    refused = subprocess.run([hardy, "train", *JOB, *checkpoint_every, "--steps", str(steps + 50), "--run-dir", str(run),
                              "--resume", "latest"], capture_output=True, text=True)
    message = refused.stderr
    check(refused.returncode != 0 and "--model tiramisu" in message and "--model compact" in message,
          f"resuming a tiramisu run as the compact network is refused naming both (status "
          f"{refused.returncode}): {message.strip()[-400:]}")
    # And as itself it goes on from its last checkpoint.
    subprocess.run([hardy, "train", *JOB, *TIRAMISU, *checkpoint_every, "--steps", str(steps + 10), "--run-dir",
                    str(run), "--resume", "latest"], check=True, stdout=subprocess.DEVNULL)
    restored = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "state_restored"]
    check(restored and restored[-1]["step"] == steps, f"tiramisu: resumed at step {steps} ({restored[-1:]})")

    # DeepCAM's network at full size on small crops: --learn, it learns; per submission, 2 steps +
    # a resume + 2 more end bit-identical to 4 straight (SGD without decay: the resumed job's total
    # differs; the resume lands on the last warmup step).
    DEEPCAM_STEPS = 100  # with its recipe's LAMB, still inside the 400-step warm-up
    DEEPCAM = ["--model", "deepcam", "--synthetic", "--samples", "256", "--height", "64", "--width", "64",
               "--global-batch", "8", "--seed", "7", "--log-every", "10"]
    if learn:
        run = Path(tmp) / "deepcam"
        started = time.time()
        subprocess.run([hardy, "train", *DEEPCAM, "--eval-samples", "32", "--steps", str(DEEPCAM_STEPS),
                        "--run-dir", str(run)], check=True, stdout=subprocess.DEVNULL)
        metrics, events = read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "events.jsonl")
        first = sum(m["loss"] for m in metrics[:3]) / 3
        last = sum(m["loss"] for m in metrics[-5:]) / 5
        check(last <= 0.5 * first, f"deepcam: loss fell from {first:.4f} to {last:.4f} in {DEEPCAM_STEPS} steps "
              f"({time.time() - started:.0f} s)")
        check(events[-1]["event"] == "job_finished" and events[-1]["mean_iou"] > 0.4,
              f"deepcam: held-out mean IoU {events[-1].get('mean_iou')} is above all-background's (< 1/3)")
        check(not [e for e in events if e["event"] == "training_diverging"], "deepcam: not reported as diverging")
    else:
        import h5py
        import numpy as np

        SGD = ["--eval-samples", "0", "--optimizer", "sgd", "--lr", "0.01", "--lr-decay", "none",
               "--warmup-steps", "2", "--checkpoint-every", "2"]
        straight, resumed = Path(tmp) / "deepcam-straight", Path(tmp) / "deepcam-resumed"
        subprocess.run([hardy, "train", *DEEPCAM, *SGD, "--steps", "4", "--run-dir", str(straight)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([hardy, "train", *DEEPCAM, *SGD, "--steps", "2", "--run-dir", str(resumed)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([hardy, "train", *DEEPCAM, *SGD, "--steps", "4", "--run-dir", str(resumed), "--resume",
                        "latest"], check=True, stdout=subprocess.DEVNULL)

        def tensors(path):
            with h5py.File(path, "r") as f:
                return {name: np.array(data) for name, data in f["model"].items()}

        a, b = tensors(straight / "model.h5"), tensors(resumed / "model.h5")
        check(a.keys() == b.keys() and any(k.endswith("running_mean") for k in a)
              and all(np.array_equal(a[k], b[k]) for k in a),
              f"deepcam: {len(a)} tensors (parameters and batch-norm statistics) bit-identical after resuming")
check.finish("networks")
