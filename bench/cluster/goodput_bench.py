#!/usr/bin/python3
"""Goodput under a stream of failures on the emulated cluster: hardy against checkpoint-restart
(needs root for the network namespaces).

    sudo bench/cluster/goodput_bench.py [--hardy build/bin/hardy] [--seed 1] [--duration 1200] \
        [--mtbf 90] [--configs one_job,domains,restart] [--kinds rank_kill,node_crash,node_freeze,partition] \
        [--json bench/results/goodput-DATE.json]

One failure schedule is drawn from --seed: interruptions at exponentially distributed intervals
of mean --mtbf seconds (from the job's first committed step), each of a kind drawn evenly from
--kinds and a victim drawn as a fraction (the k-th of the live ranks or nodes at that moment). It is
replayed identically, in time, kind and victim, against each configuration, each on a fresh
emulated cluster of 8 nodes of one rank (tests/cluster/emulated_cluster.py) with spare hosts:

  one_job   hardy's defaults under `hardy run --spare-nodes K`: one MPI job with ULFM, in-job
            shrink, node-local snapshots (auto), a relaunch on the spares when the job dies whole
  domains   the same as 4 fault domains of 2 nodes (`--nodes-per-domain 2`): a lost node stops
            only its domain, which comes back on a spare healed from the others
  restart   checkpoint-restart as users run it without hardy's defences, at its strongest: `hardy
            run --ulfm false` (every failure ends the job; it is relaunched whole at once on the
            healthy nodes and spares, no backoff growth) resuming from its last periodic
            checkpoint (node-local snapshots off, no slow-node policy: `--straggler off`),
            every C steps, C the Young/Daly optimum
            sqrt(2 x MTBF x cost) for --mtbf and the checkpoint's cost measured in its own
            failure-free run (the median stall the training pays per checkpoint; at least 1.5 x
            the median write, so that a write is on disk before the next one starts)

The kinds: rank_kill (SIGKILL one rank's process), node_crash (SIGKILL every process of a node,
its runtime daemon included), node_freeze (link down and SIGSTOP everything on it), partition
(link down only). A node a fault took stays out for the rest of the run (15 s after a freeze or a
partition its processes are killed too, so that they take no CPU from the others): repair is
emulated by spares, --spares of them (default: as many as the schedule has node faults, plus
two: a slow node evicted takes one too), which is what a scheduler's replacement node would be. Every node runs in a cgroup v1 cpu
group with an equal CFS quota (an eighth of a CPU: together one of the machine's CPUs, so that
the quota binds) and Open MPI's waiting ranks sleep (tests/cluster/straggler.py's
NodeCpuGroups and SLEEP_WHEN_IDLE), so that the 2-core machine's nodes share it as machines of
their own would: without it, 8 ranks on 2 cores timed the scheduler, and the slow-rank watch of
two-rank domains named healthy second ranks slow (scores 0.70-0.84).

Each configuration trains the fault tests' small job (hardy_test.py small_job: the compact network,
every sample audited) on 256 samples of 16x128x128 read from files (`hardy data generate`, written
once) at a global batch of 32, for as many steps as a failure-free one-job run takes --duration
seconds (its median step from a failure-free run of 200 steps first; the same short run of
`restart` measures its checkpoint's cost). Goodput = steps x the healthy step / wall time (from
`hardy run`'s start to its end): the share of its healthy throughput the run kept, the healthy
step measured in the same run as the mean of its quiet steps (at full strength, none within 20 s
of a fault or of a launch, restore or heal, past the first 60; none, and no goodput of its own,
with fewer than 200 such steps: its faults' losses are then counted at one job's healthy step).
The median of those steps, and the goodput it gives, are kept beside (goodput_median: until
2026-11-30 the goodput; a step's time is skewed, so it charged a run that never failed 1-3.4%). Also against one job's healthy step (from the one_job run),
so that what a design costs every step counts as lost. Per fault, over its window (until the next
fault): the time it cost until the job had recovered (`lost_s`: from the fault to WARMUP_STEPS
commits after its disruption ended, less its new steps at the healthy step; `recovered_s`; the
whole window when the next fault came first), what the rest of its window lost (`background_s`,
`background_lost_s`: the machine's own spread, summed over the run with the start's into the
run's `background_s` and `background_lost_s`), the whole window's loss (`window_lost_s`), its
longest time without a commit, the steps it redid (`redone`: committed again after a restore),
and the fewest ranks a step ran on (`fewest_ranks`). Every run is checked: `hardy run` exits 0, every step
1..N committed (at least once), every sample once in every complete epoch.

Results go to --json (default bench/results/goodput-<date>.json); the table is printed.
"""
import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/cluster"))
sys.path.insert(0, str(ROOT / "tests/lib"))
sys.path.insert(0, str(ROOT / "tests/soak"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import complete_epochs_exact, on_dataset, read_jsonl, small_job  # noqa: E402
from random_faults import Job, pid_alive  # noqa: E402
import straggler  # noqa: E402  (NodeCpuGroups: a CPU share of its own for every emulated node)

NODES, PER_DOMAIN = 8, 2
KINDS = ["rank_kill", "node_crash", "node_freeze", "partition"]
# 128x128 samples, a global batch of 32 (4 a rank), as tests/cluster/straggler.py: each step's
# own work outweighs its fixed costs, so that a job shrunk to 7 ranks at the same global batch is
# slower, as a compute-bound job is; at 32x32 and 2 a rank the collectives' fixed costs were most
# of the step and a shrunk job ran faster.
SAMPLES, BATCH, SIZE = 256, 32, 128
# DATASET: the samples are read from files (hardy's own layout, written once by `hardy data
# generate`), as a user's job reads its dataset. --synthetic made them in the loader, 3 ms of CPU
# each, once per rank per sample until its sample cache held all 256: on an eighth of a CPU that
# took every launch's first ~350 steps (about 25 s) at 110-170 ms instead of 80 (2026-11-30),
# which counted every relaunch twice over.
HEALTHY_STEPS = 200
QUIET_AFTER_FAULT_S = 20     # steps this soon after a fault do not count as healthy
MIN_QUIET_STEPS = 200        # fewer healthy steps than this in a run: no healthy step of its own
KILL_STRANDED_AFTER_S = 15   # a frozen or partitioned node's processes are killed after this
# The CPUs the 8 nodes' quotas add up to: one of the machine's two, so that the quota binds and
# a job on fewer nodes has less CPU, as on a real cluster. With both CPUs shared out, the healthy
# nodes got about half their quota (the daemons, the supervisor, this script take the rest) and a
# job shrunk to 5 nodes stepped as fast as on 8 (64 and 67 ms, 2026-11-30).
CPUS = 1.0


def draw_schedule(seed, mtbf, horizon, kinds):
    rng = random.Random(f"hardy-goodput:{seed}")
    faults, at = [], 0.0
    while True:
        at += rng.expovariate(1.0 / mtbf)
        if at > horizon:
            return faults
        faults.append({"at_s": round(at, 3), "kind": rng.choice(kinds), "pick": rng.random()})


def make_dataset(hardy, root):
    """The samples in hardy's own layout on disk, as a user's job reads them (see DATASET)."""
    subprocess.run([hardy, "data", "generate", "--out", str(root), "--samples", str(SAMPLES),
                    "--height", str(SIZE), "--width", str(SIZE), "--seed", "5"],
                   check=True, capture_output=True, text=True, timeout=300)
    return root


def train_options(steps, config, dataset, checkpoint_every=None):
    options = on_dataset(small_job(SAMPLES, steps, BATCH), dataset)
    at = options.index("--snapshot-every")
    options = options[:at] + options[at + 2:]          # hardy's default: auto
    options += ["--threads", "1"]
    if config == "restart":
        # Without hardy's slow-node policy too: rank 0 writing a checkpoint every 2 steps on its
        # eighth of a CPU was named slow and its node evicted, 7 times in one run (2026-11-30),
        # each a relaunch and a spare that users without hardy would not have paid.
        options += ["--snapshot-every", "0", "--checkpoint-every", str(checkpoint_every),
                    "--straggler", "off"]
    return options


def supervisor_command(args, cluster, run, config, spares, train):
    command = [args.hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
               "--ranks-per-node", "1", "--spare-nodes", str(spares), "--run-dir", str(run),
               "--probe-timeout", "2", "--max-restarts", "1000"]
    if config == "domains":
        command += ["--nodes-per-domain", str(PER_DOMAIN)]
    if config == "restart":
        command += ["--ulfm", "false"]
    return command + ["--", *train]


def healthy_run(args, tmp, config, checkpoint_every=None):
    """A failure-free run of HEALTHY_STEPS: the median step after the first 20, and the
    checkpoints' stall and write times."""
    with EmulatedCluster(nodes=NODES) as cluster, straggler.NodeCpuGroups(cluster, cpus=CPUS, active_nodes=NODES):
        run = Path(tmp) / f"healthy-{config}"
        command = supervisor_command(args, cluster, run, config, 0,
                                     train_options(HEALTHY_STEPS, config, args.dataset, checkpoint_every or 50))
        done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                              env={**os.environ, **cluster.mpi_env(), **straggler.SLEEP_WHEN_IDLE})
        if done.returncode != 0:
            sys.exit(f"{config}: the failure-free run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        metrics = read_jsonl(run / "metrics.jsonl")
        events = read_jsonl(run / "events.jsonl")
        written = [e for e in events if e["event"] == "checkpoint_written"]
        return {"median_step_s": statistics.median(m["step_s"] for m in metrics if m["step"] > 20),
                "checkpoint_stall_s": statistics.median(e["stall_s"] for e in written) if written else None,
                "checkpoint_write_s": statistics.median(e["write_s"] for e in written) if written else None}


class Injector:
    """Replays the schedule against one run, from its first committed step."""

    def __init__(self, cluster, run, schedule):
        self.cluster, self.job, self.schedule = cluster, Job(run), schedule
        self.down, self.done, self.log = set(), threading.Event(), []

    def live_ranks(self):
        return [r for r in self.job.current_ranks() if r[2] not in self.down and pid_alive(r[1])]

    def live_hosts(self):
        return list(dict.fromkeys(host for _, _, host in self.live_ranks()))

    def __call__(self):
        while not self.job.step() and not self.done.wait(0.2):
            pass
        start = time.time()
        for fault in self.schedule:
            if self.done.wait(max(0.0, start + fault["at_s"] - time.time())):
                return
            kind, record = fault["kind"], {"at_s": fault["at_s"], "kind": fault["kind"]}
            if kind == "rank_kill":
                ranks = self.live_ranks()
                if not ranks:
                    continue
                rank, pid, host = ranks[int(fault["pick"] * len(ranks))]
                record.update(host=host, rank=rank, step=self.job.step(), time=time.time())
                self.cluster.kill_pid(pid)
            else:
                hosts = self.live_hosts()
                if not hosts:
                    continue
                host = hosts[int(fault["pick"] * len(hosts))]
                record.update(host=host, step=self.job.step(), time=time.time())
                self.down.add(host)
                if kind == "node_crash":
                    self.cluster.crash(host)
                else:
                    (self.cluster.freeze if kind == "node_freeze" else self.cluster.partition)(host)
                    threading.Timer(KILL_STRANDED_AFTER_S, self.cluster.crash, (host,), {"link_down": True}).start()
            self.log.append(record)
            print(f"  {record['kind']} {record['host']} at {record['at_s']:.0f} s, step {record['step']}", flush=True)


# Events after which a job is not yet at its healthy pace: a launch's or a heal's first steps read
# cold files and caches, and a restore redoes work.
DISRUPTIONS = {"launch_started", "state_restored", "failure_detected", "domain_lost", "domain_healed",
               "domain_joined"}


def healthy_step(metrics, faults, events, full_world):
    """The run's own healthy step, whose inverse is its healthy throughput: the mean of its quiet
    steps (at full strength, past the first launch's warm-up, none within QUIET_AFTER_FAULT_S of a
    fault or of a disruption: a launch's first ~50 steps ran at 100-110 ms against 80-95 after),
    and their median as well; None with fewer than MIN_QUIET_STEPS of them (a run of fault domains
    where one stayed shrunk from its 58th step took its warm-up for healthy, and its goodput came
    out at 106%, 2026-11-30).

    The mean, not the median, because goodput is a share of healthy throughput: a step's time is
    skewed (a failure-free stretch of 740 steps had a median of 142.3 ms and a mean of 147.1, seed
    2 at 58cddad), so steps x median / wall charges a job that never failed 3.4% of its time, and
    each design's ordinary spread counted as a failure's loss. The median's goodput is kept beside
    it (goodput_median), as the issue first wrote it."""
    marks = [f["time"] for f in faults] + [e["unix_time"] for e in events if e["event"] in DISRUPTIONS]
    quiet = [m["step_s"] for m in metrics if m["step"] > 60 and m.get("world_size") == full_world
             and not any(0 <= m["unix_time"] - t <= QUIET_AFTER_FAULT_S for t in marks)]
    if len(quiet) < MIN_QUIET_STEPS:
        return None, None
    return statistics.fmean(quiet), statistics.median(quiet)


# After a failure's disruption (its last step on fewer ranks, its last restore or launch, its
# first commit after the fault) the job is charged for this many more steps: a relaunch's first
# steps ran 0.57 s and 0.17 s against 0.14 (2026-11-30), and the loader's first reads are cold.
WARMUP_STEPS = 20


def recovered_at(fault_time, until, later, events, full_world):
    """When the job had recovered from a fault at `fault_time`, its window ending at `until`:
    WARMUP_STEPS commits after its disruption ended (the last commit on fewer than full_world
    ranks, the last state_restored or launch_started in the window, the first commit after the
    fault, whichever is last); None when the window ended first (the next fault came)."""
    if not later:
        return None
    commits = sorted(m["unix_time"] for m in later)
    marks = [commits[0]]
    marks += [m["unix_time"] for m in later if m.get("world_size") and m["world_size"] < full_world]
    marks += [e["unix_time"] for e in events if e["event"] in ("state_restored", "launch_started")
              and fault_time < e["unix_time"] <= until]
    disrupted = max(marks)
    after = [t for t in commits if t > disrupted]
    return after[WARMUP_STEPS - 1] if len(after) >= WARMUP_STEPS else None


def per_fault(faults, metrics, events, full_world, reference_step_s, ended):
    """For each injected fault, over its window (until the next fault or the run's end): the time
    it cost until the job had recovered from it (`lost_s`: from the fault to recovered_at(), less
    the new steps committed in that time at the reference step; the whole window when it did not
    recover within it), the rest of the window (`background_s`, `background_lost_s`: the machine's
    own spread, which no failure caused), the whole window's loss (`window_lost_s`, what `lost_s`
    was until 2026-11-30), the longest time without a commit, the steps committed again
    (restored from before it), and the fewest ranks a step ran on."""
    out = []
    for i, fault in enumerate(faults):
        until = faults[i + 1]["time"] if i + 1 < len(faults) else ended
        later = [m for m in metrics if fault["time"] < m["unix_time"] <= until]
        new = {m["step"] for m in later if m["step"] > fault["step"]}
        recovered = recovered_at(fault["time"], until, later, events, full_world)
        charged_until = recovered if recovered is not None else until
        charged = {m["step"] for m in later if m["step"] > fault["step"] and m["unix_time"] <= charged_until}
        times = [fault["time"], *sorted(m["unix_time"] for m in later)]
        restored = [e for e in events if e["event"] == "state_restored" and fault["time"] < e["unix_time"] <= until]
        redone = max((fault["step"] - e["step"] for e in restored if e.get("step") is not None), default=0)
        sizes = [m["world_size"] for m in later if m.get("world_size")]
        out.append({**fault, "window_s": round(until - fault["time"], 3),
                    "lost_s": round(charged_until - fault["time"] - len(charged) * reference_step_s, 3),
                    "recovered_s": round(recovered - fault["time"], 3) if recovered is not None else None,
                    "background_s": round(until - charged_until, 3),
                    "background_lost_s": round(until - charged_until - len(new - charged) * reference_step_s, 3),
                    "window_lost_s": round(until - fault["time"] - len(new) * reference_step_s, 3),
                    "longest_gap_s": round(max(b - a for a, b in zip(times, times[1:])), 3) if later else None,
                    "redone": max(0, redone), "fewest_ranks": min(sizes) if sizes else None})
    return out


def lost_before_faults(started, ended, faults, metrics, reference_step_s):
    """From `hardy run`'s start to the first fault (or the end): the time lost until the launch
    had committed WARMUP_STEPS steps (the launch, MPI start-up, the first steps' warm-up: less
    those steps at the healthy step), and the time after that (`background_s`) with what it lost
    (`background_lost_s`: the machine's own spread)."""
    first_fault = faults[0]["time"] if faults else ended
    before = sorted((m["unix_time"], m["step"]) for m in metrics if m["unix_time"] <= first_fault)
    warm = before[WARMUP_STEPS - 1][0] if len(before) >= WARMUP_STEPS else first_fault
    steps_warm = len({step for t, step in before if t <= warm})
    steps_after = len({step for t, step in before if t > warm})
    return {"start_lost_s": round((warm - started) - reference_step_s * steps_warm, 3),
            "background_s": round(first_fault - warm, 3),
            "background_lost_s": round((first_fault - warm) - reference_step_s * steps_after, 3)}


def background(start, faults):
    """The run's time outside every failure's recovery and the launch's warm-up, and what it
    lost: the machine's own spread (a rate the model applies as the run's, not a failure's)."""
    seconds = start["background_s"] + sum(f["background_s"] for f in faults)
    lost = start["background_lost_s"] + sum(f["background_lost_s"] for f in faults)
    return {"background_s": round(seconds, 3), "background_lost_s": round(lost, 3)}


def reanalyze(path, keep):
    """Derives again, as this version does, what results written before derived from their runs
    (the healthy step, goodput, each fault's losses, start_lost_s), from the run directories kept
    with --keep. The run's start: its end (the last fault's window ends there) less its wall."""
    results = json.loads(Path(path).read_text())
    one_job_step = None
    for config in sorted(results["runs"], key=lambda c: c != "one_job"):
        run = results["runs"][config]
        faults = [{k: f[k] for k in ("at_s", "kind", "host", "rank", "step", "time") if k in f}
                  for f in run["faults"]]
        if not faults:
            continue
        ended = run["faults"][-1]["time"] + run["faults"][-1]["window_s"]
        metrics = read_jsonl(Path(keep) / f"run-{config}" / "metrics.jsonl")
        events = read_jsonl(Path(keep) / f"run-{config}" / "events.jsonl")
        own, median = healthy_step(metrics, faults, events, NODES)
        reference = own or one_job_step
        if config == "one_job":
            one_job_step = own
        start = lost_before_faults(ended - run["wall_s"], ended, faults, metrics, reference)
        faults = per_fault(faults, metrics, events, NODES, reference, ended)
        run.update(healthy_step_s=own, healthy_median_step_s=median, reference_step_s=reference,
                   goodput=run["steps"] * own / run["wall_s"] if own else None,
                   goodput_median=run["steps"] * median / run["wall_s"] if median else None,
                   start_lost_s=start["start_lost_s"], faults=faults, **background(start, faults))
        if one_job_step:
            run["goodput_vs_one_job_step"] = run["steps"] * one_job_step / run["wall_s"]
        print(f"{config}: healthy step {own} (median {median}), goodput {percent(run['goodput'])} "
              f"(at the median step {percent(run['goodput_median'])}), start_lost_s {run['start_lost_s']}")
    Path(path).write_text(json.dumps(results, indent=1))


def faulty_run(args, tmp, config, steps, spares, schedule, checkpoint_every, one_job_step=None):
    with EmulatedCluster(nodes=NODES + spares) as cluster, \
            straggler.NodeCpuGroups(cluster, cpus=CPUS, active_nodes=NODES):
        run = Path(tmp) / f"run-{config}"
        command = supervisor_command(args, cluster, run, config, spares,
                                     train_options(steps, config, args.dataset, checkpoint_every))
        injector = Injector(cluster, run, schedule)
        thread = threading.Thread(target=injector, daemon=True)
        started = time.time()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, **cluster.mpi_env(), **straggler.SLEEP_WHEN_IDLE})
        thread.start()
        try:
            output, _ = process.communicate(timeout=args.duration * 6 + 600)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        ended = time.time()
        wall = ended - started
        injector.done.set()
        thread.join(timeout=10)
        metrics = read_jsonl(run / "metrics.jsonl")
        events = read_jsonl(run / "events.jsonl")
        committed = sorted({m["step"] for m in metrics})
        complete, wrong = complete_epochs_exact(run, SAMPLES)
        checks = {"exit_0": process.returncode == 0,
                  "every_step_committed": committed == list(range(1, steps + 1)),
                  "samples_once_per_epoch": bool(complete) and not wrong}
        if not all(checks.values()):
            print(output[-4000:])
        if args.keep:
            import shutil
            shutil.copytree(run, Path(args.keep) / f"run-{config}", dirs_exist_ok=True)
            (Path(args.keep) / f"output-{config}.txt").write_text(output)
        own_step_s, median_step_s = healthy_step(metrics, injector.log, events, NODES)
        # Without a healthy step of its own, the faults' losses are counted against one job's.
        reference_step_s = own_step_s or one_job_step
        # What the run lost to its launch (MPI start-up and the first steps' warm-up), to each
        # fault until the job had recovered, and in between (the background). Together they make
        # up all the time lost: wall - steps x healthy step = start_lost_s + the faults' lost_s +
        # background_lost_s.
        start = lost_before_faults(started, ended, injector.log, metrics, reference_step_s)
        faults = per_fault(injector.log, metrics, events, NODES, reference_step_s, ended)
        relaunches = len([e for e in events if e["event"] in ("job_relaunched", "domain_relaunched")])
        shrinks = len([e for e in events if e["event"] == "communicator_shrunk"])
        regrows = len([e for e in events if e["event"] == "regrow_planned"])
        return {"config": config, "steps": steps, "wall_s": round(wall, 2),
                "healthy_step_s": own_step_s, "goodput": steps * own_step_s / wall if own_step_s else None,
                "healthy_median_step_s": median_step_s,
                "goodput_median": steps * median_step_s / wall if median_step_s else None,
                "reference_step_s": reference_step_s,
                "start_lost_s": start["start_lost_s"], "faults": faults, **background(start, faults),
                "lines_committed": len(metrics), "relaunches": relaunches, "in_job_shrinks": shrinks,
                "regrows": regrows,
                "checks": checks, "checkpoint_every": checkpoint_every}


def percent(fraction):
    return f"{100 * fraction:.1f}%" if fraction is not None else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hardy", default=str(ROOT / "build/bin/hardy"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=1200, help="a failure-free run's length, seconds")
    parser.add_argument("--mtbf", type=float, default=90, help="mean seconds between interruptions")
    parser.add_argument("--configs", default="one_job,domains,restart")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--spares", type=int, default=None)
    parser.add_argument("--keep", default=None, help="copy each faulty run's directory and output here")
    parser.add_argument("--json", default=str(ROOT / f"bench/results/goodput-{date.today()}.json"))
    parser.add_argument("--reanalyze", metavar="KEEP_DIR", default=None,
                        help="derive what this version adds from the runs kept in KEEP_DIR (--keep) "
                             "into the existing results of --json, and run nothing")
    args = parser.parse_args()
    if args.reanalyze:
        return reanalyze(args.json, args.reanalyze)
    ok, why = namespaces_available()
    if not ok:
        sys.exit(f"cannot emulate a cluster here: {why}")
    ok, why = straggler.cgroups_available()
    if not ok:
        sys.exit(f"cannot give the emulated nodes a CPU share each: {why}")
    configs, kinds = args.configs.split(","), args.kinds.split(",")
    # Faults keep coming while a slowed job runs past --duration.
    schedule = draw_schedule(args.seed, args.mtbf, 2 * args.duration, kinds)
    spares = args.spares if args.spares is not None else 2 + sum(f["kind"] != "rank_kill" for f in schedule)
    results = {"seed": args.seed, "mtbf_s": args.mtbf, "duration_s": args.duration, "nodes": NODES,
               "nodes_per_domain": PER_DOMAIN, "kinds": kinds, "spares": spares, "schedule": schedule, "host": platform.node(), "cpus": os.cpu_count(),
               "date": str(date.today()), "healthy": {}, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="hardy-goodput-") as tmp:
        args.dataset = make_dataset(args.hardy, Path(tmp) / "dataset")
        for config in dict.fromkeys(["one_job", *configs]):
            results["healthy"][config] = healthy_run(args, tmp, config)
            print(f"{config} failure-free: {results['healthy'][config]}", flush=True)
        reference = results["healthy"]["one_job"]["median_step_s"]
        steps = int(args.duration / reference)
        checkpoint_every = None
        if "restart" in configs:
            healthy = results["healthy"]["restart"]
            cost = healthy["checkpoint_stall_s"] or 0
            interval = max(math.sqrt(2 * args.mtbf * cost), 1.5 * (healthy["checkpoint_write_s"] or 0))
            checkpoint_every = max(1, round(interval / healthy["median_step_s"]))
            results["young_daly"] = {"cost_s": cost, "interval_s": interval, "every_steps": checkpoint_every}
            print(f"restart: checkpoint every {checkpoint_every} steps ({interval:.2f} s; cost {cost:.4f} s)")
        print(f"{steps} steps ({args.duration:.0f} s failure-free at {1e3 * reference:.1f} ms), "
              f"{len([f for f in schedule if f['at_s'] < args.duration])} interruptions drawn in that time, "
              f"{spares} spares", flush=True)
        for config in configs:
            print(f"{config}:", flush=True)
            # One job's healthy step, from its faulty run, else from its failure-free one (a
            # run of --configs without one_job).
            one_job_step = (results["runs"].get("one_job", {}).get("healthy_step_s")
                            or results["healthy"]["one_job"]["median_step_s"])
            results["runs"][config] = faulty_run(
                args, tmp, config, steps, spares, schedule, checkpoint_every if config == "restart" else None,
                one_job_step)
            r = results["runs"][config]
            print(f"{config}: goodput {percent(r['goodput'])} ({r['wall_s']:.0f} s for {steps} steps; "
                  f"{len(r['faults'])} faults, {r['relaunches']} relaunches ({r['regrows']} to regrow), "
                  f"{r['in_job_shrinks']} shrinks; "
                  f"checks {r['checks']})", flush=True)
    # Against one job's healthy step too: what a design costs every step counts as lost there.
    one_job_step = results["runs"].get("one_job", {}).get("healthy_step_s")
    for r in results["runs"].values():
        if one_job_step:
            r["goodput_vs_one_job_step"] = r["steps"] * one_job_step / r["wall_s"]
    Path(args.json).write_text(json.dumps(results, indent=1))
    print("\n| design | goodput (its own healthy throughput) | at its median step | against one job's "
          "healthy step | wall s | faults | relaunches (to regrow) | in-job shrinks | its healthy step in the "
          "run (mean, median) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for config, r in results["runs"].items():
        against = f"{100 * r['goodput_vs_one_job_step']:.1f}%" if "goodput_vs_one_job_step" in r else "-"
        own = (f"{1e3 * r['healthy_step_s']:.1f} ms, {1e3 * r['healthy_median_step_s']:.1f} ms"
               if r["healthy_step_s"] else f"fewer than {MIN_QUIET_STEPS} steps")
        print(f"| {config} | {percent(r['goodput'])} | {percent(r['goodput_median'])} | {against} | "
              f"{r['wall_s']:.0f} | {len(r['faults'])} | {r['relaunches']} ({r['regrows']}) | "
              f"{r['in_job_shrinks']} | {own} |")
    print(f"results: {args.json}")
    failed = [c for c, r in results["runs"].items() if not all(r["checks"].values())]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
