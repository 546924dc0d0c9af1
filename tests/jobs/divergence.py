#!/usr/bin/env python3
"""End to end: a job whose learning rate is far too high says that it diverges, and a job that
learns never does. CosmoFlow at 32^3 with the compact network's old defaults (Adam at 0.002,
issue 70: the tanh output saturates and the loss climbs from about 0.5 to a plateau above 1.5)
logs training_diverging once, with its figures, prints a line on stderr, trains on to its last
step, and `hardy status` (text and --json) and the report's marks and title name it. The same job
with the network's recipe (no optimizer options) logs none. About 30 s on 2 cores.

Usage: divergence.py HARDY SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

hardy, source = sys.argv[1], Path(sys.argv[2])
sys.path.insert(0, str(source / "tools"))
from run_files import StepClock, collect_marks, summary  # noqa: E402

JOB = ["--model", "cosmoflow", "--synthetic", "--volume", "32", "--samples", "128", "--eval-samples", "8",
       "--global-batch", "8", "--steps", "45", "--seed", "1", "--log-every", "100", "--snapshot-every", "0"]
TOO_HIGH = ["--optimizer", "adam", "--lr", "0.002", "--lr-decay", "cosine", "--weight-decay", "1e-4"]
check = Checks()

with tempfile.TemporaryDirectory(prefix="hardy-divergence-") as tmp:
    run = Path(tmp) / "too-high"
    done = subprocess.run([hardy, "train", *JOB, *TOO_HIGH, "--run-dir", str(run)], capture_output=True, text=True)
    check(done.returncode == 0, f"the diverging job trains on to its end (status {done.returncode}): "
          f"{done.stderr.strip()[-300:]}")
    events = read_jsonl(run / "events.jsonl")
    losses = [m["loss"] for m in read_jsonl(run / "metrics.jsonl")]
    diverging = [e for e in events if e["event"] == "training_diverging"]
    check(len(diverging) == 1, f"one training_diverging event (losses {[round(x, 3) for x in losses]}): {diverging}")
    if diverging:
        d = diverging[0]
        check(d["factor"] == 2 and d["window"] == 20 and d["early_steps"] == 1,
              f"the default thresholds: 2 x the first step's loss for 20 steps: {d}")
        check(d["step"] - d["since_step"] == 19 and d["window_mean_loss"] > 2 * d["early_loss"]
              and d["step"] <= 45, f"the figures hold together: {d}")
        check(abs(d["early_loss"] - losses[0]) < 1e-6, "the early level is the first step's loss")
    check("training is diverging" in done.stderr, f"a line on stderr says so: {done.stderr.strip()[-400:]}")
    check(events[-1]["event"] == "job_finished" and events[-1]["status"] == "completed",
          f"nothing else happens: the job completes ({events[-1]})")

    status = subprocess.run([hardy, "status", str(run)], capture_output=True, text=True)
    check(status.returncode == 0 and "diverging" in status.stdout and "since step" in status.stdout,
          f"hardy status shows it: {status.stdout.strip()}")
    as_json = json.loads(subprocess.run([hardy, "status", str(run), "--json"], check=True, capture_output=True,
                                        text=True).stdout)
    check(isinstance(as_json.get("diverging"), dict) and as_json["diverging"].get("event") == "training_diverging",
          f"hardy status --json holds the event: {as_json.get('diverging')}")
    metrics = read_jsonl(run / "metrics.jsonl")
    marks, _ = collect_marks(events, StepClock(metrics))
    check(any(kind == "diverging" for kind, _, _ in marks), f"hardy report draws a mark for it: {marks}")
    check("DIVERGING" in summary(run, events, metrics), "hardy report's title names it")

    # The same job with CosmoFlow's recipe: no event.
    run = Path(tmp) / "recipe"
    done = subprocess.run([hardy, "train", *JOB, "--run-dir", str(run)], capture_output=True, text=True)
    check(done.returncode == 0, f"the recipe's job completes (status {done.returncode})")
    events = read_jsonl(run / "events.jsonl")
    check(not [e for e in events if e["event"] == "training_diverging"] and "diverging" not in done.stderr,
          f"the recipe's job is not reported as diverging "
          f"(losses {[round(m['loss'], 3) for m in read_jsonl(run / 'metrics.jsonl')]})")
check.finish("a diverging job says so")
