#!/usr/bin/env python3
"""A hardy run's files as the tools read them: events.jsonl and metrics.jsonl (one JSON object a
line; a line cut short by a crash is passed over), the step a run was at at a given time, and the
marks a run's events make (failures, shrinks, relaunches, preemptions, checkpoints, with the
recovery time of each failure). tools/report.py draws them, tools/tensorboard_events.py writes
them as TensorBoard events; neither imports the other's drawing or writing."""
import bisect
import json


def read_jsonl(path):
    records = []
    try:
        with open(path, encoding="utf-8") as file:
            for line in file:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        pass
    return records


class StepClock:
    """The step a run was at, at a given unix time, from metrics.jsonl (events such as a shrink or a
    relaunch carry a time, not always a step)."""

    def __init__(self, metrics):
        timed = [(m["unix_time"], m["step"]) for m in metrics if "unix_time" in m and "step" in m]
        timed.sort()
        self.times = [t for t, _ in timed]
        self.steps = [s for _, s in timed]

    def step_at(self, unix_time):
        if not self.times:
            return 0
        i = bisect.bisect_right(self.times, unix_time) - 1
        return self.steps[max(i, 0)]

    def first_after(self, unix_time):
        """The time of the first step logged after `unix_time`, or None."""
        i = bisect.bisect_right(self.times, unix_time)
        return self.times[i] if i < len(self.times) else None


def seconds_text(seconds):
    if seconds is None:
        return "not recovered"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.1f} s"


def collect_marks(events, clock):
    """(kind, step, label) for every mark, and the recovery lines of the failures."""
    marks, recoveries = [], []
    failures = 0
    open_failure = None  # (label, unix_time) of a failure_detected awaiting its recovery_finished
    last_launch_end = None
    for e in events:
        name = e.get("event")
        t = e.get("unix_time", 0.0)
        step = e.get("step", clock.step_at(t))
        if name == "failure_detected":
            failures += 1
            if e.get("detected_by") == "watchdog":
                what = f"watchdog: stuck in {e.get('stuck_in', '?')}"
            else:
                nodes = e.get("failed_nodes")
                what = f"ranks {e.get('failed_ranks', '?')}" + (f" (node {', '.join(map(str, nodes))})" if nodes else "")
            label = f"failure {failures} at step {step}: {what}"
            marks.append(("failure", step, label))
            if open_failure:
                recoveries.append(f"{open_failure[0]}: not recovered before the next failure")
            open_failure = (label, t, step, len(marks) - 1)
        elif name == "communicator_shrunk":
            if open_failure:  # the shrink belongs to the failure it recovers from
                step = open_failure[2]
            marks.append(("shrink", step, f"shrink {e.get('old_size', '?')} -> {e.get('new_size', '?')} ranks"))
        elif name == "recovery_finished" and open_failure:
            kind, at, label = marks[open_failure[3]]
            marks[open_failure[3]] = (kind, at, f"{label}, recovered in {seconds_text(e.get('seconds'))}")
            recoveries.append(f"{open_failure[0]}: recovered in {seconds_text(e.get('seconds'))}"
                              f" (rolled back to step {e.get('step', '?')})")
            open_failure = None
        elif name == "launch_ended":
            last_launch_end = t
        elif name == "job_relaunched":
            excluded = e.get("excluded_nodes") or [x.get("host") for x in e.get("excluded", []) if isinstance(x, dict)]
            label = f"relaunch on {e.get('world_size', '?')} ranks" + (f" without {excluded}" if excluded else "")
            if open_failure:  # drawn where the job died, not at the last step logged before it
                step = max(step, open_failure[2])
            marks.append(("relaunch", step, label))
            resumed = clock.first_after(t)
            began = last_launch_end if last_launch_end is not None else t
            text = f"{label}: training again {seconds_text(resumed - began)} after the launch ended" \
                if resumed is not None else f"{label}: no step logged after it"
            if open_failure:  # a failure inside the job that the job did not survive
                recoveries.append(f"{open_failure[0]}: the job died; {text}")
                open_failure = None
            else:
                recoveries.append(text)
        elif name == "preemption_requested":
            marks.append(("preemption", step, "preemption (the scheduler's warning signal)"))
        elif name in ("checkpoint_written", "final_checkpoint"):
            marks.append(("checkpoint", step, f"ckpt {step}"))
        elif name == "rank_slow":
            marks.append(("slow rank", e.get("since_step", step),
                          f"rank {e.get('rank', '?')} on {e.get('host', '?')} slow since step "
                          f"{e.get('since_step', '?')}: {number_text(e.get('score'))} of its peers' speed"))
        elif name == "rank_recovered":
            marks.append(("slow rank", step, f"rank {e.get('rank', '?')} back to its peers' speed"))
        elif name == "shards_rebalanced" and e.get("policy") == "straggler":
            shares = ",".join(str(x) for x in e.get("per_rank_batch") or [])
            marks.append(("shares", step, f"shares {shares} ({e.get('reason', '?')})"))
        elif name == "domain_slow":
            marks.append(("slow rank", e.get("since_step", step),
                          f"fault domain {e.get('slow_domain', '?')} slow since step {e.get('since_step', '?')}: "
                          f"{number_text(e.get('score'))} of the other domains' speed"))
        elif name == "domain_recovered":
            marks.append(("slow rank", step, f"fault domain {e.get('slow_domain', '?')} back to the others' speed"))
        elif name == "domains_rebalanced":
            shares = ",".join(str(x) for x in e.get("per_domain_batch") or [])
            marks.append(("shares", step, f"domain shares {shares} ({e.get('reason', '?')})"))
        elif name == "training_diverging":
            # Drawn where the loss first stayed above the threshold, labelled with the figures.
            marks.append(("diverging", e.get("since_step", step),
                          f"diverging since step {e.get('since_step', '?')}: loss above "
                          f"{e.get('factor', '?')} x {number_text(e.get('early_loss'))} for "
                          f"{e.get('window', '?')} steps"))
    if open_failure:
        recoveries.append(f"{open_failure[0]}: not recovered (no recovery_finished)")
    return marks, recoveries


def number_text(value):
    return f"{value:.3g}" if isinstance(value, (int, float)) else "?"


def held_out_scores(finished):
    """The held-out scores job_finished records, as {TensorBoard tag: value}: a segmentation run's
    mean IoU and IoU per class, a regression run's (CosmoFlow's) mean absolute error and error per
    target. Empty when the run scored nothing (--eval-samples 0, or it did not finish)."""
    scores = {}
    if not finished:
        return scores
    if isinstance(finished.get("mae"), (int, float)):
        scores["eval/mae"] = finished["mae"]
        for i, value in enumerate(finished.get("target_mae") or []):
            scores[f"eval/mae_target_{i}"] = value
    elif isinstance(finished.get("mean_iou"), (int, float)):
        scores["eval/mean_iou"] = finished["mean_iou"]
        for i, value in enumerate(finished.get("iou") or []):
            scores[f"eval/iou_class_{i}"] = value
    return scores


def held_out_text(finished):
    """The held-out score in words, for a title: "held-out MAE 0.299" or "held-out mean IoU 0.812"."""
    scores = held_out_scores(finished)
    if "eval/mae" in scores:
        return f"held-out MAE {scores['eval/mae']:.3f}"
    if "eval/mean_iou" in scores:
        return f"held-out mean IoU {scores['eval/mean_iou']:.3f}"
    return ""


def summary(run_dir, events, metrics):
    started = next((e for e in events if e.get("event") == "job_started"), {})
    finished = next((e for e in reversed(events) if e.get("event") == "job_finished"), None)
    parts = [f"hardy run {run_dir.name}"]
    if started:
        parts.append(f"{started.get('steps', '?')} steps, {started.get('world_size', metrics[0].get('world_size', '?') if metrics else '?')} ranks at start")
    if finished:
        parts.append(f"{finished.get('status')} at step {finished.get('steps')}, "
                     f"{finished.get('failures', 0)} failure(s) survived")
        if held_out_text(finished):
            parts.append(held_out_text(finished))
    diverging = next((e for e in reversed(events) if e.get("event") == "training_diverging"), None)
    if diverging:
        parts.append(f"DIVERGING since step {diverging.get('since_step', '?')}")
    else:
        parts.append("not finished")
    return "  |  ".join(parts)
