#!/usr/bin/python3
"""A slow node evicted to a spare (CTest label `cluster`).

Usage: straggler_evict.py HARDY

`hardy run` trains on 2 emulated nodes of one rank (one thread each) with a third host kept as a
spare; from step 300 the rank of node 1 does its work 3x as long (--inject-failure
rank=1@step=300:slow=3). With the default `--straggler evict` and a relaunch said to cost 0.5 s
(--straggler-evict-cost: the measured default, twice the launch's start, takes thousands of this
small job's steps to pay back): rank_slow names rank 1, the batch is shared out around it, and
once the time lost to it reaches the cost, node_evicted names node 1 with its evidence, the job
writes a final checkpoint and stops with status 5, and hardy run relaunches at once (no backoff,
not counted as a restart) with the spare in node 1's place, resuming at the evicted step. Every
step is committed once, every sample once per epoch, and the relaunched steps (the slowdown
belongs to the first launch) run at the healthy pace again.
"""
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import Checks, complete_epochs_exact, read_jsonl, small_job  # noqa: E402

hardy = sys.argv[1]
# At about 5 ms a step the watch's 1 s window and 3 s confirmation are hundreds of steps.
SAMPLES, STEPS, BATCH, SLOW_FROM = 128, 2500, 32, 300


def median_step(metrics, first, last):
    return statistics.median(m["step_s"] for m in metrics if first <= m["step"] <= last)


ok, why = namespaces_available()
if not ok:
    print(f"skipped: cannot emulate a cluster here: {why}")
    sys.exit(77)
check = Checks()
with EmulatedCluster(nodes=3) as cluster, tempfile.TemporaryDirectory(prefix="hardy-cluster-evict-") as tmp:
    run = Path(tmp) / "run"
    train = small_job(SAMPLES, STEPS, BATCH)
    at = train.index("--snapshot-every")
    train = train[:at] + ["--snapshot-every", "0"] + train[at + 2:]
    command = [hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
               "--ranks-per-node", "1", "--spare-nodes", "1", "--run-dir", str(run), "--backoff", "5",
               "--probe-timeout", "2", "--finish-grace", "5", "--", *train, "--threads", "1",
               "--straggler-evict-cost", "0.5", "--inject-failure", f"rank=1@step={SLOW_FROM}:slow=3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, **cluster.mpi_env()})
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
    check(done.returncode == 0, f"hardy run exits 0 ({done.returncode})")
    events = read_jsonl(run / "events.jsonl")

    def of(kind):
        return [e for e in events if e["event"] == kind]

    slow = of("rank_slow")
    check(slow and slow[0]["rank"] == 1 and slow[0]["host"] == cluster.hosts[1],
          f"rank_slow names rank 1 on {cluster.hosts[1]}: {[(e['rank'], e['host']) for e in slow]}")
    evicted = of("node_evicted")
    check(len(evicted) == 1 and evicted[0]["node"] == 1 and evicted[0]["host"] == cluster.hosts[1]
          and evicted[0]["lost_s"] >= evicted[0]["cost_s"] == 0.5 and "slow since step" in evicted[0]["evidence"],
          f"node_evicted names node 1 once, lost >= cost: {evicted}")
    relaunched = of("job_relaunched")
    check(len(relaunched) == 1 and relaunched[0]["backoff_s"] == 0
          and relaunched[0]["excluded_nodes"] == [cluster.hosts[1]]
          and relaunched[0]["excluded"][0].get("replaced_by") == cluster.hosts[2]
          and any("evicted as slow" in e for e in relaunched[0]["excluded"][0]["evidence"])
          and relaunched[0]["nodes"] == [cluster.hosts[0], cluster.hosts[2]],
          f"one relaunch at once, the spare {cluster.hosts[2]} in node 1's place: {relaunched}")
    restored = of("state_restored")
    check(evicted and restored and restored[-1]["step"] == evicted[0]["step"],
          f"the relaunch resumes at the evicted step: {[r.get('step') for r in restored]}")
    finished = of("supervisor_finished")
    check(finished and finished[-1]["status"] == 0 and finished[-1]["launches"] == 2,
          f"the supervisor finishes with status 0 after 2 launches: {finished}")
    metrics = read_jsonl(run / "metrics.jsonl")
    check(sorted(m["step"] for m in metrics) == list(range(1, STEPS + 1)), "every step committed once")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(complete and not wrong, f"{len(complete)} epochs, each sample once in each ({wrong})")
    if evicted:
        healthy = median_step(metrics, 100, SLOW_FROM - 1)
        slowed = median_step(metrics, SLOW_FROM + 10, slow[0]["step"] if slow else SLOW_FROM + 100)
        after = median_step(metrics, evicted[0]["step"] + 10, STEPS)
        print(f"step: healthy {1e3 * healthy:.2f} ms, slow {1e3 * slowed:.2f} ms, after the eviction "
              f"{1e3 * after:.2f} ms")
        check(after <= 1.3 * healthy, f"after the eviction {after / healthy:.2f}x the healthy step (at most 1.3x)")
    check(not cluster.leftovers(), f"no process left on any node: {cluster.leftovers()}")
check.finish("a slow node evicted to a spare")
