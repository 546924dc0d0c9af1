#!/usr/bin/python3
"""A stand-in for mpirun that misbehaves on cue, for supervisor_judgement.py.

`hardy run --launcher-path fake_launcher.py` calls it with mpirun's arguments; it finds the run
directory after --run-dir and plays the next act of FAKE_LAUNCHER_PLAN (comma-separated, one act
per launch, the last one repeating), counting launches in RUN_DIR/fake-launches. A fault domain's
launch (--domain D) plays FAKE_LAUNCHER_PLAN_D<D> when it is set, counts in
RUN_DIR/fake-launches-d<D>, and its events carry the domain's number:

  lost:HOST        the runtime lost HOST's daemon: print Open MPI's message naming it, exit 0
                   after the job committed 3 of its steps (no job_finished)
  exit0            exit 0 having committed nothing and logged nothing
  finish-and-hang  log job_started and job_finished (completed), then never exit
  finish           log job_started and job_finished (completed) and exit 0
  crash            log job_started, exit 1
  progress-crash   log job_started, commit the step after metrics.jsonl's last, exit 1
  checkpoint-crash log job_started and checkpoint_written (step 2), exit 1
  hang-at-start    log nothing and never exit (a runtime daemon that never spawns the ranks)
  slow-finish      log job_started, then job_finished (completed) 8 s later, and exit 0
  hang             log job_started, then commit nothing and never exit (a domain whose node froze)
  stall[:S]        log job_started, commit 30 steps 50 ms apart (after metrics.jsonl's last), then
                   commit nothing more: never exit (a peer frozen or cut off), or after S
                   seconds log job_finished (completed) and exit 0 (a job stuck for a while)
  fail-linger[:S]  log job_started, then job_finished (failed: a domain that lost its leader), and
                   exit 1 only S seconds later (default 2: a launcher slow to follow its ranks)
  await-signal     handle SIGUSR1 as `hardy train` does, then log job_started; on the signal
                   write RUN_DIR/fake-signal-N (N: this launch), log job_finished (preempted) and
                   exit 4; without one within 20 s, finish
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

STEPS = 5


DOMAIN = {}


def emit(run, event, **fields):
    now = time.time()
    fields = {**DOMAIN, **fields}
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + "Z", "unix_time": now,
              "event": event, **fields}
    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def main():
    args = sys.argv[1:]
    run = Path(args[args.index("--run-dir") + 1])
    if "--domain" in args:
        DOMAIN["domain"] = int(args[args.index("--domain") + 1])
    run.mkdir(parents=True, exist_ok=True)
    # A fault domain's launches count on their own, and follow FAKE_LAUNCHER_PLAN_D<D> when it is
    # set: the domains' launchers start at the same moment, in no fixed order.
    domain = DOMAIN.get("domain")
    counter = run / ("fake-launches" if domain is None else f"fake-launches-d{domain}")
    launch = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(launch + 1))
    plan = os.environ.get(f"FAKE_LAUNCHER_PLAN_D{domain}", os.environ["FAKE_LAUNCHER_PLAN"]).split(",")
    act = plan[min(launch, len(plan) - 1)]
    (run / f"fake-launch-{'' if domain is None else f'd{domain}-'}{launch + 1}.args").write_text(json.dumps(args))
    if act == "exit0":
        sys.exit(0)
    if act == "hang-at-start":
        while True:
            time.sleep(1)
    signalled = []
    if act == "await-signal":
        signal.signal(signal.SIGUSR1, lambda number, frame: signalled.append(number))
    emit(run, "job_started", steps=STEPS, world_size=4)
    if act == "progress-crash":
        lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
        step = json.loads(lines[-1])["step"] + 1 if lines else 1
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "loss": 1.0, "unix_time": time.time()}) + "\n")
        sys.exit(1)
    if act.startswith("fail-linger"):
        time.sleep(0.5)
        emit(run, "job_finished", status="failed", steps=0, error="lost its leader (fake)")
        time.sleep(float(act.split(":", 1)[1]) if ":" in act else 2.0)
        sys.exit(1)
    if act in ("crash", "checkpoint-crash"):
        if act == "checkpoint-crash":
            emit(run, "checkpoint_written", step=2, path=str(run / "checkpoints" / "ckpt-2.h5"))
        sys.exit(1)
    if act == "await-signal":
        deadline = time.time() + 20
        while not signalled and time.time() < deadline:
            time.sleep(0.1)
        if signalled:
            (run / f"fake-signal-{launch + 1}").write_text(str(signalled[0]))
            emit(run, "job_finished", status="preempted", steps=2)
            sys.exit(4)
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
    if act == "hang":
        while True:
            time.sleep(1)
    if act.startswith("stall"):
        lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
        first = json.loads(lines[-1])["step"] + 1 if lines else 1
        for step in range(first, first + 30):
            time.sleep(0.05)
            with open(run / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "loss": 1.0, "unix_time": time.time()}) + "\n")
        if ":" not in act:
            while True:
                time.sleep(1)
        time.sleep(float(act.split(":", 1)[1]))
    if act == "slow-finish":
        time.sleep(8)
    emit(run, "job_finished", status="completed", steps=STEPS)
    if act == "finish-and-hang":
        while True:
            time.sleep(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
