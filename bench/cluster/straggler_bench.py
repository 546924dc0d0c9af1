#!/usr/bin/python3
"""One node at a third of its speed, or one node's link at a tenth of its bandwidth, on the
emulated cluster: what it costs, and what sharing the batch out around it, or evicting it to a
spare, gives back, side by side in one run.

Runs tests/cluster/straggler.py's scenarios (imported: the same job, the same cgroup emulation,
the same figures) on one cluster of 8 emulated nodes x 1 rank of 1 thread and a spare (network
namespaces: root), each node's processes in a cpu cgroup of their own with an equal CFS quota (--cpus / 8 of
a CPU), the slow node's cut by --throttle-by when the job has committed --slow-step steps:

  healthy           no throttle (the watch on)
  slow, off         the throttle, --straggler off: no mitigation
  slow, rebalance   the throttle, --straggler rebalance: rank_slow, then fewer samples for it
  slow, evict       the throttle, --straggler evict with the ninth host as a spare (hardy run
                    --spare-nodes 1) and a relaunch said to cost 1 s: rank_slow, fewer samples,
                    then node_evicted and a relaunch with the spare in the slow node's place
  slow link, off    no throttle; every node's link capped at 200 Mbit/s with tc from the start,
                    the slow node's at 20 from --slow-step, --straggler off
  slow link, evict  the same caps, --straggler evict and the spare: link_probe, link_slow, then
                    node_evicted (cause link) and a relaunch with the spare in its place

    sudo bench/cluster/straggler_bench.py [--hardy build/bin/hardy] [--steps 500] [--slow-step 120]
        [--rounds 1] [--global-batch 32] [--size 128] [--cpus 2] [--throttle-by 6]
        [--period-us P] [--spin]

The defaults are the test's (its docstring says why: short CFS periods, sleeping waits, 128x128
samples, a sixth of the quota). The literal emulation first tried, for comparison:
`--period-us 100000 --throttle-by 3 --spin --size 32 --global-batch 16 --steps 300 --slow-step 80`.

Per scenario: the median step_s of the healthy phase (after the 20 warm-up steps, to the
throttle), of the slow phase before any action (3 steps after the throttle to the first share
change, or to the end), and after the last share change (5 steps on, to the end), and the mean
step of each (a stall that the median hides shows in the mean); when rank_slow named whom, in
steps and seconds after the throttle; the shares; whether every step committed once and every
epoch's samples were trained once (--audit-samples). With --rounds N the scenarios run N times
in rotating order and the table shows medians. Results go to bench/results/straggler-<date>.json
(--output to choose).
"""
import argparse
import os
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/cluster"))
sys.path.insert(0, str(ROOT / "bench/common"))
import benchlib  # noqa: E402
import straggler  # noqa: E402
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402

COLUMNS = [("healthy", "healthy"), ("off", "slow, off"), ("rebalance", "slow, rebalance"), ("evict", "slow, evict")]
LINK_COLUMNS = [("link_off", "slow link, off"), ("link", "slow link, evict")]


def median_of(runs, key):
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def fmt_ms(v):
    return f"{1e3 * v:.1f} ms" if v is not None else "-"


def fmt_x(v):
    return f"{v:.2f}x" if v is not None else "-"


def summary(runs):
    s = {key: median_of(runs, key) for key in ("healthy_median_s", "slow_median_s", "rebalanced_median_s",
                                               "healthy_mean_s", "slow_mean_s", "rebalanced_mean_s",
                                               "slow_over_healthy", "rebalanced_over_healthy",
                                               "rebalanced_over_slow", "named_after_steps", "named_after_s",
                                               "evicted_median_s", "evicted_over_healthy", "evicted_after_s",
                                               "elapsed_s")}
    s["runs"] = len(runs)
    last = runs[-1]
    cpu_b, cpu_a = last.get("cpu_ms_per_step_before") or [], last.get("cpu_ms_per_step_after") or []
    if cpu_b and cpu_a:
        node, other = last["slow_node"], (last["slow_node"] + 1) % len(cpu_b)
        s["cpu_slow"] = f"{cpu_b[node]:.1f}->{cpu_a[node]:.1f}"
        s["cpu_healthy"] = f"{cpu_b[other]:.1f}->{cpu_a[other]:.1f}"
    s["named"] = [[(e["rank"], e["host"], e["step"]) for e in r["rank_slow"]] for r in runs]
    s["named_throttled_node"] = [all(e["host"] == r["slow_host"] for e in r["rank_slow"]) if r["rank_slow"] else None
                                 for r in runs]
    s["shares"] = [[(m["step"], m["reason"], m["per_rank_batch"]) for m in r["shards_rebalanced"]] for r in runs]
    s["recovered"] = [[(e["rank"], e["step"]) for e in r["rank_recovered"]] for r in runs]
    s["link_named"] = [[(e["rank"], e["host"], e["step"]) for e in r.get("link_slow", [])] for r in runs]
    s["probes"] = [[(p["step"], p["named_host"], round(p["seconds"], 2)) for p in r.get("link_probes", [])]
                   for r in runs]
    s["evicted_cause"] = [[e.get("cause") for e in r["node_evicted"]] for r in runs]
    s["steps_committed_once"] = all(r["steps_committed_once"] for r in runs)
    s["samples_once"] = all(r["samples_once"] for r in runs)
    s["exit_0"] = all(r["status"] == 0 and r["finished"] for r in runs)
    return s


def table(summaries, slow_host, slow_rank):
    names = [label for _, label in COLUMNS]
    rows = []

    def row(label, cells):
        rows.append([label] + cells)

    per = [summaries.get(key) for key, _ in COLUMNS]
    get = lambda s, k: s.get(k) if s else None  # noqa: E731
    row("median step, healthy phase", [fmt_ms(get(s, "healthy_median_s")) for s in per])
    row("median step, slow before any action (healthy: same steps)", [fmt_ms(get(s, "slow_median_s")) for s in per])
    row("median step after the last rebalance", [fmt_ms(get(s, "rebalanced_median_s")) for s in per])
    row("mean step: healthy / slow / rebalanced",
        [" / ".join(fmt_ms(get(s, f"{k}_mean_s")) for k in ("healthy", "slow", "rebalanced")) for s in per])
    row("median step on the spare, after the eviction", [fmt_ms(get(s, "evicted_median_s")) for s in per])
    row("evicted / healthy", [fmt_x(get(s, "evicted_over_healthy")) for s in per])
    row("evicted: seconds after the throttle",
        [f"{get(s, 'evicted_after_s'):.1f} s" if get(s, "evicted_after_s") is not None else "-" for s in per])
    row("slow / healthy", [fmt_x(get(s, "slow_over_healthy")) for s in per])
    row("rebalanced / healthy", [fmt_x(get(s, "rebalanced_over_healthy")) for s in per])
    row("rebalanced / slow", [fmt_x(get(s, "rebalanced_over_slow")) for s in per])
    row("rank_slow: steps after the throttle",
        [f"{get(s, 'named_after_steps'):.0f}" if get(s, "named_after_steps") is not None else "-" for s in per])
    row("rank_slow: seconds after the throttle",
        [f"{get(s, 'named_after_s'):.1f} s" if get(s, "named_after_s") is not None else "-" for s in per])
    row(f"named (throttled: rank {slow_rank} on {slow_host})",
        ["; ".join(",".join(f"rank {r} {h} @{st}" for r, h, st in run) or "nobody" for run in get(s, "named") or [])
         or "-" for s in per])
    row("shares (step, reason: per rank)",
        ["; ".join(" / ".join(f"{st} {why}: {','.join(map(str, b))}" for st, why, b in run) or "even" for run in
                   get(s, "shares") or []) or "-" for s in per])
    row("every step committed once", [("yes" if s["steps_committed_once"] else "NO") if s else "-" for s in per])
    row("every epoch's samples once", [("yes" if s["samples_once"] else "NO") if s else "-" for s in per])
    row("exit 0, completed", [("yes" if s["exit_0"] else "NO") if s else "-" for s in per])
    row("run time", [f"{get(s, 'elapsed_s'):.0f} s" if s else "-" for s in per])
    row("CPU a step, ms: slow node / a healthy one (before -> after the throttle)",
        [f"{get(s, 'cpu_slow')} / {get(s, 'cpu_healthy')}" if s else "-" for s in per])
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def link_table(summaries, slow_host):
    """The slow link's scenarios: the healthy phase (every link capped at 200 Mbit/s), the slow
    one (the slow node's at 20), and the steps on the spare."""
    per = [summaries.get(key) for key, _ in LINK_COLUMNS]
    get = lambda s, k: s.get(k) if s else None  # noqa: E731
    rows = [
        ["median step, healthy phase (every link 200 Mbit/s)", *[fmt_ms(get(s, "healthy_median_s")) for s in per]],
        ["median step, slow link before any action", *[fmt_ms(get(s, "slow_median_s")) for s in per]],
        ["slow / healthy", *[fmt_x(get(s, "slow_over_healthy")) for s in per]],
        ["median step on the spare, after the eviction", *[fmt_ms(get(s, "evicted_median_s")) for s in per]],
        ["evicted / healthy", *[fmt_x(get(s, "evicted_over_healthy")) for s in per]],
        ["link_slow: steps / seconds after the cap",
         *[f"{get(s, 'named_after_steps'):.0f} / {get(s, 'named_after_s'):.1f} s"
           if get(s, "named_after_steps") is not None else "-" for s in per]],
        ["evicted: seconds after the cap",
         *[f"{get(s, 'evicted_after_s'):.1f} s" if get(s, "evicted_after_s") is not None else "-" for s in per]],
        [f"named (capped: {slow_host})",
         *["; ".join(",".join(f"{h} @{st}" for _, h, st in run) or "nobody" for run in get(s, "link_named") or [])
           or "-" for s in per]],
        ["probes (step, named, seconds)",
         *["; ".join(" / ".join(f"{st} {h or 'nobody'} {sec} s" for st, h, sec in run) or "none"
                     for run in get(s, "probes") or []) or "-" for s in per]],
        ["every step committed once", *[("yes" if s["steps_committed_once"] else "NO") if s else "-" for s in per]],
        ["every epoch's samples once", *[("yes" if s["samples_once"] else "NO") if s else "-" for s in per]],
        ["exit 0, completed", *[("yes" if s["exit_0"] else "NO") if s else "-" for s in per]],
    ]
    lines = ["| | " + " | ".join(label for _, label in LINK_COLUMNS) + " |", "|---|" + "---|" * len(LINK_COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", help="path of hardy (default build/bin/hardy)")
    parser.add_argument("--steps", type=int, default=straggler.STEPS)
    parser.add_argument("--slow-step", type=int, default=straggler.SLOW_STEP)
    parser.add_argument("--slow-node", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=straggler.BATCH)
    parser.add_argument("--size", type=int, default=straggler.SIZE, help="samples of SIZE x SIZE")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1,
                        help="CPUs the 8 nodes' quotas add up to (default: this machine's)")
    parser.add_argument("--throttle-by", type=int, default=straggler.THROTTLE_BY,
                        help="the slow node's quota is its fair one divided by this")
    parser.add_argument("--period-us", type=int, default=None,
                        help="one CFS period for every group (default: the shortest per quota)")
    parser.add_argument("--spin", action="store_true",
                        help="leave Open MPI's waiting ranks polling (sched_yield), not sleeping")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--scenarios", default=",".join(key for key, _ in COLUMNS + LINK_COLUMNS))
    parser.add_argument("--output", help="JSON file (default bench/results/straggler-<date>.json)")
    args = parser.parse_args()
    args.hardy = benchlib.find_binary("hardy", args.hardy, "straggler_bench")
    scenarios = args.scenarios.split(",")
    if unknown := set(scenarios) - set(straggler.SCENARIOS):
        parser.error(f"unknown scenario {', '.join(sorted(unknown))}; choose from {', '.join(straggler.SCENARIOS)}")
    ok, why = namespaces_available()
    if ok:
        ok, why = straggler.cgroups_available()
    if not ok:
        print(f"straggler_bench: skipped: {why}")
        sys.exit(77)
    results = {"machine": dict(benchlib.machine_info(), load_average_start=os.getloadavg()),
               "settings": {k: v for k, v in vars(args).items() if k not in ("output",)},
               "job": straggler.train_options(args.steps, args.global_batch, args.size),
               "mca": {} if args.spin else straggler.SLEEP_WHEN_IDLE, "runs": [],
               "evict_cost_s": straggler.EVICT_COST_S}
    by_scenario = {s: [] for s in scenarios}
    with tempfile.TemporaryDirectory(prefix="hardy-straggler-bench-") as tmp, \
            EmulatedCluster(nodes=straggler.NODES + (1 if {"evict", "link"} & set(scenarios) else 0)) as cluster:
        for round_index in range(args.rounds):
            order = scenarios if round_index % 2 == 0 else list(reversed(scenarios))
            for scenario in order:
                r = straggler.run_scenario(args.hardy, cluster, scenario, tmp, steps=args.steps,
                                           slow_step=args.slow_step, slow_node=args.slow_node,
                                           batch=args.global_batch, size=args.size, cpus=args.cpus,
                                           period_us=args.period_us, throttle_by=args.throttle_by,
                                           mca=None if args.spin else straggler.SLEEP_WHEN_IDLE)
                r["round"] = round_index
                by_scenario[scenario].append(r)
                results["runs"].append(r)
                print(f"{scenario} #{round_index + 1}: status {r['status']}, {r['elapsed_s']:.0f} s; healthy "
                      f"{fmt_ms(r.get('healthy_median_s'))}, slow {fmt_ms(r.get('slow_median_s'))}, rebalanced "
                      f"{fmt_ms(r.get('rebalanced_median_s'))}; named "
                      f"{[(e['rank'], e['host'], e['step']) for e in r['rank_slow']]}; shares "
                      f"{[(m['step'], m['reason'], m['per_rank_batch']) for m in r['shards_rebalanced']]}",
                      flush=True)
                for line in r["said"]:
                    print(f"   [output] {line}", flush=True)
                if r["status"] != 0:
                    print(r["output_tail"], flush=True)
    summaries = {s: summary(runs) for s, runs in by_scenario.items() if runs}
    results["summary"] = summaries
    results["machine"]["load_average_end"] = os.getloadavg()
    first = results["runs"][0] if results["runs"] else {}
    print()
    if set(summaries) & {key for key, _ in COLUMNS}:
        print(table(summaries, first.get("slow_host"), first.get("slow_rank")))
    if set(summaries) & {key for key, _ in LINK_COLUMNS}:
        print()
        print(link_table(summaries, first.get("slow_host")))
    stamp = datetime.now(timezone.utc).date().isoformat()
    path = benchlib.write_results(results, args.output, f"straggler-{stamp}.json")
    print(f"\nwritten to {path}")
    if not all(s["exit_0"] and s["steps_committed_once"] and s["samples_once"] for s in summaries.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
