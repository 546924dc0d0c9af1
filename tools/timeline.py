#!/usr/bin/env python3
"""Prints a run directory's events as a timeline: what failed, how the job recovered, how long
each part took. Usage: tools/timeline.py RUN_DIR [--all]"""
import argparse
import json
import sys
from pathlib import Path

SHOWN = {"supervisor_started", "job_started", "failure_detected", "communicator_shrunk", "state_restored",
         "shards_rebalanced", "training_resumed", "recovery_finished", "checkpoint_failed", "job_relaunched",
         "final_checkpoint", "preemption_requested", "job_finished", "supervisor_finished"}


def describe(e):
    name = e["event"]
    if name == "job_started":
        return f"{e['world_size']} ranks, {e['steps']} steps, fault tolerant: {e.get('fault_tolerant')}"
    if name == "failure_detected":
        if e.get("detected_by") == "watchdog":
            return f"watchdog: stuck in {e.get('stuck_in')} for {e.get('stuck_s', 0):.1f} s"
        return (f"ranks {e['failed_ranks']} (nodes {e['failed_nodes']}, hosts {sorted(set(e['failed_hosts']))}) "
                f"at step {e['step']}, detected {e['detection_latency_s'] * 1000:.1f} ms after the failure")
    if name == "communicator_shrunk":
        return f"{e['old_size']} -> {e['new_size']} ranks in {e['seconds'] * 1000:.1f} ms"
    if name == "state_restored":
        return f"step {e['step']} from {e['source']} in {e['seconds'] * 1000:.1f} ms"
    if name == "shards_rebalanced":
        return f"global batch {e['global_batch']} as {e['per_rank_batch']} ({e['policy']})"
    if name == "training_resumed":
        return f"at step {e['step']}, {e['seconds_since_detection'] * 1000:.1f} ms after detection"
    if name == "recovery_finished":
        return f"{e['seconds'] * 1000:.1f} ms in all"
    if name == "job_relaunched":
        return f"after {e['previous_end']}, on {e['world_size']} ranks, without nodes {e['excluded_nodes']}"
    if name == "job_finished":
        extra = f", mean IoU {e['mean_iou']:.3f}" if "mean_iou" in e else ""
        return f"{e['status']} at step {e.get('steps')}, {e.get('failures', 0)} failure(s) survived{extra}"
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
