#!/usr/bin/env python3
"""End to end on packed samples (CTest jobs/packed_data, label mpi): a DeepCAM-layout set is
packed with a window (`hardy data pack --crop --channels`), staged and trained on by 2 ranks, and
scored on its packed validation split, beside the same job on the unpacked files.

Usage: packed_data.py HARDY MPIRUN [MPIRUN FLAGS...]

Checks: `hardy data pack` writes packed.json (the window's channels and shape) and one file per
sample of every split, half the fp32 bytes; `hardy data stage` copies the packed training files;
`hardy train --stage-to` on the packed set stages them (data_staged), completes, plans every
sample once per epoch, and ends within 3% of the same job's loss on the DeepCAM files (bf16
rounding is all that differs), and so does the packed job trained with `--precision bf16` (the
fields go in as they are; only where the CPU has native bf16); `hardy eval --split validation`
scores the packed validation
split; packing into a non-empty directory, packing a packed set, and window options on a packed
set are refused with status 2.
"""
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, read_jsonl, run_hardy, run_watched  # noqa: E402

hardy, mpirun = sys.argv[1], sys.argv[2:]
TRAIN, VALIDATION, STEPS = 16, 4, 12
WINDOW = ["--crop", "32,64", "--channels", "TMQ,U850,V850,PSL"]
check = Checks()

with tempfile.TemporaryDirectory(prefix="hardy-packed-") as tmp:
    tmp = Path(tmp)
    root, packed, stage = tmp / "deepcam", tmp / "packed", tmp / "stage"
    check(run_hardy(hardy, "data", "generate", "--format", "deepcam", "--out", str(root), "--samples", str(TRAIN),
                    "--validation-samples", str(VALIDATION), "--height", "64", "--width", "96",
                    "--seed", "4").returncode == 0, "hardy data generate --format deepcam")
    done = run_hardy(hardy, "data", "pack", "--dataset", str(root), "--out", str(packed), "--threads", "2",
                     "--seed", "3", *WINDOW)
    manifest = json.loads((packed / "packed.json").read_text()) if (packed / "packed.json").is_file() else {}
    check(done.returncode == 0 and manifest.get("channels") == ["TMQ", "U850", "V850", "PSL"]
          and manifest.get("height") == 32 and manifest.get("width") == 64
          and manifest.get("splits") == {"train": TRAIN, "validation": VALIDATION},
          f"hardy data pack: status {done.returncode}, packed.json {manifest}")
    files = sorted((packed / "train").glob("*.hpk"))
    check(len(files) == TRAIN and all(f.stat().st_size == 32 + 2 * 4 * 32 * 64 + 32 * 64 for f in files),
          f"one file per training sample of bf16 fields and int8 labels: {len(files)}")

    staged_by_hand = run_hardy(hardy, "data", "stage", "--dataset", str(packed), "--to", str(tmp / "prologue"))
    check(f"copied {TRAIN} file(s)" in staged_by_hand.stdout,
          f"hardy data stage copies the packed files: {staged_by_hand.stdout[-200:]!r}")

    common = ["--global-batch", "8", "--steps", str(STEPS), "--model-width", "8", "--aspp-channels", "16",
              "--decoder-channels", "16", "--low-level-channels", "8", "--aspp-rates", "1,2",
              "--eval-samples", "4", "--audit-samples", "--log-every", "100", "--seed", "3",
              "--prefetch-batches", "2", "--loader-threads", "2", "--threads", "1"]
    runs = {}
    # bf16 training takes the packed bf16 fields as they are (no widening to f32 on the way in),
    # where the CPU computes bf16 natively.
    bf16 = subprocess.run([hardy, "train", "--precision", "bf16", "--help"], capture_output=True).returncode == 0 and \
        subprocess.run([hardy, "train", "--precision", "bf16", "--steps", "1", "--samples", "4", "--eval-samples", "0",
                        "--run-dir", str(tmp / "bf16-probe")], capture_output=True).returncode == 0
    variants = [("packed", ["--dataset", str(packed), "--stage-to", str(stage)]),
                ("deepcam", ["--dataset", str(root), *WINDOW])]
    if bf16:
        variants.append(("packed-bf16", ["--dataset", str(packed), "--precision", "bf16"]))
    for name, data in variants:
        run = tmp / f"run-{name}"
        status, output = run_watched([*mpirun, "-n", "2", hardy, "train", *data, *common, "--run-dir", str(run)],
                                     timeout=400)
        events = read_jsonl(run / "events.jsonl")
        check(status == 0 and events and events[-1]["event"] == "job_finished",
              f"the job on the {name} files completes (status {status}): {output[-800:]}")
        runs[name] = (run, events, read_jsonl(run / "metrics.jsonl"))
    run, events, metrics = runs["packed"]
    staged = [e for e in events if e["event"] == "data_staged"]
    check(len(staged) == 1 and staged[0]["files"] == TRAIN and staged[0]["copied"] == TRAIN,
          f"data_staged: every packed training file copied once: {staged}")
    copies = list((stage / socket.gethostname()).glob("*/train/*.hpk"))
    check(len(copies) == TRAIN, f"{len(copies)} staged copies")
    complete, wrong = complete_epochs_exact(run, TRAIN)
    check(len(complete) >= 2 and not wrong, f"every epoch planned every sample once: complete {complete}, wrong {wrong}")
    started = next((e for e in events if e["event"] == "job_started"), {})
    check("packed bf16 train split" in started.get("data", ""), f"the job names its data: {started.get('data')}")
    packed_loss, deepcam_loss = metrics[-1]["loss"], runs["deepcam"][2][-1]["loss"]
    check(abs(packed_loss - deepcam_loss) <= 0.03 * deepcam_loss,
          f"final loss {packed_loss:.5f} on packed samples, {deepcam_loss:.5f} on the DeepCAM files (within 3%)")

    if bf16:
        bf16_loss = runs["packed-bf16"][2][-1]["loss"]
        check(abs(bf16_loss - deepcam_loss) <= 0.03 * deepcam_loss,
              f"final loss {bf16_loss:.5f} training in bf16 on packed samples, {deepcam_loss:.5f} in f32 on the "
              f"DeepCAM files (within 3%)")

    scored = run_hardy(hardy, "eval", "--run-dir", str(run), "--split", "validation", "--json")
    result = json.loads(scored.stdout) if scored.returncode == 0 else {}
    check(result.get("samples") == VALIDATION, f"hardy eval --split validation on the packed split: {result}")

    for what, args in (("packing into a non-empty directory", ["data", "pack", "--dataset", str(root), "--out",
                                                               str(packed)]),
                       ("packing a packed dataset", ["data", "pack", "--dataset", str(packed), "--out",
                                                     str(tmp / "again")]),
                       ("--crop on a packed dataset", ["train", "--dataset", str(packed), "--crop", "16,16",
                                                       "--steps", "1", "--run-dir", str(tmp / "refused")])):
        refused = subprocess.run([hardy, *args], capture_output=True, text=True)
        check(refused.returncode == 2 and refused.stderr.strip(),
              f"{what}: status {refused.returncode}, {refused.stderr.strip()[:160]!r}")
check.finish("packed_data")
