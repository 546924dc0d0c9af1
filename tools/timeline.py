#!/usr/bin/env python3
"""Prints a run directory's events as a timeline: what failed, how the job recovered, how long
each part took. Usage: tools/timeline.py RUN_DIR [--all]"""
import argparse
import json
import sys
from pathlib import Path

SHOWN = {"supervisor_started", "job_started", "failure_detected", "communicator_shrunk",
         "device_communicator_rebuilt", "state_restored",
         "shards_rebalanced", "training_resumed", "recovery_finished", "checkpoint_failed", "job_relaunched",
         "final_checkpoint", "preemption_requested", "job_finished", "supervisor_finished"}


# One line for each event of the recovery story, by kind; any other event lists its fields.
DESCRIBE = {
    "job_started": lambda e: f"{e['world_size']} ranks, {e['steps']} steps, fault tolerant: {e.get('fault_tolerant')}",
    "failure_detected": lambda e: (
        f"watchdog: stuck in {e.get('stuck_in')} for {e.get('stuck_s', 0):.1f} s"
        if e.get("detected_by") == "watchdog" else
        f"ranks {e['failed_ranks']} (nodes {e['failed_nodes']}, hosts {sorted(set(e['failed_hosts']))}) "
        f"at step {e['step']}, detected {e['detection_latency_s'] * 1000:.1f} ms after the failure"),
    "communicator_shrunk": lambda e: f"{e['old_size']} -> {e['new_size']} ranks in {e['seconds'] * 1000:.1f} ms",
    "device_communicator_rebuilt": lambda e: f"NCCL: {e['path']} over {e['size']} ranks in {e['seconds'] * 1000:.1f} ms",
    "state_restored": lambda e: f"step {e['step']} from {e['source']} in {e['seconds'] * 1000:.1f} ms",
    "shards_rebalanced": lambda e: f"global batch {e['global_batch']} as {e['per_rank_batch']} ({e['policy']})",
    "training_resumed":
        lambda e: f"at step {e['step']}, {e['seconds_since_detection'] * 1000:.1f} ms after detection",
    "recovery_finished": lambda e: f"{e['seconds'] * 1000:.1f} ms in all",
    "job_relaunched":
        lambda e: f"after {e['previous_end']}, on {e['world_size']} ranks, without nodes {e['excluded_nodes']}",
    "job_finished": lambda e: (
        f"{e['status']} at step {e.get('steps')}, {e.get('failures', 0)} failure(s) survived"
        + (f", mean IoU {e['mean_iou']:.3f}" if "mean_iou" in e else "")),
}


def describe(e):
    if e["event"] in DESCRIBE:
        return DESCRIBE[e["event"]](e)
    return ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("event", "time", "unix_time"))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--all", action="store_true", help="every event, not only the recovery story")
    args = parser.parse_args()
    path = args.run_dir / "events.jsonl"
    if not path.is_file():
        print(f"timeline: {path} does not exist", file=sys.stderr)
        return 2
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not events:
        return 0
    start = events[0]["unix_time"]
    seen = set()
    for e in events:
        if not args.all and e["event"] not in SHOWN:
            continue
        key = (e["event"], e.get("step"), e.get("attempt"), e.get("status"))
        if key in seen and e["event"] != "job_relaunched":
            continue  # every survivor reports some events; one line each is enough
        seen.add(key)
        print(f"{e['unix_time'] - start:9.3f} s  {e['event']:<20} {describe(e)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
