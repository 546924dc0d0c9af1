#!/usr/bin/env python3
"""Stands in for `hardy run` in a rendered batch script, so that the scheduler side (the script's
directives, signal forwarding, requeue, hardy status and cancel) is tested without training.

Called as the script calls hardy: `fake_hardy_run.py run [hardy run options] -- [train options]`.
Appends one JSON line per call to RUN_DIR/fake_runs.jsonl (its arguments, the scheduler variables
it saw, what happened), and behaves as HARDY_FAKE_MODE says:
  preempt  the first run (no SLURM_RESTART_COUNT, no LSB_RESTART) waits up to 100 s for SIGUSR1
           and exits 4, as `hardy run` does after its preemption checkpoint; later runs exit 0
  sleep    logs a failure_detected event, then a metrics line every 0.2 s until it is killed
  lost     lists two lost nodes in RUN_DIR/exclude-nodes and exits 4, as `hardy run` does when
           too few healthy nodes are left in the allocation
  exit0    exits 0 at once
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

PREEMPTED = 4  # resilience::kPreempted, batch::kRequeueExitStatus


def option(args, name):
    return args[args.index(name) + 1] if name in args else None


def main(argv):
    own = argv[: argv.index("--")] if "--" in argv else argv
    run_dir = Path(option(own, "--run-dir"))
    mode = os.environ.get("HARDY_FAKE_MODE", "exit0")
    restarted = int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0 or os.environ.get("LSB_RESTART") == "Y"
    record = {
        "argv": argv,
        "mode": mode,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("SLURM_JOB", "SLURM_RESTART", "LSB_", "HARDY_"))},
        "start": time.time(),
    }

    def finish(outcome, status):
        record["outcome"] = outcome
        with open(run_dir / "fake_runs.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")
        sys.exit(status)

    got_usr1 = []
    signal.signal(signal.SIGUSR1, lambda *_: got_usr1.append(time.time()))
    if mode == "preempt" and not restarted:
        deadline = time.time() + 100
        while not got_usr1 and time.time() < deadline:
            time.sleep(0.1)
        if got_usr1:
            finish(f"SIGUSR1 after {got_usr1[0] - record['start']:.1f} s", PREEMPTED)
        finish("no SIGUSR1 within 100 s", 1)
    if mode == "lost":
        (run_dir / "exclude-nodes").write_text("a01n02\na01n05\n")
        finish("lost two nodes", PREEMPTED)
    if mode == "sleep":
        with open(run_dir / "events.jsonl", "a") as events:
            events.write(json.dumps({"event": "failure_detected", "failed_ranks": [1]}) + "\n")
        with open(run_dir / "fake_runs.jsonl", "a") as log:  # written now: the job is killed later
            log.write(json.dumps(dict(record, outcome="sleeping")) + "\n")
        step = 0
        while True:
            step += 1
            with open(run_dir / "metrics.jsonl", "a") as metrics:
                metrics.write(json.dumps({"step": step, "epoch": 0, "loss": 1.0 / step}) + "\n")
            time.sleep(0.2)
    finish("completed", 0)


if __name__ == "__main__":
    main(sys.argv[1:])
