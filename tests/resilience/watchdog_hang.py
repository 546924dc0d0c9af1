#!/usr/bin/env python3
"""A rank that hangs (SIGSTOP: alive, so the MPI reports nothing) is caught by the watchdog, and
the supervisor relaunches the job from the checkpoint the watchdog wrote (CTest label `fault`).

Usage: watchdog_hang.py HARDY

A job of 3 ranks runs under `hardy run` with `--collective-timeout 2`. Once step 5 has
committed, rank 2 is stopped with SIGSTOP. Rank 0's watchdog must declare the failure, write a
checkpoint of the last committed step, and end the job with status 75; the supervisor relaunches
it, the relaunch restores that checkpoint (not the older periodic one), and the job finishes all
its steps, with every sample of every epoch seen exactly once.
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, read_jsonl  # noqa: E402

hardy = sys.argv[1]
STEPS, SAMPLES, TIMEOUT_S = 40, 36, 2.0
TRAIN = ["--synthetic", "--samples", str(SAMPLES), "--height", "32", "--width", "32", "--global-batch", "6",
         "--steps", str(STEPS), "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16",
         "--low-level-channels", "8", "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "3",
         "--checkpoint-every", "8", "--audit-samples", "--log-every", "100", "--collective-timeout", str(TIMEOUT_S),
         # The last resort alone: the hang monitor would end the stopped rank inside the job.
         "--hang-timeout", "off"]
check = Checks()
stopped = {}


def stop_rank_2(run):
    """Waits for step 5, then stops rank 2 of the first launch, as a node stuck in a driver would."""
    deadline = time.time() + 200
    while time.time() < deadline:
        metrics = read_jsonl(run / "metrics.jsonl")
        if metrics and metrics[-1]["step"] >= 5:
            victim = next(e for e in read_jsonl(run / "events.jsonl") if e["event"] == "rank_started" and e["rank"] == 2)
            os.kill(victim["pid"], signal.SIGSTOP)
            stopped.update(pid=victim["pid"], at=time.time(), step=metrics[-1]["step"])
            return
        time.sleep(0.02)


with tempfile.TemporaryDirectory(prefix="hardy-watchdog-") as tmp:
    run = Path(tmp) / "run"
    # Open MPI's heartbeat detector off: this is the rank that hangs while it still answers
    # heartbeats, which only the watchdog catches.
    command = [hardy, "run", "--nodes", "3", "--ranks-per-node", "1", "--run-dir", str(run), "--backoff", "0.2",
               "--heartbeat-timeout", "0", "--", *TRAIN]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = threading.Thread(target=stop_rank_2, args=(run,))
    watcher.start()
    try:
        output, _ = process.communicate(timeout=300)
    finally:
        watcher.join()
        if "pid" in stopped:  # never leave a stopped process behind, whatever happened
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(stopped["pid"], sig)
                except ProcessLookupError:
                    pass
    print(output[-3000:], flush=True)
    events = read_jsonl(run / "events.jsonl")
    check("pid" in stopped, f"rank 2 was stopped after step {stopped.get('step')}")
    check(process.returncode == 0, f"the supervised job exits 0 (status {process.returncode})")
    watchdog = [e for e in events if e["event"] == "failure_detected" and e.get("detected_by") == "watchdog"]
    check(len(watchdog) == 1, f"one failure_detected by the watchdog: {watchdog}")
    if watchdog and "at" in stopped:
        caught_after = watchdog[0]["unix_time"] - stopped["at"]
        check(TIMEOUT_S <= caught_after < TIMEOUT_S + 5, f"the watchdog fired {caught_after:.2f} s after the stop "
              f"(timeout {TIMEOUT_S} s)")
    relaunches = [e for e in events if e["event"] == "job_relaunched"]
    check(len(relaunches) == 1 and relaunches[0]["previous_end"] == "exit status 75",
          f"one relaunch after exit status 75: {relaunches}")
    written = [e["step"] for e in events if e["event"] == "checkpoint_written"]
    restored = [e for e in events if e["event"] == "state_restored"]
    check(restored and restored[-1]["source"] == "checkpoint" and restored[-1]["step"] >= 5 and
          restored[-1]["step"] in written,
          f"the relaunch restored the watchdog's checkpoint of the last committed step "
          f"(restored {restored[-1]['step'] if restored else None}, written {written})")
    committed = {m["step"] for m in read_jsonl(run / "metrics.jsonl")}
    check(sorted(committed) == list(range(1, STEPS + 1)), "every step was committed")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(len(complete) >= 2 and not wrong, f"epochs {complete} each cover every sample exactly once")

check.finish("watchdog hang")
