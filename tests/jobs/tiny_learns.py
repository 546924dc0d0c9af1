#!/usr/bin/env python3
"""End to end: examples/tiny.ini trains, halves its loss, and segments held-out samples.

Usage: tiny_learns.py HARDY_BINARY SOURCE_DIR MIN_MEAN_IOU
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

hardy, source, min_iou = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])


check = Checks()
with tempfile.TemporaryDirectory(prefix="hardy-tiny-") as tmp:
    run = Path(tmp) / "run"
    subprocess.run([hardy, "train", "--config", str(source / "examples/tiny.ini"), "--run-dir", str(run)],
                   check=True)
    metrics = read_jsonl(run / "metrics.jsonl")
    events = read_jsonl(run / "events.jsonl")
    check(len(metrics) > 20, f"{len(metrics)} metric lines written")
    for key in ("step", "epoch", "loss", "lr", "samples_per_s", "world_size"):
        check(all(key in m for m in metrics), f"every metrics line has '{key}'")
    first = sum(m["loss"] for m in metrics[:5]) / 5
    last = sum(m["loss"] for m in metrics[-10:]) / 10
    check(last <= 0.5 * first, f"loss fell from {first:.4f} to {last:.4f} (at least halved)")
    names = [e["event"] for e in events]
    check(names[0] == "job_started" and names[-1] == "job_finished", f"events start and finish the job: {names}")
    finished = events[-1]
    check(finished["status"] == "completed", "job_finished status is completed")
    check(all("time" in e for e in events), "every event has a time")
    check(finished["mean_iou"] >= min_iou, f"held-out mean IoU {finished['mean_iou']:.4f} >= {min_iou}")
    check((run / "config.ini").is_file() and (run / "model.h5").is_file(), "config.ini and model.h5 written")
    check("training_diverging" not in names, "a learning job is never reported as diverging")

    # hardy eval reads the run directory back and must reproduce the training job's score.
    result = subprocess.run([hardy, "eval", "--run-dir", str(run), "--json"], check=True, capture_output=True,
                            text=True)
    scored = json.loads(result.stdout)
    check(abs(scored["mean_iou"] - finished["mean_iou"]) < 1e-9,
          f"hardy eval reproduces the mean IoU ({scored['mean_iou']:.6f})")
check.finish("tiny job learns")
