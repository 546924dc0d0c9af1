#!/usr/bin/env python3
"""Two builds of hardy side by side on the same jobs, alternating round by round, so that a change
inside the training session (the step's mechanics, the duties after a commit, recovery) can be
shown to cost nothing, or what it costs.

Each round runs, for each build in turn:
  step      `hardy train --config examples/tiny.ini` (and the large configuration of
            bench/snapshot), 1 rank, every protection at its default (the step's agreement,
            node-local snapshots `auto`, checkpoints): the median step_s after --warmup steps and
            the mean snapshot_s (the training thread's stall for its node-local copy);
  recovery  `mpirun -n 4 --with-ft ulfm hardy train` on the tiny configuration (2 "nodes" of 2
            ranks, 1 thread each) with rank 3 killed at step 30: the survivors' recovery (recovery_finished's seconds) and the time from the
            kill to the first step committed after it (the next metrics line's unix time).

    bench/session/compare_builds.py --baseline /path/to/old/hardy [--candidate build/bin/hardy]
        [--rounds 3] [--configs tiny,large] [--json out.json]

Prints a table of medians over rounds and each build's spread (min-max), and writes JSON.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from benchlib import ROOT, find_binary, machine_info, read_jsonl, write_results  # noqa: E402

TINY = os.path.join(ROOT, "examples", "tiny.ini")
CONFIGS = {
    "tiny": {"options": [], "steps": 160},
    "large": {"options": ["--height", "128", "--width", "128", "--model-width", "32", "--aspp-channels", "64",
                          "--decoder-channels", "64"], "steps": 30},
}
KILL_STEP, RECOVERY_STEPS, RECOVERY_RANKS = 30, 60, 4


def mpirun():
    venv = os.path.join(ROOT, ".venv", "bin", "mpirun")
    path = venv if os.access(venv, os.X_OK) else shutil.which("mpirun")
    if not path:
        sys.exit("compare_builds.py: no mpirun (scripts/lib/setup.sh installs Open MPI into .venv)")
    return [path, "--oversubscribe", "--bind-to", "none", "--allow-run-as-root", "--with-ft", "ulfm"]


def run(command, what):
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"compare_builds.py: {what} failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")


def step_figures(hardy, config, warmup, scratch):
    run_dir = tempfile.mkdtemp(dir=scratch)
    run([hardy, "train", "--config", TINY, *CONFIGS[config]["options"], "--steps", str(CONFIGS[config]["steps"]),
         "--eval-samples", "0", "--log-every", "100000", "--run-dir", run_dir,
         "--snapshot-dir", tempfile.mkdtemp(dir=scratch)], f"{config} training")
    kept = [m for m in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if m["step"] > warmup]
    return {"step_ms": 1000 * statistics.median(m["step_s"] for m in kept),
            "snapshot_stall_ms": 1000 * statistics.mean(m["snapshot_s"] for m in kept)}


def recovery_figures(hardy, scratch):
    run_dir = tempfile.mkdtemp(dir=scratch)
    run([*mpirun(), "-n", str(RECOVERY_RANKS), hardy, "train", "--config", TINY, "--steps", str(RECOVERY_STEPS),
         "--threads", "1", "--ranks-per-node", "2", "--eval-samples", "0", "--log-every", "100000",
         "--run-dir", run_dir, "--snapshot-dir", tempfile.mkdtemp(dir=scratch),
         "--inject-failure", f"rank={RECOVERY_RANKS - 1}@step={KILL_STEP}"], "recovery run")
    events = read_jsonl(os.path.join(run_dir, "events.jsonl"))
    finished = next(e for e in events if e["event"] == "recovery_finished")
    kill_files = [f for f in os.listdir(os.path.join(run_dir, "checkpoints")) if f.startswith("injected-kill-")]
    with open(os.path.join(run_dir, "checkpoints", kill_files[0])) as stream:
        killed_at = float(stream.read())
    first_after = min(m["unix_time"] for m in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
                      if m["unix_time"] > killed_at)
    return {"recovery_ms": 1000 * finished["seconds"], "kill_to_next_step_ms": 1000 * (first_after - killed_at)}


def spread(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the hardy executable to compare against")
    parser.add_argument("--candidate", help="default: build/bin/hardy")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--configs", default="tiny,large")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out (oneDNN primitives)")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    builds = {"baseline": args.baseline,
              "candidate": find_binary("hardy", args.candidate, "compare_builds.py")}
    configs = args.configs.split(",") if args.configs else []
    for config in configs:
        if config not in CONFIGS:
            parser.error(f"unknown configuration {config}; choose from {', '.join(CONFIGS)}")
    rows = {name: {} for name in builds}
    with tempfile.TemporaryDirectory(prefix="hardy-compare-builds-") as scratch:
        for round_ in range(args.rounds):
            # Alternate which build goes first, so that neither always runs on a warmer machine.
            order = list(builds.items()) if round_ % 2 == 0 else list(reversed(builds.items()))
            for name, hardy in order:
                figures = {}
                for config in configs:
                    for key, value in step_figures(hardy, config, args.warmup, scratch).items():
                        figures[f"{config}_{key}"] = value
                if not args.skip_recovery:
                    figures.update(recovery_figures(hardy, scratch))
                for key, value in figures.items():
                    rows[name].setdefault(key, []).append(value)
                print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()),
                      flush=True)
    print("\n| figure | baseline median (min-max) | candidate median (min-max) | change |")
    print("|---|---|---|---|")
    for key in rows["baseline"]:
        before, after = statistics.median(rows["baseline"][key]), statistics.median(rows["candidate"][key])
        change = f"{100 * (after - before) / before:+.1f}%" if before else "-"
        print(f"| {key} | {spread(rows['baseline'][key])} | {spread(rows['candidate'][key])} | {change} |")
    out = write_results({"machine": machine_info(), "builds": builds, "rounds": rows,
                         "load_average_at_end": os.getloadavg()}, args.json, "session-compare-builds.json")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
