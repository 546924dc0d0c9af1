#!/usr/bin/env python3
"""Hung ranks on the emulated cluster: how long from the hang to training again, phase by phase,
and how often a healthy job beside a CPU hog is taken for a hung one (never, or it is a bug).

Runs tests/cluster/node_loss.py's scenarios (4 emulated nodes x 2 ranks, network namespaces;
needs root; default options, so the hang timeout is the learned one):
  rank_stop   SIGSTOP one rank from outside
  rank_spin   one rank computes forever (--inject-failure ...:spin)
  rank_stop_watchdog  the baseline, in the same run: the same SIGSTOP with the hang monitor off
              and --collective-timeout 20, so the watchdog ends the job and every node relaunches
  loaded      no fault, a busy process per core for the whole run (the false-positive check)
each --repeats times (loaded: --loaded-runs times), 600 steps with the fault at step 150, and
prints the median seconds from the hang to each phase:
  decided_killed  the hung rank's own monitor, or the live rank on its host, wrote its decision
                  and sent SIGKILL (one moment)
  shrunk          the survivors' communicator is shrunk (ULFM)
  resumed         state restored from memory and the batch re-split
  total           the first step committed afterwards (for the baseline: after the relaunch)

    sudo bench/cluster/hang_bench.py [--hardy build/bin/hardy] [--repeats 3] [--loaded-runs 10]

The baseline's 20 s collective timeout is the test's; the default is 300 s, which its total
grows by.
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
PHASES = ["decided_killed_s", "shrunk_s", "resumed_s", "total_s", "hang_timeout_s"]


def run_scenario(hardy, scenario, tmp, repeat):
    out = Path(tmp) / f"{scenario}-{repeat}.json"
    done = subprocess.run([sys.executable, str(ROOT / "tests/cluster/node_loss.py"), hardy, scenario,
                           str(Path(tmp) / "reference"), "--json", str(out), "--steps", "600", "--fault-step", "150"],
                          capture_output=True, text=True)
    if done.returncode == 77:
        sys.exit(done.stdout.strip())
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    loaded = [line for line in done.stdout.splitlines() if line.startswith("loaded:")]
    return (json.loads(out.read_text()) if done.returncode == 0 and out.exists() else None), failed, loaded


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loaded-runs", type=int, default=10)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="hardy-hang-bench-") as tmp:
        plan = (("rank_stop", args.repeats), ("rank_spin", args.repeats), ("rank_stop_watchdog", args.repeats),
                ("loaded", args.loaded_runs))
        for scenario, count in plan:
            runs, failures, notes = [], [], []
            for repeat in range(count):
                result, failed, loaded = run_scenario(args.hardy, scenario, tmp, repeat)
                notes += loaded
                if result is None:
                    failures.append(failed)
                    print(f"{scenario} #{repeat + 1}: FAILED {failed}", flush=True)
                    continue
                runs.append(result)
                print(f"{scenario} #{repeat + 1}: {json.dumps(result['phases'])} {' '.join(loaded)}", flush=True)
            median = {p: statistics.median(r["phases"][p] for r in runs if p in r["phases"])
                      for p in PHASES if any(p in r["phases"] for r in runs)}
            results[scenario] = {"median": median, "runs": runs, "failed_runs": failures, "notes": notes}
    print("\n| scenario | runs | failed | " + " | ".join(p.removesuffix("_s") for p in PHASES) + " |")
    print("|---|---|---|" + "---|" * len(PHASES))
    for scenario, result in results.items():
        m = result["median"]
        cells = [f"{m[p]:.2f}" if p in m else "-" for p in PHASES]
        print(f"| {scenario} | {len(result['runs']) + len(result['failed_runs'])} | {len(result['failed_runs'])} | "
              + " | ".join(cells) + " |")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load = os.getloadavg()
    out = ROOT / "bench/results" / f"cluster-hang-{date.today().isoformat()}.json"
    out.write_text(json.dumps({"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                           "load_at_end": load},
                               "commit": commit, "results": results}, indent=1))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
