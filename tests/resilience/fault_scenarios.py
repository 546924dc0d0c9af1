#!/usr/bin/env python3
"""Fault-injection tests of in-job recovery (CTest label `fault`).

Usage: fault_scenarios.py HARDY SOURCE_DIR SCENARIO MPIRUN [MPIRUN FLAGS...]

Each scenario runs 8 ranks as 4 "nodes" of 2 (--ranks-per-node 2) with --audit-samples, injects
or causes failures, and checks that the job finishes all its steps, that every epoch in the audit
covers every sample exactly once (the last line written for a step counts), that the events tell
what happened, and that the final loss is within 2% of a failure-free run with the same seed.
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import SMALL_COMPACT, SMALL_TIRAMISU, Checks, complete_epochs_exact, on_dataset, read_jsonl, run_watched, samples_by_epoch  # noqa: E402

hardy, source, scenario, mpirun = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
STEPS, SAMPLES, RANKS = 24, 40, 8
# The Gordon Bell run's network (small) for the tiramisu scenarios, DeepCAM's at full size for
# network_deepcam ones (batch norm across ranks: the survivors' statistics cover the whole batch
# again), CosmoFlow's 3-D regression at 32^3 for the cosmoflow ones (its cube replaces the
# fields' height and width), the compact one otherwise.
MODEL = (SMALL_TIRAMISU if scenario.startswith("tiramisu")
         else ["--model", "deepcam"] if scenario.startswith("network_deepcam")
         else ["--model", "cosmoflow", "--volume", "32"] if scenario.startswith("cosmoflow") else SMALL_COMPACT)
SIZE = [] if scenario.startswith("cosmoflow") else ["--height", "32", "--width", "32"]
COMMON = ["--synthetic", "--samples", str(SAMPLES), *SIZE, "--global-batch", "16",
          "--steps", str(STEPS), *MODEL, "--eval-samples", "0", "--seed", "5",
          "--optimizer", "adam", "--lr", "0.003", "--warmup-steps", "2", "--ranks-per-node", "2",
          "--audit-samples", "--log-every", "100", "--checkpoint-every", "4", "--max-failures", "4"]
check = Checks()


def train(run, ranks, *options, during=None, timeout=420):
    command = [*mpirun, "-n", str(ranks), hardy, "train", *COMMON, "--run-dir", str(run), *options]
    status, output = run_watched(command, (lambda: during(run)) if during else None, timeout)
    if status is None:
        print(output[-4000:])
        raise subprocess.TimeoutExpired(command, timeout)
    print(output[-2500:] if status else output[-600:], flush=True)
    if os.environ.get("HARDY_FAULT_LOG"):
        Path(os.environ["HARDY_FAULT_LOG"]).write_text(output)
    return status, read_jsonl(run / "events.jsonl"), read_jsonl(run / "metrics.jsonl")


def audit_is_exact(run):
    steps, _ = samples_by_epoch(run)
    if steps != list(range(1, STEPS + 1)):
        return False, f"audit steps {steps[:5]}... are not 1..{STEPS}"
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    _, seen = samples_by_epoch(run)
    # Only the last epoch may be cut short by the end of the job: a sample missing from an
    # earlier one was lost in a rollback.
    short = [e for e in sorted(e for e in seen if seen[e])[:-1] if e not in complete]
    return (len(complete) >= 2 and not wrong and not short), \
        f"complete epochs {complete}, wrong: {wrong}, short of samples: {short}"


def kill_external(run):
    """Waits for step 9 in the metrics, then kill -9 the rank 5 process, as an operator might."""
    deadline = time.time() + 300
    while time.time() < deadline:
        metrics = read_jsonl(run / "metrics.jsonl")
        if metrics and metrics[-1]["step"] >= 9:
            started = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "rank_started"]
            victim = next(e for e in started if e["rank"] == 5)
            os.kill(victim["pid"], signal.SIGKILL)
            return
        time.sleep(0.05)


# The "rank" scenario kills a random rank at a random step; HARDY_FAULT_SEED replays a run.
seed = int(os.environ.get("HARDY_FAULT_SEED", time.time_ns() % 1_000_000))
chosen = random.Random(seed)
random_victim, random_step = chosen.randrange(1, RANKS), chosen.randrange(2, STEPS)
if scenario == "rank":
    print(f"rank {random_victim} dies at step {random_step} (HARDY_FAULT_SEED={seed} replays this)", flush=True)

SCENARIOS = {
    # name: (extra options, watcher, expected failure events, world size at the end)
    "rank": (["--inject-failure", f"rank={random_victim}@step={random_step}"], None, 1, 7),
    "node": (["--inject-failure", "node=1@step=10"], None, 1, 6),
    "rank0": (["--inject-failure", "rank=0@step=9"], None, 1, 7),
    "two_failures": (["--inject-failure", "rank=6@step=6,node=0@step=15"], None, 2, 5),
    "during_checkpoint": (["--inject-failure", "rank=0@step=12:checkpoint-write", "--checkpoint-mode", "sync"], None, 1, 7),
    "during_recovery": (["--inject-failure", "rank=2@step=8,rank=5@step=8:recovery"], None, 2, 6),
    "allreduce": (["--inject-failure", "rank=4@step=11:allreduce"], None, 1, 7),
    "external_kill": ([], kill_external, 1, 7),
    # Without the in-memory copy, the new rank 0 reads the step-8 checkpoint and broadcasts it.
    "checkpoint_restore": (["--inject-failure", "rank=3@step=10", "--memory-snapshots", "false"], None, 1, 7),
    # The survivors keep their 2 samples each: a global batch of 14 and the learning rate x 14/16.
    "constant_local_batch": (["--inject-failure", "rank=3@step=7", "--rebalance", "constant-local-batch"], None, 1, 7),
    # With --gradient-lag 1 (the reference run lagged too): a node is lost as step 12 starts, with
    # step 11 in flight.
    "lagged_node": (["--inject-failure", "node=2@step=12"], None, 1, 6),
    "network_deepcam_rank": (["--inject-failure", "rank=5@step=9"], None, 1, 7),
}
# Scenarios that repeat another's failure in another setting, which the name's prefix selects
# (MODEL, COMMON): name: the scenario whose failure it repeats.
SAME_FAILURE = {
    # A node lost on the published DeepCAM layout, staged to node-local storage: its files get new
    # homes and the survivors fetch them in the background.
    "deepcam_node": "node",
    # With --gradient-lag 1: a rank dies in the middle of step 11's backward while step 10's
    # reduction is in flight, so both are computed again; without the in-memory copy the rollback
    # reads the step-8 checkpoint, written with step 9 in flight.
    "lagged_allreduce": "allreduce",
    "lagged_checkpoint_restore": "checkpoint_restore",
    # The Gordon Bell run's network (small): its dropout masks follow the sample and the step, so
    # the samples that move to other ranks after the node loss draw the same masks there.
    "tiramisu_node": "node",
    # CosmoFlow's regression: the skipped-sample and rebalance paths carry its targets (label
    # words), and the MSE's scale follows the global batch over the survivors.
    "cosmoflow_node": "node",
}
SCENARIOS.update((name, SCENARIOS[same]) for name, same in SAME_FAILURE.items())
# A smaller global batch after the failure changes the trajectory, not whether it converges.
LOSS_TOLERANCE = {"constant_local_batch": 0.10}

with tempfile.TemporaryDirectory(prefix=f"hardy-fault-{scenario}-") as tmp:
    tmp = Path(tmp)
    options, during, expected_failures, final_world = SCENARIOS[scenario]
    if scenario.startswith("lagged"):
        COMMON += ["--gradient-lag", "1"]
    if scenario.startswith("deepcam"):
        root = tmp / "deepcam"
        subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", str(root), "--samples",
                        str(SAMPLES), "--validation-samples", "1", "--height", "32", "--width", "32"], check=True)
        COMMON = on_dataset(COMMON, root, "--stage-to", str(tmp / "stage"))
    status, reference_events, reference = train(tmp / "reference", RANKS)
    check(status == 0 and len(reference) == STEPS, f"failure-free reference run finished {len(reference)} steps")
    run = tmp / "faulty"
    shutil.rmtree(tmp / "stage", ignore_errors=True)  # the faulty run stages afresh
    started = time.time()
    status, events, metrics = train(run, RANKS, *options, during=during)
    names = [e["event"] for e in events]
    check(status == 0, f"{scenario}: job exits 0 after its failures ({time.time() - started:.1f} s)")
    committed = {m["step"]: m for m in metrics}
    check(sorted(committed) == list(range(1, STEPS + 1)), f"{scenario}: all {STEPS} steps committed")
    detected = [e for e in events if e["event"] == "failure_detected"]
    check(len(detected) >= expected_failures, f"{scenario}: {len(detected)} failure_detected event(s) "
          f"{[e.get('failed_ranks') for e in detected]} (expected {expected_failures})")
    for event in ("communicator_shrunk", "state_restored", "shards_rebalanced", "training_resumed"):
        check(event in names, f"{scenario}: {event} event written")
    sources = {e["source"] for e in events if e["event"] == "state_restored"}
    expected_source = "checkpoint" if scenario.endswith("checkpoint_restore") else "memory"
    check(sources == {expected_source}, f"{scenario}: state restored from {sources} (expected {expected_source})")
    check(all(e.get("detection_latency_s", 0) < 30 for e in detected),
          f"{scenario}: detection latencies {[round(e.get('detection_latency_s', -1), 3) for e in detected]} s")
    if not metrics:  # the launch failed before any step (the checks above said so): nothing more to read
        check(False, f"{scenario}: no step was logged")
        sys.exit(1)
    check(metrics[-1]["world_size"] == final_world, f"{scenario}: {metrics[-1]['world_size']} ranks at the end "
          f"(expected {final_world})")
    ok, detail = audit_is_exact(run)
    check(ok, f"{scenario}: every epoch in the audit covers every sample exactly once ({detail})")
    final, expected = metrics[-1]["loss"], reference[-1]["loss"]
    tolerance = LOSS_TOLERANCE.get(scenario, 0.02)
    check(abs(final - expected) <= tolerance * abs(expected),
          f"{scenario}: final loss {final:.5f} within {tolerance:.0%} of the failure-free {expected:.5f}")
    rebalanced = [e for e in events if e["event"] == "shards_rebalanced"]
    if scenario == "constant_local_batch":
        check(rebalanced and rebalanced[-1]["global_batch"] == 14 and rebalanced[-1]["per_rank_batch"] == [2] * 7
              and abs(rebalanced[-1]["lr_scale"] - 14 / 16) < 1e-12,
              f"{scenario}: each survivor keeps 2 samples, lr scaled by 14/16: {rebalanced}")
        after = [m for m in metrics if m["step"] > 7]
        by_step = {m["step"]: m for m in reference}
        check(all(m["global_batch"] == 14 and abs(m["lr"] - by_step[m["step"]]["lr"] * 14 / 16) < 1e-6 * by_step[m["step"]]["lr"]
                  for m in after), f"{scenario}: after the failure every step has 14 samples and the scaled lr")
    else:
        check(all(e["global_batch"] == 16 and sum(e["per_rank_batch"]) == 16 for e in rebalanced)
              and all(m["global_batch"] == 16 for m in metrics),
              f"{scenario}: the global batch stays 16 over the survivors: {[e['per_rank_batch'] for e in rebalanced]}")
    if scenario.startswith("deepcam"):
        staged = [e for e in events if e["event"] == "data_staged"]
        moved = [e for e in events if e["event"] == "data_restaging"]
        check(staged and staged[0]["files"] == SAMPLES, f"{scenario}: every file staged at the start: {staged}")
        check(moved and 0 < moved[-1]["files_moved"] < SAMPLES,
              f"{scenario}: after the node loss only its files moved: {moved}")
    finished = [e for e in events if e["event"] == "job_finished"]
    check(finished and finished[-1]["status"] == "completed", f"{scenario}: job_finished says completed")

check.finish(f"fault scenario {scenario}")
