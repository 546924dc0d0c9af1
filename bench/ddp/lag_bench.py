#!/usr/bin/python3
"""What lagged gradient updates (--gradient-lag 1) cost in convergence, and save per step.

    bench/ddp/lag_bench.py [--hardy build/bin/hardy] [--ranks 1,2] [--steps 300]
        [--data synthetic,deepcam] [--seeds 1,2]

The same job with and without the lag, one after the other for each data set, rank count and
seed: examples/tiny.ini's model on the built-in synthetic climate data, and on files in the
published DeepCAM layout written by `hardy data generate --format deepcam` (64x96, scored on its
validation split). With the lag a step's gradients are reduced while the next step's forward and
backward run, and applied one step late (the 2018 Summit climate run's lagged updates), so the
updates use gradients one step stale.

Per run: the mean loss of the last tenth of the steps (one step's loss is one batch: noise), the
held-out mean IoU of job_finished, the median step_s after step 20, and the wall time. The ranks
share this machine's cores (threads per rank = cores / ranks), so a step time says what the
overlap saves when the allreduce is cheap shared memory; the per-step figures with every
protection on come from bench/ddp/ddp_bench.py (variant hardy-lagged). Results go to
bench/results/lag-<date>.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests/lib"))
sys.path.insert(0, str(ROOT / "bench/common"))
import benchlib  # noqa: E402
from hardy_test import read_jsonl  # noqa: E402


def train(args, data_options, ranks, lag, seed, run):
    threads = max(1, (os.cpu_count() or 1) // ranks)
    command = [args.mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "none", "--allow-run-as-root",
               args.hardy, "train", "--config", str(ROOT / "examples/tiny.ini"), *data_options,
               "--steps", str(args.steps), "--threads", str(threads), "--seed", str(seed),
               "--gradient-lag", str(lag), "--run-dir", str(run), "--snapshot-dir", str(run / "node-local")]
    started = time.time()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"lag_bench: {' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    wall = time.time() - started
    metrics = read_jsonl(run / "metrics.jsonl")
    tail = [m["loss"] for m in metrics[-max(1, args.steps // 10):]]
    finished = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_finished"][-1]
    return {"tail_loss": sum(tail) / len(tail),
            "final_loss": finished["final_loss"],
            "mean_iou": finished.get("mean_iou"),
            "step_ms": 1000 * statistics.median(m["step_s"] for m in metrics if m["step"] > 20),
            # The wait for the step's reduction after its compute: what the lag hides.
            "allreduce_wait_ms": 1000 * statistics.median(m["allreduce_s"] for m in metrics if m["step"] > 20),
            "wall_s": wall}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_hardy_arguments(parser)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--data", default="synthetic,deepcam")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--output", help="JSON file (default bench/results/lag-<date>.json)")
    args = parser.parse_args()
    args.hardy = benchlib.find_binary("hardy", args.hardy, "lag_bench")
    results = {"machine": dict(benchlib.machine_info(), load_average_start=os.getloadavg()),
               "steps": args.steps, "runs": []}
    with tempfile.TemporaryDirectory(prefix="hardy-lag-bench-") as tmp:
        tmp = Path(tmp)
        for data in args.data.split(","):
            data_options = benchlib.deepcam_data(args.hardy, tmp / "deepcam") if data == "deepcam" else []
            for ranks in [int(r) for r in args.ranks.split(",")]:
                for seed in [int(s) for s in args.seeds.split(",")]:
                    for lag in (0, 1):
                        run = tmp / f"{data}-{ranks}-{seed}-{lag}"
                        row = {"data": data, "ranks": ranks, "seed": seed, "lag": lag,
                               **train(args, data_options, ranks, lag, seed, run)}
                        results["runs"].append(row)
                        print(json.dumps(row), flush=True)
    results["machine"]["load_average_end"] = os.getloadavg()
    print("\n| data | ranks | lag | last-tenth loss | held-out mIoU | step ms | allreduce wait ms |")
    print("|---|---|---|---|---|---|---|")
    for data in args.data.split(","):
        for ranks in [int(r) for r in args.ranks.split(",")]:
            for lag in (0, 1):
                rows = [r for r in results["runs"] if r["data"] == data and r["ranks"] == ranks and r["lag"] == lag]
                loss = statistics.mean(r["tail_loss"] for r in rows)
                iou = statistics.mean(r["mean_iou"] for r in rows if r["mean_iou"] is not None)
                step = statistics.median(r["step_ms"] for r in rows)
                wait = statistics.median(r["allreduce_wait_ms"] for r in rows)
                print(f"| {data} | {ranks} | {lag} | {loss:.4f} | {iou:.3f} | {step:.2f} | {wait:.3f} |")
    path = benchlib.write_results(results, args.output, f"lag-{date.today().isoformat()}.json")
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
