#!/usr/bin/python3
"""hardy's Slurm jobs on several nodes for real (CTest label `slurm-cluster`): a private Slurm
whose slurmd daemons run inside the nodes of an emulated cluster (cluster_slurm.py over
tests/cluster/emulated_cluster.py), jobs submitted with `hardy submit --scheduler slurm`.

Usage: slurm_cluster.py HARDY_BINARY SOURCE_DIR SCENARIO

  smoke         `srun -N 4 hostname` runs on all four nodes, each under its own name; a node
                whose slurmd dies with its link cut is marked DOWN; nothing is left behind
  job           a 4-node x 2-rank job: `hardy run` in the allocation starts mpirun, whose daemons
                Slurm starts (an srun step `prted` on the other nodes); it completes with every
                sample of every epoch trained exactly once; `hardy status` follows it; a second
                job is ended by `hardy cancel`, leaving no process on any node
  node_crash    a node dies mid-job (every process on it, slurmd included, and its link): Slurm
                marks it DOWN, `hardy run` relaunches inside the same allocation on the 3 others
                and the job completes with exact coverage, at most one committed step lost and
                the dead node named; prints the time from the node's death to training again
  time_limit    Slurm's warning before the time limit (SIGUSR1 to the batch shell, sent here with
                `scancel --signal=USR1 --batch`, as --signal=B:USR1@lead does) reaches every rank on
                all 4 nodes: they stop at the same step, the final checkpoint is written, the job
                requeues itself and resumes from it on 4 nodes, losing no committed step
  requeue       a 4-node job on a 5-node cluster that needs all 4 (--min-nodes 4): a node dies,
                `hardy run` asks for a requeue without it (RUN_DIR/exclude-nodes), the batch script
                requeues the job and excludes the node (ExcNodeList), Slurm runs it again on the
                4 healthy nodes and it completes from the checkpoint that `hardy run` kept of its
                newest node-local snapshot before asking (node_state_removed's `kept`), at most
                one committed step lost; prints the time from the node's death to training again
Exit status 77 (skip) where it cannot run: not root, no namespaces, no slurm-wlm/munge, no
supervisor in this build.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "cluster"))
sys.path.insert(0, str(HERE.parent / "lib"))
from cluster_slurm import ClusterSlurm, missing_requirements  # noqa: E402
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import Checks, committed_steps, complete_epochs_exact, node_state_left, read_jsonl, relaunch_restores  # noqa: E402
from scheduler_test_lib import Hardy  # noqa: E402

SKIP = 77
NODES, RANKS_PER_NODE, SAMPLES, GLOBAL_BATCH = 4, 2, 48, 16
CLUSTER_NODES = {"requeue": NODES + 1}  # emulated nodes, where a scenario needs more than NODES
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def job_ini(path, steps, **extra):
    """A small training job (the emulated nodes share this machine's cores), with every step's
    samples audited and snapshotted (--snapshot-every 1, not the default auto, which spaces the
    snapshots by their cost: the scenarios check that a relaunch loses at most one step)."""
    options = {"synthetic": "true", "samples": SAMPLES, "height": 32, "width": 32, "eval-samples": 0,
               "global-batch": GLOBAL_BATCH, "steps": steps, "optimizer": "adam", "lr": 0.003,
               "warmup-steps": 2, "model-width": 8, "aspp-channels": 16, "aspp-rates": "1,2",
               "decoder-channels": 16, "low-level-channels": 8, "seed": 5, "log-every": 50,
               "checkpoint-every": 50, "audit-samples": "true", "max-failures": 4,
               "snapshot-every": 1, **extra}
    path.write_text("".join(f"{k} = {v}\n" for k, v in options.items()))
    return path


class Scenario:
    def __init__(self, hardy, cluster, slurm, tmp):
        self.hardy, self.cluster, self.slurm, self.tmp = hardy, cluster, slurm, tmp
        self.check = Checks()
        # What the batch job inherits from sbatch (--export=ALL): Slurm's configuration and Open
        # MPI restricted to the cluster's subnet.
        self.env = {**slurm.env, **cluster.mpi_env()}
        self.runs = []

    def submit(self, run, config, *options):
        result = self.hardy("submit", "--scheduler", "slurm", "--config", config, "--run-dir", run,
                            "--nodes", NODES, "--ranks-per-node", RANKS_PER_NODE, "--time", "00:15:00",
                            # A daemon that exits at its start leaves mpirun waiting (seen in CI):
                            # the test's job starts in seconds, so a minute ends such a launch.
                            "--start-timeout", 60, *options, env=self.env)
        job_id = result.stdout.strip()
        self.runs.append(run)
        self.check(job_id.isdigit(), f"hardy submit printed the job id ({job_id})")
        return job_id

    def status(self, run):
        return json.loads(self.hardy("status", run, "--json", env=self.env).stdout)

    def step(self, run):
        metrics = read_jsonl(run / "metrics.jsonl")
        return metrics[-1]["step"] if metrics else 0

    def wait_for_step(self, run, job_id, step, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.step(run) >= step:
                return True
            if self.slurm.job_fields(job_id).get("JobState") in FINAL_STATES:
                break
            time.sleep(0.1)
        self.check(False, f"job {job_id} reached step {step} (at {self.step(run)})")
        self.dump(run)
        return False

    def job_steps(self, job_id):
        """Slurm's steps of the job: [(step id, name, node list)]."""
        out = self.slurm.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j %N"], check=False).stdout
        return [tuple(line.split()) for line in out.splitlines() if len(line.split()) == 3]

    def job_processes(self):
        """Processes on the nodes other than slurmd: what a finished job may not leave behind."""
        return [line for line in self.cluster.leftovers() if "slurmd " not in line and "slurmd -D" not in line]

    def dump(self, run):
        steps = self.slurm.run(["squeue", "-s", "-h", "-o", "%i %j %N %M"], check=False).stdout
        print(f"--- job steps Slurm counts as running:\n{steps}")
        print("--- processes on the nodes:\n" + "\n".join(self.job_processes()))
        events = run / "events.jsonl"
        if events.exists():
            print("--- the last events:\n" + "\n".join(events.read_text(errors="replace").splitlines()[-12:]))
        for name in ("job.out", "job.err"):
            path = run / name
            if path.exists():
                print(f"--- {name}:\n{path.read_text(errors='replace')[-4000:]}")
        print(self.slurm.logs())

    def completed(self, job_id, run, steps, label, requeues, timeout=400):
        """Waits for the job's end, checks that Slurm saw it complete after `requeues` requeues,
        and audits its run directory (audit()); returns Slurm's fields and the events."""
        fields = self.slurm.wait_for_state(job_id, FINAL_STATES, timeout=timeout)
        as_expected = (fields["JobState"] == "COMPLETED" and fields.get("ExitCode") == "0:0"
                       and fields.get("Restarts") == str(requeues))
        self.check(as_expected,
                   f"{label}: the job completed after {requeues} requeue(s) ({fields['JobState']}, exit "
                   f"{fields.get('ExitCode')}, restarts {fields.get('Restarts')})")
        # A wrong number of requeues too: on 2026-12-01 a time_limit job resumed inside its
        # allocation instead of being requeued, and nothing said how its launch had ended.
        if not as_expected:
            self.dump(run)
        return fields, self.audit(run, steps, label)

    def audit(self, run, steps, label):
        """What every finished job must show: completed at its last step, every step committed,
        every complete epoch covering every sample exactly once."""
        check = self.check
        events = read_jsonl(run / "events.jsonl")
        finished = [e for e in events if e["event"] == "job_finished"]
        check(finished and finished[-1]["status"] == "completed" and finished[-1]["steps"] == steps,
              f"{label}: job_finished completed at step {steps} ({finished[-1:]})")
        supervisor = [e for e in events if e["event"] == "supervisor_finished"]
        check(supervisor and supervisor[-1]["status"] == 0, f"{label}: supervisor_finished status 0")
        committed = committed_steps(read_jsonl(run / "metrics.jsonl"), events)
        check(committed == list(range(1, steps + 1)), f"{label}: every step 1..{steps} committed")
        complete, wrong = complete_epochs_exact(run, SAMPLES)
        check(len(complete) >= steps * GLOBAL_BATCH // SAMPLES - 1 and not wrong,
              f"{label}: {len(complete)} complete epochs each cover every sample exactly once (wrong: {wrong})")
        return events


def smoke(s):
    check, slurm, cluster = s.check, s.slurm, s.cluster
    result = slurm.run(["srun", "-N", str(NODES), "hostname"], check=False, timeout=60)
    names = sorted(result.stdout.split())
    check(result.returncode == 0 and names == sorted(cluster.hosts),
          f"srun -N {NODES} hostname ran on every node: {names} (exit {result.returncode})")
    addresses = {n: slurm.node_fields(n).get("NodeAddr") for n in cluster.hosts}
    check(addresses == {n.hostname: n.address for n in cluster.nodes}, f"each node at its own address: {addresses}")
    # Inside an allocation, a step on one node is how hardy can ask whether a node still runs
    # jobs (the launcher's own path: Open MPI starts its daemons with srun there).
    probe = slurm.run(["salloc", "-N", str(NODES), "srun", "--overlap", "-N1", "-n1", "-w", cluster.hosts[2],
                       "hostname"], check=False, timeout=60)
    check(probe.returncode == 0 and probe.stdout.split() == [cluster.hosts[2]],
          f"srun --overlap -N1 -w {cluster.hosts[2]} in an allocation ({probe.stdout.strip()!r}, {probe.stderr.strip()[-300:]!r})")
    died = time.monotonic()
    cluster.crash(3, link_down=True)
    waited = slurm.wait_for_node_state(cluster.hosts[3], ("down",), timeout=40)
    check(True, f"{cluster.hosts[3]} marked down {waited:.1f} s after its slurmd died with its link cut")
    result = slurm.run(["srun", "-N", str(NODES - 1), "hostname"], check=False, timeout=60)
    check(result.returncode == 0 and sorted(result.stdout.split()) == sorted(cluster.hosts[:3]),
          f"jobs run on the {NODES - 1} nodes left ({sorted(result.stdout.split())})")
    cluster.heal(3)
    slurm.start_slurmd(3)
    check(True, f"{cluster.hosts[3]} back in service {time.monotonic() - died:.1f} s after it died (slurmd restarted)")


def job(s):
    check, slurm, cluster, tmp = s.check, s.slurm, s.cluster, s.tmp
    steps = 200
    run = tmp / "run"
    job_id = s.submit(run, job_ini(tmp / "job.ini", steps))
    slurm.wait_for_state(job_id, ("RUNNING",) + FINAL_STATES, timeout=60)
    seen_steps = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(name == "prted" for _, name, _ in seen_steps):
        seen_steps = s.job_steps(job_id)
        time.sleep(0.2)
    prted = [nodes for _, name, nodes in seen_steps if name == "prted"]
    # mpirun runs in the batch step on the first node and has Slurm start its daemon (prted)
    # on every other node: Open MPI's plm is slurm, not ssh.
    others = f"{cluster.hosts[0][:-1]}[1-{NODES - 1}]"  # hdy-node[1-3]
    check(prted == [others],
          f"Slurm started mpirun's daemons as a step on the other nodes: {seen_steps}")
    status = s.status(run)
    check(status["scheduler"]["state"] == "RUNNING" and status["scheduler"]["job_id"] == job_id,
          f"hardy status: job {job_id} RUNNING ({status['scheduler']})")
    _, events = s.completed(job_id, run, steps, "job", requeues=0, timeout=300)
    started = [e for e in events if e["event"] == "supervisor_started"]
    check(started and started[0]["scheduler"] == "slurm" and started[0]["scheduler_job_id"] == job_id
          and started[0]["nodes"] == cluster.hosts, f"hardy run took the allocation's nodes: {started[:1]}")
    check(read_jsonl(run / "metrics.jsonl")[-1]["world_size"] == NODES * RANKS_PER_NODE,
          f"{NODES * RANKS_PER_NODE} ranks trained")
    status = s.status(run)
    check(status["scheduler"]["state"] == "COMPLETED" and status["step"] == steps,
          f"hardy status: COMPLETED at step {status['step']}")
    check(status["checkpoint"]["step"] == steps, f"hardy status: valid checkpoint {status['checkpoint']}")
    left = _wait(s.job_processes, 10)
    check(not left, f"no process of the job left on any node: {left}")

    # A second job, ended by hardy cancel while it trains.
    run2 = tmp / "cancelled"
    # A cancelled job's node-local snapshots go when its hardy run ends (the newest kept as a
    # checkpoint): in the test's own tree all the same.
    job2 = s.submit(run2, job_ini(tmp / "long.ini", 100000, **{"snapshot-dir": tmp / "node-local-cancelled"}))
    if s.wait_for_step(run2, job2, 20, timeout=120):
        result = s.hardy("cancel", run2, env=s.env)
        check(f"cancelled slurm job {job2}" in result.stdout, f"hardy cancel: {result.stdout.strip()}")
        fields = slurm.wait_for_state(job2, ("CANCELLED",) + FINAL_STATES, timeout=60)
        check(fields["JobState"] == "CANCELLED", f"Slurm cancelled the job ({fields['JobState']})")
        check(s.status(run2)["scheduler"]["state"] == "CANCELLED", "hardy status: CANCELLED")
        left = _wait(s.job_processes, 30)
        check(not left, f"nothing of the cancelled job left on any node: {left}")
        idle = _wait(lambda: not slurm.all_nodes_idle(), 30)
        check(not idle, f"every node idle again: {slurm.node_states()}")


def node_crash(s):
    check, slurm, cluster, tmp = s.check, s.slurm, s.cluster, s.tmp
    steps, fault_step, victim = 1200, 80, 2
    host = cluster.hosts[victim]
    run = tmp / "run"
    # Node-local snapshots (a directory per node) let a relaunch resume from the newest
    # committed step, not from the last checkpoint.
    # The job must still run when the node comes back, after Slurm took about 15 s to mark it
    # down: with every-step snapshots now a copy into node memory, 240 steps of 32x32 ended before
    # that, and once 900. 1200 steps of 64x64 take about 25 s after the relaunch here.
    config = job_ini(tmp / "job.ini", steps, **{"checkpoint-every": 100, "snapshot-dir": tmp / "node-local",
                                                "height": 64, "width": 64})
    job_id = s.submit(run, config)
    if not s.wait_for_step(run, job_id, fault_step, timeout=240):
        return
    fault_step = s.step(run)
    died = time.time()
    cluster.crash(victim, link_down=True)
    print(f"--- crashed {host} (slurmd included, link down) at step {fault_step}", flush=True)
    down_after = slurm.wait_for_node_state(host, ("down",), timeout=60)
    reason = slurm.run(["sinfo", "-h", "-n", host, "-o", "%E"], check=False).stdout.strip()
    check(True, f"Slurm marked {host} DOWN {down_after:.1f} s after it died (reason {reason!r})")
    # Once the job runs without it, the node comes back (repaired, slurmd registers again, Slurm
    # returns it to service): the job goes on where it is, and the node is free for others.
    deadline = time.monotonic() + 120
    while not [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_relaunched"] \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    cluster.heal(victim)
    slurm.start_slurmd(victim)
    back_at_step = s.step(run)
    state = slurm.job_fields(job_id).get("JobState")
    check(state == "RUNNING", f"{host} back in service ({slurm.node_states().get(host)}) at step {back_at_step} "
          f"while the job runs ({state})")
    _, events = s.completed(job_id, run, steps, "node_crash", requeues=0)  # inside its allocation
    relaunches = [e for e in events if e["event"] == "job_relaunched"]
    excluded = {x["host"]: x["evidence"] for r in relaunches for x in r.get("excluded", [])}
    check(list(excluded) == [host], f"hardy run left out {host} alone: {excluded}")
    check(relaunches and relaunches[-1]["nodes"] == [h for h in cluster.hosts if h != host],
          f"relaunched on the others: {relaunches[-1]['nodes'] if relaunches else None}")
    metrics = read_jsonl(run / "metrics.jsonl")
    check(metrics[-1]["world_size"] == (NODES - 1) * RANKS_PER_NODE, f"{metrics[-1]['world_size']} ranks at the end")
    lost = None
    for launch, ended_at, restored_at, source in relaunch_restores(events):
        lost = ended_at - restored_at
        check(lost <= 1, f"{lost} committed step(s) lost across launch {launch} "
              f"(ended at {ended_at}, restored {restored_at} from {source})")
    status = s.status(run)
    check(status["failures"]["job_relaunched"] >= 1 and status["scheduler"]["state"] == "COMPLETED",
          f"hardy status: {status['scheduler']['state']}, failures {status['failures']}")
    lost_nodes = status.get("lost_nodes", [])
    check([(n["host"], n["outcome"]) for n in lost_nodes] == [(host, "relaunched without it")]
          and lost_nodes[0]["evidence"], f"hardy status names the lost node and why: {lost_nodes}")
    text = s.hardy("status", run, env=s.env).stdout
    check(f"lost node      {host}" in text, f"hardy status (text) shows the lost node:\n{text}")

    # From the node's death to training again: the first step committed after the relaunch.
    after = [e for e in events if e["unix_time"] >= died]
    ended = next((e for e in after if e["event"] == "launch_ended"), None)
    relaunched = relaunches[0] if relaunches else None
    resumed = next((e for e in after if e["event"] == "state_restored" and relaunched
                    and e["unix_time"] > relaunched["unix_time"]), None)
    first = next((m for m in metrics if resumed and m["unix_time"] > resumed["unix_time"]
                  and m["step"] > resumed["step"]), None)
    if ended and relaunched and resumed and first:
        timeline = {"slurm_down_s": round(down_after, 2), "launch_ended_s": round(ended["unix_time"] - died, 2),
                    "decide_s": round(relaunched["decide_s"], 2), "backoff_s": relaunched["backoff_s"],
                    "relaunched_s": round(relaunched["unix_time"] - died, 2),
                    "restored_s": round(resumed["unix_time"] - died, 2),
                    "training_again_s": round(first["unix_time"] - died, 2), "steps_lost": lost}
        print(f"TIMELINE node_crash: {json.dumps(timeline)}", flush=True)
    check(first is not None, "training resumed after the relaunch")
    left = _wait(s.job_processes, 20)
    check(not left, f"nothing of the job left on any node, the one that came back included: {left}")
    check(slurm.node_states().get(host, "").rstrip("*") in ("idle",), f"{host} idle for other jobs: "
          f"{slurm.node_states()}")


def time_limit(s):
    check, slurm, tmp = s.check, s.slurm, s.tmp
    steps, warn_step = 240, 60
    run = tmp / "run"
    job_id = s.submit(run, job_ini(tmp / "job.ini", steps, **{"snapshot-dir": tmp / "node-local"}))
    if not s.wait_for_step(run, job_id, warn_step, timeout=240):
        return
    slurm.run(["scancel", "--signal=USR1", "--batch", job_id])
    warned_at = s.step(run)
    print(f"--- SIGUSR1 to the batch shell of job {job_id} at step {warned_at}", flush=True)
    _, events = s.completed(job_id, run, steps, "time_limit", requeues=1)
    stopped = [e for e in events if e["event"] == "job_finished" and e["status"] == "preempted"]
    check(len(stopped) == 1 and stopped[0]["world_size"] == NODES * RANKS_PER_NODE,
          f"all {NODES * RANKS_PER_NODE} ranks stopped together: {stopped}")
    final = [e for e in events if e["event"] == "final_checkpoint"]
    restored = [e for e in events if e["event"] == "state_restored"]
    check(stopped and final and final[0]["step"] == stopped[0]["steps"] and restored
          and restored[0]["step"] == stopped[0]["steps"] and restored[0]["source"] == "checkpoint",
          f"the final checkpoint of step {stopped[0]['steps'] if stopped else None} is where the requeued "
          f"run resumed: {final} {restored[:1]}")
    asked = [e for e in events if e["event"] == "requeue_requested"]
    check(len(asked) == 1 and not asked[0]["exclude_nodes"], f"a requeue without excluded nodes: {asked}")
    started = [e for e in events if e["event"] == "supervisor_started"]
    check(len(started) == 2 and len(started[-1]["nodes"]) == NODES, f"both runs on {NODES} nodes")
    err = (run / "job.err").read_text()
    check("passed on to hardy run" in err and f"requeueing job {job_id}" in err,
          "job.err shows the forwarded signal and the requeue")


def requeue(s):
    check, slurm, cluster, tmp = s.check, s.slurm, s.cluster, s.tmp
    steps, fault_step = 240, 80
    run = tmp / "run"
    # The job must still run when the node comes back, after Slurm took about 15 s to mark it
    # down: with every-step snapshots now a copy into node memory, 240 steps of 32x32 ended before
    # that, and once 900. 1200 steps of 64x64 take about 25 s after the relaunch here.
    config = job_ini(tmp / "job.ini", steps, **{"checkpoint-every": 100, "snapshot-dir": tmp / "node-local",
                                                "height": 64, "width": 64})
    job_id = s.submit(run, config, "--min-nodes", NODES, "--max-requeues", 2)
    if not s.wait_for_step(run, job_id, fault_step, timeout=240):
        return
    first_nodes = read_jsonl(run / "events.jsonl")[0]["nodes"]  # supervisor_started
    host = first_nodes[1]
    fault_step = s.step(run)
    died = time.time()
    cluster.crash(cluster.hosts.index(host), link_down=True)
    print(f"--- crashed {host} (slurmd included, link down) at step {fault_step}", flush=True)
    fields, events = s.completed(job_id, run, steps, "requeue", requeues=1)
    check(fields.get("ExcNodeList") == host, f"Slurm's ExcNodeList holds {host} ({fields.get('ExcNodeList')})")
    check((run / "exclude-nodes").read_text().split() == [host], "RUN_DIR/exclude-nodes lists it")
    asked = [e for e in events if e["event"] == "requeue_requested"]
    check(len(asked) == 1 and asked[0]["exclude_nodes"] == [host] and asked[0]["scheduler_job_id"] == job_id,
          f"hardy run asked for the requeue without {host}: {asked}")
    started = [e for e in events if e["event"] == "supervisor_started"]
    second = started[-1]["nodes"] if len(started) == 2 else []
    check(len(started) == 2 and host not in second and len(second) == NODES
          and started[-1]["scheduler_restart_count"] == 1,
          f"the requeued run has {NODES} nodes without {host}: {second}")
    metrics = read_jsonl(run / "metrics.jsonl")
    check(metrics[-1]["world_size"] == NODES * RANKS_PER_NODE, f"{metrics[-1]['world_size']} ranks at the end")
    restored = [e for e in events if e["event"] == "state_restored" and started and e["unix_time"] > started[-1]["unix_time"]]
    lost = asked[0]["step"] - restored[0]["step"] if asked and restored else None
    # Before asking, hardy run kept the newest snapshot as a checkpoint and cleared node memory.
    removed = [e for e in events if e["event"] == "node_state_removed"]
    kept = (removed[0].get("kept") or {}) if removed else {}
    check(lost is not None and 0 <= lost <= 1 and restored[0]["source"] == "checkpoint"
          and restored[0]["step"] == kept.get("step"),
          f"{lost} committed step(s) lost across the requeue (asked at {asked[0]['step'] if asked else None}, "
          f"restored {restored[0]['step'] if restored else None} from {restored[0]['source'] if restored else None}, "
          f"the checkpoint kept of the newest snapshot: {kept})")
    _, problems = node_state_left(tmp / "node-local", events)
    check(not problems, f"nothing of the run left in node memory: {problems} (the cleanups took "
                        f"{[round(e['seconds'], 1) for e in removed]} s)")
    status = s.status(run)
    lost_nodes = status.get("lost_nodes", [])
    check([(n["host"], n["outcome"]) for n in lost_nodes] == [(host, "requeued without it")],
          f"hardy status names the node the requeue left out: {lost_nodes}")
    first = next((m for m in metrics if restored and m["unix_time"] > restored[0]["unix_time"]), None)
    if asked and restored and first:
        timeline = {"requeue_requested_s": round(asked[0]["unix_time"] - died, 2),
                    "started_again_s": round(started[-1]["unix_time"] - died, 2),
                    "restored_s": round(restored[0]["unix_time"] - died, 2),
                    "training_again_s": round(first["unix_time"] - died, 2), "steps_lost": lost,
                    "requeue_delay_s": slurm.requeue_delay}
        print(f"TIMELINE requeue: {json.dumps(timeline)}", flush=True)
    check(first is not None, "training resumed after the requeue")
    left = _wait(s.job_processes, 20)
    check(not [line for line in left if not line.startswith(host)], f"nothing of the job left on a live node: {left}")


def _wait(what, timeout):
    """Polls what() until it is falsy or timeout; returns its last value."""
    deadline = time.monotonic() + timeout
    value = what()
    while value and time.monotonic() < deadline:
        time.sleep(0.2)
        value = what()
    return value


SCENARIOS = {f.__name__: f for f in (smoke, job, node_crash, time_limit, requeue)}


def main(argv):
    if len(argv) != 3 or argv[2] not in SCENARIOS:
        print(__doc__)
        return 2
    binary, scenario = argv[0], argv[2]
    reason = missing_requirements()
    ok, why = namespaces_available()
    if reason or not ok:
        print(f"SKIPPED: {reason or why}")
        return SKIP
    hardy = Hardy(binary)
    if scenario != "smoke":
        hardy.skip_without_supervisor()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"hardy-slurm-cluster-{scenario}-") as tmp, \
            EmulatedCluster(nodes=CLUSTER_NODES.get(scenario, NODES)) as cluster, ClusterSlurm(cluster) as slurm:
        hardy.cwd = tmp  # jobs work in (and Slurm writes its default files to) the scenario's directory
        s = Scenario(hardy, cluster, slurm, Path(tmp))
        print(f"private Slurm on {','.join(cluster.hosts)} up in {time.monotonic() - started:.1f} s", flush=True)
        try:
            SCENARIOS[scenario](s)
        except (TimeoutError, subprocess.TimeoutExpired) as e:
            s.check(False, f"{scenario}: {e}")
            for run in s.runs:
                s.dump(run)
        failures = s.check.failures
        slurm_dir = slurm.dir
    left = [str(slurm_dir)] if slurm_dir.exists() else []
    left += [line for line in _remaining(cluster)]
    s.check(not left, f"teardown left nothing behind: {left}")
    print(f"slurm-cluster {scenario}: {time.monotonic() - started:.0f} s")
    s.check.finish(f"slurm-cluster {scenario}")
    return 1 if failures else 0


def _remaining(cluster):
    """What of this cluster is left after teardown: namespaces, links, /etc/hosts lines."""
    import emulated_cluster as ec
    left = [f"netns {n}" for n in ec._netns_names() if n.startswith(cluster.name + "n")]
    left += [f"link {l}" for l in ec._links() if l.startswith(cluster.name)]
    left += [f"/etc/hosts: {l}" for l in Path("/etc/hosts").read_text().splitlines()
             if l.rstrip().endswith(f"{ec.MARKER} {cluster.name}")]
    return left


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
