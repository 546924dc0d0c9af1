#!/usr/bin/python3
"""Time from a fault to the first step trained afterwards, phase by phase, on the emulated cluster.

Runs the node-loss scenarios of tests/cluster/node_loss.py (4 emulated nodes x 2 ranks, as
network namespaces; needs root) --repeats times each and prints, per scenario, the median of each
phase and the committed steps lost. The baseline in the same run is the in-job path (rank_crash:
ULFM shrinks inside the job, nothing is relaunched), against which every relaunch is compared.

    sudo bench/cluster/node_loss_bench.py [--hardy build/bin/hardy] [--repeats 3] \
        [--scenarios node_crash,node_crash_spare,...]

Phases (seconds): detect_in_job (fault -> the job's failure_detected), detect (fault -> the
launcher ended: the runtime noticed the lost daemon), decide (reading the evidence and probing
the nodes), backoff, launch (job_relaunched -> job_started), restore (job_started ->
state_restored, MPI start-up included), first_step (state_restored -> the first committed step),
total (fault -> first step). Results go to bench/results/cluster-node-loss-<date>.json.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["rank_crash", "node_crash", "node_crash_spare", "node_freeze", "partition", "two_nodes",
             "during_relaunch"]
PHASES = ["detect_in_job_s", "detect_s", "decide_s", "backoff_s", "launch_s", "restore_s", "first_step_s",
          "total_s", "steps_lost"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    results, failures = {}, {}
    with tempfile.TemporaryDirectory(prefix="hardy-node-loss-bench-") as tmp:
        for scenario in args.scenarios.split(","):
            runs = []
            for repeat in range(args.repeats):
                out = Path(tmp) / f"{scenario}-{repeat}.json"
                done = subprocess.run([sys.executable, str(ROOT / "tests/cluster/node_loss.py"), args.hardy, scenario,
                                       str(Path(tmp) / "reference"), "--json", str(out),
                                       "--steps", "600", "--fault-step", "150"],
                                      capture_output=True, text=True)
                if done.returncode == 77:
                    sys.exit(done.stdout.strip())
                if done.returncode != 0 or not out.exists():
                    # A run whose checks failed is no data point; the table counts it.
                    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
                    print(f"{scenario} #{repeat + 1}: the scenario failed (status {done.returncode}): {failed}",
                          flush=True)
                    failures.setdefault(scenario, []).append(failed)
                    continue
                runs.append(json.loads(out.read_text()))
                print(f"{scenario} #{repeat + 1}: {json.dumps(runs[-1]['phases'])}", flush=True)
            if not runs:
                continue
            summary = {}
            for phase in PHASES:
                values = [r["phases"][phase] for r in runs if isinstance(r["phases"].get(phase), (int, float))]
                if values:
                    summary[phase] = statistics.median(values)
            summary["restored_from"] = sorted({r["phases"].get("restored_from", "?") for r in runs})
            summary["relaunches"] = statistics.median(r["relaunches"] for r in runs)
            summary["failed_runs"] = len(failures.get(scenario, []))
            results[scenario] = {"median": summary, "runs": runs}

    header = ["scenario"] + [p.removesuffix("_s") for p in PHASES] + ["relaunches", "restored from", "failed runs"]
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for scenario, result in results.items():
        m = result["median"]
        cells = [scenario] + [(f"{m[p]:.2f}" if p.endswith("_s") else f"{m[p]:.0f}") if p in m else "-"
                              for p in PHASES] + [f"{m['relaunches']:.0f}", "/".join(m["restored_from"]),
                                                  str(m["failed_runs"])]
        print("| " + " | ".join(cells) + " |")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "bench/results" / f"cluster-node-loss-{date.today().isoformat()}.json"
    out.write_text(json.dumps({"machine": {"cpu": platform.processor() or platform.machine(),
                                           "cores": os.cpu_count()},
                               "commit": commit, "repeats": args.repeats, "results": results,
                               "failed_runs": failures}, indent=1))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
