#!/usr/bin/env python3
"""Past --min-world-size a job stops with status 3 after writing a final checkpoint of its last
committed step, which a later job resumes from (CTest label `fault`).

Usage: stop_at_limits.py HARDY MPIRUN [MPIRUN FLAGS...]
"""
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

hardy, mpirun = sys.argv[1], sys.argv[2:]
TRAIN = ["--synthetic", "--samples", "24", "--height", "32", "--width", "32", "--global-batch", "8", "--steps", "16",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--log-every", "100", "--checkpoint-every", "100"]
check = Checks()

with tempfile.TemporaryDirectory(prefix="hardy-limits-") as tmp:
    run = Path(tmp) / "run"
    stopped = subprocess.run([*mpirun, "-n", "4", hardy, "train", *TRAIN, "--run-dir", str(run), "--min-world-size", "4",
                              "--inject-failure", "rank=2@step=6"], capture_output=True, text=True, timeout=240)
    events = read_jsonl(run / "events.jsonl")
    finished = [e for e in events if e["event"] == "job_finished"]
    check(stopped.returncode == 3, f"the job exits with status 3 (got {stopped.returncode})")
    check(finished and finished[-1]["status"] == "stopped" and "min-world-size" in finished[-1]["reason"],
          f"job_finished says why it stopped: {finished[-1] if finished else None}")
    final = [e for e in events if e["event"] == "final_checkpoint"]
    check(final and final[-1]["step"] == 5, f"a final checkpoint of committed step 5: {final}")
    verify = subprocess.run([hardy, "ckpt", "verify", str(run / "checkpoints" / "latest")], capture_output=True, text=True)
    check(verify.returncode == 0, "the final checkpoint verifies")
    resumed = subprocess.run([*mpirun, "-n", "3", hardy, "train", *TRAIN, "--run-dir", str(run), "--resume", "latest"],
                             capture_output=True, text=True, timeout=240)
    metrics = read_jsonl(run / "metrics.jsonl")
    check(resumed.returncode == 0 and metrics[-1]["step"] == 16 and metrics[-1]["world_size"] == 3,
          "3 ranks resume from it and finish the job")

check.finish("stop at limits")
