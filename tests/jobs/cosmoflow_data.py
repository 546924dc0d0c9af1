#!/usr/bin/env python3
"""End to end on MLPerf HPC CosmoFlow's layout (CTest jobs/cosmoflow_data, labels unit and e2e):
`hardy train --model cosmoflow --dataset ROOT` on files written by NumPy and h5py themselves and
by `hardy data generate --format cosmoflow`, at 32^3.

Usage: cosmoflow_data.py HARDY   (run with a Python that has numpy and h5py; exit 77 without)

Checks:
- The same samples written by Python in both variants (np.save: NAME_data.npy, NAME_label.npy;
  h5py: NAME.h5 with x and y) train to bit-identical parameters: both readers read the same values.
- `hardy data generate --format cosmoflow` in both variants, read back with h5py and numpy: the
  published shapes and types, the same counts and targets in both; trained on, its parameters
  equal those of the same job on --synthetic data (SyntheticCosmology in memory, same seed): the
  writer and reader lose nothing. `--stage-to` stages every training file (data_staged).
- A truncated sample file: with --bad-samples skip the job completes and sample_skipped names the
  file; with --bad-samples fail it ends with a non-zero status naming the file.
- Refused with status 2: a CosmoFlow dataset with a segmentation network, a DeepCAM dataset with
  --model cosmoflow, --volume other than the files' edge (naming both).
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, run_hardy, skip  # noqa: E402

try:
    import h5py
    import numpy as np
except ImportError:
    skip("numpy and h5py are needed to write the files")

hardy = sys.argv[1]
VOLUME, TRAIN, VALIDATION, SEED = 32, 8, 4, 3
ANY_VOLUME = ["--model", "cosmoflow", "--global-batch", "4", "--eval-samples", str(VALIDATION),
              "--seed", str(SEED), "--optimizer", "adam", "--lr", "0.001", "--snapshot-every", "0", "--log-every",
              "100"]
JOB = [*ANY_VOLUME, "--volume", str(VOLUME)]
check = Checks()


def events_of(run):
    return read_jsonl(run / "events.jsonl")


def finished(run):
    ends = [e for e in events_of(run) if e["event"] == "job_finished"]
    return ends[-1] if ends else {}


def train(label, *options, steps=2):
    run = tmp / f"run-{label}"
    done = run_hardy(hardy, "train", *JOB, "--steps", str(steps), *options, "--run-dir", str(run))
    end = finished(run)
    check(done.returncode == 0 and end.get("status") == "completed",
          f"{label}: trains (status {done.returncode}, {end.get('status')})")
    return run, end


def write_python_dataset(root, variant, samples):
    for split, items in samples.items():
        (root / split).mkdir(parents=True)
        for name, (x, y) in items.items():
            if variant == "numpy":
                np.save(root / split / f"{name}_data.npy", x)
                np.save(root / split / f"{name}_label.npy", y)
            else:
                with h5py.File(root / split / f"{name}.h5", "w") as f:
                    f.create_dataset("x", data=x)
                    f.create_dataset("y", data=y)


with tempfile.TemporaryDirectory(prefix="hardy-cosmoflow-data-") as tmp:
    tmp = Path(tmp)

    # ---- Python's files, both variants, the same samples ----
    rng = np.random.default_rng(11)
    samples = {}
    for split, count in (("train", TRAIN), ("validation", VALIDATION)):
        samples[split] = {}
        for k in range(count):
            y = rng.uniform(-1, 1, 4).astype(np.float32)
            x = rng.poisson(2.0 + y[2], (VOLUME, VOLUME, VOLUME, 4)).astype(np.int16)
            samples[split][f"univ_{split}_{k:03d}"] = (x, y)
    for variant in ("numpy", "hdf5"):
        write_python_dataset(tmp / f"python-{variant}", variant, samples)
    digests = {}
    for variant in ("numpy", "hdf5"):
        run, end = train(f"python-{variant}", "--dataset", str(tmp / f"python-{variant}"))
        digests[variant] = end.get("parameter_digest")
        started = [e for e in events_of(run) if e["event"] == "job_started"]
        check(started and "CosmoFlow train split" in started[0].get("data", ""),
              f"python-{variant}: the job names its data: {started[0].get('data') if started else None}")
    check(digests["numpy"] is not None and digests["numpy"] == digests["hdf5"],
          f"the same samples as .npy and as .h5 train to the same parameters: {digests}")

    # ---- hardy's writer, read by h5py and numpy, and against SyntheticCosmology in memory ----
    generated = {}
    for variant in ("hdf5", "numpy"):
        root = tmp / f"generated-{variant}"
        done = run_hardy(hardy, "data", "generate", "--format", "cosmoflow", "--variant", variant, "--out",
                         str(root), "--samples", str(TRAIN), "--validation-samples", str(VALIDATION),
                         "--volume", str(VOLUME), "--seed", str(SEED))
        check(done.returncode == 0, f"hardy data generate --format cosmoflow --variant {variant}")
        if variant == "hdf5":
            files = sorted((root / "train").glob("*.h5"))
            read = []
            for path in files:
                with h5py.File(path, "r") as f:
                    read.append((f["x"][()], f["y"][()]))
        else:
            files = sorted((root / "train").glob("*_data.npy"))
            read = [(np.load(p), np.load(str(p).replace("_data.npy", "_label.npy"))) for p in files]
        check(len(files) == TRAIN and len(list((root / "validation").iterdir())) ==
              VALIDATION * (2 if variant == "numpy" else 1), f"{variant}: {len(files)} training files")
        check(all(x.dtype == np.int16 and x.shape == (VOLUME,) * 3 + (4,) and y.dtype == np.float32
                  and y.shape == (4,) and x.min() >= 0 and np.all(np.abs(y) <= 1) for x, y in read),
              f"{variant}: x int16 ({VOLUME}, {VOLUME}, {VOLUME}, 4) counts and y float32 (4) in [-1, 1]")
        generated[variant] = read
        check(not list(root.rglob("*.tmp")), f"{variant}: no temporary file left")
    check(all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
              for a, b in zip(generated["hdf5"], generated["numpy"])),
          "both variants hold the same counts and targets")
    # Without --validation-samples: a quarter as many held out as trained on, MLPerf's split.
    root = tmp / "generated-default-split"
    done = run_hardy(hardy, "data", "generate", "--format", "cosmoflow", "--out", str(root), "--samples", "12",
                     "--volume", "4")
    held_out = len(list((root / "validation").glob("*.h5")))
    check(done.returncode == 0 and held_out == 3 and "12 training and 3 validation" in done.stdout,
          f"12 training samples and, by default, 3 held out: {held_out} ({done.stdout.strip()[-120:]})")
    _, synthetic = train("synthetic", "--synthetic", "--samples", str(TRAIN))
    stage = tmp / "stage"
    staged_run, from_files = train("generated-hdf5", "--dataset", str(tmp / "generated-hdf5"), "--stage-to",
                                   str(stage))
    check(from_files.get("parameter_digest") == synthetic.get("parameter_digest")
          and from_files.get("mae") == synthetic.get("mae"),
          f"generated files train as SyntheticCosmology in memory: {from_files.get('parameter_digest')} "
          f"vs {synthetic.get('parameter_digest')}, MAE {from_files.get('mae')} vs {synthetic.get('mae')}")
    staged = [e for e in events_of(staged_run) if e["event"] == "data_staged"]
    check(len(staged) == 1 and staged[0].get("files") == TRAIN,
          f"--stage-to stages every training file: {staged}")
    check(len(list(stage.rglob("cosmo-*.h5"))) == TRAIN, f"{TRAIN} copies below {stage}")

    # ---- a damaged file: skipped by name, or the end of the job ----
    damaged_root = tmp / "damaged"
    shutil.copytree(tmp / "generated-numpy", damaged_root)
    damaged = sorted((damaged_root / "train").glob("*_data.npy"))[5]
    with open(damaged, "r+b") as f:
        f.truncate(damaged.stat().st_size // 2)
    run, _ = train("skip", "--dataset", str(damaged_root), "--bad-samples", "skip", steps=4)
    skipped = [e for e in events_of(run) if e["event"] == "sample_skipped"]
    check(skipped and all(damaged.name in str(e) for e in skipped),
          f"sample_skipped names {damaged.name}: {skipped[:1]}")
    failed = subprocess.run([hardy, "train", *JOB, "--dataset", str(damaged_root), "--bad-samples", "fail",
                             "--steps", "4", "--run-dir", str(tmp / "run-fail")], capture_output=True, text=True)
    check(failed.returncode != 0 and damaged.name in failed.stdout + failed.stderr,
          f"--bad-samples fail ends the job (status {failed.returncode}) naming {damaged.name}")

    # ---- refusals ----
    deepcam = tmp / "deepcam"
    run_hardy(hardy, "data", "generate", "--format", "deepcam", "--out", str(deepcam), "--samples", "1",
              "--validation-samples", "0", "--height", "16", "--width", "16")
    for label, options, says in (
            ("segmentation network", ["--dataset", str(tmp / "generated-hdf5"), "--steps", "1"],
             ["CosmoFlow dataset", "--model cosmoflow"]),
            ("DeepCAM dataset", [*JOB, "--steps", "1", "--dataset", str(deepcam)], ["DeepCAM dataset", "CosmoFlow layout"]),
            ("another volume", [*ANY_VOLUME, "--steps", "1", "--dataset", str(tmp / "generated-hdf5"), "--volume", "64"],
             ["32^3", "--volume is 64"])):
        refused = subprocess.run([hardy, "train", *options, "--run-dir", str(tmp / "refused")],
                                 capture_output=True, text=True)
        check(refused.returncode == 2 and all(s in refused.stderr for s in says),
              f"{label} refused with status 2 saying {says}: status {refused.returncode}, "
              f"{refused.stderr.strip()[-240:]!r}")
check.finish("cosmoflow_data")
