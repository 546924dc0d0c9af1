#!/usr/bin/env python3
"""End to end on the published DeepCAM layout (CTest jobs/deepcam_data, label mpi): a generated
set is staged to node-local storage, trained on by 2 ranks with a damaged file among the samples,
and scored on its validation split.

Usage: deepcam_data.py HARDY MPIRUN [MPIRUN FLAGS...]

Checks: `hardy data generate --format deepcam` writes the layout; `hardy data stage` copies every
training file once and nothing the second time; `hardy train --stage-to` stages (data_staged) and
reads the copies; with --bad-samples skip the truncated file is skipped by name (sample_skipped),
the job completes, and every epoch's audit still holds every sample exactly once; every metrics
line says how long the step waited for data; with --bad-samples fail the same job ends with exit
status 1 naming the file; `hardy eval --split validation` scores the validation files and reports
the all-background baseline; DeepCAM-only options on another dataset are refused with status 2.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, read_jsonl, run_hardy, run_watched  # noqa: E402

hardy, mpirun = sys.argv[1], sys.argv[2:]
TRAIN, VALIDATION, STEPS = 24, 6, 14
check = Checks()


def hardy_ok(*args):
    return run_hardy(hardy, *args)


with tempfile.TemporaryDirectory(prefix="hardy-deepcam-") as tmp:
    tmp = Path(tmp)
    root, stage = tmp / "deepcam", tmp / "stage"
    generated = hardy_ok("data", "generate", "--format", "deepcam", "--out", str(root), "--samples", str(TRAIN),
                         "--validation-samples", str(VALIDATION), "--height", "64", "--width", "96", "--seed", "4")
    check(generated.returncode == 0, "hardy data generate --format deepcam")
    train_files = sorted((root / "train").glob("data-*.h5"))
    check(len(train_files) == TRAIN and len(list((root / "validation").glob("data-*.h5"))) == VALIDATION
          and (root / "stats.h5").is_file(), f"layout: stats.h5, {len(train_files)} train files, validation files")

    # Staging by hand (a job's prologue): everything once, then nothing.
    first = hardy_ok("data", "stage", "--dataset", str(root), "--to", str(tmp / "prologue"), "--threads", "3")
    second = hardy_ok("data", "stage", "--dataset", str(root), "--to", str(tmp / "prologue"))
    check(f"copied {TRAIN} file(s)" in first.stdout, f"hardy data stage copies every file: {first.stdout[-200:]!r}")
    check(f"copied 0 file(s)" in second.stdout and f"{TRAIN} already" in second.stdout,
          f"and none the second time: {second.stdout[-200:]!r}")

    # One damaged sample: the file ends half-way through its data.
    damaged = train_files[7]
    pristine = tmp / "pristine.h5"
    shutil.copy2(damaged, pristine)
    with open(damaged, "r+b") as f:
        f.truncate(os.path.getsize(damaged) // 2)

    common = ["--dataset", str(root), "--crop", "32,64", "--channels", "TMQ,U850,V850,PSL,PRECT,TS,Z200,ZBOT",
              "--global-batch", "8", "--steps", str(STEPS), "--model-width", "8", "--aspp-channels", "16",
              "--decoder-channels", "16", "--low-level-channels", "8", "--aspp-rates", "1,2",
              "--eval-samples", "4", "--audit-samples", "--log-every", "100", "--seed", "3",
              "--stage-to", str(stage), "--prefetch-batches", "2", "--loader-threads", "2"]
    run = tmp / "run-skip"
    status, output = run_watched([*mpirun, "-n", "2", hardy, "train", *common, "--bad-samples", "skip",
                                  "--run-dir", str(run)], timeout=400)
    print(output[-1500:])
    events, metrics = read_jsonl(run / "events.jsonl"), read_jsonl(run / "metrics.jsonl")
    names = [e["event"] for e in events]
    check(status == 0 and names[-1:] == ["job_finished"] and events[-1].get("status") == "completed",
          f"the job with a damaged file completes under --bad-samples skip (status {status})")
    staged = [e for e in events if e["event"] == "data_staged"]
    check(len(staged) == 1 and staged[0]["files"] == TRAIN and staged[0]["copied"] == TRAIN,
          f"data_staged: every training file homed and copied once: {staged}")
    host = socket.gethostname()
    copies = list((stage / host).glob("*/train/data-*.h5")) if (stage / host).exists() else []
    check(len(copies) == TRAIN, f"{len(copies)} copies below {stage / host}")
    skipped = [e for e in events if e["event"] == "sample_skipped"]
    check(skipped and all(damaged.name in json.dumps(e) for e in skipped),
          f"sample_skipped names {damaged.name}: {skipped[:2]}")
    check(len(metrics) == STEPS and all("data_wait_s" in m for m in metrics),
          "every metrics line has data_wait_s")
    complete, wrong = complete_epochs_exact(run, TRAIN)
    check(len(complete) >= 2 and not wrong, f"every epoch planned every sample once: complete {complete}, wrong {wrong}")
    started = next(e for e in events if e["event"] == "job_started")
    check("DeepCAM train split" in started.get("data", ""), f"the job names its data: {started.get('data')}")

    # The same job with --bad-samples fail ends naming the file.
    run_fail = tmp / "run-fail"
    # (a job that fails keeps its node-local snapshots for a relaunch: in the test's own tree)
    status, output = run_watched([*mpirun, "-n", "2", hardy, "train", *common, "--bad-samples", "fail",
                                  "--run-dir", str(run_fail), "--snapshot-dir", str(tmp / "node-local")],
                                 timeout=400)
    check(status not in (0, None) and damaged.name in output,
          f"--bad-samples fail ends the job (status {status}) naming {damaged.name}")

    # Scoring on the validation split, against the all-background baseline.
    scored = hardy_ok("eval", "--run-dir", str(run), "--split", "validation", "--json")
    result = json.loads(scored.stdout) if scored.returncode == 0 else {}
    check(result.get("samples") == VALIDATION and "all_background_mean_iou" in result,
          f"hardy eval --split validation scores {result.get('samples')} samples: {result}")

    # DeepCAM-only options on another source are bad input.
    refused = subprocess.run([hardy, "train", "--synthetic", "--crop", "32,32", "--steps", "1", "--run-dir",
                              str(tmp / "refused")], capture_output=True, text=True)
    check(refused.returncode == 2 and "DeepCAM" in refused.stderr,
          f"--crop without a DeepCAM dataset: status {refused.returncode}, {refused.stderr.strip()[:160]!r}")
check.finish("deepcam_data")
