#!/usr/bin/env python3
"""End to end on the ClimateNet layout (CTest jobs/climatenet_data): a small set of netCDF-4 files
written as the release has them (tests/lib/climatenet_files.py, with netCDF4) trains and is scored.

Usage: climatenet_data.py HARDY

Checks: `hardy train --dataset ROOT` detects the layout, computes the normalisation statistics
over train/ once and keeps them beside the data (equal to numpy's over the files as netCDF4 reads
them; `hardy data stats --out` writes the same); with --stage-to it stages and reads the copies;
with --bad-samples skip a truncated file and a netCDF-3 file are skipped by name and the job
completes; the model learns (held-out mean IoU on test/ above the all-background baseline), and
`hardy eval` reproduces that score and scores --split test; with --bad-samples fail the job ends
naming the file; a ClimateNet config.json given with --normalization trains on its four
variables, and without --channels is refused naming the variables it lacks.
Exit 77 (skipped) when this Python has no netCDF4 or h5py (scripts/test installs python3-netcdf4).
"""
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, run_hardy, skip  # noqa: E402

try:
    import numpy as np
    from netCDF4 import Dataset
    import climatenet_files  # noqa: E402  (imports netCDF4 and h5py)
except ImportError as error:
    skip(f"{error} in {sys.executable}; scripts/test installs python3-netcdf4")

hardy = sys.argv[1]
TRAIN, TEST, HEIGHT, WIDTH = 40, 8, 64, 64
check = Checks()


def run(*args, timeout=600):
    return run_hardy(hardy, *args, timeout=timeout)


with tempfile.TemporaryDirectory(prefix="hardy-climatenet-") as tmp:
    tmp = Path(tmp)
    root, stage = tmp / "climatenet", tmp / "stage"
    climatenet_files.write_dataset(hardy, root, TRAIN, TEST, HEIGHT, WIDTH, seed=5)
    train_files = sorted((root / "train").glob("*.nc"))
    check(len(train_files) == TRAIN and len(list((root / "test").glob("*.nc"))) == TEST,
          f"the layout: {len(train_files)} train and {TEST} test files")

    # The statistics numpy computes from the files as netCDF4 reads them (scale_factor applied).
    values = {name: [] for name in climatenet_files.NAMES}
    for path in train_files:
        with Dataset(path) as nc:
            for name in values:
                values[name].append(np.asarray(nc[name][:], dtype=np.float64).ravel())
    expected = {name: (np.concatenate(v).mean(), np.concatenate(v).std()) for name, v in values.items()}

    # Two bad training files, written after the statistics were taken: one truncated half-way, one
    # netCDF-3 (classic) with the same variables.
    truncated = train_files[9]
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) // 2)
    classic = root / "train" / "data-2003-07-30-01-1.nc"
    fields, labels = climatenet_files.synthetic_samples(hardy, 1, HEIGHT, WIDTH, seed=9)
    climatenet_files.write_file(classic, fields[0], labels[0], file_format="NETCDF3_CLASSIC")
    train_count = TRAIN + 1

    common = ["--dataset", str(root), "--global-batch", "8", "--model-width", "8", "--aspp-channels", "16",
              "--decoder-channels", "16", "--low-level-channels", "8", "--aspp-rates", "1,2", "--groups", "4",
              "--eval-samples", str(TEST), "--log-every", "50", "--seed", "3", "--lr", "0.004",
              "--lr-decay", "cosine"]
    trained = tmp / "run"
    done = run("train", *common, "--steps", "150", "--warmup-steps", "10", "--bad-samples", "skip", "--stage-to", str(stage),
               "--run-dir", str(trained))
    events, metrics = read_jsonl(trained / "events.jsonl"), read_jsonl(trained / "metrics.jsonl")
    finished = events[-1] if events else {}
    check(done.returncode == 0 and finished.get("event") == "job_finished" and finished.get("status") == "completed",
          f"hardy train on the ClimateNet layout completes (exit {done.returncode})")
    started = next((e for e in events if e["event"] == "job_started"), {})
    check("ClimateNet train split" in started.get("data", "") and f"{train_count} samples of 16x{HEIGHT}x{WIDTH}"
          in started.get("data", ""), f"the job names its data: {started.get('data')}")

    stats_file = root / "hardy_climatenet_stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    check(stats.get("files") == TRAIN - 1 and len(stats.get("skipped_files", [])) == 2,
          f"the statistics, kept beside the data, cover the {TRAIN - 1} readable training files and name the 2 "
          f"left out: files {stats.get('files')}, skipped {stats.get('skipped_files')}")
    # The truncated file was whole when numpy read it; take it out of the expectation.
    for name in expected:
        kept = np.concatenate([v for k, v in enumerate(values[name]) if k != 9])
        expected[name] = (kept.mean(), kept.std())
    got = stats.get("fields", {})
    close = all(name in got and np.isclose(got[name]["mean"], m, rtol=1e-6, atol=1e-12)
                and np.isclose(got[name]["std"], s, rtol=1e-5) for name, (m, s) in expected.items())
    check(close, "each variable's mean and std equal numpy's over the files as netCDF4 reads them "
                 f"(TMQ {got.get('TMQ')} vs {expected['TMQ']}; PSL, packed in one file, {got.get('PSL')} vs "
                 f"{expected['PSL']})")

    staged = [e for e in events if e["event"] == "data_staged"]
    check(len(staged) == 1 and staged[0]["files"] == train_count,
          f"data_staged: every training file homed and copied: {staged}")
    copies = list((stage / socket.gethostname()).glob("*/train/*.nc"))
    check(len(copies) == train_count, f"{len(copies)} copies staged")
    skipped = [e for e in events if e["event"] == "sample_skipped"]
    text = json.dumps(skipped)
    check(skipped and truncated.name in text and classic.name in text and "netCDF-3" in text,
          f"sample_skipped names the truncated file and the netCDF-3 one: {skipped[:2]}")

    # It learns, and hardy eval scores the test split the job held out.
    mean_iou = finished.get("mean_iou", 0)
    first = sum(m["loss"] for m in metrics[:5]) / 5 if metrics else 0
    last = sum(m["loss"] for m in metrics[-5:]) / 5 if metrics else 1
    check(last < 0.7 * first, f"the loss fell from {first:.3f} to {last:.3f}")
    scored = run("eval", "--run-dir", str(trained), "--json")
    result = json.loads(scored.stdout) if scored.returncode == 0 else {}
    check(result.get("samples") == TEST and abs(result.get("mean_iou", -1) - mean_iou) < 1e-9,
          f"hardy eval reproduces the held-out mean IoU {mean_iou:.4f} on {result.get('samples')} test samples")
    baseline = result.get("all_background_mean_iou", 1)
    check(mean_iou > baseline + 0.15,
          f"held-out mean IoU {mean_iou:.4f} is well above all-background's {baseline:.4f}")
    split = run("eval", "--run-dir", str(trained), "--split", "test", "--json")
    check(split.returncode == 0 and json.loads(split.stdout).get("samples") == TEST
          and "ClimateNet test split" in json.loads(split.stdout).get("data", ""),
          f"hardy eval --split test scores every test file: {split.stdout[-200:]}")

    # The same statistics from hardy data stats, written elsewhere.
    elsewhere = tmp / "stats.json"
    done = run("data", "stats", "--dataset", str(root), "--out", str(elsewhere))
    again = json.loads(elsewhere.read_text()) if elsewhere.is_file() else {}
    check(done.returncode == 0 and again.get("fields") == stats.get("fields"),
          f"hardy data stats --out writes the same statistics: {done.stdout.strip()[-200:]}")

    # --bad-samples fail ends the job naming a bad file.
    # (a job that fails keeps its node-local snapshots for a relaunch: in the test's own tree)
    done = run("train", *common, "--steps", "12", "--warmup-steps", "1", "--bad-samples", "fail", "--run-dir",
               str(tmp / "run-fail"), "--snapshot-dir", str(tmp / "node-local"))
    check(done.returncode != 0 and (truncated.name in done.stderr or classic.name in done.stderr),
          f"--bad-samples fail ends the job (exit {done.returncode}) naming the file: {done.stderr.strip()[-300:]}")

    # ClimateNet's own config.json as the normalisation: its four variables.
    config = tmp / "config.json"
    config.write_text(json.dumps({"architecture": "cgnet", "fields": {
        name: {"mean": float(expected[name][0]), "std": float(expected[name][1])}
        for name in ("TMQ", "U850", "V850", "PSL")}, "labels": ["Background", "Tropical Cyclone",
                                                                  "Atmospheric River"]}))
    done = run("train", *common, "--steps", "4", "--warmup-steps", "1", "--bad-samples", "skip",
               "--normalization", str(config),
               "--channels", "TMQ,U850,V850,PSL", "--crop", "32,48", "--downsample", "2",
               "--run-dir", str(tmp / "run-config"))
    started = next((e for e in read_jsonl(tmp / "run-config" / "events.jsonl") if e["event"] == "job_started"), {})
    check(done.returncode == 0 and "variables TMQ,U850,V850,PSL" in started.get("data", "")
          and f"normalised by {config}" in started.get("data", "") and "-> 4x16x24" in started.get("data", ""),
          f"--normalization config.json with its four --channels, cropped and downsampled: {started.get('data')}")
    done = run("train", *common, "--steps", "1", "--warmup-steps", "0", "--normalization", str(config), "--run-dir", str(tmp / "run-no"))
    check(done.returncode == 2 and "UBOT" in done.stderr and "--channels" in done.stderr,
          f"without --channels the variables the file lacks are named (exit {done.returncode}): "
          f"{done.stderr.strip()[-300:]}")
check.finish("climatenet_data")
