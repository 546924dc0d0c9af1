#!/usr/bin/env python3
"""What watching for slow ranks costs a healthy job: the tiny job (examples/tiny.ini) on 2 ranks
of one thread each, trained alternately with `--straggler off` (nothing measured, nothing sent)
and `--straggler detect` (each rank's own work timed and summed with the loss every step, the
watch's decision taken on every rank; no share ever changes, so the work is the same), then
`rebalance` (the default: the same, with nothing to rebalance in a healthy job).

Each run's figure is the median step time (step_s in metrics.jsonl) after its first 20 steps; a
mode's figure is the median over its runs; the order of the modes rotates each round. The
bar (issue 66): the measurement costs at most 0.5% of the step.

    /usr/bin/python3 bench/stragglers/measurement_cost.py [--rounds 7] [--steps 300]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
import benchlib  # noqa: E402

MODES = ("off", "detect", "rebalance")


def run(hardy, mpirun, mode, steps, tmp):
    run_dir = Path(tmp) / f"{mode}-{time.monotonic_ns()}"
    command = [mpirun, "--oversubscribe", "--bind-to", "none", "--allow-run-as-root", "-n", "2", hardy, "train",
               "--config", os.path.join(benchlib.ROOT, "examples", "tiny.ini"), "--run-dir", str(run_dir),
               "--threads", "1", "--steps", str(steps), "--eval-samples", "0", "--snapshot-every", "0",
               "--log-every", "1000", "--straggler", mode]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"measurement_cost.py: {' '.join(command)} failed:\n{done.stdout[-2000:]}")
    if mode != "off" and "not watched" in done.stdout:
        sys.exit("measurement_cost.py: the ranks share CPUs here, so the watch is off: nothing to measure")
    metrics = [m for m in benchlib.read_jsonl(run_dir / "metrics.jsonl") if m["step"] > 20]
    events = benchlib.read_jsonl(run_dir / "events.jsonl")
    actions = [e for e in events if e["event"] in ("rank_slow", "rank_recovered")
               or (e["event"] == "shards_rebalanced" and e.get("policy") == "straggler")]
    return statistics.median(m["step_s"] for m in metrics), len(actions)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    benchlib.add_hardy_arguments(parser)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--output", help="JSON file (default bench/results/straggler-cost-<date>.json)")
    args = parser.parse_args()
    hardy = benchlib.find_binary("hardy", args.hardy, "measurement_cost.py")
    per_mode = {mode: [] for mode in MODES}
    actions = {mode: 0 for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="hardy-straggler-cost-") as tmp:
        for round_index in range(args.rounds):
            order = MODES[round_index % 3:] + MODES[:round_index % 3]
            for mode in order:
                step_s, acted = run(hardy, args.mpirun, mode, args.steps, tmp)
                per_mode[mode].append(step_s)
                actions[mode] += acted
                print(f"round {round_index + 1} {mode:>9}: {1e3 * step_s:.3f} ms a step", flush=True)
    medians = {mode: statistics.median(values) for mode, values in per_mode.items()}
    print(f"\nthe tiny job, 2 ranks x 1 thread, {args.rounds} rounds of {args.steps} steps, median step after step 20:")
    for mode in MODES:
        cost = medians[mode] / medians["off"] - 1
        print(f"  --straggler {mode:>9}: {1e3 * medians[mode]:.3f} ms ({cost:+.2%} against off); "
              f"slow-rank events in a healthy job: {actions[mode]}")
    results = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": benchlib.machine_info(),
               "job": "examples/tiny.ini, 2 ranks x 1 thread, --snapshot-every 0", "rounds": args.rounds,
               "steps": args.steps, "step_s": per_mode, "median_step_s": medians, "events": actions,
               "cost_vs_off": {mode: medians[mode] / medians["off"] - 1 for mode in MODES}}
    print(benchlib.write_results(results, args.output, f"straggler-cost-{time.strftime('%Y-%m-%d')}.json"))


if __name__ == "__main__":
    main()
