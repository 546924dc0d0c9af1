#!/usr/bin/python3
"""Two builds' hardy_step_bench side by side: the compute-only training step of bench_step.py's
configurations (tiny and large by default; tiramisu, deepcam, cosmoflow... by name), alternating
which build goes first round by round, so that a kernel change can be shown to pay (or not) on a
machine whose load drifts.

    /usr/bin/python3 bench/step/compare_step_builds.py --before OLD/hardy_step_bench \\
        [--after build/bin/hardy_step_bench] [--configs tiny,large] [--rounds 6] [--threads 2]
        [--json out.json]

Prints, per configuration, each build's median (and best) per-round median step and the paired
change: the median over rounds of (after - before) / before.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_step import ALL_CONFIGS, COMMON, NETWORK_COMMON, model_of  # noqa: E402

# Steps and warm-up steps per round; the published networks' configurations take the last entry.
STEPS = {"tiny": (40, 5), "large": (12, 3), "network": (10, 2)}


def median_step_ms(binary, config, threads):
    steps, warmup = STEPS.get(config, STEPS["network"])
    common = COMMON if model_of(config) == "compact" else NETWORK_COMMON
    options = {**common, **ALL_CONFIGS[config], "threads": threads, "steps": steps, "warmup": warmup}
    command = [binary] + [word for name, value in options.items() for word in (f"--{name}", str(value))]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])["median_s"] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=os.path.join(HERE, "..", "..", "build", "bin", "hardy_step_bench"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configs", default="tiny,large",
                        help="bench_step.py's configurations, comma-separated: tiny, large, "
                             "tiramisu, deepcam, cosmoflow, ...")
    parser.add_argument("--json")
    args = parser.parse_args()
    builds = {"before": args.before, "after": args.after}
    configs = args.configs.split(",")
    unknown = [config for config in configs if config not in ALL_CONFIGS]
    if unknown:
        parser.error(f"unknown --configs {', '.join(unknown)}; known: {', '.join(ALL_CONFIGS)}")
    results = {config: {name: [] for name in builds} for config in configs}
    for round_ in range(args.rounds):
        for config in results:
            for name in (list(builds) if round_ % 2 == 0 else list(builds)[::-1]):
                results[config][name].append(median_step_ms(builds[name], config, args.threads))
    for config, runs in results.items():
        before, after = runs["before"], runs["after"]
        paired = [(a - b) / b * 100 for b, a in zip(before, after)]
        print(f"{config}: before {statistics.median(before):.3f} ms (best {min(before):.3f}), "
              f"after {statistics.median(after):.3f} ms (best {min(after):.3f}); paired change "
              f"{statistics.median(paired):+.1f}% (rounds {min(paired):+.1f}% to {max(paired):+.1f}%)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"builds": builds, "threads": args.threads, "load_average": os.getloadavg(),
                       "median_step_ms": results}, out, indent=1)


if __name__ == "__main__":
    main()
