#!/usr/bin/env python3
"""What the node-local snapshot tier costs a training step (standard library only).

Runs single-rank `hardy train` on the tiny configuration (examples/tiny.ini: batch 8, 64x64,
width 16) and a large one (batch 8, 128x128, width 32, ASPP and decoder 64 channels, as in
bench/step) with `--snapshot-every 0` (off), `auto` (the default) and `1` (every step), everything
else the same (seed included), the three in a rotating order over --rounds rounds, so that a drift
in machine load hits each alike. Snapshots go to /dev/shm, as in production.

From each run's metrics.jsonl, after --warmup steps, per configuration and setting:
  step ms        median step_s over all rounds
  vs off         (step - step off) / step off, from the medians: what the setting costs the step,
                 and the median of the per-round ratios ("paired"), steadier on a noisy machine
  snapshots      steps that took a snapshot (snapshot_stall_s > 0), of all steps measured
  stall ms       mean training-thread stall per snapshot (the copy into the writer's buffers)
  write cpu ms   mean CPU time of the background writer per snapshot (copy into the slot file and
                 its checksum): it shares the cores with training, so on a node whose cores all
                 train it shows in the step time
  share %        sum(snapshot_s) / sum(step_s): the snapshots' whole cost as metrics.jsonl reports it

    python3 bench/snapshot/bench_snapshot.py [--hardy build/bin/hardy] [--configs tiny,large]
        [--steps tiny=200,large=30] [--rounds 3] [--json results.json]
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
from benchlib import ROOT, find_binary, machine_info, read_jsonl  # noqa: E402
TINY = os.path.join(ROOT, "examples", "tiny.ini")

CONFIGS = {
    "tiny": [],
    "large": ["--height", "128", "--width", "128", "--model-width", "32", "--aspp-channels", "64",
              "--decoder-channels", "64"],
}
DEFAULT_STEPS = {"tiny": 200, "large": 30}
SETTINGS = ("0", "auto", "1")
LABELS = {"0": "off", "auto": "auto", "1": "every step"}


def train(hardy, config, steps, snapshot_every, scratch, label, backend, extra):
    run = os.path.join(scratch, label)
    command = [hardy, "train", "--config", TINY, *CONFIGS[config], "--steps", str(steps),
               "--backend", backend, *extra,
               "--eval-samples", "0", "--log-every", "100000", "--run-dir", run,
               "--snapshot-every", snapshot_every, "--snapshot-dir", os.path.join(scratch, "snapshots")]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"bench_snapshot.py: {' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
    started = next(e for e in read_jsonl(os.path.join(run, "events.jsonl")) if e["event"] == "job_started")
    return metrics, started


def summarize(runs, off_runs):
    steps = [m for run in runs for m in run]
    taken = [m for m in steps if m.get("snapshot_stall_s", 0) > 0]
    step = statistics.median(m["step_s"] for m in steps)
    off = statistics.median(m["step_s"] for run in off_runs for m in run)
    paired = [statistics.median(m["step_s"] for m in run) / statistics.median(m["step_s"] for m in base) - 1
              for run, base in zip(runs, off_runs)]
    written_cpu = sum(m.get("snapshot_write_cpu_s", 0) for m in steps)
    return {
        "step_s": step,
        "vs_off_pct": 100 * (step - off) / off,
        "vs_off_paired_pct": 100 * statistics.median(paired),
        "vs_off_rounds_pct": [100 * p for p in paired],
        "steps": len(steps),
        "snapshots": len(taken),
        "stall_per_snapshot_s": statistics.mean(m["snapshot_stall_s"] for m in taken) if taken else 0.0,
        "write_cpu_per_snapshot_s": written_cpu / len(taken) if taken else 0.0,
        "share_pct": 100 * sum(m.get("snapshot_s", 0) for m in steps) / sum(m["step_s"] for m in steps),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy")
    parser.add_argument("--configs", default="tiny,large")
    parser.add_argument("--steps", default="", help="per configuration, e.g. tiny=200,large=30")
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out (oneDNN primitives)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the results and raw per-step times here")
    parser.add_argument("--backend", default="cpu", help="hardy train's --backend (cpu or cuda)")
    parser.add_argument("--train-args", default="", help="more hardy train options, e.g. '--threads 4'")
    args = parser.parse_args()
    hardy = find_binary("hardy", args.hardy, "bench_snapshot.py", ("build",), "build hardy or pass --hardy")
    steps = dict(DEFAULT_STEPS)
    for item in filter(None, args.steps.split(",")):
        name, _, value = item.partition("=")
        steps[name] = int(value)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    results = {"hardy": hardy, "backend": args.backend, "train_args": args.train_args, "rounds": args.rounds,
               "warmup": args.warmup, "machine": machine_info(), "load_average_before": os.getloadavg(),
               "unix_time": time.time(), "configs": {}}
    with tempfile.TemporaryDirectory(prefix="hardy-bench-snapshot-", dir=shm) as scratch:
        for config in args.configs.split(","):
            raw = {setting: [] for setting in SETTINGS}
            info = {}
            for round_ in range(args.rounds):
                order = SETTINGS[round_ % 3:] + SETTINGS[:round_ % 3]
                for setting in order:
                    metrics, started = train(hardy, config, steps[config], setting, scratch,
                                             f"{config}-{setting}-{round_}", args.backend, args.train_args.split())
                    raw[setting].append([{key: m.get(key, 0.0) for key in
                                          ("step_s", "snapshot_s", "snapshot_stall_s", "snapshot_write_cpu_s")}
                                         for m in metrics[args.warmup:]])
                    info = {"parameters": started["parameters"], "threads": started["threads_per_rank"]}
            results["configs"][config] = {
                **info, "steps": steps[config], "state_mib": info["parameters"] * 3 * 4 / 2**20,
                "settings": {setting: summarize(raw[setting], raw["0"]) for setting in SETTINGS}, "raw": raw}
    results["load_average_after"] = os.getloadavg()

    print(f"hardy {hardy}, {results['machine']['cpus_online']} cores, {args.rounds} rounds, load average "
          f"{results['load_average_before'][0]:.2f} before, {results['load_average_after'][0]:.2f} after")
    print(f"{'config':6} {'state MiB':>9} {'setting':>10} {'step ms':>8} {'vs off':>7} {'paired':>7} "
          f"{'snapshots':>10} {'stall ms':>9} {'write cpu ms':>12} {'share %':>8}")
    for config, r in results["configs"].items():
        for setting, s in r["settings"].items():
            print(f"{config:6} {r['state_mib']:>9.1f} {LABELS[setting]:>10} {1e3 * s['step_s']:>8.2f} "
                  f"{s['vs_off_pct']:>6.1f}% {s['vs_off_paired_pct']:>6.1f}% "
                  f"{s['snapshots']:>4}/{s['steps']:<5} {1e3 * s['stall_per_snapshot_s']:>9.3f} "
                  f"{1e3 * s['write_cpu_per_snapshot_s']:>12.3f} {s['share_pct']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
