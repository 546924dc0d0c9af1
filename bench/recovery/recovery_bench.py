#!/usr/bin/env python3
"""In-job recovery against a supervisor relaunch, on the same job and the same failure.

Runs one job twice under `hardy run` (4 ranks as 2 nodes of 2, node 1 killed at step STEP):
with ULFM (the survivors recover in the job) and with ULFM off (the MPI ends the job and the
supervisor relaunches it from its latest checkpoint on the surviving node). Prints recovery time
split into detect, shrink (or relaunch), restore and first step, the work lost per failure in
steps, and the ratio; then projects both to 4,560 nodes x 6 GPUs with `hardy simulate`.

    bench/recovery/recovery_bench.py [--hardy build/bin/hardy] [--repeats 3]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from benchlib import read_jsonl, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KILL_STEP, CHECKPOINT_EVERY = 100, 40


def run_job(hardy, run, ulfm):
    command = [hardy, "run", "--nodes", "2", "--ranks-per-node", "2", "--run-dir", str(run), "--backoff", "0",
               "--ulfm", "true" if ulfm else "false", "--", "--config", str(ROOT / "examples/tiny.ini"),
               "--steps", "140", "--eval-samples", "0", "--checkpoint-every", str(CHECKPOINT_EVERY),
               "--checkpoint-mode", "sync", "--inject-failure", f"node=1@step={KILL_STEP}", "--log-every", "1000"]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    events = read_jsonl(run / "events.jsonl")
    metrics = read_jsonl(run / "metrics.jsonl")
    kill = max(float((run / "checkpoints" / f).read_text()) for f in
               [p.name for p in (run / "checkpoints").glob("injected-kill-*.time")])
    first = lambda name, after=0.0: next(e for e in events if e["event"] == name and e["unix_time"] >= after)
    steps_after = [m for m in metrics if m["step"] > (KILL_STEP - 1 if ulfm else CHECKPOINT_EVERY * (KILL_STEP // CHECKPOINT_EVERY))]
    if ulfm:
        detected = first("failure_detected")
        shrunk, restored = first("communicator_shrunk"), first("state_restored")
        result = {"detect_s": detected["detection_latency_s"], "shrink_or_relaunch_s": shrunk["seconds"],
                  "restore_s": restored["seconds"], "restored_step": restored["step"]}
    else:
        relaunched = first("job_relaunched")
        ended = relaunched["unix_time"] - relaunched["seconds_since_end"] - relaunched["backoff_s"]
        restored = [e for e in events if e["event"] == "state_restored"][-1]
        result = {"detect_s": ended - kill,  # the MPI notices and the whole job ends
                  "shrink_or_relaunch_s": restored["unix_time"] - restored["seconds"] - ended,
                  "restore_s": restored["seconds"], "restored_step": restored["step"]}
    result["first_step_s"] = steps_after[0]["step_s"]
    # Work lost: the steps that must be computed again.
    result["steps_lost"] = KILL_STEP - 1 - result["restored_step"]
    result["total_s"] = result["detect_s"] + result["shrink_or_relaunch_s"] + result["restore_s"] + result["first_step_s"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {"in-job (ULFM)": [], "supervisor relaunch": []}
    with tempfile.TemporaryDirectory(prefix="hardy-recovery-bench-") as tmp:
        for i in range(args.repeats):
            for name, ulfm in (("in-job (ULFM)", True), ("supervisor relaunch", False)):
                results[name].append(run_job(args.hardy, Path(tmp) / f"{'ulfm' if ulfm else 'relaunch'}-{i}", ulfm))
        keys = ["detect_s", "shrink_or_relaunch_s", "restore_s", "first_step_s", "total_s", "steps_lost"]
        median = {name: {k: statistics.median(r[k] for r in runs) for k in keys} for name, runs in results.items()}
        print(f"median of {args.repeats} runs, 4 ranks (2 nodes x 2) oversubscribed on this machine's cores, node 1 killed at step {KILL_STEP}")
        print(f"{'path':<22}{'detect s':>10}{'shrink/relaunch s':>19}{'restore s':>11}{'1st step s':>12}{'total s':>10}{'steps lost':>12}")
        for name, m in median.items():
            print(f"{name:<22}{m['detect_s']:>10.4f}{m['shrink_or_relaunch_s']:>19.4f}{m['restore_s']:>11.4f}"
                  f"{m['first_step_s']:>12.4f}{m['total_s']:>10.3f}{m['steps_lost']:>12.0f}")
        ratio = median["supervisor relaunch"]["total_s"] / median["in-job (ULFM)"]["total_s"]
        print(f"\nsupervisor relaunch / in-job recovery: {ratio:.1f}x (goal: in-job at least 5x faster)\n")
        simulate = subprocess.run([args.hardy, "simulate", "--from-run", str(Path(tmp) / "ulfm-0"),
                                   "--relaunch-run", str(Path(tmp) / "relaunch-0")], capture_output=True, text=True)
        print(simulate.stdout or simulate.stderr)
    out = write_results({"median": median, "runs": results, "ratio": ratio, "projection": simulate.stdout}, None,
                        f"recovery-{date.today().isoformat()}.json")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
