#!/usr/bin/python3
"""Random-fault soak on the emulated cluster (CTest label `soak`, not part of an ordinary run).

Usage: random_faults.py [--hardy PATH] [--duration SECONDS] [--seed N] [--runs N] [--only-run K]
                        [--kinds KIND,...] [--layouts LAYOUT,...] [--json FILE] [--keep-failed DIR] [--reference-dir DIR]
                        [--mpirun PATH] [--max-duration SECONDS]

    sudo tests/soak/random_faults.py --duration 1800 --json soak.json
    HARDY_SOAK_SECONDS=600 ctest -L soak            (from the build directory)

For --duration seconds (default $HARDY_SOAK_SECONDS, else 1800) it trains one job after another
under `hardy run --hosts ... --launch-agent ...` on a fresh emulated cluster of 4 nodes x 2 ranks
(tests/cluster/emulated_cluster.py, network namespaces; a fifth host as a spare in about one run
of three), each job 240 steps of the test model with a checkpoint every 20 (about 25 s without
faults), and hits each with 1 to 3 faults drawn at random in kind, victim and step:

  rank_kill        SIGKILL one rank's process from outside (pid from its rank_started event):
                   the job shrinks inside (ULFM)
  node_crash       SIGKILL every process of a node, its Open MPI daemon included: the runtime
                   ends the job and `hardy run` relaunches without the node
  node_freeze      cut a node's link and SIGSTOP every process on it
  partition        cut a node's link only (healed once the job is over, before the leftover check)
  relaunch_crash   while `hardy run` relaunches after one of the three above (from its
                   job_relaunched event), crash another node for good (link down too); a draw
                   without such a fault before it gets a node_crash put in front
  checkpoint_kill  SIGKILL rank 0 half-way through writing a checkpoint
  log_kill         SIGKILL rank 0 after a step's agreement and node-local snapshot, before it logs
                   the step (metrics.jsonl, samples.jsonl): whoever carries on logs it
  recovery_kill    SIGKILL one rank, then another between the shrink and the restore of the
                   recovery from the first death
  preemption       SIGUSR1 to `hardy run`, which forwards it: the job writes a final checkpoint
                   and ends preempted (status 4); with no scheduler here, the soak itself runs
                   `hardy run ... --resume latest` again with the same run directory on the nodes
                   still healthy, and checks that it resumed from that checkpoint
  full_disk        the checkpoints directory is a small tmpfs (for every run); a filler file
                   takes all but a third of a checkpoint's size, topped up until a checkpoint
                   write fails with ENOSPC (checkpoint_failed), then removed
  slow_node        one node's processes at about a third of their peers' speed for 60-100 steps,
                   then back: every node of the run is kept in a cgroup v1 cpu group with an
                   equal CFS quota (tests/cluster/straggler.py's NodeCpuGroups) and the slow one's
                   cut to a sixth of it (THROTTLE_BY there); nothing fails, so the job may
                   rebalance around it, evict it to a spare (the default --straggler evict) or
                   ride it out, mixed with whatever else the run draws. Drawn apart from the
                   other kinds (a stream of its own, in a third of the runs of any layout), so
                   that older seeds draw what they drew besides it; left out, with a NOTE, where
                   the cgroup v1 cpu controller is missing

Each run also draws the job's layout (--layouts limits the draw):

  one_job          one MPI job over the 4 nodes: every fault kind above
  domains          fault domains of 2 nodes (`hardy run --nodes-per-domain 2`: 2 domains, each its
                   own mpirun), meeting every step
  domains_lag      the same with --gradient-lag 1
  domains_sync4    the same meeting every 4th step (--domain-sync-every 4)
  domains_staged   the same on DeepCAM-layout files (`hardy data generate --format deepcam`) staged
                   to node-local storage (--stage-to)
  domains_sharded  the domains layout with --domain-exchange sharded: every rank sums its shard with
                   the other domain's rank of its index, and a domain that loses a rank ends
  one_job_bf16     one_job computing in bf16 (--precision bf16; the CPU backend runs it on AVX512-BF16)
  domains_lag_sync4  domains_sync4 with --gradient-lag 1 too

The last two are variants of one_job and domains_sync4: a run that draws the base layout runs as its
variant half the time, from a stream of its own, so that older seeds draw what they drew.

A domain layout draws the faults that reach a domain from outside (rank_kill, node_crash,
node_freeze, partition): a lost node ends its domain, which comes back on the spare when there is
one and is abandoned otherwise, while the other domain trains on. Its invariants are the ones below,
with: a fault's domain_lost (or a failure found inside the domain) after it; no domain relaunched on
a lost node; with --domain-sync-every 4, a restore may go back to the last meeting (up to 4 steps);
with it, or after a domain was lost (the other trains alone meanwhile), the last tenth's mean loss
is compared (within 5%) instead of the final loss; with staging,
everything staged private and nothing half-copied but on lost nodes. Each layout's failure-free
reference is its own (one MPI job of 8 ranks on this host, or 2 domains of 4 ranks for
domains_sync4), cached.

checkpoint_kill, recovery_kill and log_kill use hardy's own test hook (`--inject-failure
rank=0@step=C:checkpoint-write`, `rank=A@step=S,rank=B@step=S:recovery`,
`rank=0@step=S:log-write`): a write of half a megabyte takes about 0.1 s and a recovery a few ms,
too short to hit from outside at the right instant, and the moment between a step's snapshot and
its log lines has no width at all. log_kill is drawn apart from the other kinds (a stream of its
own, in a third of the one-job runs without a checkpoint_kill, which kills rank 0 too), so that
seeds drawn before it existed still draw the same faults besides it. The hook belongs to the first launch only (`hardy run` strips it from relaunches), so
those faults are drawn at earlier steps than the ones from outside; and since a relaunch leaves
out the nodes of injected victims (the supervisor takes the hook's record as conclusive), the
draw keeps at least one node for the job. Every other fault, the full disk included, is caused
from outside, once the job has committed the drawn step (never "at an exact step": the machine
may be slow) and has trained again since the previous fault.

After every run, the invariants (a failed one fails the run; the soak goes on with the next):
  - the job finishes: the last `hardy run` exits 0 with job_finished completed at step 240,
    every step 1..240 committed, and the final loss within 2% of a failure-free run (computed
    once and cached in --reference-dir);
  - every sample is seen exactly once in every epoch (--audit-samples, samples.jsonl);
  - no committed step is lost beyond the one in flight: every state_restored is at most one
    step behind the newest step committed before it (a preemption's resume: none behind);
  - the newest checkpoint verifies (`hardy ckpt verify`), `latest` names it, and no `.tmp` is
    left; the same for the final checkpoint of a preemption before it is resumed;
  - every drawn fault happened (a fault from outside that the job outran is reported as not
    injected, not as a failure);
  - nothing healthy is named slow: every rank_slow, link_slow and node_evicted names the node a
    slow_node fault slowed or one another fault took (a slow node that goes unnamed is not a
    failure: a run's 240 short steps may end before the watch confirms; the summary counts
    whether it was named);
  - nothing is left: no process on any node that is still up, no process of the run anywhere
    after the cluster is torn down, no node-local snapshot outside the lost nodes, and none of
    the cluster's namespaces, links, /etc/hosts lines or mounts (remaining_resources()).

Every run's draw comes from random.Random("hardy-soak:SEED:RUN"), so a failing run replays alone
with --seed SEED --only-run RUN (timing still varies: the draw replays, the race may not).
The seed is printed first ("seed N: replay with --seed N --runs K") and again with every failure.
--runs N stops after N runs; --kinds limits the draw (e.g. --kinds preemption,full_disk).
--json FILE writes a summary: runs, faults survived by kind, wall time, failures.
--keep-failed DIR copies a failing run's directory (and its `hardy run` output) there
(default: /tmp/hardy-soak-SEED-failed). --hardy defaults to build/bin/hardy of this checkout; the
failure-free reference is cached in --reference-dir (default build/tests/soak-reference) and
trained with --mpirun (default $HARDY_MPIRUN, else .venv/bin/mpirun). --max-duration caps
--duration (CTest passes what fits its TIMEOUT).

Processes that crash by themselves (a SIGSEGV in a rank, say) are printed as NOTEs with the run's
replay and listed under "crashes" in the JSON; they fail a run only through the invariants.

Needs root and network namespaces like the `cluster` tests; without them it exits 77 with the
reason. Exit status 0 when every run passed, 1 when any failed.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
sys.path.insert(0, str(ROOT / "tests" / "lib"))
import emulated_cluster  # noqa: E402
import straggler  # noqa: E402  (NodeCpuGroups: the slow_node fault's cgroups)
from emulated_cluster import EmulatedCluster, namespaces_available, remaining_resources  # noqa: E402
from hardy_test import check_private_staging, committed_steps, complete_epochs_exact, on_dataset, node_state_left, read_jsonl_tail  # noqa: E402

NODES, RANKS_PER_NODE, SAMPLES, GLOBAL_BATCH = 4, 2, 48, 16
STEPS, CHECKPOINT_EVERY = 240, 20
TRAIN = ["--synthetic", "--samples", str(SAMPLES), "--height", "32", "--width", "32",
         "--global-batch", str(GLOBAL_BATCH), "--steps", str(STEPS), "--model-width", "8",
         "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "5", "--optimizer", "adam",
         "--lr", "0.003", "--warmup-steps", "2", "--audit-samples", "--log-every", "1000",
         "--checkpoint-every", str(CHECKPOINT_EVERY), "--max-failures", "8"]
# Every step snapshotted (the default, auto, spaces them by their cost): the soak checks that a
# relaunch loses at most the step in flight, --snapshot-every 1's promise.
EVERY_STEP = ["--snapshot-every", "1"]
SUPERVISOR = ["--backoff", "0.5", "--probe-timeout", "2", "--finish-grace", "5", "--max-restarts", "6"]
LAUNCH_TIMEOUT_S = 300        # one `hardy run` (a run has two after a preemption)
WAIT_S = 150                  # for the condition of one fault
CHECKPOINT_FS_BYTES = 24 << 20
LOSS_TOLERANCE = 0.02

KINDS = ["rank_kill", "node_crash", "node_freeze", "partition", "relaunch_crash", "checkpoint_kill",
         "recovery_kill", "preemption", "full_disk"]
# Drawn apart from KINDS (draw(): a stream of its own), so that older seeds replay.
LOG_KILL = "log_kill"
SLOW_NODE = "slow_node"
APART = [LOG_KILL, SLOW_NODE]
# How a run's job is laid out, drawn per run: one MPI job, or fault domains of 2 nodes (2 domains, each
# its own mpirun) alone, with lagged updates, meeting every 4th step, or training on DeepCAM-layout
# files staged to node-local storage. Domain layouts draw the faults that reach a domain from outside
# (the hooks, the preemption and the full disk belong to the one-job layout).
DOMAIN_KINDS = ["rank_kill", "node_crash", "node_freeze", "partition"]
LAYOUTS = {  # hardy run's options, hardy train's, the fault kinds that fit
    "one_job": ([], [], KINDS),
    "domains": (["--nodes-per-domain", "2"], [], DOMAIN_KINDS),
    "domains_lag": (["--nodes-per-domain", "2"], ["--gradient-lag", "1"], DOMAIN_KINDS),
    "domains_sync4": (["--nodes-per-domain", "2"], ["--domain-sync-every", "4"], DOMAIN_KINDS),
    "domains_staged": (["--nodes-per-domain", "2"], ["--stage-to"], DOMAIN_KINDS),
    "domains_sharded": (["--nodes-per-domain", "2"], ["--domain-exchange", "sharded"], DOMAIN_KINDS),
    "one_job_bf16": ([], ["--precision", "bf16"], KINDS),
    "domains_lag_sync4": (["--nodes-per-domain", "2"], ["--gradient-lag", "1", "--domain-sync-every", "4"],
                          DOMAIN_KINDS),
}
# Variants of a layout, drawn in its place half the time from a stream of their own (draw()), so that
# older seeds still draw the layouts and faults they drew (a run of the base layout may now run as
# its variant; the stream's name keeps seed 656107231's run 64, the log-write case of #71, as it was).
VARIANT_OF = {"one_job_bf16": "one_job", "domains_lag_sync4": "domains_sync4"}
SYNC_EVERY = {"domains_sync4": 4, "domains_lag_sync4": 4}
# What a layout that meets every few steps trains as once one domain is lost for good: one
# domain, meeting nobody (the reference that bounds its loss with its own).
ALONE = {"domains_sync4": "domains", "domains_lag_sync4": "domains_lag"}
ONE_JOB = {"one_job", "one_job_bf16"}
HOOKED = {"checkpoint_kill", "recovery_kill", LOG_KILL}       # --inject-failure, first launch only
NODE_LOSS = {"node_crash", "node_freeze", "partition", "relaunch_crash"}
RELAUNCHING = {"node_crash", "node_freeze", "partition"}    # what a relaunch_crash can follow
ONCE = {"checkpoint_kill", "recovery_kill", "preemption", "full_disk"}


# ---- the draw ------------------------------------------------------------------------------------
def draw(seed, index, kinds, layouts=("one_job",)):
    """The layout and faults of run `index`: a dict with "layout", "spares" and "faults" (in the
    order they happen), a function of (seed, index, kinds, layouts) alone."""
    rng = random.Random(f"hardy-soak:{seed}:{index}")
    log_kinds = set(kinds) & {LOG_KILL}
    slow = SLOW_NODE in kinds
    kinds = [k for k in kinds if k not in APART]  # none left: only kinds drawn apart were asked for
    bases = [name for name in LAYOUTS if name not in VARIANT_OF and
             (name in layouts or any(VARIANT_OF[v] == name for v in layouts if v in VARIANT_OF))]
    fitting = [name for name in bases if not kinds or set(kinds) & set(LAYOUTS[name][2])]
    if not fitting:
        raise RuntimeError(f"no layout of {list(layouts)} takes the fault kinds {kinds}")
    layout = rng.choice(fitting)
    choices = ([layout] if layout in layouts else []) + \
        [v for v, base in VARIANT_OF.items() if base == layout and v in layouts]
    layout = random.Random(f"hardy-soak-layout-variant:{seed}:{index}").choice(choices)
    kinds = [k for k in kinds if k in LAYOUTS[layout][2]]
    for _ in range(1000):
        spares = 1 if rng.random() < 0.3 else 0
        chosen = []
        for _ in range(rng.randint(1, 3) if kinds else 0):
            kind = rng.choice(kinds)
            if kind in ONCE and kind in chosen:
                continue
            chosen.append(kind)
        if not chosen and kinds:
            continue
        hooked = [k for k in chosen if k in HOOKED]
        outside = [k for k in chosen if k not in HOOKED]
        rng.shuffle(outside)
        # A relaunch crash needs a relaunch to hit: right after a node fault that causes one.
        ordered = []
        for kind in outside:
            if kind == "relaunch_crash" and not (ordered and ordered[-1] in RELAUNCHING):
                ordered.append("node_crash")
            ordered.append(kind)
        faults = []
        last_hook_step = 0
        if "checkpoint_kill" in hooked:
            step = rng.choice(range(CHECKPOINT_EVERY, 81, CHECKPOINT_EVERY))
            faults.append({"kind": "checkpoint_kill", "step": step, "ranks": [0]})
            last_hook_step = step
        if "recovery_kill" in hooked:
            avoid = {f["step"] + d for f in faults for d in range(-4, 5)}
            step = rng.choice([s for s in range(6, 91) if s not in avoid])
            # Rank 0 must live to write its checkpoint when both hooks are drawn.
            pool = list(range(1 if faults else 0, NODES * RANKS_PER_NODE))
            first, second = rng.sample(pool, 2)
            faults.append({"kind": "recovery_kill", "step": step, "ranks": [first, second]})
            last_hook_step = max(last_hook_step, step)
        faults.sort(key=lambda f: f["step"])
        # Outside faults at increasing steps, at least GAP apart, after the hooks.
        stepped = [k for k in ordered if k != "relaunch_crash"]
        gap, first_step, last_step = 15, max(15, last_hook_step + 12), STEPS - 40
        room = last_step - first_step - (len(stepped) - 1) * gap
        if room < len(stepped):
            continue
        offsets = sorted(rng.sample(range(room), len(stepped)))
        steps = iter(first_step + o + i * gap for i, o in enumerate(offsets))
        for kind in ordered:
            fault = {"kind": kind, "pick": rng.random()}
            if kind != "relaunch_crash":
                fault["step"] = next(steps)
            faults.append(fault)
        # The nodes a relaunch leaves out: every node lost plus (once there is a relaunch) the
        # nodes of injected victims. At least one node must be left to train on.
        lost = sum(1 for f in faults if f["kind"] in NODE_LOSS)
        if lost:
            lost += len({r // RANKS_PER_NODE for f in faults if f["kind"] in HOOKED for r in f["ranks"]})
        if lost > NODES + spares - 1:
            continue
        # Domains of 2 nodes: a lost node ends its domain, which comes back on a spare or not at
        # all. One domain must be left to finish the job.
        if layout not in ONE_JOB and lost > spares + 1:
            continue
        # A kill of rank 0 between a step's snapshot and its log lines, drawn last from a stream of
        # its own (the draw above is what it was before log_kill existed), where rank 0 has no
        # other death drawn and its node may go too.
        own = random.Random(f"hardy-soak-log-kill:{seed}:{index}")
        rank0_dies = any(0 in f.get("ranks", []) for f in faults)
        room_for_node = not lost or lost + 1 <= NODES + spares - 1
        if LOG_KILL in log_kinds and layout in ONE_JOB and not rank0_dies and room_for_node \
                and own.random() < 1 / 3:
            avoid = {f["step"] + d for f in faults if "step" in f for d in range(-4, 5)}
            step = own.choice([s for s in range(6, 91) if s not in avoid])
            faults.append({"kind": LOG_KILL, "step": step, "ranks": [0]})
        # A node slowed for a while, drawn last from a stream of its own as log_kill is, in a
        # third of the runs of any layout (every run when it is the only kind asked for).
        own = random.Random(f"hardy-soak-slow-node:{seed}:{index}")
        if slow and (own.random() < 1 / 3 or not kinds):
            step = own.randint(25, STEPS - 120)
            faults.append({"kind": SLOW_NODE, "step": step, "until": step + own.randint(60, 100),
                           "pick": own.random()})
        return {"layout": layout, "spares": spares, "faults": faults}
    raise RuntimeError(f"no valid draw for kinds {kinds}")


def describe(fault):
    where = f"at step {fault['step']}" if "step" in fault else "during the next relaunch"
    if "until" in fault:
        where += f" until step {fault['until']}"
    who = f" ranks {fault['ranks']}" if "ranks" in fault else ""
    return f"{fault['kind']}{who} {where}"


# ---- reading a run directory as it grows ---------------------------------------------------------
def read_jsonl(path):
    """Every complete JSON line (a line being written is skipped)."""
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def tail_mean(metrics):
    """The mean loss of the last tenth of the steps (the last record of each step)."""
    last = {m["step"]: m["loss"] for m in metrics}
    tail = [last[step] for step in sorted(last)[-(STEPS // 10):]]
    return sum(tail) / len(tail) if tail else float("nan")


def every_holder_lost(events, restored):
    """The hosts of the launch that ended before a relaunch's restore when every one of them that
    still ran ranks at its end was left out of the relaunch (nothing of the newest state survived
    outside the checkpoints), else None."""
    at = next(i for i, e in enumerate(events) if e is restored)
    ended = next((i for i in range(at - 1, -1, -1) if events[i].get("event") == "launch_ended"), None)
    if ended is None:
        return None
    started = next((i for i in range(ended - 1, -1, -1) if events[i].get("event") in ("job_started", "launch_ended")),
                   None)
    if started is None or events[started].get("event") != "job_started":
        return None
    hosts, failed = {}, set()
    for e in events[started:ended]:
        if e.get("event") == "rank_started":
            hosts[e["rank"]] = e["host"]
        elif e.get("event") == "failure_detected":
            failed |= set(e.get("failed_ranks", []))
    alive = {host for rank, host in hosts.items() if rank not in failed}
    relaunched = next((e for e in events[ended:at] if e.get("event") == "job_relaunched"), None)
    if relaunched is None or not alive <= set(relaunched.get("excluded_nodes", [])):
        return None
    return sorted(alive)


def pid_alive(pid):
    try:
        state = next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                     if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return state not in ("Z", "X")


def processes_mentioning(text):
    """Live processes whose command line contains text (the run directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and pid_alive(int(entry.name)):
            found.append(f"pid {entry.name}: {cmd[:200]}")
    return found


def clear_like_a_reboot(hostnames, since):
    """What rebooting the run's nodes would clear, and what the nodes' shared /tmp and /dev/shm keep
    here after their processes were killed: Open MPI's daemon session directories (/tmp/prted.PID,
    named by pid, so a later daemon with the same pid would find one) and shared-memory segments.
    Only those of the emulated nodes' hosts whose processes are gone."""
    prefixes = tuple(f"pmix.{h}." for h in hostnames)
    for directory in Path("/tmp").glob("prted.*"):
        pid = directory.name.partition(".")[2]
        try:
            if not pid.isdigit() or pid_alive(int(pid)) or \
                    not any(f.name.startswith(prefixes) for f in directory.iterdir()):
                continue
        except OSError:
            continue
        shutil.rmtree(directory, ignore_errors=True)
    for segment in Path("/dev/shm").glob("sm_segment.*"):
        try:
            if segment.name.split(".")[1] in hostnames and segment.stat().st_mtime >= since:
                segment.unlink()
        except (OSError, IndexError):
            continue


class Job:
    def __init__(self, run):
        self.run = run

    def events(self, name=None):
        return [e for e in read_jsonl(self.run / "events.jsonl") if name is None or e.get("event") == name]

    def step(self):
        last = read_jsonl_tail(self.run / "metrics.jsonl")
        return last["step"] if last else 0

    def last_metric_time(self):
        last = read_jsonl_tail(self.run / "metrics.jsonl")
        return last.get("unix_time", 0) if last else 0

    def current_ranks(self):
        """(rank, pid, host) of the newest launch's ranks; with fault domains, of every domain's
        newest launch (the rank is then the domain's)."""
        events = self.events()
        if any(e.get("domain") is not None for e in events if e.get("event") == "rank_started"):
            newest = {}
            for e in events:
                if e.get("event") == "rank_started":
                    newest[(e.get("domain"), e["rank"])] = (e["rank"], e["pid"], e["host"])
            return [newest[key] for key in sorted(newest)]
        starts = [i for i, e in enumerate(events) if e.get("event") == "job_started"]
        if not starts:
            return []
        newest = {}
        for e in events[starts[-1]:]:
            if e.get("event") == "rank_started":
                newest[e["rank"]] = (e["rank"], e["pid"], e["host"])
        return [newest[r] for r in sorted(newest)]


# ---- one run -------------------------------------------------------------------------------------
ACTIVE = []  # the Run in progress, for the signal handler


def on_signal(signum, frame):
    """SIGTERM/SIGINT/SIGHUP (^C, a CTest timeout): end the run's `hardy run` (its launcher dies
    with it), unmount its tmpfs, remove its cluster, then end as the signal would. (Installed over
    the EmulatedCluster's handler, which does not chain to the one it replaced.)"""
    for run in list(ACTIVE):
        process = run.process
        if process and process.poll() is None:
            process.kill()
            process.wait()
        run.close_groups()
        run.cluster.down()
        run.unmount()
        shutil.rmtree(run.tmp, ignore_errors=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def handle_signals():
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)


class Run:
    def __init__(self, soak, index, plan, tmp, cluster):
        self.soak, self.index, self.plan, self.tmp, self.cluster = soak, index, plan, tmp, cluster
        self.run = tmp / "run"
        self.layout = plan["layout"]
        self.stage = tmp / "stage"  # node-local storage of the staged layout (a directory per host)
        self.job = Job(self.run)
        self.snapshots = tmp / "node-local"
        self.checkpoints = self.run / "checkpoints"
        self.hosts = cluster.hosts
        self.env = {**os.environ, **cluster.mpi_env()}
        self.lock = threading.Lock()
        self.process = None          # the `hardy run` of now
        self.over = threading.Event()  # the last `hardy run` ended, nothing more will start
        self.down = {}               # host -> kind, for nodes a fault took
        self.frozen = set()
        self.injected = []           # {"kind", "time", "step", ...} for each fault caused
        self.not_injected = []       # (fault, why): the job outran it
        self.problems = []           # invariants that failed
        self.preempted_at = None
        self.outputs = []
        self.crashes = []            # processes that crashed by themselves (SIGSEGV...)
        self.notes = []              # what is worth knowing but breaks no invariant
        self.slowed = {}             # host -> the slow_node record of a node slowed
        # Every node in a cpu cgroup of its own from the start, when a node is to be slowed, with
        # Open MPI's waiting ranks sleeping (straggler.py: polling would spend a node's quota).
        self.slow = next((f for f in plan["faults"] if f["kind"] == SLOW_NODE), None)
        self.groups = None           # made when the run starts (execute())
        if self.slow:
            self.env.update(straggler.SLEEP_WHEN_IDLE)
        self.elapsed = 0.0
        self.recoveries = self.relaunches = 0

    # -- launching
    def command(self, hosts, spares, resume):
        command = [self.soak.hardy, "run", "--hosts", ",".join(hosts), "--launch-agent", self.cluster.agent,
                   "--ranks-per-node", str(RANKS_PER_NODE), "--run-dir", str(self.run), *SUPERVISOR,
                   *LAYOUTS[self.layout][0]]
        if spares:
            command += ["--spare-nodes", str(spares)]
        command += ["--", *self.soak.train_options(self.layout, self.stage), *EVERY_STEP,
                    "--snapshot-dir", str(self.snapshots)]
        hooks = [f for f in self.plan["faults"] if f["kind"] in HOOKED]
        if hooks and not resume:
            specs = []
            for f in hooks:
                if f["kind"] == "checkpoint_kill":
                    specs.append(f"rank=0@step={f['step']}:checkpoint-write")
                elif f["kind"] == LOG_KILL:
                    specs.append(f"rank=0@step={f['step']}:log-write")
                else:
                    first, second = f["ranks"]
                    specs += [f"rank={first}@step={f['step']}", f"rank={second}@step={f['step']}:recovery"]
            command += ["--inject-failure", ",".join(specs)]
        if resume:
            command += ["--resume", "latest"]
        return command

    def launch(self, command, name):
        log = open(self.tmp / f"{name}.out", "w")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        with self.lock:
            self.process = process
        try:
            status = process.wait(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            status = None
        log.close()
        self.outputs.append(self.tmp / f"{name}.out")
        return status

    def fail(self, message):
        self.problems.append(message)
        print(f"  FAILED: {message}", flush=True)

    # -- faults from outside
    def wait(self, condition, what, timeout=WAIT_S):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if condition():
                return True
            if self.over.is_set():
                return condition()
            time.sleep(0.02)
        return False

    def skip(self, fault, why):
        """A drawn fault that did not happen, and why (the job outran it, no victim was left)."""
        self.not_injected.append((fault, why))
        print(f"  --- NOT INJECTED: {describe(fault)}: {why}", flush=True)

    def note(self, kind, **details):
        record = {"kind": kind, "time": time.time(), "step": self.job.step(), **details}
        self.injected.append(record)
        extra = " ".join(f"{k}={v}" for k, v in details.items())
        print(f"  --- {kind} {extra} at step {record['step']}", flush=True)
        return record

    def live_hosts(self):
        """Hosts of the newest launch that no fault took, those with a live rank first choice."""
        ranks = [r for r in self.job.current_ranks() if r[2] not in self.down]
        busy = list(dict.fromkeys(host for _, pid, host in ranks if pid_alive(pid)))
        return busy or list(dict.fromkeys(host for _, _, host in ranks))

    def inject(self):
        try:
            self._inject()
        except Exception as e:  # a bug of the soak itself must not pass for a hardy bug
            self.fail(f"the fault injector crashed: {type(e).__name__}: {e}")
            raise

    def _inject(self):
        previous = {"time": 0.0, "relaunches": 0}
        for fault in self.plan["faults"]:
            kind = fault["kind"]
            if kind in HOOKED or kind == SLOW_NODE:
                continue  # the job does it; slow_down() slows its node
            if kind == "relaunch_crash":
                ok = self.wait(lambda: len(self.job.events("job_relaunched")) > previous["relaunches"],
                               "a relaunch")
            else:
                since = previous["time"]
                ok = self.wait(lambda: self.job.step() >= fault["step"] and self.job.last_metric_time() > since
                               and self.process_running(), f"step {fault['step']}")
            if not ok:
                why = "the job ended first" if self.over.is_set() else f"timed out after {WAIT_S} s"
                self.skip(fault, why)
                continue
            previous["relaunches"] = len(self.job.events("job_relaunched"))
            record = None
            if kind == "rank_kill":
                ranks = [r for r in self.job.current_ranks() if r[2] not in self.down and pid_alive(r[1])]
                if ranks:
                    rank, pid, host = ranks[int(fault["pick"] * len(ranks))]
                    record = self.note(kind, rank=rank, pid=pid, host=host)
                    self.cluster.kill_pid(pid)
            elif kind in ("node_crash", "node_freeze", "partition"):
                hosts = self.live_hosts()
                if hosts:
                    host = hosts[int(fault["pick"] * len(hosts))]
                    record = self.note(kind, host=host)
                    self.down[host] = kind
                    if kind == "node_crash":
                        self.cluster.crash(host)
                    elif kind == "node_freeze":
                        self.frozen.add(host)
                        self.cluster.freeze(host)
                    else:
                        self.cluster.partition(host)
            elif kind == "relaunch_crash":
                relaunch = self.job.events("job_relaunched")[-1]
                hosts = [h for h in relaunch.get("nodes", []) if h not in self.down]
                if hosts:
                    host = hosts[int(fault["pick"] * len(hosts))]
                    record = self.note(kind, host=host)
                    self.down[host] = kind
                    self.cluster.crash(host, link_down=True)
            elif kind == "preemption":
                with self.lock:
                    process = self.process
                record = self.note(kind, pid=process.pid)
                self.preempted_at = record
                process.send_signal(signal.SIGUSR1)
            elif kind == "full_disk":
                # A fault before it that took long (a partition) can leave this one its turn only
                # once the job wrote its last checkpoint: then no write is left to fail.
                if self.job.step() > STEPS - CHECKPOINT_EVERY:
                    why = f"the job is at step {self.job.step()}, past its last periodic checkpoint"
                    self.skip(fault, why)
                    continue
                record = self.fill_disk()
            if record is None:
                self.skip(fault, "no victim left")
                continue
            record["drawn_step"] = fault["step"] if "step" in fault else None
            previous["time"] = record["time"]

    def slow_down(self):
        """The slow_node fault: once the job has committed its step, a live node at a sixth of its
        CPU quota (about a third of its peers' speed) until its `until` step, then back."""
        fault = self.slow
        if not self.wait(lambda: self.job.step() >= fault["step"] and self.process_running(), f"step {fault['step']}"):
            why = "the job ended first" if self.over.is_set() else f"timed out after {WAIT_S} s"
            self.skip(fault, why)
            return
        hosts = self.live_hosts()
        if not hosts:
            self.skip(fault, "no victim left")
            return
        host = hosts[int(fault["pick"] * len(hosts))]
        node = self.hosts.index(host)
        record = self.note(SLOW_NODE, host=host, throttle_by=straggler.THROTTLE_BY)
        record["drawn_step"] = fault["step"]
        self.slowed[host] = record
        self.groups.throttle(node, straggler.THROTTLE_BY)
        self.wait(lambda: self.job.step() >= fault["until"], f"step {fault['until']}", timeout=LAUNCH_TIMEOUT_S)
        self.groups.set_bandwidth(node, self.groups.period_us, self.groups.quota_us)
        record["restored_step"] = self.job.step()
        print(f"  --- {host} back to its share at step {record['restored_step']}", flush=True)

    def close_groups(self):
        if self.groups:
            self.groups.close()

    def process_running(self):
        with self.lock:
            return self.process is not None and self.process.poll() is None

    def fill_disk(self):
        """Fills the checkpoints' tmpfs but for a third of a checkpoint, until a write fails."""
        size = max((p.stat().st_size for p in self.checkpoints.glob("ckpt-*.h5")), default=600_000)
        filler = self.checkpoints / ".soak-disk-filler"
        record = self.note("full_disk", leave_bytes=size // 3)
        failed_before = len(self.job.events("checkpoint_failed"))
        chunk = b"\0" * (1 << 20)
        with open(filler, "ab") as f:
            def top_up():
                vfs = os.statvfs(self.checkpoints)
                free = vfs.f_bavail * vfs.f_frsize
                extra = free - size // 3
                while extra > 0:
                    try:
                        f.write(chunk[:min(extra, len(chunk))])
                        f.flush()
                    except OSError:
                        break
                    extra -= min(extra, len(chunk))
            top_up()
            deadline = time.time() + WAIT_S
            while time.time() < deadline and not self.over.is_set():
                if len(self.job.events("checkpoint_failed")) > failed_before:
                    break
                top_up()  # a retention pass that removed an old checkpoint freed its space
                time.sleep(0.02)
        filler.unlink(missing_ok=True)
        record["freed_at_step"] = self.job.step()
        print(f"  --- disk freed at step {record['freed_at_step']}", flush=True)
        return record

    # -- the run
    def mount(self):
        self.checkpoints.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={CHECKPOINT_FS_BYTES}", "hardy-soak",
                        str(self.checkpoints)], check=True)

    def unmount(self):
        subprocess.run(["umount", "-l", str(self.checkpoints)], capture_output=True)

    def execute(self):
        started = time.time()
        if self.slow:
            self.groups = straggler.NodeCpuGroups(self.cluster, active_nodes=NODES)
        injector = threading.Thread(target=self.inject, daemon=True)
        injector.start()
        slower = threading.Thread(target=self.slow_down, daemon=True) if self.slow else None
        if slower:
            slower.start()
        spares = self.plan["spares"]
        status = self.launch(self.command(self.hosts, spares, resume=False), "hardy-run-1")
        if status == 4 and self.preempted_at:
            self.check_preempted()
            healthy = [h for h in self.hosts if h not in self.down]
            spares = min(spares, len(healthy) - 1)
            print(f"  resuming on {','.join(healthy)}", flush=True)
            status = self.launch(self.command(healthy, spares, resume=True), "hardy-run-2")
        self.over.set()
        injector.join(timeout=30)
        if slower:
            slower.join(timeout=30)
        self.elapsed = time.time() - started
        if status is None:
            self.fail(f"`hardy run` did not end within {LAUNCH_TIMEOUT_S} s")
            with self.lock:
                if self.process and self.process.poll() is None:
                    self.process.kill()
        self.check_invariants(status)

    def check_preempted(self):
        events = self.job.events()
        stopped = [e for e in events if e.get("event") == "job_finished" and e.get("status") == "preempted"]
        final = [e for e in events if e.get("event") == "final_checkpoint"]
        if not stopped or not final or final[-1]["step"] != stopped[-1].get("steps"):
            self.fail(f"preemption: job_finished preempted with a final checkpoint of its step: {stopped[-1:]} {final[-1:]}")
            return
        self.preempted_at["stopped_step"] = stopped[-1]["steps"]
        self.check_newest_checkpoint("after the preemption", expect_step=stopped[-1]["steps"])

    def check_newest_checkpoint(self, when, expect_step=None):
        found = sorted(self.checkpoints.glob("ckpt-*.h5"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))
        if not found:
            self.fail(f"{when}: no checkpoint at all")
            return
        newest = found[-1]
        result = subprocess.run([self.soak.hardy, "ckpt", "verify", str(newest)], capture_output=True, text=True)
        if result.returncode != 0:
            self.fail(f"{when}: the newest checkpoint {newest.name} does not verify: {result.stderr.strip()[:400]}")
        latest = self.checkpoints / "latest"
        target = os.readlink(latest) if latest.is_symlink() else None
        if target != newest.name:
            self.fail(f"{when}: latest names {target}, the newest checkpoint is {newest.name}")
        step = int(re.findall(r"\d+", newest.name)[0])
        if expect_step is not None and step != expect_step:
            self.fail(f"{when}: the newest checkpoint is of step {step}, expected {expect_step}")
        return step

    def check_invariants(self, status):
        events = self.job.events()
        metrics = read_jsonl(self.run / "metrics.jsonl")
        named = lambda name: [e for e in events if e.get("event") == name]  # noqa: E731
        self.recoveries, self.relaunches = len(named("recovery_finished")), len(named("job_relaunched"))
        # The job finishes.
        finished = named("job_finished")
        if status != 0:
            self.fail(f"the last `hardy run` exits {status}, not 0")
        if not finished or finished[-1].get("status") != "completed" or finished[-1].get("steps") != STEPS:
            self.fail(f"job_finished completed at step {STEPS}: {finished[-1:]}")
        supervisor = named("supervisor_finished")
        if not supervisor or supervisor[-1].get("status") != 0:
            self.fail(f"supervisor_finished status 0: {supervisor[-1:]}")
        committed = committed_steps(metrics, events)
        if committed != list(range(1, STEPS + 1)):
            missing = sorted(set(range(1, STEPS + 1)) - set(committed))
            self.fail(f"every step 1..{STEPS} committed (missing {missing[:10]}{'...' if len(missing) > 10 else ''})")
        reference = self.soak.references.get(self.layout)
        if metrics and reference and metrics[-1]["step"] == STEPS:
            if self.layout in SYNC_EVERY or (self.layout.startswith("domains") and named("domain_lost")):
                # Domains that train alone between meetings redo different steps after a loss (the
                # rewind): their last tenth's mean loss against the failure-free run's, within 5%.
                # A lost domain leaves one domain until it is back (for good when abandoned: no
                # spare), which trains as one job meanwhile: between the two failure-free runs,
                # within 5% of either end. (domains_lag's final loss, compared within 2% before,
                # ended 2.8% off after its domain was abandoned at step 38: seed 656107231, run 90.)
                final, expected = tail_mean(metrics), tail_mean(reference)
                low, high = expected, expected
                alone = self.soak.references.get(ALONE.get(self.layout, "domains"))
                if named("domain_lost") and alone:
                    one_job = tail_mean(alone)
                    low, high = min(expected, one_job), max(expected, one_job)
                if not 0.95 * low <= final <= 1.05 * high:
                    self.fail(f"the last {STEPS // 10} steps' mean loss {final:.5f} not within 5% of the "
                              f"failure-free {expected:.5f}" + (f" (or of the range to one job's {low:.5f})"
                                                                 if low != high else ""))
            else:
                final, expected = metrics[-1]["loss"], reference[-1]["loss"]
                if abs(final - expected) > LOSS_TOLERANCE * abs(expected):
                    self.fail(f"final loss {final:.5f} not within {LOSS_TOLERANCE:.0%} of the failure-free "
                              f"{expected:.5f}")
        if any(m.get("global_batch") != GLOBAL_BATCH for m in metrics):
            self.fail(f"the global batch stays {GLOBAL_BATCH}")
        # Every sample exactly once per epoch.
        complete, wrong = complete_epochs_exact(self.run, SAMPLES)
        epochs = STEPS * GLOBAL_BATCH // SAMPLES  # 80: the job ends on an epoch boundary
        if wrong or sorted(complete) != list(range(epochs)):
            incomplete = sorted(set(range(epochs)) - set(complete))
            self.fail(f"every epoch 0..{epochs - 1} in samples.jsonl holds every sample exactly once (wrong: {wrong}, "
                      f"incomplete: {incomplete})")
        # No committed step lost beyond the one in flight.
        for restored in named("state_restored"):
            before = max((m["step"] for m in metrics if m.get("unix_time", 0) < restored["unix_time"]), default=0)
            allowed = 0 if self.preempted_at and restored.get("source") == "checkpoint" \
                and restored["step"] == self.preempted_at.get("stopped_step") else 1
            # Domains that meet every N-th step go back to the last meeting: up to N steps.
            allowed = max(allowed, SYNC_EVERY.get(self.layout, 1))
            if before - restored["step"] <= allowed:
                continue
            resumed = [e for e in named("domains_resumed") if e.get("source") == "checkpoint"
                       and e["step"] == restored["step"] and abs(e["unix_time"] - restored["unix_time"]) < 5]
            if resumed and restored.get("source") == "checkpoint":
                # Every domain that held committed state was lost (one while another healed): the
                # relaunched ones go on from the newest checkpoint, all a job of domains can do.
                self.notes.append(f"every domain holding step {before} was lost: the relaunched domains resumed "
                                  f"from the newest checkpoint, step {restored['step']}")
                print(f"  NOTE: {self.notes[-1]}", flush=True)
                continue
            lost_with = every_holder_lost(events, restored)
            newest = max((e["step"] for e in events if e.get("event") == "checkpoint_written"
                          and e["unix_time"] < restored["unix_time"]), default=0)
            if lost_with and restored.get("source") == "checkpoint" and restored["step"] >= newest:
                # Only the lost nodes held anything newer (their node-local copies): back to the
                # newest checkpoint is all a relaunch can do.
                self.notes.append(f"every node that held step {before} was lost ({', '.join(lost_with)}): "
                                  f"resumed from the newest checkpoint, step {restored['step']}")
                print(f"  NOTE: {self.notes[-1]}", flush=True)
                continue
            self.fail(f"{before - restored['step']} committed steps lost: step {before} was committed before "
                      f"a restore of step {restored['step']} from {restored.get('source')}")
        if self.preempted_at and "stopped_step" in self.preempted_at:
            stop = self.preempted_at["stopped_step"]
            resumed = [e for e in named("state_restored") if e["unix_time"] > self.preempted_at["time"]]
            if not resumed or resumed[0]["step"] != stop or resumed[0].get("source") != "checkpoint":
                self.fail(f"the resumed job restored the final checkpoint of step {stop}: {resumed[:1]}")
        # The newest checkpoint verifies.
        self.check_newest_checkpoint("at the end", expect_step=STEPS)
        tmp_left = sorted(p.name for p in self.checkpoints.iterdir() if p.name.endswith(".tmp"))
        if tmp_left:
            self.fail(f"unfinished checkpoint files left: {tmp_left}")
        if self.layout == "domains_staged":
            check_private_staging(lambda ok, message: ok or self.fail(message), "staged", self.stage, events,
                                  lost_hosts=list(self.down))
        # Every fault happened; nothing healthy named slow.
        self.check_faults_happened(events)
        self.check_named_slow(events)
        self.find_crashes()
        # Nothing of the job is left on a node that is up, nor node-local snapshots. A node cut
        # off for good cannot hear that mpirun is gone: its daemon's last message to mpirun stays
        # unacknowledged, so TCP retransmits (the keepalive never starts) until tcp_retries2 gives
        # up, about 15 minutes. Partitions end, so the check heals them first: then mpirun's host
        # answers with a reset and the daemons leave within a second (measured: 1 s).
        for host in [h for h, kind in self.down.items() if kind == "partition"]:
            self.cluster.heal(host)
        deadline = time.time() + 10  # the daemons leave about 0.6 s after mpirun
        while (left := [line for line in self.cluster.leftovers() if line.split(":")[0] not in self.frozen]) \
                and time.time() < deadline:
            time.sleep(0.1)
        if left:
            self.fail(f"processes left on nodes that are up: {left}")
        # Every node of the run removed the run's node-local state at the end, a node whose ranks
        # died inside the job and one a relaunch left out included; only a node the cleanup
        # could not reach keeps its copy, and the event names it (a crashed node's memory would
        # be gone; a frozen node's is removed by the user's next job there).
        hosts, problems = node_state_left(self.snapshots, events)
        for problem in problems:
            self.fail(problem)
        unexpected = [h for h in hosts if h not in self.down]
        if unexpected:
            self.notes.append(f"node-local snapshots left on {unexpected}, which the cleanup could not reach "
                              f"though no fault took them")

    def check_faults_happened(self, events):
        failed_ranks = lambda after: {r for e in events if e.get("event") == "failure_detected"  # noqa: E731
                                      and e["unix_time"] >= after for r in e.get("failed_ranks", [])}
        first_launch = min((e["unix_time"] for e in events if e.get("event") == "job_started"), default=0)
        first_end = next((e for e in events if e.get("event") == "launch_ended"), {})
        for fault in self.plan["faults"]:
            if fault["kind"] in HOOKED:
                # The victim notes the time it died (FailureInjector) before its SIGKILL.
                killed = {r for r in fault["ranks"] if (self.checkpoints / f"injected-kill-{r}.time").exists()}
                missing = set(fault["ranks"]) - killed - failed_ranks(first_launch)
                if missing and (first_end.get("last_committed_step") or 0) < fault["step"] - 1:
                    # The hook belongs to the first launch, which ended before the step for another
                    # reason: the relaunch no longer carries it.
                    why = f"the first launch ended first: {first_end.get('verdict')}"
                    self.skip(fault, why)
                elif missing:
                    self.fail(f"{describe(fault)}: rank(s) {sorted(missing)} neither recorded their injected death "
                              f"nor were detected as failed")
        for record in self.injected:
            kind, after = record["kind"], record["time"]
            later = [e for e in events if e["unix_time"] >= after]
            domains = self.layout not in ONE_JOB
            if kind == "rank_kill" and domains:
                # A domain's rank numbers are its own: any failure found after, or its domain lost.
                if not any(e.get("event") in ("failure_detected", "domain_lost") for e in later):
                    self.fail(f"rank_kill of rank {record['rank']} on {record['host']}: neither detected in its "
                              f"domain nor ending it")
            elif kind == "rank_kill" and record["rank"] not in failed_ranks(after) and not any(
                    e.get("event") == "launch_ended" for e in later):
                self.fail(f"rank_kill of rank {record['rank']}: neither detected in the job nor ending the launch")
            if kind in NODE_LOSS and domains:
                # Its domain ends, or shrinks around it inside (ULFM) when its launcher lives on.
                lost = [e for e in later if (e.get("event") == "domain_lost" and record["host"] in e.get("nodes", []))
                        or (e.get("event") == "failure_detected" and record["host"] in e.get("failed_hosts", []))]
                back = [e for e in later if e.get("event") == "domain_relaunched" and record["host"] in e.get("nodes", [])]
                if not lost:
                    self.fail(f"{kind} of {record['host']}: neither a domain_lost nor a failure_detected names it")
                if back:
                    self.fail(f"{kind} of {record['host']}: a domain was relaunched there: {back[-1]}")
            elif kind in NODE_LOSS:
                relaunched = [e for e in later if e.get("event") == "job_relaunched"]
                if relaunched and record["host"] in relaunched[-1].get("nodes", []):
                    self.fail(f"{kind} of {record['host']}: the last relaunch still runs there: {relaunched[-1]['nodes']}")
            if kind == "full_disk":
                failed = [e for e in later if e.get("event") == "checkpoint_failed"]
                if not failed:
                    self.fail("full_disk: no checkpoint_failed event")
                elif "space" not in failed[0].get("error", "").lower():
                    self.fail(f"full_disk: checkpoint_failed does not say the disk is full: {failed[0]}")
                else:
                    record["failed_step"] = failed[0]["step"]
            if kind == "preemption" and "stopped_step" not in record:
                self.fail("preemption: the job did not stop preempted")

    def check_named_slow(self, events):
        """Every rank_slow, link_slow and node_evicted names the node slowed or one a fault took
        (a partition's link, a freezing node's last steps); a slow node's record says when it was
        first named and evicted."""
        for event in events:
            if event.get("event") not in ("rank_slow", "link_slow", "node_evicted"):
                continue
            host = event.get("host")
            if host in self.slowed or host in self.down:
                continue
            # Seen in domains_staged before the watch weighed a rank's excess against the step
            # (seed 11's run 2, seed 424242's runs 18 and 36): while a node of domain 0 was slowed,
            # healthy ranks of domain 1 whose fixed costs made them 1.5-1.7 times their peers per
            # sample, 0.6 ms in 25 ms steps, were named. The replays pass since.
            self.fail(f"{event['event']} names {host}, which no fault slowed or took: {event}")
        for host, record in self.slowed.items():
            named = [e for e in events if e.get("event") in ("rank_slow", "link_slow")
                     and e.get("host") == host and e["unix_time"] >= record["time"]]
            evicted = [e for e in events if e.get("event") == "node_evicted" and e.get("host") == host]
            record["named_at_step"] = named[0]["step"] if named else None
            record["evicted_at_step"] = evicted[0]["step"] if evicted else None
            print(f"  slow node {host}: named at step {record['named_at_step']}, evicted at step "
                  f"{record['evicted_at_step']} (slowed at step {record['step']})", flush=True)

    def find_crashes(self):
        """Ranks that crashed (not killed by a fault): reported, not a failure of the run by itself."""
        self.crashes = []
        for output in self.outputs:
            text = output.read_text(errors="replace")
            for match in re.finditer(r"\[([\w.-]+):(\d+)\] Signal: ([^\n]+)", text):
                frames = re.findall(rf"\[{re.escape(match.group(1))}:{match.group(2)}\] \[ ?\d+\] ([^\n]+)", text)
                where = next((f for f in frames if "libc.so" not in f), "?")
                self.crashes.append(f"{match.group(1)} pid {match.group(2)}: {match.group(3)} in {where[:160]}")
        for crash in self.crashes:
            print(f"  NOTE: a process crashed: {crash}", flush=True)

    def survived(self):
        """Faults by kind that happened in this run."""
        counts = Counter(r["kind"] for r in self.injected)
        skipped = [id(f) for f, _ in self.not_injected]
        for fault in self.plan["faults"]:
            if fault["kind"] in HOOKED and id(fault) not in skipped:
                counts[fault["kind"]] += 1
        return counts


# ---- the soak ------------------------------------------------------------------------------------
class Soak:
    def __init__(self, args):
        self.args = args
        self.hardy = str(Path(args.hardy).resolve())
        self.references = {}  # layout -> the failure-free run's metrics
        self.dataset = None   # DeepCAM-layout files, for the staged layout

    def train_options(self, layout, stage=None):
        """`hardy train`'s options of a layout; the staged one stages to `stage` (none: reads the
        files where they are, as its reference does)."""
        extra = LAYOUTS[layout][1]
        if layout == "domains_staged":
            return on_dataset(TRAIN, self.dataset, *(["--stage-to", str(stage)] if stage else []))
        return TRAIN + extra

    def compute_references(self, layouts):
        """The failure-free run of each layout's job, cached: one MPI job of 8 ranks on this host, or,
        for domains that train alone between meetings (which one job cannot), 2 domains of 4 ranks."""
        import hashlib
        directory = Path(self.args.reference_dir)
        directory.mkdir(parents=True, exist_ok=True)
        if "domains_staged" in layouts:
            self.dataset = directory / f"deepcam-{SAMPLES}"
            if not (self.dataset / "done").exists():
                shutil.rmtree(self.dataset, ignore_errors=True)
                subprocess.run([self.hardy, "data", "generate", "--format", "deepcam", "--out", str(self.dataset),
                                "--samples", str(SAMPLES), "--validation-samples", "1", "--height", "32",
                                "--width", "32"], check=True, stdout=subprocess.DEVNULL)
                (self.dataset / "done").write_text("")
        mpirun = self.args.mpirun or os.environ.get("HARDY_MPIRUN", str(ROOT / ".venv" / "bin" / "mpirun"))
        # Domains meeting every 4th step that lose one domain for good train on as one job: its
        # reference (the domains layout's) bounds theirs.
        # Domains meeting every 4th step that lose one domain for good train on as one domain: its
        # reference (ALONE) bounds theirs.
        layouts = [*layouts, *[ALONE[name] for name in layouts if name in ALONE and ALONE[name] not in layouts]]
        for layout in layouts:
            train = self.train_options(layout)
            key = hashlib.sha1(" ".join(train + [str(NODES * RANKS_PER_NODE), layout]).encode()).hexdigest()[:12]
            cache = directory / f"reference-{key}.json"
            if cache.exists():
                self.references[layout] = json.loads(cache.read_text())["metrics"]
                continue
            run = directory / f"reference-{key}"
            shutil.rmtree(run, ignore_errors=True)
            if layout in SYNC_EVERY:
                command = [self.hardy, "run", "--nodes", "2", "--nodes-per-domain", "1", "--ranks-per-node",
                           str(NODES * RANKS_PER_NODE // 2), "--run-dir", str(run), "--", *train,
                           "--snapshot-every", "0", "--snapshot-dir", str(directory / "node-local")]
            else:
                command = [mpirun, "-n", str(NODES * RANKS_PER_NODE), "--oversubscribe", "--bind-to", "none",
                           "--allow-run-as-root", self.hardy, "train", *train, "--ranks-per-node",
                           str(RANKS_PER_NODE), "--run-dir", str(run), "--snapshot-every", "0"]
            print(f"computing the failure-free reference of {layout} into {run}", flush=True)
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=600)
            metrics = read_jsonl(run / "metrics.jsonl")
            self.references[layout] = [{"step": m["step"], "loss": m["loss"]} for m in metrics]
            cache.write_text(json.dumps({"metrics": self.references[layout], "train": train, "layout": layout}))

    def one(self, index, kinds, layouts):
        plan = draw(self.args.seed, index, kinds, layouts)
        spares = f", {plan['spares']} spare node" if plan["spares"] else ""
        print(f"=== run {index} (seed {self.args.seed}), {plan['layout']}{spares}: "
              + "; ".join(map(describe, plan["faults"])), flush=True)
        before = set(remaining_resources())
        run_started = time.time() - 1
        with tempfile.TemporaryDirectory(prefix=f"hardy-soak-{index}-") as tmp:
            tmp = Path(tmp)
            cluster = EmulatedCluster(nodes=NODES + plan["spares"])
            run = Run(self, index, plan, tmp, cluster)
            ACTIVE.append(run)
            handle_signals()
            try:
                run.mount()
                run.execute()
            except Exception as e:  # noqa: BLE001 (the soak goes on; the run failed)
                run.fail(f"the soak itself failed: {type(e).__name__}: {e}")
            finally:
                run.close_groups()
                cid = cluster.cluster_id
                cluster.down()
                clear_like_a_reboot(cluster.hosts, run_started)
            # Nothing of the run anywhere once its nodes are gone (frozen ones included).
            deadline = time.time() + 10
            while (stray := processes_mentioning(str(tmp))) and time.time() < deadline:
                time.sleep(0.1)
            if stray:
                run.fail(f"processes of the run left after the cluster was torn down: {stray}")
            mine = re.compile(rf"(?<![0-9a-z]){emulated_cluster.PREFIX}{cid}(n\d+|v\d+|br|-node\d+|-head)?(?![0-9])")
            leftover = [r for r in remaining_resources() if r not in before and
                        (mine.search(r) or not any(emulated_cluster.NETNS_RE.match(n) for n in emulated_cluster._netns_names()))]
            if leftover:
                run.fail(f"cluster resources left: {leftover}")
            if run.problems:
                self.keep(index, tmp, run)
            run.unmount()
            ACTIVE.remove(run)
            if any(line.split()[1] == str(run.checkpoints) for line in Path("/proc/mounts").read_text().splitlines()):
                run.fail(f"the checkpoint tmpfs is still mounted on {run.checkpoints}")
        return run

    def keep(self, index, tmp, run):
        keep = Path(self.args.keep_failed or f"/tmp/hardy-soak-{self.args.seed}-failed") / f"run-{index}"
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir(parents=True)
        for item in tmp.iterdir():
            if item.is_dir():
                shutil.copytree(item, keep / item.name, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(item, keep / item.name)
        (keep / "plan.json").write_text(json.dumps({"seed": self.args.seed, "run": index, "plan": run.plan,
                                                    "injected": run.injected, "problems": run.problems}, indent=1))
        run.kept = str(keep)
        print(f"  kept the run in {keep}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hardy", default=str(ROOT / "build" / "bin" / "hardy"))
    parser.add_argument("--duration", type=float, default=float(os.environ.get("HARDY_SOAK_SECONDS", "1800")))
    parser.add_argument("--max-duration", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--only-run", type=int, default=None)
    parser.add_argument("--kinds", default=",".join(KINDS + APART))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep-failed", default=None)
    parser.add_argument("--reference-dir", default=None)
    parser.add_argument("--mpirun", default=None)
    args = parser.parse_args()
    if args.seed is None:
        args.seed = time.time_ns() % 1_000_000_007
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS + APART]
    if unknown or not kinds:
        parser.error(f"unknown fault kinds {unknown}; choose among {','.join(KINDS + APART)}")
    if SLOW_NODE in kinds and not straggler.cgroups_available()[0]:
        print(f"NOTE: {SLOW_NODE} left out of the draw: {straggler.cgroups_available()[1]}", flush=True)
        kinds = [k for k in kinds if k != SLOW_NODE]
        if not kinds:
            parser.error(f"{SLOW_NODE} was the only kind asked for, and it cannot be caused here")
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    if not layouts or [name for name in layouts if name not in LAYOUTS]:
        parser.error(f"unknown layouts in {args.layouts}; choose among {','.join(LAYOUTS)}")
    if args.max_duration is not None and args.duration > args.max_duration:
        print(f"NOTE: --duration {args.duration:.0f} s capped to {args.max_duration:.0f} s (what fits the test's "
              f"TIMEOUT; reconfigure with HARDY_SOAK_SECONDS set for a longer soak)", flush=True)
        args.duration = args.max_duration
    if args.reference_dir is None:
        build_tests = ROOT / "build" / "tests"
        args.reference_dir = str(build_tests / "soak-reference" if build_tests.is_dir()
                                 else Path(tempfile.gettempdir()) / "hardy-soak-reference")
    replay = f"--seed {args.seed}" + (f" --kinds {args.kinds}" if set(kinds) != set(KINDS + APART) else "") + \
        (f" --layouts {args.layouts}" if set(layouts) != set(LAYOUTS) else "")
    print(f"seed {args.seed}: replay with {replay} --runs K (or one run alone: --only-run K)", flush=True)
    ok, why = namespaces_available()
    if not ok:
        print(f"skipped: cannot emulate a cluster here: {why}")
        sys.exit(77)
    if not Path(args.hardy).exists():
        print(f"no hardy executable at {args.hardy}")
        sys.exit(2)

    handle_signals()
    soak = Soak(args)
    started = time.time()
    soak.compute_references(layouts)
    finals = ", ".join(f"{name} {metrics[-1]['loss']:.5f}" for name, metrics in soak.references.items())
    print(f"failure-free final losses: {finals}; soaking for {args.duration:.0f} s", flush=True)
    survived, not_injected, failures, crashes, runs = Counter(), Counter(), [], [], 0
    layouts_run, drawn, layout_kinds = Counter(), Counter(), Counter()
    indices = [args.only_run] if args.only_run is not None else None
    index = 0
    while True:
        if indices is not None:
            if not indices:
                break
            index = indices.pop()
        elif (args.runs is not None and index >= args.runs) or \
                (args.runs is None and time.time() - started >= args.duration):
            break
        run = soak.one(index, kinds, layouts)
        runs += 1
        counts = run.survived()
        for fault, why in run.not_injected:
            not_injected[fault["kind"]] += 1
        if run.crashes or run.notes:
            crashes.append({"run": index, "replay": f"{replay} --only-run {index}", "plan": run.plan,
                            "passed": not run.problems, "crashes": run.crashes, "notes": run.notes})
        layouts_run[run.layout] += 1
        for fault in run.plan["faults"]:
            drawn[fault["kind"]] += 1
            layout_kinds[f"{run.layout}/{fault['kind']}"] += 1
        if run.problems:
            failures.append({"run": index, "replay": f"{replay} --only-run {index}", "plan": run.plan,
                             "injected": run.injected, "problems": run.problems, "kept": getattr(run, "kept", None)})
            print(f"=== run {index} FAILED ({len(run.problems)} problem(s)); seed {args.seed}: replay it alone with "
                  f"{replay} --only-run {index}, or the soak up to it with {replay} --runs {index + 1}", flush=True)
        else:
            survived.update(counts)
            print(f"=== run {index} passed in {run.elapsed:.1f} s ({run.recoveries} in-job recoveries, "
                  f"{run.relaunches} relaunches), survived {dict(counts)}", flush=True)
        index += 1
    wall = time.time() - started
    print(f"\nsoak: {runs} run(s) in {wall:.0f} s, {len(failures)} failed; seed {args.seed}")
    print(f"faults survived: {dict(sorted(survived.items()))} ({sum(survived.values())} in all); "
          f"runs by layout: {dict(sorted(layouts_run.items()))}")
    print(f"faults drawn: {dict(sorted(drawn.items()))}; by layout and kind: {dict(sorted(layout_kinds.items()))}")
    if not_injected:
        print(f"faults not injected (the job outran them): {dict(sorted(not_injected.items()))}")
    for crash in crashes:
        state = "passed" if crash["passed"] else "failed"
        if crash["crashes"]:
            print(f"NOTE: run {crash['run']} ({state}): {len(crash['crashes'])} process(es) crashed by themselves, "
                  f"e.g. {crash['crashes'][0]}; replay with {crash['replay']}")
        for note in crash["notes"]:
            print(f"NOTE: run {crash['run']} ({state}): {note}; replay with {crash['replay']}")
    for failure in failures:
        print(f"FAILED run {failure['run']}: replay with {failure['replay']}")
        for problem in failure["problems"]:
            print(f"    {problem}")
    left = remaining_resources()
    others = any(emulated_cluster.NETNS_RE.match(n) for n in emulated_cluster._netns_names())
    if left and not others:
        print(f"FAILED: emulated-cluster resources left at the end: {left}")
        failures.append({"run": None, "problems": [f"resources left at the end: {left}"]})
    if args.json:
        Path(args.json).write_text(json.dumps({
            "seed": args.seed, "runs": runs, "wall_s": round(wall, 1), "duration_s": args.duration,
            "kinds": kinds, "layouts": dict(sorted(layouts_run.items())),
            "faults_drawn": dict(sorted(drawn.items())),
            "faults_by_layout": dict(sorted(layout_kinds.items())),
            "faults_survived": dict(sorted(survived.items())),
            "faults_not_injected": dict(sorted(not_injected.items())), "failed_runs": len(failures),
            "failures": failures, "notes": crashes}, indent=1))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
