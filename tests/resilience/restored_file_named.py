#!/usr/bin/env python3
"""state_restored names the file that was read (CTest label `fault`).

Usage: restored_file_named.py HARDY

One process trains with a node-local snapshot of every step and is killed at step 6 (no
checkpoint: --checkpoint-every 100). Its newest snapshot (step 5, or 4 when the kill cut the last
write short) is moved into the other slot's file, replacing the older one. A `--resume latest`
then restores that step from that file, and the event must name it: it used to name a path made
from the step (ckpt-5.h5), a file that did not exist.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, snapshot_files, snapshot_step  # noqa: E402

hardy = sys.argv[1]
TRAIN = ["--synthetic", "--samples", "16", "--height", "32", "--width", "32", "--global-batch", "4", "--steps", "8",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--checkpoint-every", "100", "--log-every", "100",
         "--snapshot-every", "1"]
check = Checks()

with tempfile.TemporaryDirectory(prefix="hardy-restored-file-") as tmp:
    tmp = Path(tmp)
    run, snapshots = tmp / "run", tmp / "snapshots"
    killed = subprocess.run([hardy, "train", *TRAIN, "--run-dir", str(run), "--snapshot-dir", str(snapshots),
                             "--inject-failure", "rank=0@step=6"], capture_output=True, text=True, timeout=120)
    check(killed.returncode != 0, f"the job was killed at step 6 (exit {killed.returncode})")
    files = sorted((f for f in snapshot_files(snapshots) if snapshot_step(f) is not None), key=snapshot_step)
    newest = snapshot_step(files[-1]) if files else None
    check(newest in (4, 5), f"the newest snapshot is of step 5 or 4: {[(f.name, snapshot_step(f)) for f in files]}")
    if files:
        # The newest moved into the other slot's file: the event must name the file that was read.
        other = [f for f in files[-1].parent.glob("slot-*.snapshot") if f != files[-1]]
        moved = other[0] if other else files[-1].with_name("slot-1.snapshot" if files[-1].name == "slot-0.snapshot"
                                                              else "slot-0.snapshot")
        files[-1].replace(moved)
        resumed = subprocess.run([hardy, "train", *TRAIN, "--run-dir", str(run), "--snapshot-dir", str(snapshots),
                                  "--resume", "latest"], capture_output=True, text=True, timeout=120)
        print(resumed.stderr[-1500:], flush=True)
        restored = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "state_restored"]
        last = restored[-1] if restored else {}
        check(resumed.returncode == 0, f"the resumed job completes (exit {resumed.returncode})")
        check(last.get("source") == "node-local" and last.get("step") == newest,
              f"it restored step {newest} from the node-local snapshot: {last}")
        check(last.get("path") == str(moved), f"state_restored names the file read, {moved.name}: {last.get('path')}")

check.finish("restored file named")
