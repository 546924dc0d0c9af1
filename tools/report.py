#!/usr/bin/env python3
"""One picture of a hardy run: loss and learning rate against step, world size against step, a
vertical mark for every failure, shrink, relaunch, preemption, checkpoint and divergence of the
loss (labelled from events.jsonl), and the recovery time of each failure.

Usage: tools/report.py RUN_DIR [--out FILE]   (FILE: .png, .svg, .pdf, or .html with an inline SVG)
       tools/report.py RUN_DIR --tensorboard DIR [--out FILE]   (TensorBoard event files instead,
                                                 or as well: tools/tensorboard_events.py)

`hardy report` runs this; it reads RUN_DIR/events.jsonl and RUN_DIR/metrics.jsonl (one JSON object a
line; a line cut short by a crash is passed over). In an SVG every label is text, so a failure's
label can be searched for."""
import argparse
import html
import io
import sys
from pathlib import Path

from run_files import StepClock, collect_marks, read_jsonl, summary

# Colours and line styles of the marks, by what happened.
MARKS = {
    "failure": ("#d62728", "-", 1.6),
    "shrink": ("#ff7f0e", "--", 1.2),
    "relaunch": ("#9467bd", "-", 1.6),
    "preemption": ("#8c564b", "-.", 1.4),
    "checkpoint": ("#2ca02c", ":", 0.9),
    "diverging": ("#e377c2", "-", 2.0),
    "slow rank": ("#bcbd22", "-", 1.4),
    "shares": ("#7f7f7f", "--", 1.0),
}
MAX_CHECKPOINT_LABELS = 12  # beyond this the checkpoint marks stay, unlabelled, and the legend says so


# The parts of a step as metrics.jsonl times them: compute_s runs from the draw of the batch to the
# end of backward and holds data_wait_s and input_copy_s; allreduce_s is the wait for the sums
# after it; snapshot_s the node-local snapshot; the rest (the agreement, logs, checkpoints) is
# what step_s holds beyond them. On a GPU, compute_device_s is the device's span of the step's
# forward and backward (from events; its backward may end after compute_s, which does not wait for
# it): shown beside the bar, it is not a part of it.
STEP_PARTS = [("data wait", "#d62728"), ("input copy", "#ff7f0e"), ("compute", "#1f77b4"),
              ("gradient sums", "#2ca02c"), ("snapshot", "#9467bd"), ("the rest", "#bbbbbb")]


def step_breakdown(metrics):
    """(steps, mean step_s, {part: mean seconds}, mean compute_device_s or None) over the committed
    steps after the first (which builds the kernels' primitives), or None without timings. Means,
    so that the parts add up to the step."""
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
    spans = [m.get("compute_device_s") for m in timed]
    device = mean(spans) if all(isinstance(span, (int, float)) for span in spans) else None
    return (len(timed), mean(m["step_s"] for m in timed), {name: mean(values) for name, values in parts.items()},
            device)


def draw_breakdown(ax, metrics):
    """One bar: the mean step cut into its parts, each labelled with its share."""
    ax.set_yticks([])
    ax.set_xlabel("share of the mean step")
    found = step_breakdown(metrics)
    if not found:
        ax.text(0.5, 0.5, "no step timings in metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
        return
    steps, step_s, parts, device = found
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
                 f"compute {1000 * parts['compute']:.2f} ms, gradient sums {1000 * parts['gradient sums']:.2f} ms)"
                 + ("" if device is None else f"; the GPU's span of forward and backward {1000 * device:.2f} ms"),
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

    # The slow-rank watch's scores, when it ran (every --straggler-window steps, each rank's).
    scored = [m for m in metrics if isinstance(m.get("rank_scores"), list)]
    rows = 4 if scored else 3
    fig, axes = plt.subplots(rows, 1, figsize=(13, 10 + 2 * (rows - 3)),
                             gridspec_kw={"height_ratios": [3, 1, 1, 0.55][:rows - 1] + [0.55]})
    ax_loss, ax_world, ax_parts = axes[0], axes[1], axes[-1]
    ax_world.sharex(ax_loss)
    ax_loss.tick_params(labelbottom=False)
    draw_breakdown(ax_parts, metrics)
    if scored:
        ax_scores = axes[2]
        ax_scores.sharex(ax_loss)
        for rank in range(max(len(m["rank_scores"]) for m in scored)):
            points = [(m["step"], m["rank_scores"][rank]) for m in scored if rank < len(m["rank_scores"])]
            ax_scores.plot([p[0] for p in points], [p[1] for p in points], linewidth=0.8, label=f"rank {rank}")
        ax_scores.axhline(1, color="#999999", linewidth=0.6)
        ax_scores.set_yscale("log")  # a third of the peers' speed and three times it, alike
        ax_scores.set_ylabel("score\n(peers / own)")
        ax_scores.grid(alpha=0.25)
        if len(scored[0]["rank_scores"]) <= 8:
            ax_scores.legend(loc="upper right", fontsize=7, ncol=4)
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
