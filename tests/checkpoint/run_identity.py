#!/usr/bin/env python3
"""Run identity as a user meets it (CTest label `fault`).

Usage: run_identity.py HARDY

1. A job dies (SIGKILL) with its node-local snapshots left on the node; a relaunch in the same run
   directory resumes from them (the control: the snapshots are usable).
2. The run directory is deleted and made again at the same path with another configuration (more
   samples) while the snapshots of the dead job are still on the node: `--resume latest` must
   start from step 0, with a snapshot_rejected event saying the snapshot is another run's.
3. A checkpoint named with --resume FILE from another run (a fork) restores, and state_restored
   says it is foreign; one of another configuration is refused with status 2 and a message; an
   old checkpoint without a run id (its /job/run_id and /job/config_hash removed with h5py) is
   still read by `hardy ckpt inspect` and restores as foreign.
"""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, snapshot_files  # noqa: E402

hardy = sys.argv[1]
TRAIN = ["--synthetic", "--height", "32", "--width", "32", "--global-batch", "4",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "9", "--log-every", "100",
         "--snapshot-every", "1"]  # the relaunch below resumes from the step before the failure
check = Checks()


def train(run, snapshots, samples, *extra, steps=8):
    result = subprocess.run([hardy, "train", *TRAIN, "--samples", str(samples), "--steps", str(steps), "--run-dir", str(run),
                             "--snapshot-dir", str(snapshots), *extra], capture_output=True, text=True, timeout=240)
    print(result.stdout[-600:], result.stderr[-1200:], flush=True)
    return result


def events_named(run, name):
    return [e for e in read_jsonl(Path(run) / "events.jsonl") if e["event"] == name]


def first_metrics_step(run):
    metrics = read_jsonl(Path(run) / "metrics.jsonl")
    return metrics[0]["step"] if metrics else None


def strip_run_identity(path):
    """Makes `path` look like a checkpoint written before hardy recorded run identities."""
    import h5py
    with h5py.File(path, "r+") as f:
        manifest = json.loads(f.attrs["manifest"])
        manifest["datasets"] = [d for d in manifest["datasets"] if d["path"] not in ("/job/run_id", "/job/config_hash")]
        for name in ("run_id", "config_hash"):
            del f["job"][name]
        text = json.dumps(manifest)
        del f.attrs["manifest"]
        f.attrs.create("manifest", text.encode(), dtype=h5py.string_dtype("utf-8", len(text.encode())))


with tempfile.TemporaryDirectory(prefix="hardy-run-identity-") as tmp:
    tmp = Path(tmp)
    snapshots = tmp / "node-local"
    run = tmp / "run"

    # 1. The control: a relaunch of the same run resumes from its node-local snapshot.
    died = train(run, snapshots, 32, "--inject-failure", "rank=0@step=5")
    check(died.returncode == -9, f"the first job was killed at step 5 (status {died.returncode})")
    run_id = (run / "run_id").read_text().strip()
    check(len(run_id) == 32, f"the run directory has a run id ({run_id})")
    check(any(snapshot_files(snapshots)), "its node-local snapshots are still on the node")
    saved_snapshots = tmp / "saved-snapshots"
    shutil.copytree(snapshots, saved_snapshots, symlinks=True)
    relaunched = train(run, snapshots, 32, "--resume", "latest")
    restored = events_named(run, "state_restored")
    check(relaunched.returncode == 0 and restored and restored[-1]["source"] == "node-local"
          and restored[-1]["step"] in (3, 4) and restored[-1]["foreign"] is False,
          f"a relaunch of the same run resumes from its own snapshot ({restored[-1:]})")
    check((run / "run_id").read_text().strip() == run_id, "the relaunch keeps the run id")

    # 2. The same path, deleted and made again with another configuration; the old snapshots are back.
    shutil.rmtree(run)
    shutil.rmtree(snapshots)
    shutil.copytree(saved_snapshots, snapshots, symlinks=True)
    reused = train(run, snapshots, 40, "--resume", "latest")
    new_id = (run / "run_id").read_text().strip()
    rejected = events_named(run, "snapshot_rejected")
    check(reused.returncode == 0, f"the new run completes (status {reused.returncode})")
    check(new_id != run_id, "the new run directory has a new run id")
    check(not events_named(run, "state_restored"), "nothing was restored into the new run")
    check(first_metrics_step(run) == 1, f"it trained from step 0 (first step {first_metrics_step(run)})")
    check(rejected and all(run_id in e["reason"] for e in rejected),
          f"snapshot_rejected names the other run ({[e['reason'] for e in rejected]})")
    check("skipping node-local snapshot" in reused.stderr, "and says so on stderr")

    # 3. Checkpoints named explicitly: a fork is foreign, another configuration is refused.
    source = tmp / "source"
    check(train(source, snapshots, 32, "--checkpoint-every", "4").returncode == 0, "a run with checkpoints")
    checkpoint = source / "checkpoints" / "ckpt-8.h5"
    inspect = subprocess.run([hardy, "ckpt", "inspect", "--json", str(checkpoint)], capture_output=True, text=True)
    shown = json.loads(inspect.stdout) if inspect.returncode == 0 else {}
    check(shown.get("run_id") == (source / "run_id").read_text().strip() and len(shown.get("config_hash", "")) == 16,
          f"hardy ckpt inspect shows the run id and configuration hash ({shown.get('run_id')}, {shown.get('config_hash')})")
    fork = tmp / "fork"
    forked = train(fork, snapshots, 32, "--resume", str(checkpoint), steps=10)
    restored = events_named(fork, "state_restored")
    check(forked.returncode == 0 and restored and restored[-1]["foreign"] is True
          and restored[-1]["saved_run_id"] == shown.get("run_id") and restored[-1]["step"] == 8,
          f"a fork from another run's checkpoint restores and is marked foreign ({restored[-1:]})")
    misfit = train(tmp / "misfit", snapshots, 40, "--resume", str(checkpoint), steps=10)
    check(misfit.returncode == 2 and "another configuration" in misfit.stderr and str(checkpoint) in misfit.stderr,
          f"a checkpoint of another configuration is refused with status 2 ({misfit.returncode})")
    check(not events_named(tmp / "misfit", "state_restored"), "and nothing was restored")

    old = tmp / "old-ckpt-8.h5"
    shutil.copy(checkpoint, old)
    try:
        strip_run_identity(old)
    except ImportError:
        print("no h5py: the old-checkpoint part is skipped", flush=True)
    else:
        inspect = subprocess.run([hardy, "ckpt", "inspect", str(old)], capture_output=True, text=True)
        check(inspect.returncode == 0, f"hardy ckpt inspect reads a checkpoint without a run id: {inspect.stderr[-300:]}")
        legacy = tmp / "legacy"
        resumed = train(legacy, snapshots, 32, "--resume", str(old), steps=10)
        restored = events_named(legacy, "state_restored")
        check(resumed.returncode == 0 and restored and restored[-1]["foreign"] is True and restored[-1]["step"] == 8,
              f"a checkpoint without a run id restores, as foreign ({restored[-1:]})")

check.finish("run identity")
