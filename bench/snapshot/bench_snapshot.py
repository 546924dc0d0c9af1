#!/usr/bin/env python3
"""What the node-local snapshot tier costs a training step (standard library only).

Runs single-rank `hardy train` on the tiny configuration (examples/tiny.ini: batch 8, 64x64,
width 16) and a large one (batch 8, 128x128, width 32, ASPP and decoder 64 channels, as in
bench/step) for a fixed number of steps, with `--snapshot-every 0` and `--every` (default 1),
everything else the same (seed included), alternating the two over --repeats rounds. From each run's metrics.jsonl,
after --warmup steps: the median step_s, and with snapshots on the mean snapshot_s (the training
thread's stall: the copy of the committed state into the writer's spare buffers, plus any wait
for the previous write). Reported per configuration:
  step off / step on   median step_s over all rounds
  stall                mean snapshot_s, and as % of the median step without snapshots
  overhead             (step on - step off) / step off: the stall plus what the background
                       write takes from training (it shares the cores)

    python3 bench/snapshot/bench_snapshot.py [--hardy build/bin/hardy] [--configs tiny,large]
        [--steps tiny=60,large=15] [--repeats 2] [--every 1] [--json results.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from benchlib import ROOT, find_binary, read_jsonl  # noqa: E402
TINY = os.path.join(ROOT, "examples", "tiny.ini")

CONFIGS = {
    "tiny": [],
    "large": ["--height", "128", "--width", "128", "--model-width", "32", "--aspp-channels", "64",
              "--decoder-channels", "64"],
}
DEFAULT_STEPS = {"tiny": 60, "large": 15}


def train(hardy, config, steps, snapshot_every, scratch, label, backend="cpu", extra=()):
    run = os.path.join(scratch, label)
    command = [hardy, "train", "--config", TINY, *CONFIGS[config], "--steps", str(steps),
               "--backend", backend, *extra,
               "--eval-samples", "0", "--log-every", "100000", "--run-dir", run,
               "--snapshot-every", str(snapshot_every), "--snapshot-dir", os.path.join(scratch, "snapshots")]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"bench_snapshot.py: {' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
    started = next(e for e in read_jsonl(os.path.join(run, "events.jsonl")) if e["event"] == "job_started")
    return metrics, started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy")
    parser.add_argument("--configs", default="tiny,large")
    parser.add_argument("--steps", default="", help="per configuration, e.g. tiny=60,large=15")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out (oneDNN primitives)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--every", default="1", help="--snapshot-every of the runs with snapshots (a number or auto)")
    parser.add_argument("--json", help="also write the results and raw per-step times here")
    parser.add_argument("--backend", default="cpu", help="hardy train's --backend (cpu or cuda)")
    parser.add_argument("--train-args", default="", help="more hardy train options, e.g. '--threads 4'")
    args = parser.parse_args()
    hardy = find_binary("hardy", args.hardy, "bench_snapshot.py", ("build", "build-snap"),
                        "build hardy or pass --hardy")
    steps = dict(DEFAULT_STEPS)
    for item in filter(None, args.steps.split(",")):
        name, _, value = item.partition("=")
        steps[name] = int(value)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    results = {"hardy": hardy, "backend": args.backend, "train_args": args.train_args, "snapshot_every": args.every, "load_average_before": os.getloadavg(), "cores": os.cpu_count(),
               "unix_time": time.time(), "configs": {}}
    with tempfile.TemporaryDirectory(prefix="hardy-bench-snapshot-", dir=shm) as scratch:
        for config in args.configs.split(","):
            raw = {0: [], args.every: []}
            info = {}
            for round_ in range(args.repeats):
                # Alternate which goes first, so that a drift in machine load hits both alike.
                for every in ((0, args.every) if round_ % 2 == 0 else (args.every, 0)):
                    metrics, started = train(hardy, config, steps[config], every, scratch,
                                             f"{config}-{every}-{round_}", args.backend,
                                             args.train_args.split())
                    raw[every].append([{"step_s": m["step_s"], "snapshot_s": m.get("snapshot_s", 0.0), "data_wait_s": m.get("data_wait_s", 0.0)}
                                       for m in metrics[args.warmup:]])
                    info = {"parameters": started["parameters"], "threads": started["threads_per_rank"]}
            off = statistics.median(m["step_s"] for run in raw[0] for m in run)
            on = statistics.median(m["step_s"] for run in raw[args.every] for m in run)
            stall = statistics.mean(m["snapshot_s"] for run in raw[args.every] for m in run)
            results["configs"][config] = {
                **info, "steps": steps[config], "state_mib": info["parameters"] * 3 * 4 / 2**20,
                "step_off_s": off, "step_on_s": on, "stall_s": stall, "stall_pct": 100 * stall / off,
                "overhead_pct": 100 * (on - off) / off, "raw": raw}
    results["load_average_after"] = os.getloadavg()

    print(f"hardy {hardy}, --snapshot-every {args.every}, {results['cores']} cores, load average {results['load_average_before'][0]:.2f} "
          f"before, {results['load_average_after'][0]:.2f} after")
    print(f"{'config':8} {'params':>9} {'state MiB':>9} {'step off ms':>11} {'step on ms':>10} "
          f"{'stall ms':>9} {'stall %':>8} {'overhead %':>10}")
    for config, r in results["configs"].items():
        print(f"{config:8} {r['parameters']:>9} {r['state_mib']:>9.1f} {1e3 * r['step_off_s']:>11.2f} "
              f"{1e3 * r['step_on_s']:>10.2f} {1e3 * r['stall_s']:>9.3f} {r['stall_pct']:>8.2f} "
              f"{r['overhead_pct']:>10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
