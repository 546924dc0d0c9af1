#!/usr/bin/python3
"""A slow node evicted to a spare, in one MPI job or from its fault domain (CTest label `cluster`).

Usage: straggler_evict.py HARDY [one_job|domains] [-- TRAIN OPTIONS...]

Options after `--` are added to `hardy train`'s (for example `--gradient-lag 1`).

one_job (the default, CTest cluster/straggler_evict): `hardy run` trains on 2 emulated nodes of
one rank (one thread each) with a third host kept as a spare; from step 300 the rank of node 1
does its work 3x as long (--inject-failure rank=1@step=300:slow=3). With the default `--straggler
evict` and a relaunch said to cost 0.5 s (--straggler-evict-cost: the measured default, twice the
launch's start, takes thousands of this small job's steps to pay back): rank_slow names rank 1,
the batch is shared out around it, and once the time lost to it reaches the cost, node_evicted
names node 1 with its evidence, the job writes a final checkpoint and stops with status 5, and
hardy run relaunches at once (no backoff, not counted as a restart) with the spare in node 1's
place, resuming at the evicted step.

domains (CTest cluster/straggler_evict_domain): 4 emulated nodes of one rank as 2 fault domains of
2 (`hardy run --nodes-per-domain 2`), a fifth host kept as a spare, rank 1 (domain 0's second
node) 3x slow from step 300. The watch runs inside each domain, over its own ranks: domain 0
names its rank 1 slow, shares its slice of the batch out around it, and at the cost evicts node 1:
node_evicted (domain 0), domain 0 alone stops (status 5), and the other domain trains on without
it; hardy run reads the eviction as conclusive (domain_lost with `evicting`, node 1 excluded for
the spare, not counted against --max-restarts) and relaunches domain 0 on its node 0 and the
spare, which heals from domain 1 and joins again.

Checked for both: every step committed once, every sample once per epoch, the supervisor finishes
with status 0, and the steps after the eviction (after the domain joined again) run at the healthy
pace again (at most 1.3x the healthy median), no process left behind.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import Checks, complete_epochs_exact, median_step, read_jsonl, small_job, split_train_options  # noqa: E402

args, extra = split_train_options(sys.argv[1:])
hardy = args[0]
layout = args[1] if len(args) > 1 else "one_job"
if layout not in ("one_job", "domains"):
    print(f"unknown layout {layout!r}: one_job or domains")
    sys.exit(2)
domains = layout == "domains"
# At about 5 ms a step the watch's 1 s window and 3 s confirmation are hundreds of steps.
SAMPLES, STEPS, BATCH, SLOW_FROM = 128, 2500, 32, 300
NODES = 4 if domains else 2


ok, why = namespaces_available()
if not ok:
    print(f"skipped: cannot emulate a cluster here: {why}")
    sys.exit(77)
check = Checks()
with EmulatedCluster(nodes=NODES + 1) as cluster, tempfile.TemporaryDirectory(prefix="hardy-cluster-evict-") as tmp:
    run = Path(tmp) / "run"
    spare = cluster.hosts[NODES]
    train = small_job(SAMPLES, STEPS, BATCH)
    at = train.index("--snapshot-every")
    train = train[:at] + ["--snapshot-every", "0"] + train[at + 2:]
    command = [hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
               "--ranks-per-node", "1", "--spare-nodes", "1", "--run-dir", str(run), "--backoff", "5",
               "--probe-timeout", "2", "--finish-grace", "5"]
    if domains:
        command += ["--nodes-per-domain", "2"]
    command += ["--", *train, "--threads", "1", "--straggler-evict-cost", "0.5",
                "--inject-failure", f"rank=1@step={SLOW_FROM}:slow=3", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **cluster.mpi_env()})
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
    check(done.returncode == 0, f"{layout}: hardy run exits 0 ({done.returncode})")
    events = read_jsonl(run / "events.jsonl")

    def of(kind):
        return [e for e in events if e["event"] == kind]

    slow = of("rank_slow")
    check(slow and slow[0]["rank"] == 1 and slow[0]["host"] == cluster.hosts[1] and slow[0].get("domain", 0) == 0,
          f"{layout}: rank_slow names rank 1 on {cluster.hosts[1]} (domain 0): "
          f"{[(e['rank'], e['host'], e.get('domain')) for e in slow]}")
    evicted = of("node_evicted")
    check(len(evicted) == 1 and evicted[0]["node"] == 1 and evicted[0]["host"] == cluster.hosts[1]
          and evicted[0].get("domain", 0) == 0
          and evicted[0]["lost_s"] >= evicted[0]["cost_s"] == 0.5 and "slow since step" in evicted[0]["evidence"],
          f"{layout}: node_evicted names node 1 once, lost >= cost: {evicted}")
    finished = of("supervisor_finished")
    metrics = read_jsonl(run / "metrics.jsonl")
    if domains:
        lost = of("domain_lost")
        check(len(lost) == 1 and lost[0]["domain"] == 0 and lost[0]["evicting"] and lost[0]["exit_status"] == 5
              and [x["host"] for x in lost[0]["excluded"]] == [cluster.hosts[1]]
              and lost[0]["excluded"][0].get("replaced_by") == spare
              and any("evicted as slow" in e for e in lost[0]["excluded"][0]["evidence"]),
              f"domains: domain 0 ends once, evicting, node 1 excluded for the spare {spare}: {lost}")
        relaunched = of("domain_relaunched")
        check(len(relaunched) == 1 and relaunched[0]["domain"] == 0
              and relaunched[0]["nodes"] == [cluster.hosts[0], spare],
              f"domains: domain 0 relaunched once on {cluster.hosts[0]} and the spare: {relaunched}")
        joined = [e for e in of("domain_joined") if e.get("domain") == 0 and evicted
                  and e["unix_time"] > evicted[0]["unix_time"]]
        check(bool(joined), "domains: domain 0 joins again after the eviction")
        check(not of("domain_abandoned"), f"domains: no domain abandoned: {of('domain_abandoned')}")
        check(finished and finished[-1]["status"] == 0 and finished[-1]["launches"] == 3,
              f"domains: the supervisor finishes with status 0 after 3 launches: {finished}")
        back = [m["step"] for m in metrics if joined and m["unix_time"] > joined[0]["unix_time"]]
        after_from = back[0] if back else STEPS
        check(metrics and metrics[-1]["world_size"] == NODES, f"domains: back at {NODES} ranks at the end")
    else:
        relaunched = of("job_relaunched")
        check(len(relaunched) == 1 and relaunched[0]["backoff_s"] == 0
              and relaunched[0]["excluded_nodes"] == [cluster.hosts[1]]
              and relaunched[0]["excluded"][0].get("replaced_by") == spare
              and any("evicted as slow" in e for e in relaunched[0]["excluded"][0]["evidence"])
              and relaunched[0]["nodes"] == [cluster.hosts[0], spare],
              f"one_job: one relaunch at once, the spare {spare} in node 1's place: {relaunched}")
        restored = of("state_restored")
        check(evicted and restored and restored[-1]["step"] == evicted[0]["step"],
              f"one_job: the relaunch resumes at the evicted step: {[r.get('step') for r in restored]}")
        check(finished and finished[-1]["status"] == 0 and finished[-1]["launches"] == 2,
              f"one_job: the supervisor finishes with status 0 after 2 launches: {finished}")
        after_from = evicted[0]["step"] if evicted else STEPS
    check(sorted(m["step"] for m in metrics) == list(range(1, STEPS + 1)), f"{layout}: every step committed once")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(complete and not wrong, f"{layout}: {len(complete)} epochs, each sample once in each ({wrong})")
    if evicted and after_from + 20 < STEPS:
        healthy = median_step(metrics, 100, SLOW_FROM - 1)
        slowed = median_step(metrics, SLOW_FROM + 10, slow[0]["step"] if slow else SLOW_FROM + 100)
        after = median_step(metrics, after_from + 10, STEPS)
        print(f"{layout}: step healthy {1e3 * healthy:.2f} ms, slow {1e3 * slowed:.2f} ms, after the eviction "
              f"{1e3 * after:.2f} ms (from step {after_from + 10})")
        check(after <= 1.3 * healthy, f"{layout}: after the eviction {after / healthy:.2f}x the healthy step (at most 1.3x)")
    check(not cluster.leftovers(), f"{layout}: no process left on any node: {cluster.leftovers()}")
check.finish(f"a slow node evicted to a spare ({layout})")
