#!/usr/bin/env python3
"""A hung rank is found, named and removed inside the job (CTest label `fault`).

Usage: hang_detection.py HARDY SCENARIO [--json FILE]

`hardy run` trains 8 ranks (4 nodes x 2 ranks on this host) with default options; once step
FAULT_STEP is near, one rank hangs:

  stop    SIGSTOP from outside, as a debugger or the OS would stop it: its heartbeats stop, and
          the other rank on its host kills it
  spin    it computes forever (--inject-failure ...:spin): its own monitor sees the compute
          stretch overrun the hang timeout and kills it
  stall   it blocks for good in its node snapshot write (...:stall), with --hang-io-timeout 8:
          its own monitor kills it past the I/O bound
  slow    no hang: one step computes 3 s longer (30 times the usual step), and a snapshot write
          takes 6 s, inside --hang-io-timeout 8. Nobody may be called hung.

Each hang must be named (hang_detected: the rank, its host, what it was doing, who ended it),
turned into an in-job shrink (no relaunch: one launch, 7 ranks at the end), and the job training
again within max(10 s, 5 x the median step) of the hang (the stall: the I/O bound later). No
committed step is lost (every step 1..STEPS committed once, the restore at the last committed
step) and every epoch sees every sample exactly once.
"""
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, check_completed, complete_epochs_exact, read_jsonl, read_jsonl_tail, run_watched, small_job  # noqa: E402

hardy, scenario = sys.argv[1], sys.argv[2]
json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
NODES, RANKS_PER_NODE, SAMPLES, GLOBAL_BATCH = 4, 2, 48, 16
STEPS, FAULT_STEP, IO_TIMEOUT_S = 150, 60, 8
VICTIM = {"stop": 3, "spin": 5, "stall": 2}.get(scenario)
INJECT = {
    "spin": [f"rank=5@step={FAULT_STEP}:spin"],
    "stall": [f"rank=2@step={FAULT_STEP}:stall"],
    "slow": [f"rank=3@step={FAULT_STEP}:sleep=3", f"rank=2@step={FAULT_STEP + 20}:snapshot-write:sleep=6"],
}.get(scenario, [])
if scenario not in ("stop", "spin", "stall", "slow"):
    sys.exit(f"unknown scenario {scenario}")

check = Checks()
stopped = {}
with tempfile.TemporaryDirectory(prefix=f"hardy-hang-{scenario}-") as tmp:
    run = Path(tmp) / "run"
    train = small_job(SAMPLES, STEPS, GLOBAL_BATCH) + ["--checkpoint-every", "50", "--hang-io-timeout", str(IO_TIMEOUT_S),
                                                       "--snapshot-dir", str(Path(tmp) / "node-local")]
    for spec in INJECT:
        train += ["--inject-failure", spec]
    command = [hardy, "run", "--nodes", str(NODES), "--ranks-per-node", str(RANKS_PER_NODE), "--run-dir", str(run),
               "--backoff", "0.2", "--", *train]

    def stop_victim():
        """SIGSTOP the victim once the job is at FAULT_STEP, from outside the job."""
        if scenario != "stop":
            return
        deadline = time.time() + 200
        while time.time() < deadline:
            metrics = read_jsonl_tail(run / "metrics.jsonl")
            if metrics and metrics["step"] >= FAULT_STEP - 1:
                victim = next(e for e in read_jsonl(run / "events.jsonl")
                              if e["event"] == "rank_started" and e["rank"] == VICTIM)
                os.kill(victim["pid"], signal.SIGSTOP)
                stopped.update(pid=victim["pid"], at=time.time())
                return
            time.sleep(0.01)

    started = time.time()
    status, output = run_watched(command, stop_victim, timeout=300)
    if "pid" in stopped:  # never leave a stopped process behind, whatever happened
        try:
            os.kill(stopped["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    print(output[-4000:])
    events = read_jsonl(run / "events.jsonl")
    metrics = read_jsonl(run / "metrics.jsonl")
    of = lambda kind: [e for e in events if e["event"] == kind]  # noqa: E731

    check(status == 0, f"{scenario}: hardy run exits 0 ({status}, {time.time() - started:.1f} s)")
    check_completed(check, events, STEPS, scenario)
    check(len(of("job_started")) == 1 and not of("job_relaunched"), f"{scenario}: one launch, never relaunched")
    steps = [m["step"] for m in metrics]
    check(sorted(steps) == list(range(1, STEPS + 1)), f"{scenario}: every step 1..{STEPS} committed once")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(len(complete) >= STEPS * GLOBAL_BATCH // SAMPLES - 1 and not wrong,
          f"{scenario}: {len(complete)} complete epochs, each every sample exactly once (wrong: {wrong})")
    hangs = of("hang_detected")
    phases = {}
    if scenario == "slow":
        check(not hangs and not of("failure_detected"), f"{scenario}: nobody called hung: {hangs}")
        check(metrics[-1]["world_size"] == 8, f"{scenario}: 8 ranks at the end")
        slowest = max(m["step_s"] for m in metrics)
        check(slowest >= 3, f"{scenario}: the slow steps happened (slowest {slowest:.1f} s)")
    else:
        check(len(hangs) == 1 and hangs[0]["rank"] == VICTIM, f"{scenario}: hang_detected names rank {VICTIM}: {hangs}")
        detected = of("failure_detected")
        check(detected and detected[0]["failed_ranks"] == [VICTIM] and detected[0]["detected_by"] == "hang monitor",
              f"{scenario}: the recovery names rank {VICTIM}, detected by the hang monitor: {detected[:1]}")
        check(metrics[-1]["world_size"] == 7, f"{scenario}: 7 ranks at the end ({metrics[-1]['world_size']})")
        if hangs:
            hang = hangs[0]
            expect_by = "on its host" if scenario == "stop" else "its own monitor"
            check(expect_by in hang["detected_by"], f"{scenario}: ended by {hang['detected_by']!r}")
            expect_doing = {"spin": "compute", "stall": "node snapshot write"}.get(scenario)
            check(expect_doing is None or hang["doing"] == expect_doing, f"{scenario}: doing {hang['doing']!r}")
            restored = of("state_restored")
            check(restored and restored[-1]["source"] == "memory" and restored[-1]["step"] == hang["step"] - 1,
                  f"{scenario}: restored from memory at the last committed step {hang['step'] - 1}: {restored[-1:]}")
            record = run / "checkpoints" / f"injected-kill-{VICTIM}.time"
            hung_at = stopped.get("at") or (float(record.read_text()) if record.exists() else None)
            resumed = of("training_resumed")
            median_step = statistics.median(m["step_s"] for m in metrics if m["step"] < FAULT_STEP - 1)
            bound = max(10.0, 5 * median_step) + (IO_TIMEOUT_S if scenario == "stall" else 0)
            if hung_at and resumed:
                first = next((m for m in metrics if m["unix_time"] > resumed[0]["unix_time"]), None)
                phases = {"scenario": scenario, "median_step_s": median_step, "timeout_s": hang["timeout_s"],
                          "detected_s": hang["detected_unix_time"] - hung_at,
                          "shrunk_s": detected[0]["unix_time"] - hung_at,
                          "resumed_s": resumed[0]["unix_time"] - hung_at,
                          "first_step_s": first["unix_time"] - hung_at if first else None}
                print(f"timeline: {json.dumps(phases)}")
                check(first and first["unix_time"] - hung_at <= bound,
                      f"{scenario}: training again {phases['first_step_s']} s after the hang (bound {bound:.1f} s)")
            else:
                check(False, f"{scenario}: the hang's time ({hung_at}) and training_resumed ({resumed[:1]}) are known")
    # Heartbeats are node-local (under --snapshot-dir); the job removes them with its snapshots.
    node_local = Path(tmp) / "node-local"
    leftover = list(node_local.rglob("*")) if node_local.exists() else []
    check(not leftover, f"{scenario}: nothing of the job left on the node at the end ({leftover[:3]})")
    decisions = list((run / "heartbeats").rglob("decision-*")) if (run / "heartbeats").exists() else []
    check(not decisions, f"{scenario}: the launch's decisions removed at the end ({decisions[:3]})")
    if json_out:
        Path(json_out).write_text(json.dumps(phases, indent=1))
check.finish(f"hang scenario {scenario}")
