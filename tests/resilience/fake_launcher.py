#!/usr/bin/python3
"""A stand-in for mpirun that misbehaves on cue, for supervisor_judgement.py.

`hardy run --launcher-path fake_launcher.py` calls it with mpirun's arguments; it finds the run
directory after --run-dir and plays the next act of FAKE_LAUNCHER_PLAN (comma-separated, one act
per launch, the last one repeating), counting launches in RUN_DIR/fake-launches:

  lost:HOST        the runtime lost HOST's daemon: print Open MPI's message naming it, exit 0
                   after the job committed 3 of its steps (no job_finished)
  exit0            exit 0 having committed nothing and logged nothing
  finish-and-hang  log job_started and job_finished (completed), then never exit
  finish           log job_started and job_finished (completed) and exit 0
"""
import json
import os
import sys
import time
from pathlib import Path

STEPS = 5


def emit(run, event, **fields):
    now = time.time()
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + "Z", "unix_time": now,
              "event": event, **fields}
    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def main():
    args = sys.argv[1:]
    run = Path(args[args.index("--run-dir") + 1])
    run.mkdir(parents=True, exist_ok=True)
    counter = run / "fake-launches"
    launch = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(launch + 1))
    plan = os.environ["FAKE_LAUNCHER_PLAN"].split(",")
    act = plan[min(launch, len(plan) - 1)]
    (run / f"fake-launch-{launch + 1}.args").write_text(json.dumps(args))
    if act == "exit0":
        sys.exit(0)
    emit(run, "job_started", steps=STEPS, world_size=4)
    if act.startswith("lost:"):
        with open(run / "metrics.jsonl", "a") as f:
            for step in range(1, 4):
                f.write(json.dumps({"step": step, "loss": 1.0, "unix_time": time.time()}) + "\n")
        host = act.split(":", 1)[1]
        sys.stderr.write(
            "--------------------------------------------------------------------------\n"
            "PRTE has lost communication with a remote daemon.\n\n"
            "  HNP daemon   : [prterun-vm-1@0,0] on node vm\n"
            f"  Remote daemon: [prterun-vm-1@0,2] on node {host}\n\n"
            "This is usually due to either a failure of the TCP network\n"
            "connection to the node, or possibly an internal failure of\n"
            "the daemon itself. We cannot recover from this failure, and\n"
            "therefore will terminate the job.\n"
            "--------------------------------------------------------------------------\n")
        sys.exit(0)
    emit(run, "job_finished", status="completed", steps=STEPS)
    if act == "finish-and-hang":
        while True:
            time.sleep(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
