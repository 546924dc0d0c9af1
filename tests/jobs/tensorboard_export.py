#!/usr/bin/env python3
"""hardy report --tensorboard, read back with TensorBoard's own event reader (EventAccumulator, what
`tensorboard --logdir` serves from):
  - a supervised run written here in hardy's format (a failure survived in the job, one that killed
    it and a relaunch rolled back to a checkpoint, a preemption, checkpoints): every scalar at every
    committed step equals metrics.jsonl's, a step trained twice shows its last value, wall times are
    the steps' times, and each failure, shrink, relaunch, preemption and checkpoint is text at its
    step; exporting again replaces the files, and a second run lands beside the first;
  - a real 4-step `hardy train` run exports the same way, with its held-out score at its last step
    (eval/mean_iou, eval/iou_class_N), and a real 2-step CosmoFlow run with its mean absolute error
    (eval/mae, eval/mae_target_N), each equal to job_finished's and named in run/summary;
  - without tensorboardX, hardy report --tensorboard exits 2 naming it and the Python it tried.
Exit 77 (skipped) when this Python has no TensorBoard to read with (scripts/test installs it).
Usage: tensorboard_export.py HARDY_BINARY"""
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, skip  # noqa: E402
from run_records import append, write_run  # noqa: E402

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as error:
    skip(f"no TensorBoard in {sys.executable} ({error}); scripts/test installs it")

hardy = sys.argv[1]
check = Checks()
TAGS = {"loss": "train/loss", "lr": "train/lr", "samples_per_s": "throughput/samples_per_s",
        "world_size": "job/world_size", "global_batch": "job/global_batch", "step_s": "time/step_s",
        "data_wait_s": "time/data_wait_s", "input_copy_s": "time/input_copy_s", "input_device_s": "time/input_device_s", "compute_s": "time/compute_s", "compute_device_s": "time/compute_device_s", "allreduce_s": "time/allreduce_s",
        "snapshot_s": "time/snapshot_s", "skipped_samples": "data/skipped_samples"}


def export(run, logdir, **env):
    return subprocess.run([hardy, "report", str(run), "--tensorboard", str(logdir)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def read(directory):
    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def texts(accumulator):
    """{kind: [(step, text), ...]} of the run's text summaries."""
    out = {}
    for tag in accumulator.Tags()["tensors"]:
        name = tag.removesuffix("/text_summary")
        out[name] = [(e.step, e.tensor_proto.string_val[0].decode()) for e in accumulator.Tensors(tag)]
    return out


def check_scalars(accumulator, metrics, what):
    """Every scalar at every step is the last value metrics.jsonl logged for that step."""
    last = {}
    for record in metrics:
        last[record["step"]] = record
    tags = set(accumulator.Tags()["scalars"])
    for field, tag in TAGS.items():
        if not any(field in record for record in last.values()):
            continue
        if tag not in tags:
            check(False, f"{what}: the events hold {tag} (they hold {sorted(tags)})")
            continue
        points = accumulator.Scalars(tag)
        want = [(step, last[step][field], last[step]["unix_time"]) for step in sorted(last) if field in last[step]]
        got = [(p.step, p.value, p.wall_time) for p in points]
        same = len(got) == len(want) and all(
            s == ws and math.isclose(v, wv, rel_tol=1e-6, abs_tol=1e-9) and math.isclose(t, wt, abs_tol=1e-3)
            for (s, v, t), (ws, wv, wt) in zip(got, want))
        check(same, f"{what}: {tag} has one point per committed step with metrics.jsonl's {field} and time "
                    f"({len(got)} points; first {got[:2]}, want {want[:2]})")


def check_held_out(accumulator, run, fields, words):
    """The run's held-out scores (job_finished's `fields`, a number and a list) are scalars at its
    last step, and run/summary names the first."""
    finished = [e for e in read_jsonl(run / "events.jsonl") if e.get("event") == "job_finished"][-1]
    tags = set(accumulator.Tags()["scalars"])
    (whole, whole_tag), (each, each_tag) = fields.items()
    want = {whole_tag: finished[whole], **{f"{each_tag}{i}": v for i, v in enumerate(finished[each])}}
    got = {tag: [(p.step, p.value) for p in accumulator.Scalars(tag)] for tag in want if tag in tags}
    check(len(want) > 1 and all(
        len(got.get(tag, [])) == 1 and got[tag][0][0] == finished["steps"] and math.isclose(got[tag][0][1], value,
                                                                                         rel_tol=1e-6)
        for tag, value in want.items()),
        f"{run.name}: the held-out scores are scalars at step {finished['steps']} equal to job_finished's "
        f"({got}; want {want})")
    summary = dict(texts(accumulator).get("run/summary", [])).get(0, "")
    check(f"held-out {words} {finished[whole]:.3f}" in summary, f"{run.name}: run/summary names it ({summary!r})")


with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    # ---- a supervised run with failures, a rollback and checkpoints ----
    run = tmp / "runs" / "supervised"
    run.mkdir(parents=True)
    events, metrics = write_run(run, time.time() - 100, rollback=True)
    append(run / "events.jsonl", events)
    append(run / "metrics.jsonl", metrics)
    (run / "config.ini").write_text("[train]\nsteps = 60\nglobal-batch = 8\n")
    logdir = tmp / "tb"
    r = export(run, logdir)
    written = logdir / "supervised"
    files = sorted(written.glob("events.out.tfevents.*"))
    check(r.returncode == 0 and len(files) == 1,
          f"hardy report --tensorboard writes one event file into DIR/<run name> (exit {r.returncode}, "
          f"files {[f.name for f in files]}) {r.stderr.strip()[-300:]}")
    check(not (run / "report.png").exists(), "--tensorboard alone draws no picture")
    accumulator = read(written)
    check_scalars(accumulator, metrics, "supervised run")
    loss = {p.step: p.value for p in accumulator.Scalars("train/loss")} if "train/loss" in accumulator.Tags()["scalars"] else {}
    check(math.isclose(loss.get(32, 0), 1 / 32 / 2, rel_tol=1e-6),
          f"step 32, trained again after the relaunch, shows the relaunch's loss ({loss.get(32)})")
    world = {p.step: p.value for p in accumulator.Scalars("job/world_size")} if "job/world_size" in accumulator.Tags()["scalars"] else {}
    check((world.get(19), world.get(20), world.get(36)) == (4, 2, 1),
          f"world size 4, then 2 after the shrink at step 20, then 1 after the relaunch ({world.get(19)}, "
          f"{world.get(20)}, {world.get(36)})")
    text = texts(accumulator)
    failures = text.get("events/failure", [])
    check([s for s, _ in failures] == [20, 35] and failures[0][1].startswith("failure 1 at step 20: ranks [2, 3]")
          and "watchdog: stuck in allreduce" in failures[1][1],
          f"each failure is text at its step ({failures})")
    check([(s, t) for s, t in text.get("events/shrink", [])] == [(20, "shrink 4 -> 2 ranks")],
          f"the shrink is text at step 20 ({text.get('events/shrink')})")
    relaunches = text.get("events/relaunch", [])
    check(len(relaunches) == 1 and relaunches[0][0] == 35 and "relaunch on 1 ranks" in relaunches[0][1],
          f"the relaunch is text at step 35 ({relaunches})")
    check([s for s, _ in text.get("events/preemption", [])] == [45], "the preemption is text at step 45")
    checkpoints = text.get("events/checkpoint", [])
    check(sorted(checkpoints) == [(step, f"ckpt {step}") for step in (10, 20, 30, 40, 50, 60)],
          f"each checkpoint is text at its step ({checkpoints})")
    summary = dict(text.get("run/summary", []))
    check("recovered in 20.0 ms" in summary.get(0, "") and "the job died" in summary.get(0, ""),
          f"run/summary at step 0 tells how each failure was recovered ({summary})")
    check("global-batch = 8" in dict(text.get("run/config", [])).get(0, ""), "run/config holds config.ini")

    r = export(run, logdir)
    files = sorted(written.glob("events.out.tfevents.*"))
    check(r.returncode == 0 and len(files) == 1, f"exporting again replaces the event file ({len(files)} files)")
    check_scalars(read(written), metrics, "exported again")

    # ---- a real training run, into the same log directory ----
    real = tmp / "runs" / "trained"
    r = subprocess.run([hardy, "train", "--run-dir", str(real), "--synthetic", "--samples", "16", "--height", "16",
                        "--width", "16", "--eval-samples", "4", "--global-batch", "2", "--steps", "4",
                        "--checkpoint-every", "2", "--model-width", "4", "--aspp-channels", "8",
                        "--decoder-channels", "8", "--low-level-channels", "4", "--groups", "2", "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"a 4-step hardy train (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    r = export(real, logdir)
    check(r.returncode == 0, f"hardy report --tensorboard on a trained run (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    trained = read(logdir / "trained")
    check_scalars(trained, read_jsonl(real / "metrics.jsonl"), "trained run")
    check(sorted(s for s, _ in texts(trained).get("events/checkpoint", [])) == [2, 4],
          f"the trained run's checkpoints at steps 2 and 4 are text ({texts(trained).get('events/checkpoint')})")
    check_held_out(trained, real, {"mean_iou": "eval/mean_iou", "iou": "eval/iou_class_"}, "mean IoU")
    check(sorted(p.name for p in logdir.iterdir()) == ["supervised", "trained"],
          "two runs exported to one log directory sit side by side, as TensorBoard's runs")

    regression = tmp / "runs" / "cosmoflow"
    r = subprocess.run([hardy, "train", "--run-dir", str(regression), "--model", "cosmoflow", "--synthetic",
                        "--volume", "32", "--samples", "8", "--eval-samples", "4", "--global-batch", "2",
                        "--steps", "2", "--threads", "1"], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"a 2-step CosmoFlow run (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    r = export(regression, logdir)
    check(r.returncode == 0, f"hardy report --tensorboard on it (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    check_held_out(read(logdir / "cosmoflow"), regression, {"mae": "eval/mae", "target_mae": "eval/mae_target_"},
                   "MAE")

    # ---- without tensorboardX ----
    bare = "/usr/bin/python3"
    if not Path(bare).exists() or subprocess.run([bare, "-c", "import tensorboardX"], capture_output=True).returncode == 0:
        bare = str(tmp / "no-python")
    r = export(run, tmp / "tb-none", HARDY_PYTHON=bare)
    check(r.returncode == 2 and "tensorboardX" in r.stderr and bare in r.stderr,
          f"without tensorboardX, hardy report --tensorboard exits 2 naming it and what it tried "
          f"(exit {r.returncode}: {r.stderr.strip()})")

check.finish("tensorboard_export")
