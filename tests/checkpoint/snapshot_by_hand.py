#!/usr/bin/env python3
"""A node-local snapshot looked at and resumed by hand, as a user would after a crash (CTest labels
`e2e`, `fault`).

Usage: snapshot_by_hand.py HARDY

A job that snapshots every step is killed at step 6 (no checkpoint yet). Then, by hand:
`hardy ckpt list RUN_DIR` shows the run's node-local snapshots with their steps, the newest
marked and valid; `hardy ckpt inspect` and `verify` read the newest slot file; `hardy ckpt
convert` writes it as a checkpoint file that `verify` accepts, refusing to overwrite a file
(status 2); a damaged slot is shown INVALID with the reason; and `hardy train --resume SLOT` in
another run directory resumes at that step (marked foreign: another run's state).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, snapshot_files, snapshot_step  # noqa: E402

hardy = sys.argv[1]
TRAIN = ["--synthetic", "--samples", "16", "--height", "32", "--width", "32", "--global-batch", "4",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--checkpoint-every", "100", "--log-every", "100",
         "--snapshot-every", "1"]
check = Checks()


def ckpt(*args):
    return subprocess.run([hardy, "ckpt", *map(str, args)], capture_output=True, text=True, timeout=60)


with tempfile.TemporaryDirectory(prefix="hardy-snapshot-by-hand-") as tmp:
    tmp = Path(tmp)
    run, snapshots = tmp / "run", tmp / "snapshots"
    killed = subprocess.run([hardy, "train", *TRAIN, "--steps", "8", "--run-dir", str(run), "--snapshot-dir",
                             str(snapshots), "--inject-failure", "rank=0@step=6"],
                            capture_output=True, text=True, timeout=120)
    check(killed.returncode != 0, f"the job was killed at step 6 (exit {killed.returncode})")
    slots = [s for s in snapshot_files(snapshots) if snapshot_step(s) is not None]
    newest = max(slots, key=snapshot_step) if slots else None
    step = snapshot_step(newest) if newest else None
    check(step in (4, 5), f"the newest snapshot holds step 5 or 4 ({[(s.name, snapshot_step(s)) for s in slots]})")

    listed = ckpt("list", run, "--snapshot-dir", snapshots)
    lines = [line for line in listed.stdout.splitlines() if newest and newest.name in line]
    check(listed.returncode == 0 and "no checkpoints in" in listed.stdout and "node-local snapshots of host" in listed.stdout
          and any(line.split()[0] == str(step) and "valid" in line and "<- newest" in line for line in lines),
          f"hardy ckpt list shows the snapshots, the newest (step {step}) valid and marked:\n{listed.stdout}")

    if newest:
        inspect = ckpt("inspect", "--json", newest)
        shown = json.loads(inspect.stdout) if inspect.returncode == 0 else {}
        check(shown.get("step") == step, f"hardy ckpt inspect reads the slot file (step {shown.get('step')})")
        verify = ckpt("verify", newest)
        check(verify.returncode == 0 and "valid" in verify.stdout, f"hardy ckpt verify accepts it: {verify.stdout}")

        kept = tmp / "kept.h5"
        converted = ckpt("convert", newest, kept)
        check(converted.returncode == 0 and ckpt("verify", kept).returncode == 0,
              f"hardy ckpt convert writes a valid checkpoint file ({converted.stdout}{converted.stderr})")
        diff = ckpt("diff", "--json", newest, kept)
        check(diff.returncode == 0 and json.loads(diff.stdout)["max_abs_diff"] == 0,
              "the converted file holds the same tensors")
        again = ckpt("convert", newest, kept)
        check(again.returncode == 2 and "exists" in again.stderr, f"convert refuses to overwrite ({again.stderr})")

        fork = tmp / "fork"
        resumed = subprocess.run([hardy, "train", *TRAIN, "--steps", "8", "--run-dir", str(fork), "--snapshot-dir",
                                  str(tmp / "fork-snapshots"), "--resume", str(newest)],
                                 capture_output=True, text=True, timeout=120)
        restored = [e for e in read_jsonl(fork / "events.jsonl") if e["event"] == "state_restored"]
        check(resumed.returncode == 0 and restored and restored[-1]["step"] == step
              and restored[-1]["path"] == str(newest) and restored[-1]["foreign"] is True,
              f"--resume SLOT resumes at step {step}, another run's state ({restored[-1:]}, {resumed.stderr[-400:]})")

        # Damage: the listing says which slot and why.
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 0xFF
        newest.write_bytes(bytes(data))
        listed = ckpt("list", run, "--snapshot-dir", snapshots)
        check("INVALID" in listed.stdout and "checksum" in listed.stdout,
              f"a damaged slot is listed INVALID with the reason:\n{listed.stdout}")
        verify = ckpt("verify", newest)
        check(verify.returncode == 1 and "checksum" in verify.stderr, f"verify: status 1 and why ({verify.stderr})")

check.finish("snapshot by hand")
