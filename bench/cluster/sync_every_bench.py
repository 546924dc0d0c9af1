#!/usr/bin/python3
"""What meeting every N-th step costs in convergence, and saves per step (--domain-sync-every).

    bench/cluster/sync_every_bench.py [--hardy build/bin/hardy] [--every 1,2,4,8] [--domains 4]
        [--steps 300] [--data synthetic,deepcam] [--seeds 1]

The same job as D fault domains of one rank each (`hardy run --nodes D --nodes-per-domain 1`, every
domain on this host, so no network namespaces are needed), once per N: with N = 1 the domains
sum their gradients every step, which is the same arithmetic as one MPI job; with N > 1 each
domain trains alone on its share of every global batch and the domains average their state every
N-th step (the NERSC hybrid scheme; LocalSGD). Both data sets train examples/tiny.ini's model:
the built-in synthetic climate data, and files in the published DeepCAM layout written by
`hardy data generate --format deepcam` (64x96, scored on its validation split).

Per run: the mean loss of the last tenth of the steps (one step's loss is one batch: noise), the
held-out mean IoU of job_finished, the median step_s after step 20, and the wall time. Every
domain shares this machine's cores, so step times say how much less the domains wait for each
other, not what a real machine's network would save. Results go to
bench/results/domain-sync-every-<date>.json.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/lib"))
sys.path.insert(0, str(ROOT / "bench/common"))
import benchlib  # noqa: E402
from hardy_test import read_jsonl  # noqa: E402


def train(args, data_options, every, seed, run):
    command = [args.hardy, "run", "--nodes", str(args.domains), "--nodes-per-domain", "1", "--ranks-per-node", "1",
               "--run-dir", str(run), "--", "--config", str(ROOT / "examples/tiny.ini"), *data_options,
               "--steps", str(args.steps), "--threads", "1", "--seed", str(seed), "--domain-sync-every", str(every),
               "--snapshot-dir", str(run.parent / "node-local")]
    started = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
    wall = time.time() - started
    metrics = read_jsonl(run / "metrics.jsonl")
    last = {m["step"]: m for m in metrics}
    tail = [last[s]["loss"] for s in sorted(last)[-max(1, args.steps // 10):]]
    finished = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_finished"][-1]
    return {"tail_loss": sum(tail) / len(tail),
            "final_loss": finished.get("final_loss"),
            "mean_iou": finished.get("mean_iou"),
            "step_ms": 1000 * statistics.median(m["step_s"] for m in metrics if m["step"] > 20),
            "wall_s": wall}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--every", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--domains", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--data", default="synthetic,deepcam")
    parser.add_argument("--seeds", type=int, default=1, help="runs per setting, with seeds 7, 8, ...")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    load = {"start": Path("/proc/loadavg").read_text().split()[:3]}
    results = {}
    with tempfile.TemporaryDirectory(prefix="hardy-sync-every-") as tmp:
        tmp = Path(tmp)
        for data in args.data.split(","):
            options = [] if data == "synthetic" else benchlib.deepcam_data(args.hardy, tmp / "deepcam")
            results[data] = {}
            for seed in range(7, 7 + args.seeds):
                for every in args.every:  # alternating, so that a change in load touches every N alike
                    run = tmp / f"{data}-{every}-{seed}"
                    result = train(args, options, every, seed, run)
                    results[data].setdefault(str(every), []).append(result)
                    print(f"{data} N={every} seed {seed}: {json.dumps(result)}", flush=True)
    load["end"] = Path("/proc/loadavg").read_text().split()[:3]
    medians = {data: {every: {k: statistics.median(r[k] for r in runs if r[k] is not None)
                              for k in runs[0] if any(r[k] is not None for r in runs)}
                      for every, runs in by_every.items()}
               for data, by_every in results.items()}
    for data, by_every in medians.items():
        base = by_every[str(args.every[0])]
        print(f"\n{data}, {args.domains} domains x 1 rank, {args.steps} steps, medians of {args.seeds} seed(s)")
        print("| N | loss, last tenth | vs N=%d | held-out mean IoU | step ms | vs N=%d |" % (args.every[0], args.every[0]))
        print("|---|---|---|---|---|---|")
        for every, m in by_every.items():
            iou = f"{m['mean_iou']:.3f}" if "mean_iou" in m else "-"
            print(f"| {every} | {m['tail_loss']:.4f} | {100 * (m['tail_loss'] / base['tail_loss'] - 1):+.1f}% | {iou} "
                  f"| {m['step_ms']:.1f} | {100 * (m['step_ms'] / base['step_ms'] - 1):+.1f}% |")
    out = Path(args.out) if args.out else ROOT / "bench/results" / f"domain-sync-every-{date.today().isoformat()}.json"
    out.write_text(json.dumps({"machine": {"host": platform.node(), "cpus": os.cpu_count(), "load": load},
                               "hardy": args.hardy, "domains": args.domains, "steps": args.steps,
                               "runs": results, "medians": medians}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
