"""A hardy run as TensorBoard event files, for `tensorboard --logdir DIR` (`hardy report RUN_DIR
--tensorboard DIR` runs this through tools/report.py; nothing on the training path writes them).

Written into DIR/<name of the run directory>, so that several runs exported to one DIR show as
TensorBoard's runs side by side; exporting a run again replaces its event files there. Scalars, one
point per committed step of metrics.jsonl, at its step and wall-clock time:
  train/loss, train/lr                  loss and learning rate
  throughput/samples_per_s              training samples per second
  job/world_size, job/global_batch      ranks, and samples per step over all of them
  time/step_s, time/data_wait_s         the step's wall time and the time it waited for data,
  time/compute_s, time/input_copy_s,   then its parts (compute_s holds the wait and the copy of
  time/allreduce_s, time/snapshot_s     the batch into the backend's input)
  time/input_device_s                   a batch staged during the step before: its copy's device
                                        time (beside that step's kernels, not part of the step)
  time/compute_device_s                 on a GPU: the device's span of the step's forward and
                                        backward, from events (absent on the CPU)
  data/skipped_samples                  bad samples skipped in the step
  stragglers/slowest_score,             the slow-rank watch's lowest score (the peers' time per
  stragglers/rank_N_score               sample over the rank's own; 1 is typical), and every
                                        --straggler-window steps each rank's
and at the last step, when the run scored its held-out samples (job_finished): eval/mae and
eval/mae_target_N for a regression run (CosmoFlow), eval/mean_iou and eval/iou_class_N for a
segmentation run.
A step trained twice (rolled back to a checkpoint by a relaunch) shows its last value, as
TensorBoard itself shows a restarted run. Text, at the step where it happened (TensorBoard's Text
tab): events/failure, events/shrink, events/relaunch, events/preemption, events/checkpoint, each
labelled as in `hardy report`'s picture; run/summary (the run and how each failure was
recovered) and run/config (config.ini) at step 0.

Needs tensorboardX (pip install tensorboardX): the writer TensorBoard's own documentation points
PyTorch-free users to."""
from pathlib import Path

from run_files import StepClock, collect_marks, held_out_scores, read_jsonl, summary

# metrics.jsonl field -> TensorBoard tag.
SCALARS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "samples_per_s": "throughput/samples_per_s",
    "world_size": "job/world_size",
    "global_batch": "job/global_batch",
    "step_s": "time/step_s",
    "data_wait_s": "time/data_wait_s",
    "input_copy_s": "time/input_copy_s",
    "input_device_s": "time/input_device_s",
    "compute_s": "time/compute_s",
    "compute_device_s": "time/compute_device_s",
    "allreduce_s": "time/allreduce_s",
    "snapshot_s": "time/snapshot_s",
    "skipped_samples": "data/skipped_samples",
    "slowest_score": "stragglers/slowest_score",
}


def committed_steps(metrics):
    """One record per step, the last one logged for it, in step order."""
    last = {}
    for record in metrics:
        if isinstance(record.get("step"), int):
            last[record["step"]] = record
    return [last[step] for step in sorted(last)]


def write_events(run_dir, logdir):
    """Writes run_dir's metrics and events under logdir/<run name>; returns that directory."""
    from tensorboardX import SummaryWriter

    events = read_jsonl(run_dir / "events.jsonl")
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "step" in m]
    if not events and not metrics:
        raise SystemExit(f"{run_dir}: no events.jsonl or metrics.jsonl to export")
    out = Path(logdir) / run_dir.resolve().name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("events.out.tfevents.*"):  # a second export replaces the first
        old.unlink()

    steps = committed_steps(metrics)
    marks, recoveries = collect_marks(events, StepClock(metrics))
    started = min((m["unix_time"] for m in steps if "unix_time" in m), default=None)
    writer = SummaryWriter(logdir=str(out))
    try:
        for record in steps:
            for field, tag in SCALARS.items():
                value = record.get(field)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    writer.add_scalar(tag, value, record["step"], walltime=record.get("unix_time"))
            # The slow-rank watch's scores (every --straggler-window steps): one tag per rank.
            for rank, score in enumerate(record.get("rank_scores") or []):
                writer.add_scalar(f"stragglers/rank_{rank}_score", score, record["step"],
                                  walltime=record.get("unix_time"))
        finished = next((e for e in reversed(events) if e.get("event") == "job_finished"), None)
        if finished and held_out_scores(finished):
            step = finished.get("steps", steps[-1]["step"] if steps else 0)
            for tag, value in held_out_scores(finished).items():
                writer.add_scalar(tag, value, step, walltime=finished.get("unix_time"))
        for kind, step, label in marks:
            writer.add_text(f"events/{kind}", label, step, walltime=started)
        text = summary(run_dir, events, metrics) + "\n\n" + \
            "\n".join(f"- {line}" for line in recoveries or ["no failures"])
        writer.add_text("run/summary", text, 0, walltime=started)
        config = run_dir / "config.ini"
        if config.is_file():
            # Indented: TensorBoard renders text as Markdown, and this keeps the file as it is.
            writer.add_text("run/config", "\n".join("    " + line for line in
                                                    config.read_text(encoding="utf-8").splitlines()),
                            0, walltime=started)
    finally:
        writer.close()
    return out
