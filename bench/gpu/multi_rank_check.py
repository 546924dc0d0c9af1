#!/usr/bin/env python3
"""Multi-rank NCCL on one GPU: the recoveries of `hardy train --backend cuda` with several ranks
sharing the device (bench/gpu/one_gpu_rank.sh gives each rank its own NCCL_HOSTID; test only).

Usage (on the GPU machine, after `source bench/gpu/device_env.sh KIT`, with the kit's Open MPI
on PATH): multi_rank_check.py [--ranks 3] [--steps 60] [--json FILE]

Scenarios, each a job of --ranks ranks on examples/tiny.ini under `mpirun --with-ft ulfm`:
  clean          no failure (and the same job on --backend cpu: the loss to compare with)
  between        a rank killed between collectives (as the forward pass starts): ncclCommShrink
  in_allreduce   a rank killed half-way through backward, NCCL buckets in flight: abort, and a
                 new communicator over the shrunk MPI one
  lead           rank 0 killed
  stopped        a rank stopped (SIGSTOP): its hang monitor's peer ends it, then as a crash
  resume         2 ranks to a checkpoint, then --ranks ranks resume from it (the NCCL restore
                 broadcast)
Each asserts exit 0, job_finished completed at the last step, every step committed once, every
complete epoch's samples exactly once (--audit-samples), and the final loss within 2% of the CPU
job's. Prints one line per scenario and exits 1 when any check failed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = str(ROOT / "bench/gpu/one_gpu_rank.sh")
sys.path.insert(0, str(ROOT / "tests/lib"))
from hardy_test import complete_epochs_exact  # noqa: E402


def read_jsonl(path):
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=160)  # 2.5 epochs of tiny.ini at 8 per step
    parser.add_argument("--json")
    # cpu runs the same scenarios without a GPU: how the script itself is checked off the GPU machine.
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    mpirun, hardy = shutil.which("mpirun"), shutil.which("hardy")
    if not mpirun or not hardy:
        sys.exit("multi_rank_check.py: mpirun and hardy must be on PATH (source bench/gpu/device_env.sh)")
    steps, fault_step = args.steps, args.steps // 3
    common = ["--config", str(ROOT / "examples/tiny.ini"), "--audit-samples", "--log-every", "1000"]
    samples = int(next((line.split("=")[1] for line in (ROOT / "examples/tiny.ini").read_text().splitlines()
                        if line.replace(" ", "").startswith("samples=")), "0").strip() or 0)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    results, failures = [], 0
    with tempfile.TemporaryDirectory(prefix="hardy-multi-rank-") as tmp:
        tmp = Path(tmp)

        def train(name, ranks, backend, *extra, run=None):
            run = run or tmp / name
            command = [mpirun, "--with-ft", "ulfm", "-n", str(ranks), "--oversubscribe", "--bind-to", "none",
                       WRAPPER, hardy, "train", *common, "--backend", backend, "--run-dir", str(run),
                       "--snapshot-dir", str(tmp / "node-local" / name), *extra]
            started = time.time()
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
            return done, run, time.time() - started

        def two_phases(name, backend):
            """2 ranks of one node past a checkpoint half-way, then the node dies (both ranks: the
            job ends), and --ranks ranks resume from the newest state (the learning-rate schedule
            spans the whole job, as in one run)."""
            run = tmp / name
            first = train(name, 2, backend, "--steps", str(steps), "--checkpoint-every", str(steps // 2),
                          "--ranks-per-node", "2", "--inject-failure", f"node=0@step={steps // 2 + 2}",
                          run=run)[0]
            done, run, seconds = train(name, args.ranks, backend, "--steps", str(steps), "--resume", "latest",
                                       run=run)
            return done, run, seconds

        def final_loss(run):
            metrics = read_jsonl(run / "metrics.jsonl")
            return metrics[-1]["loss"] if metrics else float("nan")

        train("cpu", args.ranks, "cpu", "--steps", str(steps))
        expected = final_loss(tmp / "cpu")
        two_phases("cpu-resume", "cpu")
        expected_resume = final_loss(tmp / "cpu-resume")
        scenarios = {
            "clean": [],
            "between": ["--inject-failure", f"rank={args.ranks - 1}@step={fault_step}"],
            "in_allreduce": ["--inject-failure", f"rank=1@step={fault_step}:allreduce"],
            "lead": ["--inject-failure", f"rank=0@step={fault_step}"],
            "stopped": ["--inject-failure", f"rank={args.ranks - 1}@step={fault_step}:stop"],
            "resume": None,
        }
        for name, extra in scenarios.items():
            if extra is None:
                done, run, seconds = two_phases(name, args.backend)
            else:
                done, run, seconds = train(name, args.ranks, args.backend, "--steps", str(steps), *extra)
            events, metrics = read_jsonl(run / "events.jsonl"), read_jsonl(run / "metrics.jsonl")
            finished = [e for e in events if e["event"] == "job_finished"]
            committed = [m["step"] for m in metrics]
            reference = expected_resume if name == "resume" else expected
            complete, wrong = complete_epochs_exact(run, samples) if samples else ([], [])
            final = metrics[-1]["loss"] if metrics else float("nan")
            checks = {
                "exit 0": done.returncode == 0,
                "completed at the last step": bool(finished) and finished[-1].get("status") == "completed"
                and finished[-1].get("steps") == steps,
                "every step once": sorted(set(committed)) == list(range(1, steps + 1))
                and committed[-1] == steps,
                "epochs exactly once": bool(complete) and not wrong,
                "loss within 2% of the CPU": abs(final - reference) <= 0.02 * abs(reference),
            }
            if name not in ("clean", "resume"):
                checks["a failure was survived"] = any(e["event"] == "failure_detected" for e in events)
            failed = [k for k, ok in checks.items() if not ok]
            failures += bool(failed)
            recoveries = [{k: e.get(k) for k in ("event", "seconds", "source", "old_size", "new_size")}
                          for e in events if e["event"] in ("communicator_shrunk", "state_restored")]
            results.append({"scenario": name, "seconds": round(seconds, 1), "final_loss": final, "cpu_loss": reference,
                            "complete_epochs": len(complete), "failed_checks": failed, "recoveries": recoveries})
            print(f"{name}: {'ok' if not failed else 'FAILED ' + ', '.join(failed)} in {seconds:.1f} s, "
                  f"loss {final:.5f} (cpu {reference:.5f}), {len(complete)} exact epochs; {recoveries}", flush=True)
            if failed:
                print(done.stdout[-1500:], done.stderr[-2500:], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"multi_rank_check: {len(results) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
