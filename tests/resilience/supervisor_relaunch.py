#!/usr/bin/env python3
"""The supervisor relaunches a job that died as a whole (CTest label `fault`).

Usage: supervisor_relaunch.py HARDY [--ulfm true|false] [--launcher NAME --launcher-path PATH]

A job of 4 ranks (2 nodes of 2) runs under `hardy run` without in-job recovery (an MPI without
ULFM, or ULFM switched off); rank 3 is killed at step 10. The MPI ends the whole job, and the
supervisor must relaunch it from its latest checkpoint on the node that did not fail (node-local
snapshots are off here: resilience/node_local_relaunch tests those), where it finishes all its
steps; the audit must still cover every sample of every epoch exactly once, and the final loss
must be within 2% of a failure-free run.
"""
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, read_jsonl  # noqa: E402

hardy, launcher_options = sys.argv[1], sys.argv[2:]
STEPS, SAMPLES = 20, 36
TRAIN = ["--synthetic", "--samples", str(SAMPLES), "--height", "32", "--width", "32", "--global-batch", "8",
         "--steps", str(STEPS), "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16",
         "--low-level-channels", "8", "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "11",
         "--warmup-steps", "2", "--checkpoint-every", "4", "--audit-samples", "--log-every", "100",
         "--snapshot-every", "0",
         # Synchronous, so that the step-8 checkpoint is on disk when rank 3 dies at step 10:
         # an asynchronous write may still be in flight there on a loaded machine (the MPICH
         # build is -O0), and the relaunch would rightly restore step 4.
         "--checkpoint-mode", "sync"]
check = Checks()


def supervise(run, *train_extra):
    command = [hardy, "run", "--nodes", "2", "--ranks-per-node", "2", "--run-dir", str(run), "--backoff", "0.2",
               *launcher_options, "--", *TRAIN, *train_extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400)
    print(result.stdout[-800:], result.stderr[-1500:], flush=True)
    return result.returncode


with tempfile.TemporaryDirectory(prefix="hardy-supervisor-") as tmp:
    tmp = Path(tmp)
    check(supervise(tmp / "reference") == 0, "failure-free job under the supervisor completes")
    reference = read_jsonl(tmp / "reference" / "metrics.jsonl")
    run = tmp / "relaunched"
    status = supervise(run, "--inject-failure", "rank=3@step=10")
    events = read_jsonl(run / "events.jsonl")
    names = [e["event"] for e in events]
    check(status == 0, f"the supervised job exits 0 (status {status})")
    relaunches = [e for e in events if e["event"] == "job_relaunched"]
    check(len(relaunches) == 1, f"one job_relaunched event: {relaunches}")
    check(relaunches and relaunches[0]["excluded_nodes"] and relaunches[0]["world_size"] == 2,
          "the relaunch excludes the failed node and runs on the 2 surviving ranks")
    restored = [e for e in events if e["event"] == "state_restored"]
    check(restored and restored[-1]["source"] == "checkpoint" and restored[-1]["step"] == 8,
          f"the relaunched job restored the step-8 checkpoint ({restored[-1] if restored else None})")
    metrics = read_jsonl(run / "metrics.jsonl")
    committed = {m["step"]: m for m in metrics}
    check(sorted(committed) == list(range(1, STEPS + 1)), "every step was committed")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(len(complete) >= 3 and not wrong, f"epochs {complete} each cover every sample exactly once")
    final, expected = committed[STEPS]["loss"], reference[-1]["loss"]
    check(abs(final - expected) <= 0.02 * abs(expected), f"final loss {final:.5f} within 2% of {expected:.5f}")
    check(names.count("supervisor_finished") == 1 and events[-1]["event"] == "supervisor_finished",
          "supervisor_finished closes the log")

check.finish("supervisor relaunch")
