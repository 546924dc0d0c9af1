#!/usr/bin/python3
"""Lagged gradient updates where the allreduce costs something: 2 emulated nodes on a slow link.

On one host the ranks' allreduce goes through shared memory and takes a tenth of a millisecond,
so --gradient-lag has nothing to hide (bench/ddp/lag_bench.py). Here each rank is a node of the
emulated cluster (tests/cluster/emulated_cluster.py: network namespaces, so root), its traffic
goes over TCP through a veth whose egress is shaped with `tc` (a token bucket at --rates), and the
same job runs with and without the lag in rotating order:

    sudo bench/cluster/lag_network_bench.py [--hardy build/bin/hardy] [--rates none,1gbit,300mbit]
        [--steps 120] [--rounds 3] [--layouts one_job,domains]

The job is examples/tiny.ini's model (151,267 parameters: 0.6 MB of gradients, one bucket) on
the synthetic data, 1 rank x 1 thread per node. Two layouts of the same 2 nodes: `one_job` (one
MPI job under mpirun: the gradients go over MPI) and `domains` (2 fault domains of 1 node under
`hardy run --nodes-per-domain 1`: the gradients go between the domains' leaders over gloo, the
path a lost node cannot stop). Per run: the median step_s and allreduce_s (the wait for the
reduction and, with domains, the cross-domain exchange, after the compute) past step 20, from
metrics.jsonl. Results go to bench/results/lag-network-<date>.json.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/cluster"))
sys.path.insert(0, str(ROOT / "tests/lib"))
sys.path.insert(0, str(ROOT / "bench/common"))
import benchlib  # noqa: E402
import emulated_cluster as ec  # noqa: E402
from hardy_test import read_jsonl  # noqa: E402


def shape(cluster, rate):
    for node in range(len(cluster.hosts)):
        netns = cluster.node(node).netns
        subprocess.run(["ip", "netns", "exec", netns, "tc", "qdisc", "del", "dev", "eth0", "root"],
                       stderr=subprocess.DEVNULL, check=False)
        if rate != "none":
            subprocess.run(["ip", "netns", "exec", netns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                            "rate", rate, "burst", "64kb", "latency", "100ms"], check=True)


def train(args, cluster, layout, lag, run):
    env = {**os.environ, **cluster.mpi_env()}
    job = ["--config", str(ROOT / "examples/tiny.ini"), "--steps", str(args.steps), "--threads", "1",
           "--gradient-lag", str(lag), "--snapshot-dir", str(run / "node-local"), "--eval-samples", "0"]
    if layout == "one_job":
        hosts = ",".join(f"{h}:1" for h in cluster.hosts)
        command = [args.mpirun, "--oversubscribe", "--bind-to", "none", "-n", str(len(cluster.hosts)), "--host",
                   hosts, args.hardy, "train", "--run-dir", str(run), *job]
    else:
        command = [args.hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
                   "--ranks-per-node", "1", "--nodes-per-domain", "1", "--run-dir", str(run), "--", *job]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    if done.returncode != 0:
        sys.exit(f"lag_network_bench: {' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    metrics = [m for m in read_jsonl(run / "metrics.jsonl") if m["step"] > 20]
    shutil.rmtree(run, ignore_errors=True)
    return {"step_ms": 1000 * statistics.median(m["step_s"] for m in metrics),
            "allreduce_wait_ms": 1000 * statistics.median(m["allreduce_s"] for m in metrics),
            # From the iteration's start to the end of its backward pass (the plan check included).
            "compute_ms": 1000 * statistics.median(m["compute_s"] for m in metrics),
            "final_loss": metrics[-1]["loss"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_hardy_arguments(parser)
    parser.add_argument("--rates", default="none,1gbit,300mbit")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layouts", default="one_job",
                        help="comma-separated: one_job (one MPI job), domains (2 fault domains of 1 node)")
    parser.add_argument("--output", help="JSON file (default bench/results/lag-network-<date>.json)")
    args = parser.parse_args()
    args.hardy = benchlib.find_binary("hardy", args.hardy, "lag_network_bench")
    layouts = args.layouts.split(",")
    if unknown := set(layouts) - {"one_job", "domains"}:
        parser.error(f"unknown layout {', '.join(sorted(unknown))}; choose from one_job, domains")
    ok, why = ec.namespaces_available()
    if not ok:
        sys.exit(f"lag_network_bench: {why}")
    results = {"machine": dict(benchlib.machine_info(), load_average_start=os.getloadavg()),
               "steps": args.steps, "rounds": args.rounds, "runs": []}
    table = []
    with tempfile.TemporaryDirectory(prefix="hardy-lag-network-") as tmp, ec.EmulatedCluster(nodes=2) as cluster:
        for rate in args.rates.split(","):
            shape(cluster, rate)
            per_run = {(layout, lag): [] for layout in layouts for lag in (0, 1)}
            for round_index in range(args.rounds):
                order = list(per_run) if round_index % 2 == 0 else list(reversed(per_run))
                for layout, lag in order:
                    row = train(args, cluster, layout, lag, Path(tmp) / f"{rate}-{round_index}-{layout}-{lag}")
                    per_run[layout, lag].append(row)
                    results["runs"].append({"rate": rate, "round": round_index, "layout": layout, "lag": lag, **row})
                    print(json.dumps(results["runs"][-1]), flush=True)
            for layout in layouts:
                summary = {"rate": rate, "layout": layout}
                for lag in (0, 1):
                    rows = per_run[layout, lag]
                    summary[f"step_ms_lag{lag}"] = statistics.median(r["step_ms"] for r in rows)
                    summary[f"allreduce_wait_ms_lag{lag}"] = statistics.median(r["allreduce_wait_ms"] for r in rows)
                summary["speedup"] = summary["step_ms_lag0"] / summary["step_ms_lag1"]
                table.append(summary)
        shape(cluster, "none")
    results["table"] = table
    results["machine"]["load_average_end"] = os.getloadavg()
    print("\n| link | layout | step ms, no lag | step ms, lag 1 | allreduce wait ms, no lag | lag 1 | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for s in table:
        print(f"| {s['rate']} | {s['layout']} | {s['step_ms_lag0']:.2f} | {s['step_ms_lag1']:.2f} | "
              f"{s['allreduce_wait_ms_lag0']:.2f} | {s['allreduce_wait_ms_lag1']:.2f} | {s['speedup']:.2f}x |")
    path = benchlib.write_results(results, args.output, f"lag-network-{date.today().isoformat()}.json")
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
