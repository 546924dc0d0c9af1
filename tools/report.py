#!/usr/bin/env python3
"""One picture of a hardy run: loss and learning rate against step, world size against step, a
vertical mark for every failure, shrink, relaunch, preemption and checkpoint (labelled from
events.jsonl), and the recovery time of each failure.

Usage: tools/report.py RUN_DIR [--out FILE]   (FILE: .png, .svg, .pdf, or .html with an inline SVG)
       tools/report.py RUN_DIR --tensorboard DIR [--out FILE]   (TensorBoard event files instead,
                                                 or as well: tools/tensorboard_events.py)

`hardy report` runs this; it reads RUN_DIR/events.jsonl and RUN_DIR/metrics.jsonl (one JSON object a
line; a line cut short by a crash is passed over). In an SVG every label is text, so a failure's
label can be searched for."""
import argparse
import bisect
import html
import io
import json
import sys
from pathlib import Path

# Colours and line styles of the marks, by what happened.
MARKS = {
    "failure": ("#d62728", "-", 1.6),
    "shrink": ("#ff7f0e", "--", 1.2),
    "relaunch": ("#9467bd", "-", 1.6),
    "preemption": ("#8c564b", "-.", 1.4),
    "checkpoint": ("#2ca02c", ":", 0.9),
}
MAX_CHECKPOINT_LABELS = 12  # beyond this the checkpoint marks stay, unlabelled, and the legend says so


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
    if open_failure:
        recoveries.append(f"{open_failure[0]}: not recovered (no recovery_finished)")
    return marks, recoveries


def summary(run_dir, events, metrics):
    started = next((e for e in events if e.get("event") == "job_started"), {})
    finished = next((e for e in reversed(events) if e.get("event") == "job_finished"), None)
    parts = [f"hardy run {run_dir.name}"]
    if started:
        parts.append(f"{started.get('steps', '?')} steps, {started.get('world_size', metrics[0].get('world_size', '?') if metrics else '?')} ranks at start")
    if finished:
        parts.append(f"{finished.get('status')} at step {finished.get('steps')}, "
                     f"{finished.get('failures', 0)} failure(s) survived")
    else:
        parts.append("not finished")
    return "  |  ".join(parts)


# The parts of a step as metrics.jsonl times them: compute_s runs from the draw of the batch to the
# end of backward and holds data_wait_s and input_copy_s; allreduce_s is the wait for the sums
# after it; snapshot_s the node-local snapshot; the rest (the agreement, logs, checkpoints) is
# what step_s holds beyond them.
STEP_PARTS = [("data wait", "#d62728"), ("input copy", "#ff7f0e"), ("compute", "#1f77b4"),
              ("gradient sums", "#2ca02c"), ("snapshot", "#9467bd"), ("the rest", "#bbbbbb")]


def step_breakdown(metrics):
    """(steps, mean step_s, {part: mean seconds}) over the committed steps after the first (which
    builds the kernels' primitives), or None without timings. Means, so that the parts add up to
    the step."""
    timed = [m for m in metrics if isinstance(m.get("step_s"), (int, float)) and isinstance(m.get("compute_s"), (int, float))]
    if len(timed) > 1:
        timed = timed[1:]
    if not timed:
        return None

    def mean(values):
        values = list(values)
        return sum(values) / len(values)

    parts = {name: [] for name, _ in STEP_PARTS}
    for m in timed:
        wait, copy = m.get("data_wait_s", 0) or 0, m.get("input_copy_s", 0) or 0
        compute = max(0.0, m["compute_s"] - wait - copy)
        sums, snapshot = m.get("allreduce_s", 0) or 0, m.get("snapshot_s", 0) or 0
        values = {"data wait": wait, "input copy": copy, "compute": compute, "gradient sums": sums,
                  "snapshot": snapshot, "the rest": max(0.0, m["step_s"] - m["compute_s"] - sums - snapshot)}
        for name, value in values.items():
            parts[name].append(value)
    return len(timed), mean(m["step_s"] for m in timed), {name: mean(values) for name, values in parts.items()}


def draw_breakdown(ax, metrics):
    """One bar: the mean step cut into its parts, each labelled with its share."""
    ax.set_yticks([])
    ax.set_xlabel("share of the mean step")
    found = step_breakdown(metrics)
    if not found:
        ax.text(0.5, 0.5, "no step timings in metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
        return
    steps, step_s, parts = found
    total = sum(parts.values()) or 1.0
    left = 0.0
    for name, colour in STEP_PARTS:
        share = parts[name] / total
        ax.barh(0, share, left=left, color=colour, edgecolor="white", label=f"{name} {100 * share:.1f}%")
        if share > 0.06:
            ax.text(left + share / 2, 0, f"{name}\n{100 * share:.0f}%", ha="center", va="center", fontsize=8,
                    color="white")
        left += share
    ax.set_xlim(0, 1)
    ax.set_title(f"where the step goes: mean of {steps} steps, {1000 * step_s:.1f} ms "
                 f"(data wait {1000 * parts['data wait']:.2f} ms, input copy {1000 * parts['input copy']:.2f} ms, "
                 f"compute {1000 * parts['compute']:.2f} ms, gradient sums {1000 * parts['gradient sums']:.2f} ms)",
                 fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=len(STEP_PARTS), fontsize=8, frameon=False)


def draw(run_dir, out):
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: labels can be searched
    import matplotlib.pyplot as plt

    events = read_jsonl(run_dir / "events.jsonl")
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "step" in m]
    if not events and not metrics:
        raise SystemExit(f"{run_dir}: no events.jsonl or metrics.jsonl to draw")
    clock = StepClock(metrics)
    marks, recoveries = collect_marks(events, clock)

    fig, (ax_loss, ax_world, ax_parts) = plt.subplots(3, 1, figsize=(13, 10),
                                                      gridspec_kw={"height_ratios": [3, 1, 0.55]})
    ax_world.sharex(ax_loss)
    ax_loss.tick_params(labelbottom=False)
    draw_breakdown(ax_parts, metrics)
    steps = [m["step"] for m in metrics]
    losses = [m.get("loss") for m in metrics]
    ax_loss.plot(steps, losses, color="#1f77b4", linewidth=0.9, label="loss")
    ax_loss.set_ylabel("loss")
    if losses and min(x for x in losses if x is not None) > 0:
        ax_loss.set_yscale("log")
    ax_lr = ax_loss.twinx()
    ax_lr.plot(steps, [m.get("lr") for m in metrics], color="#17becf", linewidth=1.2, label="learning rate")
    ax_lr.set_ylabel("learning rate")
    ax_world.step(steps, [m.get("world_size") for m in metrics], where="post", color="#333333", label="world size")
    ax_world.set_ylabel("world size (ranks)")
    ax_world.set_xlabel("step")
    sizes = [m.get("world_size") for m in metrics if m.get("world_size") is not None]
    if sizes:
        ax_world.set_ylim(0, max(sizes) + 1)
        ax_world.yaxis.get_major_locator().set_params(integer=True)

    checkpoints = sum(1 for kind, _, _ in marks if kind == "checkpoint")
    label_checkpoints = checkpoints <= MAX_CHECKPOINT_LABELS
    # Labels of events close together (a failure and its shrink share a step) take turns left and
    # right of their marks, then move down, so that none is drawn over another.
    span = max(steps[-1] - steps[0], 1) if steps else 1
    cluster_end, in_cluster = None, 0
    seen = set()
    for kind, step, label in marks:
        colour, style, width = MARKS[kind]
        legend = None
        if kind not in seen:
            seen.add(kind)
            legend = kind if kind != "checkpoint" or label_checkpoints else f"checkpoint ({checkpoints}, unlabelled)"
        for ax in (ax_loss, ax_world):
            ax.axvline(step, color=colour, linestyle=style, linewidth=width, alpha=0.85,
                       label=legend if ax is ax_world else None)
        if kind == "checkpoint" and not label_checkpoints:
            continue
        # Checkpoint labels sit low, the rest high, so that a failure at a checkpoint's step stays legible.
        if kind == "checkpoint":
            ax_loss.text(step, 0.02, " " + label, transform=ax_loss.get_xaxis_transform(), rotation=90,
                         va="bottom", ha="right", fontsize=7.5, color=colour)
            continue
        in_cluster = in_cluster + 1 if cluster_end is not None and step - cluster_end < 0.03 * span else 0
        cluster_end = step
        ax_loss.text(step, 0.98 - 0.5 * (in_cluster // 2), label + " ", transform=ax_loss.get_xaxis_transform(),
                     rotation=90, va="top", ha="right" if in_cluster % 2 == 0 else "left", fontsize=8.5,
                     color=colour, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 1})

    lines = ax_loss.get_legend_handles_labels()[0] + ax_lr.get_legend_handles_labels()[0]
    ax_loss.legend(lines, [l.get_label() for l in lines], loc="upper right", fontsize=8)
    if seen:
        ax_world.legend(loc="upper right", fontsize=8, ncol=len(seen) + 1)
    ax_loss.set_title(summary(run_dir, events, metrics), fontsize=11)
    ax_loss.grid(alpha=0.25)
    ax_world.grid(alpha=0.25)

    recovery_text = "Recovery\n" + ("\n".join(recoveries) if recoveries else "no failures")
    fig.text(0.01, 0.01, recovery_text, fontsize=9, va="bottom", ha="left", family="monospace",
             bbox={"facecolor": "#f7f7f7", "edgecolor": "#cccccc"})
    fig.tight_layout(rect=(0, 0.035 + 0.022 * (len(recoveries) or 1), 1, 1))

    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() in (".html", ".htm"):
        svg = io.StringIO()
        fig.savefig(svg, format="svg")
        out.write_text(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(run_dir.name)}"
                       f"</title></head><body>\n{svg.getvalue()}\n</body></html>\n", encoding="utf-8")
    else:
        fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, help="picture to write (default RUN_DIR/report.png)")
    parser.add_argument("--tensorboard", type=Path, metavar="DIR",
                        help="write TensorBoard event files under DIR/<run name> (and a picture only with --out)")
    args = parser.parse_args()
    out = args.out or (None if args.tensorboard else args.run_dir / "report.png")
    if out and out.suffix.lower() not in (".png", ".svg", ".pdf", ".html", ".htm"):
        print(f"report.py: {out}: give a .png, .svg, .pdf or .html file", file=sys.stderr)
        return 2
    if not args.run_dir.is_dir():
        print(f"report.py: {args.run_dir} is not a directory", file=sys.stderr)
        return 2
    if args.tensorboard:
        from tensorboard_events import write_events
        print(write_events(args.run_dir, args.tensorboard))
    if out:
        draw(args.run_dir, out)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
