#!/usr/bin/python3
"""How starting and recovering a job grow with its nodes, on the emulated cluster (needs root for
the network namespaces): the measured inputs of `hardy simulate --ettr` (docs/scale-model.md).

    sudo bench/cluster/scale_bench.py [--hardy build/bin/hardy] [--nodes 4,8,16,32] \
        [--per-domain 2] [--repeats 1] [--steps 300] [--fault-step 20]

For every node count N (1 rank per node, plus one spare node) it runs the same small job twice,
alternating: as one MPI job, and as N/K fault domains of K nodes (`--nodes-per-domain K`). Once
the job has committed --fault-step steps, one node that is not the first of its domain is killed
(SIGKILL of every process on it). From events.jsonl and metrics.jsonl:

  launch_s       hardy run's launch (supervisor_started) to the last rank's process start (the
                 kernel's start time: the launcher, its daemons on every node, loading hardy)
  mpi_init_s     the last process start to the last rank's end of MPI_Init_thread
  first_step_s   the last MPI_Init to the first committed step (model, data, the domains' leaders
                 meeting over gloo, the first step)
  start_s        launch to the first committed step: the three above together
  stall_s        the kill to the survivors' next committed step: a whole-job relaunch for one MPI
                 job, the other domains' regrouping for domains
  domain_launch_s, domain_mpi_init_s   the same phases for one domain (the median over domains
                 at the start; and for the lost domain's relaunch on the spare)
  back_s         the kill to the job back at full strength (domains: the lost domain admitted)
  step_s         the median step before the kill

Then it fits each phase against the node count (least squares, a + b*N and c*N^p; the better fit
by residual is kept) and writes the points and fits to bench/results/cluster-scale-<date>.json.
Every emulated node is a network namespace on this machine, so N ranks share its cores: the
figures include that oversubscription, which the fits carry as growth with N. That makes them an
upper bound for a real machine, where every node brings its own cores. One domain's launch and
MPI_Init do the same work at every N, so their growth with N measures that contention alone:
`contention` (1 at the smallest N). Every time phase divided by the contention at its own N is
fitted again (`fits_alone`): what the phases would cost if each node had kept its cores, the
lower bound of `hardy simulate --ettr`.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/cluster"))
sys.path.insert(0, str(ROOT / "tests/lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import read_jsonl, read_jsonl_tail, run_watched, small_job  # noqa: E402

PHASES = ["launch_s", "mpi_init_s", "first_step_s", "start_s", "stall_s", "domain_launch_s", "domain_mpi_init_s",
          "back_s", "step_s", "contention"]
# Phases that take longer when the emulated nodes share the machine's cores (step_s is a price per
# step, compared between designs at the same N, and stays as measured).
CONTENDED = ["launch_s", "mpi_init_s", "first_step_s", "start_s", "stall_s", "domain_launch_s", "domain_mpi_init_s",
             "back_s"]


def first_launch_ranks(events, world):
    """The rank_started records of the first launch: one per rank, per domain for domains."""
    seen, ranks = set(), []
    for e in events:
        if e["event"] != "rank_started":
            continue
        key = (e.get("domain"), e["rank"])
        if key in seen:
            continue
        seen.add(key)
        ranks.append(e)
        if len(ranks) == world:
            break
    return ranks


def launch_phases(issued, ranks):
    started = max(r["process_started_unix_time"] for r in ranks)
    ready = max(r["mpi_ready_unix_time"] for r in ranks)
    return started - issued, ready - started, ready


def measure(events, metrics, fault, nodes, per_domain):
    named = lambda name: [e for e in events if e["event"] == name]  # noqa: E731
    issued = named("supervisor_started")[0]["unix_time"]
    ranks = first_launch_ranks(events, nodes)
    launch, init, ready = launch_phases(issued, ranks)
    first_commit = metrics[0]["unix_time"]
    result = {"launch_s": launch, "mpi_init_s": init, "first_step_s": first_commit - ready,
              "start_s": first_commit - issued,
              "step_s": statistics.median(m["step_s"] for m in metrics if 5 < m["step"] <= fault["step"])}
    # The survivors' next step once they have dealt with the loss (a step that was already on its
    # way when the node died may still commit before they notice).
    regrouped = [e for e in named("domain_quorum_changed" if per_domain else "state_restored")
                 if e["unix_time"] > fault["time"]]
    after = [m for m in metrics if regrouped and m["unix_time"] > regrouped[0]["unix_time"]]
    if after:
        result["stall_s"] = after[0]["unix_time"] - fault["time"]
    if per_domain:
        domains = sorted({r.get("domain") for r in ranks})
        per = [launch_phases(issued, [r for r in ranks if r.get("domain") == d]) for d in domains]
        result["domain_launch_s"] = statistics.median(p[0] for p in per)
        result["domain_mpi_init_s"] = statistics.median(p[1] for p in per)
        relaunched = [e for e in named("domain_relaunched") if e["unix_time"] > fault["time"]]
        if relaunched:
            lost = relaunched[0]["domain"]
            again = [e for e in named("rank_started")
                     if e.get("domain") == lost and e["unix_time"] > relaunched[0]["unix_time"]][:per_domain]
            if len(again) == per_domain:
                launch_again, init_again, _ = launch_phases(relaunched[0]["unix_time"], again)
                result["relaunched_domain_launch_s"] = launch_again
                result["relaunched_domain_mpi_init_s"] = init_again
        joined = [e for e in named("domain_joined") if e["unix_time"] > fault["time"]]
        if joined:
            result["back_s"] = joined[0]["unix_time"] - fault["time"]
    else:
        restored = [e for e in named("state_restored") if e["unix_time"] > fault["time"]]
        relaunched = [e for e in named("job_relaunched") if e["unix_time"] > fault["time"]]
        if relaunched:
            again = [e for e in named("rank_started") if e["unix_time"] > relaunched[0]["unix_time"]][:nodes]
            if len(again) == nodes:
                launch_again, init_again, _ = launch_phases(relaunched[0]["unix_time"], again)
                result["relaunch_launch_s"] = launch_again
                result["relaunch_mpi_init_s"] = init_again
        if restored:
            result["restored_from"] = restored[0].get("source")
        if "stall_s" in result:
            result["back_s"] = result["stall_s"]
    return result


def run_one(args, cluster, nodes, per_domain, tmp, tag):
    run = Path(tmp) / f"run-{tag}"
    samples = 4 * max(16, nodes)
    train = small_job(samples, args.steps, max(16, nodes)) + ["--threads", "1", "--checkpoint-every", "50"]
    command = [args.hardy, "run", "--hosts", ",".join(cluster.hosts[:nodes + 1]), "--launch-agent", cluster.agent,
               "--ranks-per-node", "1", "--nodes-per-domain", str(per_domain), "--spare-nodes", "1",
               "--run-dir", str(run), "--backoff", "0.2", "--probe-timeout", "2",
               "--", *train, "--snapshot-dir", str(Path(tmp) / f"node-local-{tag}")]
    victim = 1 if per_domain == 0 else per_domain + 1  # the second node of domain 1 (or of the job)
    fault = {}

    def inject():
        deadline = time.time() + 600
        while time.time() < deadline:
            if (read_jsonl_tail(run / "metrics.jsonl") or {}).get("step", 0) >= args.fault_step:
                fault.update(time=time.time(), step=(read_jsonl_tail(run / "metrics.jsonl") or {})["step"])
                cluster.crash(victim)
                return
            time.sleep(0.02)

    env = {**os.environ, **cluster.mpi_env()}
    status, output = run_watched(command, inject, 900, env=env)
    events, metrics = read_jsonl(run / "events.jsonl"), read_jsonl(run / "metrics.jsonl")
    if status != 0 or not fault or not metrics:
        print(output[-2000:], flush=True)
        return {"failed": f"status {status}, fault {fault}, {len(metrics)} steps"}
    result = measure(events, metrics, fault, nodes, per_domain)
    result["fault_step"] = fault["step"]
    result["last_step"] = metrics[-1]["step"]
    return result


def fit(points):
    """Least squares of y = a + b*N and of log y = log c + p log N; the one with the smaller
    relative residual. `floor` is the smallest value measured: a larger job does at least the work
    of a smaller one, so a fit that falls with N (noise about a flat cost) is held there, never
    extrapolated below it (or below zero)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    n = len(xs)
    if n < 2 or any(y <= 0 for y in ys):
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    linear_res = math.sqrt(sum(((a + b * x) - y) ** 2 / y ** 2 for x, y in zip(xs, ys)) / n)
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mlx, mly = sum(lx) / n, sum(ly) / n
    p = sum((u - mlx) * (v - mly) for u, v in zip(lx, ly)) / sum((u - mlx) ** 2 for u in lx)
    c = math.exp(mly - p * mlx)
    power_res = math.sqrt(sum(((c * x ** p) - y) ** 2 / y ** 2 for x, y in zip(xs, ys)) / n)
    floor = min(ys)
    linear = {"model": "linear", "a": a, "b": b, "floor": floor, "relative_rms": linear_res}
    power = {"model": "power", "c": c, "p": p, "floor": floor, "relative_rms": power_res}
    return {"best": linear if linear_res <= power_res else power, "linear": linear, "power": power}


def summarize(runs):
    """Medians per design and node count, the contention, the fits; prints the tables."""
    medians = {design: {n: {p: statistics.median(r[p] for r in rs if p in r)
                            for p in {k for r in rs for k, v in r.items() if isinstance(v, (int, float))}}
                        for n, rs in by_n.items()}
               for design, by_n in runs.items()}
    # A domain's launch and MPI_Init do the same work at every N (it has K nodes); they grow only
    # because the N emulated nodes share this machine's cores. Their growth over the smallest N
    # is the contention that every phase here carries.
    for design, by_n in medians.items():
        launches = {n: m["domain_launch_s"] + m["domain_mpi_init_s"] for n, m in by_n.items()
                    if "domain_launch_s" in m and "domain_mpi_init_s" in m}
        if launches:
            smallest = launches[min(launches)]
            for n, value in launches.items():
                by_n[n]["contention"] = value / smallest
    fits = {design: {p: fit([(n, m[p]) for n, m in by_n.items() if p in m])
                     for p in {k for m in by_n.values() for k in m}}
            for design, by_n in medians.items()}
    # The same machine at the same N contends alike for either design.
    contention = {n: m["contention"] for by_n in medians.values() for n, m in by_n.items() if "contention" in m}
    alone = {design: {n: {p: m[p] / contention[n] for p in CONTENDED if p in m}
                      for n, m in by_n.items() if n in contention}
             for design, by_n in medians.items()}
    fits_alone = {design: {p: fit([(n, m[p]) for n, m in by_n.items() if p in m])
                           for p in {k for m in by_n.values() for k in m}}
                  for design, by_n in alone.items()}
    for design, by_n in medians.items():
        print(f"\n{design}\n| N | " + " | ".join(PHASES) + " |\n" + "|---" * (len(PHASES) + 1) + "|")
        for n, m in by_n.items():
            print(f"| {n} | " + " | ".join(f"{m[p]:.2f}" if p in m else "-" for p in PHASES) + " |")
        for p in PHASES:
            f = fits[design].get(p)
            if f:
                b = f["best"]
                form = f"{b['a']:.3f} + {b['b']:.4f}*N" if b["model"] == "linear" else f"{b['c']:.3f}*N^{b['p']:.2f}"
                print(f"  {p}: {form} (relative rms {b['relative_rms']:.2f})")
        for p in ("start_s", "stall_s", "back_s"):
            f = fits_alone[design].get(p)
            if f:
                b = f["best"]
                form = f"{b['a']:.3f} + {b['b']:.4f}*N" if b["model"] == "linear" else f"{b['c']:.3f}*N^{b['p']:.2f}"
                print(f"  {p} with the contention removed: {form} (relative rms {b['relative_rms']:.2f})")
    return medians, fits, fits_alone


def refit(paths, out):
    """Medians and fits again from the runs of earlier results (merged: their runs per design and
    node count are pooled), e.g. after repeating one size."""
    merged, first = {}, None
    for path in paths:
        results = json.loads(Path(path).read_text())
        first = first or results
        for design, by_n in results["runs"].items():
            for n, rs in by_n.items():
                merged.setdefault(design, {}).setdefault(int(n), []).extend(r for r in rs if "failed" not in r)
    merged = {design: dict(sorted(by_n.items())) for design, by_n in merged.items()}
    medians, fits, fits_alone = summarize(merged)
    first.update(runs=merged, medians=medians, fits=fits, fits_alone=fits_alone, refit_from=[str(p) for p in paths])
    Path(out).write_text(json.dumps(first, indent=1))
    print(f"results: {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--nodes", default="4,8,16,32")
    parser.add_argument("--per-domain", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--fault-step", type=int, default=20)
    parser.add_argument("--out", default=None)
    parser.add_argument("--designs", default="one_job,domains", help="which of one_job,domains to run")
    parser.add_argument("--keep", default=None, help="keep the run directories under this directory")
    parser.add_argument("--refit", nargs="+", default=None,
                        help="no runs: medians and fits again from these results files' runs, pooled")
    args = parser.parse_args()
    if args.refit:
        refit(args.refit, args.out or args.refit[0])
        return
    ok, why = namespaces_available()
    if not ok:
        sys.exit(f"cannot emulate a cluster here: {why}")
    counts = [int(n) for n in args.nodes.split(",")]
    designs = {name: per_domain for name, per_domain in
               (("one_job", 0), (f"domains_of_{args.per_domain}", args.per_domain))
               if name.split("_of_")[0] in args.designs.split(",")}
    runs = {design: {n: [] for n in counts} for design in designs}
    load = {"start": Path("/proc/loadavg").read_text().split()[:3]}
    with tempfile.TemporaryDirectory(prefix="hardy-scale-bench-") as scratch, \
            EmulatedCluster(nodes=max(counts) + 1) as cluster:
        tmp = args.keep or scratch
        for repeat in range(args.repeats):
            for n in counts:
                for design, per_domain in designs.items():
                    result = run_one(args, cluster, n, per_domain, tmp, f"{design}-{n}-{repeat}")
                    runs[design][n].append(result)
                    print(f"{design} N={n} #{repeat + 1}: {json.dumps(result)}", flush=True)
    load["end"] = Path("/proc/loadavg").read_text().split()[:3]
    medians, fits, fits_alone = summarize(runs)
    out = Path(args.out) if args.out else ROOT / "bench/results" / f"cluster-scale-{date.today().isoformat()}.json"
    out.write_text(json.dumps({"machine": {"host": platform.node(), "cpus": os.cpu_count(), "load": load},
                               "hardy": args.hardy, "per_domain": args.per_domain, "steps": args.steps,
                               "fault_step": args.fault_step, "runs": runs, "medians": medians, "fits": fits,
                               "fits_alone": fits_alone},
                              indent=1))
    print(f"results: {out}")
    sys.exit(1 if any("failed" in r for by_n in runs.values() for rs in by_n.values() for r in rs) else 0)


if __name__ == "__main__":
    main()
