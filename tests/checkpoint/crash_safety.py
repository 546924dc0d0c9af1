#!/usr/bin/env python3
"""A checkpoint writer killed with SIGKILL mid-write leaves the previous checkpoint valid and
`latest` pointing at it; the job then resumes from it and finishes (CTest label `fault`).

Usage: crash_safety.py HARDY
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks  # noqa: E402

hardy = sys.argv[1]
TRAIN = ["--synthetic", "--samples", "32", "--height", "32", "--width", "32", "--global-batch", "4",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "9", "--steps", "12", "--checkpoint-every", "4",
         "--log-every", "100",
         "--snapshot-every", "0"]  # the checkpoint alone: a node-local snapshot would be newer
check = Checks()


with tempfile.TemporaryDirectory(prefix="hardy-crash-") as tmp:
    for mode in ("sync", "async"):
        run = Path(tmp) / mode
        died = subprocess.run([hardy, "train", *TRAIN, "--run-dir", str(run), "--checkpoint-mode", mode,
                               "--inject-failure", "rank=0@step=8:checkpoint-write"], capture_output=True, text=True)
        checkpoints = run / "checkpoints"
        check(died.returncode == -9, f"{mode}: the job was killed while writing the step-8 checkpoint")
        check((checkpoints / "latest").exists() and (checkpoints / "latest").resolve().name == "ckpt-4.h5",
              f"{mode}: latest still points at ckpt-4.h5")
        check(not (checkpoints / "ckpt-8.h5").exists(), f"{mode}: no ckpt-8.h5 became visible")
        verify = subprocess.run([hardy, "ckpt", "verify", str(checkpoints / "latest")], capture_output=True, text=True)
        check(verify.returncode == 0, f"{mode}: hardy ckpt verify latest -> {verify.returncode} {verify.stdout.strip()}")
        listing = subprocess.run([hardy, "ckpt", "list", str(run)], capture_output=True, text=True)
        check(listing.returncode == 0 and "ckpt-4.h5" in listing.stdout and "ckpt-8.h5" not in listing.stdout,
              f"{mode}: hardy ckpt list shows the surviving checkpoint")
        resumed = subprocess.run([hardy, "train", *TRAIN, "--run-dir", str(run), "--resume", "latest"],
                                 capture_output=True, text=True)
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
        restored = [e for e in events if e["event"] == "state_restored"]
        check(resumed.returncode == 0 and restored and restored[-1]["step"] == 4,
              f"{mode}: the job resumed from step 4 and finished")

check.finish("checkpoint crash safety")
