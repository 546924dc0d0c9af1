#!/usr/bin/python3
"""A slow node on an emulated cluster: named, and the batch shared out around it (CTest label
`cluster`).

Usage: straggler.py HARDY [SCENARIO] [--json FILE] [--keep DIR] [--steps N] [--slow-step S]
                    [--slow-node K] [--global-batch B] [--size PIXELS] [--cpus C] [--period-us P]
                    [--throttle-by F] [--spin]

`hardy run --hosts ... --launch-agent ...` trains the fault tests' small job (hardy_test.py
small_job: synthetic samples, the compact network, every sample audited) on 8 emulated nodes
(emulated_cluster.py: network namespaces, so root) with one rank of one kernel thread each, so
that the slow-rank watch is on (each rank is alone on its host name). Changed from small_job:
128x128 samples and a global batch of 32 (below), no node-local snapshots (nothing here
relaunches; as tests/resilience/slow_ranks.py).

Every node's processes are kept in a cgroup v1 cpu group of its own (NodeCpuGroups,
/sys/fs/cgroup/cpu/hardy-straggler-<pid>-node<K>) with an equal CFS quota, --cpus / 8 of a CPU
(a quarter on 2 CPUs), so that the 8 nodes share the machine as 8 nodes would each have their
own CPU. When the job has committed --slow-step steps, node --slow-node (5) gets a sixth of that
(--throttle-by: the healthy nodes get about half their quota, so a sixth makes the node about a
third of its peers' speed, its processes, the Open MPI daemon included, running, nothing
failing). Two things the emulation needs (docs in NodeCpuGroups and SLEEP_WHEN_IDLE):
  - a short CFS period: the shortest whose quota is the kernel's least, 1 ms (4 ms for a quarter
    of a CPU, 24 ms for a 24th). With 100 ms periods a node at a third of its quota ran a few
    steps at full speed and then stalled for about 70 ms: slower on average, but the median
    step, and so the watch's median, did not see it (score 0.96, never named).
  - waiting ranks that sleep: Open MPI's ranks poll for messages and yield between polls, which
    spends a node's quota while it waits for the slow one (1/8 of a CPU each: 17 ms of CPU a
    step instead of 6, healthy ranks then named slow too); Open MPI's nanosleep yield
    (OMPI_MCA_threads_pthreads_yield_strategy=1) instead; --spin keeps the polling.

Scenarios:
  rebalance  (the default, the CTest) the throttle with `--straggler rebalance`
  off        the same throttle with `--straggler off` (nothing measured, nothing done)
  healthy    no throttle (`--straggler rebalance`): nobody may be named slow
  evict      the throttle with `--straggler evict` and a ninth host as a spare (hardy run
             --spare-nodes 1): node_evicted names the throttled node, hardy run relaunches once
             with the spare in its place, and the steps after that run at the healthy pace
  link       (the CTest cluster/straggler_link) no throttle: every node's link capped with tc at
             LINK_MBIT (200 Mbit/s) both ways from the start, node 5's at a tenth of that from
             --slow-step, `--straggler evict` and a spare: link_slow names node 5 (a probe of
             pairs of nodes), node_evicted (cause link) relaunches on the spare, whose steps run
             at most 1.3 x the healthy ones; nobody's own work is named slow
  link_off   the same caps with `--straggler off` (the bench's unmitigated slow link)
  link_domains  (the CTest cluster/straggler_link_domains) the link scenario with the 8 nodes as
             2 fault domains of 4: domain 1 probes its own nodes, link_slow names node 5,
             node_evicted (cause link) stops domain 1 alone, hardy run relaunches it with the
             spare (domain_relaunched), and the steps after it joined again run at most 1.3 x
             the healthy ones
  healthy_long  (nightly, about 12 min) 10,000 steps, no throttle, every rank's own work up to
             10% longer at random each step, `--straggler evict` and a spare: no rank_slow, no
             share change, no link probe, no eviction
  checkpointing  (the CTest cluster/straggler_checkpointing) no throttle, 250 steps on an eighth
             of a CPU a node, a checkpoint every CHECKPOINT_EVERY steps from rank 0's background
             writer (its CPU out of node 0's quota), `--straggler evict` and a spare: the lead is
             not named slow for the steps its writer ran beside, nobody is, nothing is evicted
             or relaunched

Checked for every scenario: `hardy run` exits 0 with job_finished at the last step, no relaunch;
every step 1..N committed exactly once; every sample of every complete epoch trained exactly once
(--audit-samples); the global batch unchanged; no process left on the nodes; the cgroups
removed. For rebalance: rank_slow names the throttled node's host (and only it) within
max(5 slow steps, 15 s) of the throttle; shards_rebalanced (policy straggler, reason straggler)
gives its rank fewer samples than an even share; the median step after the last rebalance (from
5 steps on) is at most 0.6 x the median slow step before the first (a loose bar for CI noise;
the real ratio is printed). For off and healthy: no rank_slow and no share change.

With --json the figures (phase medians, the events, every step's step_s, each node's CPU a step
and cpu.stat) go to FILE. bench/cluster/straggler_bench.py imports this module to run the four
scenarios side by side on one cluster.
"""
import collections
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
from emulated_cluster import NETNS_DIR, EmulatedCluster, _pid_alive, namespaces_available  # noqa: E402
from hardy_test import Checks, Job, complete_epochs_exact, int_option, read_jsonl, run_watched, small_job  # noqa: E402

NODES = 8
# scenario: (--straggler, what is slowed at --slow-step: None, "cpu" or "link")
SCENARIOS = {"healthy": ("rebalance", None), "off": ("off", "cpu"), "rebalance": ("rebalance", "cpu"),
             "evict": ("evict", "cpu"), "link": ("evict", "link"), "link_off": ("off", "link"),
             "healthy_long": ("evict", None), "link_domains": ("evict", "link"),
             "checkpointing": ("evict", None)}
# checkpointing: a checkpoint every CHECKPOINT_EVERY steps (the goodput bench's checkpoint-restart
# interval) for CHECKPOINTING_STEPS steps, on an eighth of a CPU a node (CHECKPOINTING_CPUS, as
# in the bench). Each write's CPU (about 0.14 s there) comes out of node 0's quota while its rank
# computes: in that bench, before the writer's steps were left out of the watch, the lead was
# named slow and its healthy node evicted, 7 times in one run; here the lead was named slow at
# step 44 (score 0.82). With a quarter of a CPU a node the writes left enough to spare.
CHECKPOINT_EVERY, CHECKPOINTING_STEPS, CHECKPOINTING_CPUS = 2, 250, 1
# link_domains: the link scenario with the 8 nodes as 2 fault domains of 4 (hardy run
# --nodes-per-domain 4): the slow node's domain probes its own nodes, evicts it and stops alone;
# hardy run relaunches that domain with the spare, and the other domain trains on.
DOMAIN_NODES = 4
# healthy_long: HEALTHY_LONG_STEPS steps with every rank's own work up to NOISE longer at random
# each step (--inject-failure rank=R@step=1:noise=NOISE), the default --straggler evict and a
# spare: nothing may be named, rebalanced, probed or evicted.
HEALTHY_LONG_STEPS, NOISE = 10000, 0.1
# link: every node's link capped at LINK_MBIT from the start (a veth has no rate of its own), the
# slow node's at a tenth of that from --slow-step: the exchange of the test model's 135 KB of
# gradients goes from about 10 ms to about 100 ms, the nodes' own work unchanged.
LINK_MBIT = 200
# evict: a ninth host kept as a spare, and a relaunch said to cost 1 s (--straggler-evict-cost):
# measured, twice the launch's start, it is several seconds here, which these 500 short steps
# would not lose to a rebalanced node.
EVICT_COST_S = 1.0
# The throttled node's quota is its fair one divided by this. Not 3: the healthy nodes get about
# half their quota (8 ranks computing at once on the shared cores, their daemons, this script),
# so a third of the quota made a node 1.5 times slower, a sixth 2.6-2.7 times (a third of its
# peers' speed, which rank_slow's score confirms: 0.29-0.33).
THROTTLE_BY = 6
WARMUP = 20                 # --straggler-warmup's default: the healthy phase starts after it
SLOW_SETTLE = 3             # steps after the throttle before a step counts as slow
REBALANCED_SETTLE = 5       # steps after a share change before a step counts as rebalanced
# 128x128 samples, 4 a rank: each step's own work (a sample is about 3 ms of CPU) outweighs its
# fixed costs (about 1.6 ms of CPU: collectives over TCP, the plan check), which no share of
# samples removes; at 32x32 and 2 a rank the fixed costs were most of the CPU, and the slowest
# share (1 sample) still 1.5 times a healthy step. The watch confirms over 3 s of the healthy
# own work: about 75 slow steps here.
STEPS, SLOW_STEP, SIZE, BATCH = 500, 120, 128, 32
RUN_TIMEOUT_S = 300
# Open MPI's ranks wait for a message by polling, yielding the CPU between polls
# (mpi_yield_when_idle, which emulated_cluster.py sets): in a cgroup with a CFS quota a rank
# that waits for a slow peer spends its node's quota polling. With nanosleep as the yield they
# sleep between polls instead.
SLEEP_WHEN_IDLE = {"OMPI_MCA_threads_pthreads_yield_strategy": "1"}
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_PREFIX = "hardy-straggler-"


# ---- one cpu cgroup per emulated node ----------------------------------------------------------
def cgroups_available():
    """(True, "") where cgroup v1's cpu controller can throttle a node here, else (False, why)."""
    if not (CGROUP_CPU / "cpu.cfs_quota_us").exists():
        return False, f"no cgroup v1 cpu controller with CFS bandwidth at {CGROUP_CPU}"
    if not os.access(CGROUP_CPU, os.W_OK):
        return False, f"{CGROUP_CPU} is not writable"
    return True, ""


def _move_all(group, target):
    """Writes every process of `group` into `target`'s cgroup.procs (one pid a write)."""
    try:
        pids = (group / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            (target / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            pass                        # gone meanwhile


def _remove_group(group):
    """Moves what is left in the group back to the root cgroup and removes it (retries: rmdir
    fails while a task is still inside)."""
    for _ in range(50):
        _move_all(group, CGROUP_CPU)
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.05)
    return False


def remove_stale_groups():
    """Groups of a run that was killed before its cleanup (their owner's pid is gone)."""
    removed = []
    if not CGROUP_CPU.exists():
        return removed
    for group in CGROUP_CPU.glob(f"{CGROUP_PREFIX}*-node*"):
        owner = group.name[len(CGROUP_PREFIX):].split("-node")[0]
        if not owner.isdigit() or not _pid_alive(int(owner)) or int(owner) == os.getpid():
            if _remove_group(group):
                removed.append(group.name)
    return removed


class NodeCpuGroups:
    """Every emulated node's processes in a cpu cgroup of its own, with a CFS quota of
    cpus x period / nodes each; a thread puts the processes of each node's network namespace
    (what `ip netns pids` lists, found here in one pass over /proc per poll) into its group every
    `poll_s`, new ones included, until close(), which moves them back and removes the groups.
    A context manager; close() is idempotent."""

    def __init__(self, cluster, cpus=None, period_us=None, poll_s=0.1, active_nodes=None):
        ok, why = cgroups_available()
        if not ok:
            raise RuntimeError(why)
        remove_stale_groups()
        self.cluster = cluster
        self.cpus = cpus or os.cpu_count() or 1
        # Of a CPU, each node's fair share: the active nodes' (a spare gets as much, idle until used).
        self.fraction = self.cpus / (active_nodes or len(cluster.nodes))
        self.fixed_period_us = period_us
        self.period_us, self.quota_us = self.bandwidth(self.fraction)
        self.periods = [self.period_us] * len(cluster.nodes)
        self.quotas = [self.quota_us] * len(cluster.nodes)
        self.groups = [CGROUP_CPU / f"{CGROUP_PREFIX}{os.getpid()}-node{k}" for k in range(len(cluster.nodes))]
        self.placed = collections.Counter()       # node -> processes moved into its group
        self._cpu_ticks = {}                      # pid -> (node, utime + stime) when last seen
        self.move_errors = 0
        self._netns = {}
        for k, node in enumerate(cluster.nodes):
            st = os.stat(NETNS_DIR / node.netns)
            self._netns[(st.st_dev, st.st_ino)] = k
        self._stop = threading.Event()
        self._closed = False
        try:
            for k, group in enumerate(self.groups):
                group.mkdir()
                (group / "cpu.cfs_period_us").write_text(f"{self.period_us}\n")
                (group / "cpu.cfs_quota_us").write_text(f"{self.quota_us}\n")
            self.place()
        except BaseException:
            self.close()
            raise
        self._thread = threading.Thread(target=self._poll, args=(poll_s,), daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _node_pids(self):
        """{node index: [pid, ...]} of the processes in each node's network namespace."""
        found = collections.defaultdict(list)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{entry.name}/ns/net")
            except OSError:
                continue
            node = self._netns.get((st.st_dev, st.st_ino))
            if node is not None:
                found[node].append(int(entry.name))
        return found

    def place(self):
        """One pass: every process of a node that is not yet in its node's group goes there."""
        for node, pids in self._node_pids().items():
            want = f"/{self.groups[node].name}"
            for pid in pids:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    self._cpu_ticks[pid] = (node, int(fields[11]) + int(fields[12]))
                except (OSError, IndexError, ValueError):
                    pass
                try:
                    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                except OSError:
                    continue
                current = next((line.split(":", 2)[2] for line in lines
                                if "cpu" in line.split(":", 2)[1].split(",")), None)
                if current == want:
                    continue
                try:
                    (self.groups[node] / "cgroup.procs").write_text(f"{pid}\n")
                    self.placed[node] += 1
                except OSError:
                    self.move_errors += 1

    def _poll(self, poll_s):
        while not self._stop.wait(poll_s):
            try:
                self.place()
            except Exception as e:           # a poll that failed is retried at the next one
                print(f"NodeCpuGroups: {e}", flush=True)

    def bandwidth(self, fraction):
        """(period, quota) in us for `fraction` of a CPU: the fixed period if one was given, else
        the shortest whose quota is the kernel's least (1 ms), so that the cap binds within a
        step's compute (a CPU that slow) rather than as a stall once per long period."""
        period = self.fixed_period_us or 1000 * max(1, math.ceil(1 / fraction - 1e-9))
        return period, max(1000, round(period * fraction))

    def set_bandwidth(self, node, period_us, quota_us):
        (self.groups[node] / "cpu.cfs_period_us").write_text(f"{int(period_us)}\n")
        (self.groups[node] / "cpu.cfs_quota_us").write_text(f"{int(quota_us)}\n")
        self.periods[node], self.quotas[node] = int(period_us), int(quota_us)

    def throttle(self, node, factor):
        """The node's share of a CPU divided by factor; returns the time it was set."""
        self.set_bandwidth(node, *self.bandwidth(self.fraction / factor))
        return time.time()

    def cpu_seconds(self):
        """CPU seconds each node's processes have used so far (as of the last poll)."""
        ticks = [0] * len(self.groups)
        for node, used in list(self._cpu_ticks.values()):
            ticks[node] += used
        return [t / os.sysconf("SC_CLK_TCK") for t in ticks]

    def stats(self):
        """Each group's cpu.stat (nr_periods, nr_throttled, throttled_time in ns) and cpu_s (the
        CPU seconds its processes used)."""
        out = []
        for group, cpu_s in zip(self.groups, self.cpu_seconds()):
            try:
                stat = {k: int(v) for k, v in (line.split() for line in (group / "cpu.stat").read_text().splitlines())}
            except OSError:
                stat = {}
            out.append({**stat, "cpu_s": cpu_s})
        return out

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        thread = getattr(self, "_thread", None)
        if thread:
            thread.join(timeout=5)
        left = [g.name for g in self.groups if g.exists() and not _remove_group(g)]
        if left:
            print(f"NodeCpuGroups: could not remove {left}", flush=True)


# ---- one run ---------------------------------------------------------------------------------
def train_options(steps, batch, size=SIZE):
    """small_job's options at `batch` (3 batches an epoch) on size x size samples, without its
    node-local snapshot of every step (no relaunch here needs it; on 8 nodes sharing 2 cores it
    doubles the step), one kernel thread a rank."""
    options = small_job(3 * batch, steps, batch)
    for name, value in (("--height", size), ("--width", size), ("--snapshot-every", 0)):
        options[options.index(name) + 1] = str(value)
    return options + ["--threads", "1"]


def _median(metrics, first, last):
    values = [m["step_s"] for m in metrics if first <= m["step"] <= last]
    return statistics.median(values) if values else None


def _mean(metrics, first, last):
    values = [m["step_s"] for m in metrics if first <= m["step"] <= last]
    return sum(values) / len(values) if values else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def run_scenario(hardy, cluster, scenario, workdir, steps=STEPS, slow_step=SLOW_STEP, slow_node=5, batch=BATCH,
                 size=SIZE, cpus=None, period_us=None, mca=None, throttle_by=THROTTLE_BY, keep=None):
    """Runs one scenario on the cluster and returns its figures (a dict, JSON-ready)."""
    mode, slowed = SCENARIOS[scenario]
    throttled = slowed is not None
    run = Path(workdir) / f"run-{scenario}"
    shutil.rmtree(run, ignore_errors=True)
    job = Job(run)
    evicting = mode == "evict"
    hosts = cluster.hosts[:NODES + (1 if evicting else 0)]
    if scenario == "healthy_long":
        steps = HEALTHY_LONG_STEPS
    if scenario == "checkpointing":
        steps, cpus = min(steps, CHECKPOINTING_STEPS), cpus or CHECKPOINTING_CPUS
    noise = [f"rank={r}@step=1:noise={NOISE}" for r in range(NODES)] if scenario == "healthy_long" else []
    timeout = RUN_TIMEOUT_S * max(1, steps // STEPS) * (1.5 if noise else 1)
    command = [hardy, "run", "--hosts", ",".join(hosts), "--launch-agent", cluster.agent,
               "--ranks-per-node", "1", "--run-dir", str(run), "--backoff", "0.5", "--probe-timeout", "2",
               "--finish-grace", "5", *(["--spare-nodes", "1"] if evicting else []),
               *(["--nodes-per-domain", str(DOMAIN_NODES)] if scenario == "link_domains" else []), "--",
               *train_options(steps, batch, size), "--straggler", mode,
               *(["--inject-failure", ",".join(noise)] if noise else []),
               *(["--checkpoint-every", str(CHECKPOINT_EVERY)] if scenario == "checkpointing" else []),
               *(["--straggler-evict-cost", str(EVICT_COST_S)] if evicting else [])]
    env = {**os.environ, **cluster.mpi_env(), **(mca or {})}
    marks, ended = {}, threading.Event()
    if slowed == "link":
        for node in range(len(hosts)):
            cluster.shape_link(node, LINK_MBIT)
    with NodeCpuGroups(cluster, cpus=cpus, period_us=period_us, active_nodes=NODES) as groups:
        def slow_down():
            if slowed == "link":
                cluster.shape_link(slow_node, LINK_MBIT / 10)
                return time.time()
            return groups.throttle(slow_node, throttle_by) if throttled else time.time()

        def watch():
            if not job.wait(lambda: ended.is_set() or job.step() >= slow_step, f"step {slow_step}",
                            timeout=timeout) or ended.is_set():
                return
            before = groups.stats()
            at = slow_down()
            marks["throttle"] = {"time": at, "step": job.step(), "cpu_stat": before,
                                 "quota_us": groups.quotas[slow_node], "period_us": groups.periods[slow_node]}
            if slowed == "link":
                print(f"--- the link of {cluster.hosts[slow_node]} capped at {LINK_MBIT / 10:g} Mbit/s (the others "
                      f"{LINK_MBIT}) at step {marks['throttle']['step']}", flush=True)
                return
            print(f"--- {'throttled' if throttled else 'not throttled (healthy)'} {cluster.hosts[slow_node]}: "
                  f"{groups.quotas[slow_node]} us every {groups.periods[slow_node]} us (the others "
                  f"{groups.quota_us} of {groups.period_us}) at step {marks['throttle']['step']}", flush=True)

        load_before = os.getloadavg()
        started = time.time()
        status, output = run_watched(command, watch, timeout, env=env)
        ended.set()
        elapsed = time.time() - started
        end_stats = groups.stats()
        placed, move_errors = dict(groups.placed), groups.move_errors
        period_us, quota_us = groups.period_us, groups.quota_us
        leftovers = cluster.wait_no_leftovers()
    if slowed == "link":  # the next scenario on this cluster starts with plain links
        for node in range(len(hosts)):
            cluster.shape_link(node, None)
    if keep:
        shutil.copytree(run, Path(keep) / scenario, dirs_exist_ok=True)

    events = job.events()
    metrics = read_jsonl(run / "metrics.jsonl")
    host = cluster.hosts[slow_node]
    started_ranks = [e for e in events if e["event"] == "rank_started" and e.get("host") == host]
    slow_rank = started_ranks[-1]["rank"] if started_ranks else None
    counts = collections.Counter(m["step"] for m in metrics)
    throttle = marks.get("throttle", {})
    throttle_step, throttle_time = throttle.get("step"), throttle.get("time")
    rank_slow = [{k: e.get(k) for k in ("step", "rank", "host", "score", "own_s_per_sample", "peers_s_per_sample",
                                        "since_step", "unix_time")} for e in events if e["event"] == "rank_slow"]
    moves = [{k: e.get(k) for k in ("step", "reason", "per_rank_batch", "predicted_gain", "global_batch")}
             for e in events if e["event"] == "shards_rebalanced" and e.get("policy") == "straggler"]
    recovered = [{k: e.get(k) for k in ("step", "rank", "host", "score")} for e in events
                 if e["event"] == "rank_recovered"]
    evicted = [{k: e.get(k) for k in ("step", "rank", "node", "host", "score", "lost_s", "cost_s", "cause",
                                      "unix_time")}
               for e in events if e["event"] == "node_evicted"]
    link_slow = [{k: e.get(k) for k in ("step", "rank", "host", "pair_s", "peers_pair_s", "exchange_s", "baseline_s",
                                        "since_step", "unix_time")} for e in events if e["event"] == "link_slow"]
    link_probes = [{k: e.get(k) for k in ("step", "seconds", "exchange_s", "baseline_s", "named_host", "pairs")}
                   for e in events if e["event"] == "link_probe"]
    finished = [e for e in events if e["event"] == "job_finished"]
    complete, wrong = complete_epochs_exact(run, 3 * batch)

    result = {
        "scenario": scenario, "straggler": mode, "throttled": throttled, "slowed": slowed,
        "link_mbit": LINK_MBIT if slowed == "link" else None, "status": status, "elapsed_s": elapsed,
        "steps": steps, "slow_step": slow_step, "global_batch": batch, "size": size, "slow_node": slow_node, "slow_host": host,
        "slow_rank": slow_rank, "cpus": cpus or os.cpu_count(), "period_us": period_us, "quota_us": quota_us,
        "throttled_quota_us": throttle.get("quota_us"), "throttled_period_us": throttle.get("period_us"),
        "throttle_step": throttle_step, "throttle_time": throttle_time,
        "load_average_before": load_before, "mca": mca or {}, "throttle_by": throttle_by,
        "not_watched": "slow ranks are not watched in this job" in output,
        "finished": bool(finished) and finished[-1].get("status") == "completed" and finished[-1].get("steps") == steps,
        "relaunches": len([e for e in events if e["event"] in ("job_relaunched", "domain_relaunched")]),
        "checkpoints_written": len([e for e in events if e["event"] == "checkpoint_written"]),
        "hangs": [e for e in events if e["event"] in ("hang_detected", "failure_detected")],
        "steps_committed_once": sorted(counts) == list(range(1, steps + 1)) and set(counts.values()) == {1},
        "epochs_complete": len(complete), "epochs_wrong": wrong,
        "samples_once": bool(complete) and not wrong,
        "global_batch_constant": bool(metrics) and all(m.get("global_batch") == batch for m in metrics),
        "rank_slow": rank_slow, "shards_rebalanced": moves, "rank_recovered": recovered, "node_evicted": evicted,
        "link_slow": link_slow, "link_probes": link_probes,
        "leftovers": leftovers, "processes_placed": placed, "move_errors": move_errors,
        "cpu_stat_at_throttle": throttle.get("cpu_stat"), "cpu_stat_end": end_stats,
        "series": [[m["step"], round(m["step_s"], 5), round(m.get("compute_s", 0.0), 5), m.get("slowest_rank"),
                    m.get("slowest_score")] for m in metrics],
    }
    # The phases, in steps: healthy from the end of the warm-up to the throttle; slow from a few
    # steps after it to the first share change (or the end); rebalanced from a few steps after
    # the last change to the end.
    if throttle_step is not None:
        first_move = moves[0]["step"] if moves else (evicted[0]["step"] if evicted else steps)
        last_move = moves[-1]["step"] if moves else None
        for name, first, last in (("healthy", WARMUP + 1, throttle_step),
                                  ("slow", throttle_step + SLOW_SETTLE, first_move),
                                  ("rebalanced", (last_move or steps) + REBALANCED_SETTLE,
                                   evicted[0]["step"] if evicted else steps)):
            result[f"{name}_median_s"] = _median(metrics, first, last) if name != "rebalanced" or last_move else None
            result[f"{name}_mean_s"] = _mean(metrics, first, last) if name != "rebalanced" or last_move else None
        if evicted:  # the relaunched job, on the spare, from a few steps after it resumed
            back_from = evicted[0]["step"]
            if scenario == "link_domains":  # the other domain trains alone until the relaunched one joins
                joined = [e for e in events if e["event"] == "domain_admitted"
                          and e["unix_time"] > evicted[0]["unix_time"]]
                result["joined_step"] = joined[0]["step"] if joined else None
                back_from = joined[0]["step"] if joined else steps
            result["evicted_median_s"] = _median(metrics, back_from + REBALANCED_SETTLE, steps)
            result["evicted_over_healthy"] = _ratio(result["evicted_median_s"], result["healthy_median_s"])
            result["evicted_after_s"] = evicted[0]["unix_time"] - throttle_time
        result["slow_over_healthy"] = _ratio(result["slow_median_s"], result["healthy_median_s"])
        result["rebalanced_over_healthy"] = _ratio(result["rebalanced_median_s"], result["healthy_median_s"])
        result["rebalanced_over_slow"] = _ratio(result["rebalanced_median_s"], result["slow_median_s"])
        # CPU each node used a step, before the throttle and after it (ms).
        before_cpu = [n.get("cpu_s", 0.0) for n in throttle.get("cpu_stat") or []]
        end_cpu = [n.get("cpu_s", 0.0) for n in end_stats]
        if before_cpu and throttle_step:
            result["cpu_ms_per_step_before"] = [round(1e3 * c / throttle_step, 3) for c in before_cpu]
            result["cpu_ms_per_step_after"] = [round(1e3 * (e - b) / max(1, steps - throttle_step), 3)
                                               for b, e in zip(before_cpu, end_cpu)]
        named = link_slow if slowed == "link" else rank_slow
        if named:
            result["named_after_steps"] = named[0]["step"] - throttle_step
            result["named_after_s"] = named[0]["unix_time"] - throttle_time
    result["said"] = [line[:300] for line in output.splitlines()
                      if "hardy: rank" in line or "shared out" in line or "not watched" in line
                      or "hardy: the link" in line or "hardy: the exchange" in line]
    result["output_tail"] = output[-4000:]
    return result


def check_evicted(check, r, cause, slowed_by):
    """One node_evicted naming the slow host for `cause`, the time lost against the cost, and the
    steps on the spare at most 1.3 x the healthy ones."""
    s, ev = r["scenario"], r["node_evicted"]
    check(len(ev) == 1 and ev[0]["host"] == r["slow_host"] and ev[0].get("cause") == cause
          and ev[0]["lost_s"] >= ev[0]["cost_s"],
          f"{s}: node_evicted (cause {cause}) names {r['slow_host']} once, the time lost against the cost: {ev}")
    ratio = r.get("evicted_over_healthy")
    print(f"{s}: slow {r.get('slow_over_healthy')} x healthy; after the eviction "
          f"{1e3 * (r.get('evicted_median_s') or 0):.1f} ms a step, {ratio} x healthy; evicted "
          f"{r.get('evicted_after_s')} s after the {slowed_by}", flush=True)
    check(ratio is not None and ratio <= 1.3, f"{s}: the steps on the spare at most 1.3 x healthy ({ratio})")


def check_result(check, r):
    """The checks of a scenario's result (what a user relies on, and what the scenario is for)."""
    s = r["scenario"]
    check(r["status"] == 0, f"{s}: hardy run exits 0 ({r['status']}, {r['elapsed_s']:.1f} s)")
    check(r["finished"], f"{s}: job_finished completed at step {r['steps']}")
    relaunches = 1 if s in ("evict", "link", "link_domains") else 0
    check(r["relaunches"] == relaunches and not r["hangs"],
          f"{s}: {relaunches} relaunch(es) ({r['relaunches']}), nothing hung or failed: {r['hangs']}")
    check(r["steps_committed_once"], f"{s}: every step 1..{r['steps']} committed exactly once")
    check(r["samples_once"], f"{s}: {r['epochs_complete']} complete epochs each cover every sample exactly once "
          f"(wrong: {r['epochs_wrong']})")
    check(r["global_batch_constant"], f"{s}: the global batch stays {r['global_batch']}")
    check(not r["leftovers"], f"{s}: no process left on the nodes: {r['leftovers']}")
    check(r["throttle_step"] is not None, f"{s}: reached step {r['slow_step']} ({'throttled' if r['throttled'] else 'healthy'} "
          f"from step {r['throttle_step']})")
    check(not r["not_watched"], f"{s}: slow ranks are watched (1 rank of 1 thread per emulated node)")
    ms = lambda v: f"{1e3 * v:.1f} ms" if v is not None else "-"  # noqa: E731
    print(f"{s}: median step healthy {ms(r.get('healthy_median_s'))}, slow {ms(r.get('slow_median_s'))}, "
          f"rebalanced {ms(r.get('rebalanced_median_s'))}; slow/healthy {r.get('slow_over_healthy')}, "
          f"rebalanced/healthy {r.get('rebalanced_over_healthy')}, rebalanced/slow {r.get('rebalanced_over_slow')}",
          flush=True)
    probes = r["link_probes"]
    print(f"{s}: {len(probes)} link probe(s): {[(p['step'], p['named_host'], round(p['seconds'], 3)) for p in probes]}",
          flush=True)
    if s == "healthy_long":
        check(not r["rank_slow"] and not r["shards_rebalanced"] and not probes and not r["link_slow"]
              and not r["node_evicted"],
              f"{s}: {r['steps']} steps with {NOISE:.0%} noise: nobody named, no share changed, no link probed, "
              f"nothing evicted: {r['rank_slow']} {r['shards_rebalanced']} {r['link_slow']} {r['node_evicted']}")
        lowest = min((row[4] for row in r["series"] if row[4] is not None), default=None)
        print(f"{s}: the lowest score seen {lowest}", flush=True)
        return
    if s == "checkpointing":
        check(r["checkpoints_written"] >= r["steps"] // (4 * CHECKPOINT_EVERY),
              f"{s}: rank 0 wrote checkpoints as it trained ({r['checkpoints_written']} written, one due every "
              f"{CHECKPOINT_EVERY} steps of {r['steps']})")
        check(not r["rank_slow"] and not r["shards_rebalanced"] and not r["node_evicted"],
              f"{s}: nobody named slow (the lead's writer beside its steps), no share changed, nothing evicted: "
              f"{r['rank_slow']} {r['shards_rebalanced']} {r['node_evicted']}")
        return
    if s == "link_off":
        check(not r["link_slow"] and not r["node_evicted"] and not probes,
              f"{s}: nothing probed, named or evicted: {r['link_slow']} {r['node_evicted']}")
        return
    if s in ("link", "link_domains"):
        named = r["link_slow"]
        bound = max(5 * (r.get("slow_median_s") or 0.0), 15.0)
        check(len(named) == 1 and named[0]["host"] == r["slow_host"],
              f"{s}: link_slow names {r['slow_host']} once: {[(e['host'], e['step']) for e in named]}")
        check(r.get("named_after_s") is not None and 0 < r["named_after_s"] <= bound,
              f"{s}: named {r.get('named_after_s')} s ({r.get('named_after_steps')} steps) after the cap "
              f"(at most {bound:.1f} s)")
        check(not r["rank_slow"], f"{s}: no rank's own work named slow: {r['rank_slow']}")
        check_evicted(check, r, "link", "cap")
        return
    check(not r["link_slow"], f"{s}: no link named slow: {r['link_slow']}")
    if s == "evict":
        check_evicted(check, r, "compute", "throttle")
        return
    if r["scenario"] != "rebalance":
        check(not r["rank_slow"] and not r["shards_rebalanced"],
              f"{s}: nobody named slow, no share changed: {r['rank_slow']} {r['shards_rebalanced']}")
        return
    named = r["rank_slow"]
    bound = max(5 * (r.get("slow_median_s") or 0.0), 15.0)
    check(named and all(e["host"] == r["slow_host"] and e["rank"] == r["slow_rank"] for e in named),
          f"{s}: rank_slow names rank {r['slow_rank']} on {r['slow_host']} and nobody else: "
          f"{[(e['rank'], e['host'], e['step']) for e in named]}")
    check(named and r.get("named_after_s") is not None and 0 < r["named_after_s"] <= bound,
          f"{s}: named {r.get('named_after_s')} s ({r.get('named_after_steps')} steps) after the throttle "
          f"(at most {bound:.1f} s)")
    moves = r["shards_rebalanced"]
    even = r["global_batch"] // NODES
    check(moves and moves[0]["reason"] == "straggler" and r["slow_rank"] is not None
          and moves[0]["per_rank_batch"][r["slow_rank"]] < even,
          f"{s}: shards_rebalanced (straggler) gives rank {r['slow_rank']} fewer than {even} samples: "
          f"{[(m['step'], m['reason'], m['per_rank_batch']) for m in moves]}")
    check(all(sum(m["per_rank_batch"]) == r["global_batch"] for m in moves),
          f"{s}: the shares add up to the global batch")
    ratio = r.get("rebalanced_over_slow")
    check(ratio is not None and ratio <= 0.6,
          f"{s}: the median step after the rebalance is {ratio if ratio is None else f'{ratio:.2f}'} x the slow one "
          f"(at most 0.6)")


def main():
    hardy = sys.argv[1]
    scenario = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else "rebalance"
    if scenario not in SCENARIOS:
        sys.exit(f"straggler.py: unknown scenario {scenario}; choose from {', '.join(SCENARIOS)}")
    json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    ok, why = namespaces_available()
    if ok:
        ok, why = cgroups_available()
    if not ok:
        print(f"skipped: cannot emulate a cluster with slow nodes here: {why}")
        sys.exit(77)
    check = Checks()
    with EmulatedCluster(nodes=NODES + (1 if SCENARIOS[scenario][0] == "evict" else 0)) as cluster, \
            tempfile.TemporaryDirectory(prefix="hardy-straggler-") as tmp:
        result = run_scenario(hardy, cluster, scenario, tmp, steps=int_option("--steps", STEPS),
                              slow_step=int_option("--slow-step", SLOW_STEP), slow_node=int_option("--slow-node", 5),
                              batch=int_option("--global-batch", BATCH), size=int_option("--size", SIZE), cpus=int_option("--cpus", 0) or None,
                              period_us=int_option("--period-us", 0) or None, keep=keep,
                              mca=None if "--spin" in sys.argv else SLEEP_WHEN_IDLE,
                              throttle_by=int_option("--throttle-by", THROTTLE_BY))
        if result["status"] != 0 or not result["finished"]:
            print(result["output_tail"])
        for line in result["said"]:
            print(f"[output] {line}")
        check_result(check, result)
        if json_out:
            Path(json_out).write_text(json.dumps(result, indent=1))
    left = [g.name for g in CGROUP_CPU.glob(f"{CGROUP_PREFIX}{os.getpid()}-node*")]
    check(not left, f"{scenario}: the cpu cgroups are removed: {left}")
    check.finish(f"cluster straggler {scenario}")


if __name__ == "__main__":
    main()
