#!/usr/bin/env python3
"""Nothing of a run stays in node memory once it is over, and nothing committed is lost with it
(CTest label `fault`).

Usage: node_state_cleanup.py HARDY

1. A job of 4 ranks (2 nodes of 2 on this host) under `hardy run` with ULFM off, --max-restarts 0
   and checkpoints too rare to help (every 100 steps): rank 3 dies at step 10, the launch ends and
   the supervisor gives up (exit 1). Before the run's node-local snapshots go, the newest one (step
   9, or 8 when the copy of 9 was cut short) is kept as checkpoints/ckpt-9.h5 and `latest`
   names it (node_state_removed's `kept`); nothing is left under the snapshot root. `hardy run
   --resume latest` then goes on from that step to the end, every step committed and every epoch
   exact, and its final loss is a failure-free run's.
2. A node the cleanup could not reach keeps a run's tree: here one is planted for a run that is over
   (its events end with supervisor_finished) and one for a run that is running (supervisor_started
   last). The user's next job that writes snapshots on the node removes the first whatever its
   age (stale_snapshots_removed, run_over) and leaves the second.
3. `hardy clean --node-local --run-dir` refuses a run that is running (its lock held), exit 2.
"""
import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, read_jsonl, small_job, snapshot_files  # noqa: E402

hardy = sys.argv[1]
STEPS, SAMPLES = 20, 36
TRAIN = small_job(SAMPLES, STEPS, 8) + ["--checkpoint-every", "100"]
check = Checks()


def supervise(run, snapshots, *extra, resume=False):
    command = [hardy, "run", "--nodes", "2", "--ranks-per-node", "2", "--ulfm", "false", "--max-restarts", "0",
               "--run-dir", str(run), "--", *TRAIN, "--snapshot-dir", str(snapshots), *extra]
    if resume:
        command += ["--resume", "latest"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=250)
    print(result.stdout[-600:], result.stderr[-1200:], flush=True)
    return result.returncode


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if not p.is_dir())


shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
with tempfile.TemporaryDirectory(prefix="hardy-node-state-", dir=shm) as scratch, \
        tempfile.TemporaryDirectory(prefix="hardy-node-state-runs-") as tmp:
    scratch, tmp = Path(scratch), Path(tmp)
    snapshots = scratch / "snapshots"

    reference = tmp / "reference"
    check(supervise(reference, snapshots) == 0, "a failure-free job completes")

    # 1. Given up after a crash: the newest snapshot is kept as a checkpoint, then removed.
    run = tmp / "given-up"
    status = supervise(run, snapshots, "--inject-failure", "rank=3@step=10")
    events = read_jsonl(run / "events.jsonl")
    removed = [e for e in events if e["event"] == "node_state_removed"]
    kept = removed[-1].get("kept") if removed else None
    check(status == 1 and len(removed) == 1 and kept and kept.get("step") in (8, 9),
          f"the run gives up (status {status}) and keeps its newest snapshot as a checkpoint first: {removed}")
    if kept and kept.get("step") == 8:
        print("note: the copy of step 9 was cut short by the job's end", flush=True)
    step = (kept or {}).get("step", -1)
    latest = run / "checkpoints" / "latest"
    check(latest.is_symlink() and os.readlink(latest) == f"ckpt-{step}.h5",
          f"latest names the kept checkpoint ({os.readlink(latest) if latest.is_symlink() else None})")
    verify = subprocess.run([hardy, "ckpt", "verify", str(run / "checkpoints" / f"ckpt-{step}.h5")],
                            capture_output=True, text=True)
    check(verify.returncode == 0, f"the kept checkpoint verifies: {verify.stdout.strip()} {verify.stderr.strip()}")
    check(not files_under(snapshots), f"nothing of the run left under the snapshot root: {files_under(snapshots)}")

    status = supervise(run, snapshots, resume=True)
    restored = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "state_restored"]
    check(status == 0 and restored and restored[-1].get("source") == "checkpoint" and restored[-1].get("step") == step,
          f"--resume latest goes on from the kept step {step} (status {status}, {restored[-1:] or None})")
    metrics = read_jsonl(run / "metrics.jsonl")
    check(sorted({m["step"] for m in metrics}) == list(range(1, STEPS + 1)), "every step was committed")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(len(complete) >= 3 and not wrong, f"epochs {complete} each cover every sample exactly once")
    final, expected = metrics[-1]["loss"], read_jsonl(reference / "metrics.jsonl")[-1]["loss"]
    check(abs(final - expected) <= 0.02 * abs(expected), f"final loss {final:.5f} within 2% of {expected:.5f}")
    check(not files_under(snapshots), "nothing left under the snapshot root after the resumed run")

    # 2. Trees a cleanup could not reach: the run that is over goes at the next job, the live one stays.
    # A bare `hardy train` killed at step 3 leaves its tree (nobody cleans up after it); what its
    # events say afterwards makes it a run that is over or one that is running.
    planted, trees_by_run = {}, {}
    for name, last_event in (("over", "supervisor_finished"), ("live", "supervisor_started")):
        other = planted[name] = tmp / name
        before = {p.parent.parent for p in snapshot_files(snapshots)}
        subprocess.run([hardy, "train", *TRAIN, "--run-dir", str(other), "--snapshot-dir", str(snapshots),
                        "--inject-failure", "rank=0@step=3"], capture_output=True, text=True, timeout=120)
        new_trees = {p.parent.parent for p in snapshot_files(snapshots)} - before
        record = [(t / "run-dir").read_text().strip() for t in new_trees if (t / "run-dir").exists()]
        check(len(new_trees) == 1 and record == [str(other)],
              f"the killed {name} run left its tree, which records its run directory: {record}")
        trees_by_run[name] = next(iter(new_trees), None)
    for name, last_event in (("over", "supervisor_finished"), ("live", "supervisor_started")):
        with open(planted[name] / "events.jsonl", "a") as events_file:
            events_file.write('{"event":"supervisor_started"}\n' + f'{{"event":"{last_event}"}}\n')
    later = tmp / "later"
    check(supervise(later, snapshots) == 0, "a later job of the same user on the node completes")
    removals = [e for e in read_jsonl(later / "events.jsonl") if e["event"] == "stale_snapshots_removed"]
    over_tree, live_tree = trees_by_run["over"], trees_by_run["live"]
    check(over_tree is not None and not over_tree.exists() and
          [e.get("run_over") for e in removals if e["directory"] == str(over_tree)] == [True],
          f"the later job removed the tree of the run that is over (run_over): {removals}")
    check(live_tree is not None and live_tree.exists() and
          not [e for e in removals if e["directory"] == str(live_tree)],
          "the tree of the run that is still running stays")

    # 3. The cleanup of one run refuses while the run is running (its lock held).
    lock = open(planted["live"] / "lock", "a+")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    result = subprocess.run([hardy, "clean", "--node-local", "--run-dir", str(planted["live"]), "--snapshot-dir",
                             str(snapshots)], capture_output=True, text=True)
    check(result.returncode == 2 and live_tree is not None and live_tree.exists(),
          f"hardy clean --run-dir refuses a running run, exit 2: {result.returncode} {result.stderr.strip()[:300]}")
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()
    result = subprocess.run([hardy, "clean", "--node-local", "--run-dir", str(planted["live"]), "--snapshot-dir",
                             str(snapshots)], capture_output=True, text=True)
    check(result.returncode == 0 and live_tree is not None and not live_tree.exists(),
          f"once it is not running, hardy clean --run-dir removes its tree: {result.stdout.strip()[-300:]}")

check.finish("node state cleanup")
