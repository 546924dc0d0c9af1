#!/usr/bin/python3
"""Fault domains on the emulated cluster: what a lost node costs the survivors, phase by phase, and
what domains cost every step (needs root for the network namespaces).

    sudo bench/cluster/domain_bench.py [--hardy build/bin/hardy] [--repeats 2] [--rounds 2] \
        [--scenarios node_crash,leader_crash,node_freeze,node_crash_rpn2,node_freeze_rpn2] [--skip-overhead] \
        [--exchange leader,sharded] [--sync-every 1,4] [--gradient-lag 0,1] [--bucket-mib default,0.1]

1. Recovery: tests/cluster/domain_loss.py's scenarios (8 emulated nodes as 4 domains of 2, one
   spare), --repeats times each; per scenario the median of each phase, in seconds from the fault:
   regrouped (the survivors' leaders connected to the next generation), survivors_next_step (their
   next committed step: what the job loses), relaunched (the lost domain's new launcher started),
   healed (its state came from a live domain), back_at_full_strength, and heal_bytes. The baseline
   in the same run is docs/resilience.md's whole-job relaunch (bench/cluster/node_loss_bench.py).
2. Overhead per step: the same job (examples/tiny.ini's model, 1 rank per node, 8 nodes) as one
   MPI job and as 4 domains of 2 nodes, on the same emulated nodes, alternating, --rounds each;
   the median step_s of metrics.jsonl after the first 20 steps. The domains' price with the leader
   exchange is the gloo allreduce of the gradients between the leaders, the vote, and the in-domain
   broadcast; with the sharded one (--exchange, both by default, in the same rounds) each rank's
   shard allreduce, the in-domain allgather of the shards and the leaders' vote. With
   --sync-every 1,4 also domains that meet every 4th step (--domain-sync-every) in the same
   rounds: their price is paid once per meeting, where the state is averaged too. With
   --gradient-lag 0,1 also every design with lagged updates (the seed run's), against one job
   with lagged updates: there a step's exchange travels while the next step computes. With
   --bucket-mib default,0.1 every design also with gradient buckets of 0.1 MiB (about 6 for this
   model), against one job with the same: the sharded exchange then sends each bucket's shards to
   the other domains while backward still runs.

Results go to bench/results/cluster-domains-<date>.json.
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
sys.path.insert(0, str(ROOT / "tests/cluster"))
sys.path.insert(0, str(ROOT / "tests/lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import read_jsonl  # noqa: E402

SCENARIOS = ["node_crash", "leader_crash", "node_freeze", "node_crash_rpn2", "node_freeze_rpn2"]
PHASES = ["regrouped_s", "survivors_next_step_s", "relaunched_s", "healed_s", "back_at_full_strength_s",
          "heal_bytes", "heal_seconds"]
NODES = 8
OVERHEAD_STEPS = 120


def recovery(args, tmp):
    results, failures = {}, {}
    for scenario in args.scenarios.split(","):
        runs = []
        for repeat in range(args.repeats):
            out = Path(tmp) / f"{scenario}-{repeat}.json"
            done = subprocess.run([sys.executable, str(ROOT / "tests/cluster/domain_loss.py"), args.hardy, scenario,
                                   "--json", str(out)], capture_output=True, text=True)
            if done.returncode == 77:
                sys.exit(done.stdout.strip())
            if done.returncode != 0 or not out.exists():
                failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
                print(f"{scenario} #{repeat + 1}: failed (status {done.returncode}): {failed}", flush=True)
                failures.setdefault(scenario, []).append(failed)
                continue
            runs.append(json.loads(out.read_text())["phases"][0])
            print(f"{scenario} #{repeat + 1}: {runs[-1]}", flush=True)
        results[scenario] = {
            "runs": runs,
            "median": {p: statistics.median(r[p] for r in runs) for p in PHASES if runs and all(p in r for r in runs)}}
    return results, failures


def overhead(args, tmp):
    tiny = ROOT / "examples/tiny.ini"
    nodes, per_domain_nodes = args.overhead_nodes, args.overhead_per_domain
    split = f"domains_{nodes // per_domain_nodes}x{per_domain_nodes}"
    # (name, nodes per domain, --domain-sync-every, --domain-exchange): the names hardy simulate's
    # --domain-price-from reads (jobs/src/scale_model.cpp).
    # With --gradient-lag 1 on both sides (the seed run's lagged updates), "_lag" names the pair.
    # With --bucket-mib, "_bucket_<MiB>" names a design whose gradient buckets are not hardy's default
    # (every design, one job included, at that size: with small buckets a step's reduction starts during
    # backward, and the sharded exchange sends each bucket's shards on as soon as its domain has them).
    def suffix(lag, bucket):
        return ("_lag" if lag else "") + (f"_bucket_{bucket}" if bucket else "")
    designs = [(f"one_job{suffix(lag, bucket)}", 0, 1, "leader", lag, bucket)
               for bucket in args.bucket_mib for lag in args.gradient_lag] + [
        (split + ("" if every == 1 else f"_sync_every_{every}") + ("" if exchange == "leader" else f"_{exchange}")
         + suffix(lag, bucket), per_domain_nodes, every, exchange, lag, bucket)
        for bucket in args.bucket_mib for lag in args.gradient_lag for exchange in args.exchange
        for every in args.sync_every]
    rows = {name: [] for name, *_ in designs}
    # Where a step's time goes (metrics.jsonl's phases), so that a change in the price is explained.
    phases = {name: {"compute_s": [], "allreduce_s": []} for name, *_ in designs}
    with EmulatedCluster(nodes=nodes) as cluster:
        env = {**os.environ, **cluster.mpi_env()}
        for round_ in range(args.rounds):
            for name, per_domain, every, exchange, lag, bucket in designs:
                run = Path(tmp) / f"overhead-{name}-{round_}"
                command = [args.hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
                           "--ranks-per-node", "1", "--nodes-per-domain", str(per_domain), "--run-dir", str(run),
                           "--", "--config", str(tiny), "--steps", str(OVERHEAD_STEPS), "--threads", "1",
                           "--eval-samples", "0", "--snapshot-dir", str(Path(tmp) / "node-local"),
                           "--domain-sync-every", str(every), "--domain-exchange", exchange,
                           "--gradient-lag", str(lag)] + (["--bucket-mib", bucket] if bucket else [])
                subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=600)
                kept = [m for m in read_jsonl(run / "metrics.jsonl") if m["step"] > 20]
                rows[name].append(statistics.median(m["step_s"] for m in kept))
                for phase, values in phases[name].items():
                    values.append(statistics.median(m[phase] for m in kept))
                print(f"overhead round {round_ + 1} {name}: median step {rows[name][-1] * 1000:.1f} ms", flush=True)
    medians = {name: statistics.median(values) for name, values in rows.items()}
    one = medians[next(name for name in medians if name.startswith("one_job"))]
    # Each design against the one job with the same --gradient-lag and buckets.
    reference = {name: f"one_job{suffix(lag, bucket)}" for name, *_, lag, bucket in designs}
    result = {"nodes": nodes, "nodes_per_domain": per_domain_nodes, "rounds": rows,
              "median_ms": {name: m * 1000 for name, m in medians.items()},
              "phase_median_ms": {name: {phase: statistics.median(values) * 1000 for phase, values in by_phase.items()}
                                  for name, by_phase in phases.items()},
              "overhead_pct": {name: 100 * (m - medians[reference[name]]) / medians[reference[name]]
                               for name, m in medians.items() if not name.startswith("one_job")},
              # Each round's own difference (the two ran back to back), whose median the load's
              # drift between rounds moves less than the ratio of the two medians.
              "paired_overhead_pct": {name: statistics.median(100 * (d - o) / o
                                                              for d, o in zip(values, rows[reference[name]]))
                                      for name, values in rows.items() if not name.startswith("one_job")},
              "one_job_ms": one * 1000}
    if split in medians:
        result.update(domains_ms=medians[split] * 1000, domains_overhead_pct=100 * (medians[split] - one) / one)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--overhead-nodes", type=int, default=NODES,
                        help="nodes of the per-step comparison (2 with --overhead-per-domain 1: no node shares a core)")
    parser.add_argument("--overhead-per-domain", type=int, default=2)
    parser.add_argument("--sync-every", type=lambda text: [int(n) for n in text.split(",")], default=[1],
                        help="--domain-sync-every values of the per-step comparison, e.g. 1,4")
    parser.add_argument("--exchange", type=lambda text: text.split(","), default=["leader", "sharded"],
                        help="--domain-exchange values of the per-step comparison (leader, sharded)")
    parser.add_argument("--gradient-lag", type=lambda text: [int(n) for n in text.split(",")], default=[0],
                        help="--gradient-lag values of the per-step comparison, each against one job with the same "
                             "(0,1: both)")
    parser.add_argument("--bucket-mib", type=lambda text: [b if b != "default" else "" for b in text.split(",")],
                        default=[""], help="--bucket-mib values of the per-step comparison, each against one job "
                                           "with the same (default: hardy's; e.g. default,0.1)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    ok, why = namespaces_available()
    if not ok:
        sys.exit(f"cannot emulate a cluster here: {why}")
    with tempfile.TemporaryDirectory(prefix="hardy-domain-bench-") as tmp:
        results, failures = recovery(args, tmp) if args.scenarios else ({}, {})
        cost = None if args.skip_overhead else overhead(args, tmp)
    print("\n| scenario | " + " | ".join(PHASES) + " |")
    print("|---" * (len(PHASES) + 1) + "|")
    for scenario, result in results.items():
        median = result["median"]
        print(f"| {scenario} | " + " | ".join(f"{median[p]:.2f}" if p in median and p != "heal_bytes"
                                             else str(median.get(p, "-")) for p in PHASES) + " |")
    if cost:
        print(f"\nper step on {cost['nodes']} nodes (domains of {cost['nodes_per_domain']}): one job "
              f"{cost['one_job_ms']:.1f} ms; " +
              "; ".join(f"{name} {cost['median_ms'][name]:.1f} ms ({pct:+.1f}%)"
                        for name, pct in cost["overhead_pct"].items()))
    out = Path(args.out) if args.out else ROOT / "bench/results" / f"cluster-domains-{date.today().isoformat()}.json"
    out.write_text(json.dumps({"machine": {"host": platform.node(), "cpus": os.cpu_count()},
                               "hardy": args.hardy, "recovery": results, "failures": failures,
                               "overhead": cost}, indent=1))
    print(f"results: {out}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
