#!/usr/bin/env python3
"""A relaunch resumes from the node-local snapshots, losing no committed step (CTest label `fault`).

Usage: node_local_relaunch.py HARDY

A job of 4 ranks (2 nodes of 2) runs under `hardy run` with ULFM off, so that the death of rank 3
at step 10 ends the whole job, and with periodic checkpoints too rare to help (every 100 steps).
Each node's lowest rank keeps a copy of every committed step under --snapshot-dir; the relaunch
on the surviving node must resume from it at step 9, the last step committed before the failure.
The copy of step 9 is written in the background while step 10 starts: should the runtime kill the
job before it is complete, the copy of step 8 is the newest (the writer waits for the previous
write before it takes a new one, so never older). The test accepts that one step and says so.
Then: every step committed, every epoch of the audit covers every sample exactly once, the final
loss is within 2% of a failure-free run, and the snapshots are gone once the job completed. A
run whose snapshot directory cannot be created reports snapshot_failed and trains on.

Rank 0, which writes metrics.jsonl and samples.jsonl, killed after step 10's agreement and
node-local snapshot but before it logged the step (--inject-failure rank=0@step=10:log-write), with
and without --gradient-lag 1: the relaunch restores step 10 from the snapshot, which carries the
step's lines, and logs them (restored_from: node-local), so that both files hold every step
exactly once. The same in fault domains (`--nodes-per-domain 1`: 2 domains): rank 0 is domain 0's
leader; its domain is lost, and the step's lines are written all the same, once.

That one-step guarantee is --snapshot-every 1's. The default, auto, spaces the snapshots by 100
times what the last one cost: a last job with it and the same failure snapshots far fewer steps
than it commits (the first one always), and its relaunch resumes from the newest snapshot, which
may be several steps old, with every step committed and every epoch exact.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, read_jsonl  # noqa: E402

hardy = sys.argv[1]
STEPS, SAMPLES = 20, 36
TRAIN = ["--synthetic", "--samples", str(SAMPLES), "--height", "32", "--width", "32", "--global-batch", "8",
         "--steps", str(STEPS), "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16",
         "--low-level-channels", "8", "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "11",
         "--warmup-steps", "2", "--checkpoint-every", "100", "--audit-samples", "--log-every", "100"]
EVERY_STEP = ["--snapshot-every", "1"]
check = Checks()


def supervise(run, snapshots, *train_extra, run_options=()):
    command = [hardy, "run", "--nodes", "2", "--ranks-per-node", "2", "--ulfm", "false", "--backoff", "0.2",
               *run_options, "--run-dir", str(run), "--", *TRAIN, "--snapshot-dir", str(snapshots), *train_extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=250)
    print(result.stdout[-800:], result.stderr[-1500:], flush=True)
    return result.returncode


# Node-local means node memory: /dev/shm where there is one, as in production.
shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
with tempfile.TemporaryDirectory(prefix="hardy-node-local-", dir=shm) as scratch, \
        tempfile.TemporaryDirectory(prefix="hardy-node-local-runs-") as tmp:
    scratch, tmp = Path(scratch), Path(tmp)
    snapshots = scratch / "snapshots"
    check(supervise(tmp / "reference", snapshots, *EVERY_STEP) == 0, "failure-free job under the supervisor completes")
    reference = read_jsonl(tmp / "reference" / "metrics.jsonl")
    check(reference and all(m.get("snapshot_s", -1) >= 0 and m.get("snapshot_stall_s", -1) >= 0 for m in reference),
          "metrics.jsonl has the snapshot cost (snapshot_s) and stall (snapshot_stall_s) on every step")
    check(not any(snapshots.iterdir()), "the completed job removed its snapshot directories")

    run = tmp / "relaunched"
    status = supervise(run, snapshots, *EVERY_STEP, "--inject-failure", "rank=3@step=10")
    events = read_jsonl(run / "events.jsonl")
    check(status == 0, f"the supervised job exits 0 (status {status})")
    relaunches = [e for e in events if e["event"] == "job_relaunched"]
    check(len(relaunches) == 1 and relaunches[0]["excluded_nodes"] and relaunches[0]["world_size"] == 2,
          f"one relaunch, without the failed node, on the 2 surviving ranks: {relaunches}")
    restored = [e for e in events if e["event"] == "state_restored"]
    last = restored[-1] if restored else {}
    check(last.get("source") == "node-local" and last.get("step") in (8, 9),
          f"the relaunch restored a node-local snapshot at most one step old ({last})")
    if last.get("step") == 8:
        print("note: the copy of step 9 was cut short by the job's end: one committed step lost", flush=True)
    check(str(last.get("path", "")).startswith(str(snapshots)) and last.get("host") and
          last.get("saved_world_size") == 4 and last.get("world_size") == 2 and last.get("seconds", -1) >= 0,
          "state_restored names the host, the snapshot's path and both world sizes")
    metrics = read_jsonl(run / "metrics.jsonl")
    committed = {m["step"]: m for m in metrics}
    check(sorted(committed) == list(range(1, STEPS + 1)), "every step was committed")
    check(sum(1 for m in metrics if m["step"] == 9) == (1 if last.get("step") == 9 else 2),
          "no committed step was trained twice beyond what the restore says")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(len(complete) >= 3 and not wrong, f"epochs {complete} each cover every sample exactly once")
    if STEPS in committed and reference:
        final, expected = committed[STEPS]["loss"], reference[-1]["loss"]
        check(abs(final - expected) <= 0.02 * abs(expected), f"final loss {final:.5f} within 2% of {expected:.5f}")
    check(not any(snapshots.iterdir()), "the relaunched job removed the snapshot directories once it completed")

    # Rank 0 dies between the step's snapshot and its log lines: the restore logs them. In fault
    # domains (2 domains of 1 node here) rank 0 is domain 0's leader, which writes the run's files:
    # the domain is lost, the other one writes on, and whoever holds the step's lines logs them.
    for domains, lag in ((False, []), (False, ["--gradient-lag", "1"]), (True, []), (True, ["--gradient-lag", "1"])):
        name = "unlogged" + ("-domains" if domains else "") + ("-lagged" if lag else "")
        run = tmp / name
        status = supervise(run, snapshots, *EVERY_STEP, *lag, "--inject-failure", "rank=0@step=10:log-write",
                           run_options=["--nodes-per-domain", "1"] if domains else [])
        events = read_jsonl(run / "events.jsonl")
        restored = [e for e in events if e["event"] == "state_restored"]
        metrics, audit = read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "samples.jsonl")
        if domains:
            lost = [e for e in events if e["event"] == "domain_lost"]
            check(status == 0 and lost and lost[0].get("domain") == 0,
                  f"{name}: domain 0 lost with its leader before it logged step 10, the job completes "
                  f"(status {status}, {lost[:1]})")
        else:
            check(status == 0 and restored and restored[-1].get("source") == "node-local"
                  and restored[-1].get("step") == 10,
                  f"{name}: rank 0 killed before logging step 10; the relaunch restored step 10 from the "
                  f"node-local snapshot (status {status}, {restored[-1] if restored else None})")
        for label, lines in (("metrics.jsonl", metrics), ("samples.jsonl", audit)):
            steps = [line["step"] for line in lines]
            check(steps == list(range(1, STEPS + 1)),
                  f"{name}: {label} has every step once, in order (missing: "
                  f"{sorted(set(range(1, STEPS + 1)) - set(steps))}, twice: "
                  f"{sorted({s for s in steps if steps.count(s) > 1})})")
        step10 = [m for m in metrics if m["step"] == 10]
        if not domains:
            check(step10 and step10[0].get("restored_from") == "node-local",
                  f"{name}: step 10's metrics line came with the snapshot (restored_from: node-local): {step10}")
        complete, wrong = complete_epochs_exact(run, SAMPLES)
        check(len(complete) >= 3 and not wrong, f"{name}: epochs {complete} each cover every sample exactly once")

    # A snapshot directory that cannot be created (a file in its way) must not stop training.
    blocked = scratch / "not-a-directory"
    blocked.write_text("in the way")
    short = [("3" if previous == "--steps" else option) for previous, option in zip([None, *TRAIN], TRAIN)]
    result = subprocess.run([hardy, "train", *short, "--run-dir", str(tmp / "blocked"),
                             "--snapshot-dir", str(blocked)], capture_output=True, text=True, timeout=120)
    # Not a directory: the tree fails its checks and is refused (once), and training goes on.
    failed = [e for e in read_jsonl(tmp / "blocked" / "events.jsonl")
              if e["event"] in ("snapshot_failed", "snapshot_tier_refused")]
    check(result.returncode == 0 and len(failed) == 1 and "snapshot" in result.stderr,
          f"an unusable snapshot directory: one snapshot_tier_refused or snapshot_failed event, training "
          f"completes (status {result.returncode}, {failed})")

    # The default: snapshots spaced by their cost, and a relaunch from the newest one.
    auto = tmp / "auto"
    status = supervise(auto, snapshots, "--snapshot-every", "auto", "--inject-failure", "rank=3@step=10")
    metrics = read_jsonl(auto / "metrics.jsonl")
    first_launch = []
    for m in metrics:  # up to the first step trained again after the relaunch
        if first_launch and m["step"] <= first_launch[-1]["step"]:
            break
        first_launch.append(m)
    snapshotted = [m["step"] for m in first_launch if m.get("snapshot_stall_s", 0) > 0]
    check(status == 0 and snapshotted and snapshotted[0] == 1 and len(snapshotted) < len(first_launch) / 2,
          f"--snapshot-every auto: the first launch snapshotted steps {snapshotted} of the "
          f"{len(first_launch)} it committed (the first, and fewer than half)")
    restored = [e for e in read_jsonl(auto / "events.jsonl") if e["event"] == "state_restored"]
    check(restored and restored[-1].get("source") == "node-local" and restored[-1].get("step") in snapshotted,
          f"the relaunch resumed from the newest node-local snapshot ({restored[-1] if restored else None})")
    check(sorted({m["step"] for m in metrics}) == list(range(1, STEPS + 1)), "every step was committed")
    complete, wrong = complete_epochs_exact(auto, SAMPLES)
    check(len(complete) >= 3 and not wrong, f"epochs {complete} each cover every sample exactly once")

check.finish("node-local relaunch")
