#!/usr/bin/python3
"""Losing whole nodes on an emulated cluster (CTest label `cluster`).

Usage: node_loss.py HARDY SCENARIO REFERENCE_DIR [--json FILE] [--keep DIR] [--steps N]
                    [--fault-step S]

`hardy run --hosts ... --launch-agent ...` trains on 4 emulated nodes x 2 ranks (network
namespaces, emulated_cluster.py) from the host namespace, as from a batch node, and a fault is
injected from outside once the job has committed FAULT_STEP steps:

  rank_crash        SIGKILL one rank: the job shrinks inside (ULFM) across daemons
  node_crash        SIGKILL every process of a node, its daemon included: the runtime ends the
                    job and the supervisor relaunches on the 3 survivors
  node_crash_spare  the same with a fifth host kept as a spare, which takes the lost node's place
  node_freeze       SIGSTOP a node and cut its link: Open MPI's detector shrinks the job inside,
                    then the runtime gives up on the daemon and the supervisor relaunches
  partition         cut a node's link only
  two_nodes         crash a node, then another one after the relaunch
  during_relaunch   crash a node, then another one for good (its link down too) while the
                    supervisor relaunches
  rank_stop         SIGSTOP one rank (alive, silent): the other rank on its node sees its
                    heartbeats stop and kills it; the job shrinks inside
  rank_spin         one rank computes forever (--inject-failure ...:spin): its own monitor kills
                    it; the job shrinks inside
  rank_stop_watchdog  the baseline for rank_stop: the same SIGSTOP with the hang monitor off
                    (--hang-timeout off, --collective-timeout 20): the watchdog ends the job and
                    the supervisor relaunches it on every node, since nobody knows who hangs
  loaded            no fault, beside a CPU hog (a busy process per core, for the whole run): a
                    slower job must not be taken for a hung one (no hang_detected, no failure)

tiramisu_SCENARIO and cosmoflow_SCENARIO run a scenario training the Gordon Bell run's Tiramisu
(small) or CosmoFlow's 3-D regression network (as published, on 32^3 volumes) instead.

The hung-rank scenarios also assert that the rank is named (hang_detected) and the job trains
again within max(10 s, 5 x the median step) of the hang, with default options.

Every scenario asserts what a user relies on: `hardy run` exits 0 only with job_finished at the
last step; every sample of every epoch is trained exactly once; the final loss is within 2% of a
failure-free run (REFERENCE_DIR caches it); at most one committed step is lost across a
relaunch; the lost node is named (with evidence) and left out; no process is left on any node
that is still up. It prints the recovery timeline, phase by phase, and with --json writes it for
bench/cluster/node_loss_bench.py; --keep copies the run directory to DIR.
"""
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import SMALL_COSMOFLOW, SMALL_TIRAMISU, Checks, Job, committed_steps, complete_epochs_exact, fault_job, node_state_left, read_jsonl, relaunch_restores, run_watched  # noqa: E402

# The tests run 240 steps with the fault at step 80, between checkpoints (every 100);
# bench/cluster/node_loss_bench.py asks for the 600 and 150 that docs/resilience.md's table was
# measured with.
NODES, RANKS_PER_NODE, SAMPLES = 4, 2, 48
# The options after small_job's, whatever the network (main() swaps it for tiramisu_ and cosmoflow_).
OPTIONS = ["--checkpoint-every", "100", "--max-failures", "4"]
STEPS, FAULT_STEP, TRAIN = fault_job(SAMPLES, 240, 80, OPTIONS)
RUN_TIMEOUT_S = 240


def reference_loss(hardy, cache_dir):
    """The failure-free final loss of the same job: 8 ranks on this host, cached per configuration."""
    cache_dir = Path(cache_dir)
    key = hashlib.sha1(" ".join(TRAIN + [str(NODES * RANKS_PER_NODE)]).encode()).hexdigest()[:12]
    cache = cache_dir / f"reference-{key}.json"
    if cache.exists():
        return json.loads(cache.read_text())["final_loss"]
    run = cache_dir / f"reference-{key}"
    subprocess.run(["rm", "-rf", str(run)], check=True)
    mpirun = os.environ.get("HARDY_MPIRUN", str(Path(hardy).resolve().parents[2] / ".venv/bin/mpirun"))
    command = [mpirun, "-n", str(NODES * RANKS_PER_NODE), "--oversubscribe", "--bind-to", "none",
               "--allow-run-as-root", hardy, "train", *TRAIN, "--ranks-per-node", str(RANKS_PER_NODE),
               "--run-dir", str(run)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=300)
    final = read_jsonl(run / "metrics.jsonl")[-1]["loss"]
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"final_loss": final, "train": TRAIN}))
    return final


def timeline(job, faults):
    """Phase by phase, from the first fault to the first step trained afterwards (seconds)."""
    events = job.events()
    fault_time = faults[0]["time"]
    after = [e for e in events if e["unix_time"] >= fault_time]
    first = lambda name: next((e for e in after if e["event"] == name), None)  # noqa: E731
    detected, ended, relaunched = first("failure_detected"), first("launch_ended"), first("job_relaunched")
    phases = {"fault": faults[0]["kind"]}
    if detected and (not ended or detected["unix_time"] <= ended["unix_time"]):  # this fault's, not a later one's
        phases["detect_in_job_s"] = detected["unix_time"] - fault_time
    if relaunched:
        restarted = next(e for e in after if e["event"] == "job_started" and e["unix_time"] > relaunched["unix_time"])
        restored = next(e for e in after if e["event"] == "state_restored" and e["unix_time"] > restarted["unix_time"])
        phases.update({
            "detect_s": ended["unix_time"] - fault_time,
            "decide_s": relaunched["decide_s"],
            "backoff_s": relaunched["backoff_s"],
            "launch_s": restarted["unix_time"] - relaunched["unix_time"],
            "restore_s": restored["unix_time"] - restarted["unix_time"],
            "restored_from": restored["source"],
            "steps_lost": (ended.get("last_committed_step") or 0) - restored["step"],
        })
        resumed_at = restored["unix_time"]
        resumed_step = restored["step"]
    else:
        restored = first("state_restored")
        resumed_at = restored["unix_time"] if restored else None
        resumed_step = restored["step"] if restored else None
        if restored:
            phases["restored_from"] = restored["source"]
            phases["steps_lost"] = 0
    # The first step committed after the restore, from metrics.jsonl's unix_time.
    metrics = read_jsonl(job.run / "metrics.jsonl")
    later = [m for m in metrics if resumed_at and m.get("unix_time", 0) > resumed_at and m["step"] > resumed_step]
    if later:
        phases["first_step_s"] = later[0]["unix_time"] - resumed_at
        phases["total_s"] = later[0]["unix_time"] - fault_time
    return phases


def main():
    global TRAIN, STEPS, FAULT_STEP
    hardy, scenario, reference_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    # The same scenario training the Gordon Bell run's network, or CosmoFlow's 3-D regression
    # (half as many steps: its step is about 4 times the compact network's on 2 cores).
    for prefix, model in (("tiramisu_", SMALL_TIRAMISU), ("cosmoflow_", SMALL_COSMOFLOW)):
        if scenario.startswith(prefix):
            steps, fault_step = (120, 40) if prefix == "cosmoflow_" else (STEPS, FAULT_STEP)
            STEPS, FAULT_STEP, TRAIN = fault_job(SAMPLES, steps, fault_step, OPTIONS, model)
            scenario = scenario.removeprefix(prefix)
    json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    ok, why = namespaces_available()
    if not ok:
        print(f"skipped: cannot emulate a cluster here: {why}")
        sys.exit(77)
    check = Checks()
    expected_final = reference_loss(hardy, reference_dir)
    hosts_count = NODES + (1 if scenario == "node_crash_spare" else 0)
    with EmulatedCluster(nodes=hosts_count) as cluster, \
            tempfile.TemporaryDirectory(prefix=f"hardy-cluster-{scenario}-") as tmp:
        run = Path(tmp) / "run"
        job = Job(run)
        snapshot_dir = Path(tmp) / "node-local"
        command = [hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
                   "--ranks-per-node", str(RANKS_PER_NODE), "--run-dir", str(run), "--backoff", "0.5",
                   "--probe-timeout", "2", "--finish-grace", "5"]
        if scenario == "node_crash_spare":
            command += ["--spare-nodes", "1"]
        command += ["--", *TRAIN, "--snapshot-dir", str(snapshot_dir)]
        if scenario == "rank_spin":
            command += ["--inject-failure", f"rank=5@step={FAULT_STEP}:spin"]
        if scenario == "rank_stop_watchdog":
            command += ["--hang-timeout", "off", "--collective-timeout", "20"]
        env = {**os.environ, **cluster.mpi_env()}
        faults = []

        def fault(kind, node):
            host = cluster.hosts[node]
            if kind == "crash":
                cluster.crash(node)
            elif kind == "crash for good":  # nothing of the job may run there yet: it must stay down
                cluster.crash(node, link_down=True)
            elif kind == "freeze":
                cluster.freeze(node)
            elif kind == "partition":
                cluster.partition(node)
            faults.append({"kind": kind, "host": host, "time": time.time(), "step": job.step()})
            print(f"--- {kind} {host} at step {faults[-1]['step']}", flush=True)

        def inject():
            if not job.wait(lambda: job.step() >= FAULT_STEP, f"step {FAULT_STEP}"):
                return
            if scenario in ("rank_stop", "rank_stop_watchdog"):
                pid = job.rank_pid(5)
                faults.append({"kind": "rank stop", "host": cluster.hosts[5 // RANKS_PER_NODE], "time": time.time(),
                               "step": job.step(), "pid": pid})
                os.kill(pid, signal.SIGSTOP)
                print(f"--- stopped rank 5 (pid {pid}) at step {faults[-1]['step']}", flush=True)
            elif scenario == "rank_crash":
                pid = job.rank_pid(5)
                faults.append({"kind": "rank crash", "host": cluster.hosts[5 // RANKS_PER_NODE], "time": time.time(),
                               "step": job.step()})
                cluster.kill_pid(pid)
                print(f"--- killed rank 5 (pid {pid}) at step {faults[-1]['step']}", flush=True)
            elif scenario in ("node_crash", "node_crash_spare", "two_nodes", "during_relaunch"):
                fault("crash", 1)
            elif scenario == "node_freeze":
                fault("freeze", 3)
            elif scenario == "partition":
                fault("partition", 2)
            if scenario == "two_nodes":
                # After the relaunch has trained a while, a second node goes.
                if job.wait(lambda: job.events("state_restored") and job.step() >= FAULT_STEP + 80,
                            "the relaunch to train"):
                    fault("crash", 3)
            elif scenario == "during_relaunch":
                if job.wait(lambda: job.events("job_relaunched"), "the relaunch"):
                    fault("crash for good", 2)

        hogs = []
        if scenario == "loaded":  # a neighbour's job on the same cores
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        started = time.time()
        try:
            status, output = run_watched(command, inject, RUN_TIMEOUT_S * (2 if hogs else 1), env=env)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        elapsed = time.time() - started
        for f in faults:  # never leave a stopped rank behind, whatever happened
            if f["kind"] == "rank stop":
                try:
                    os.kill(f["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        spun = run / "checkpoints" / "injected-kill-5.time"
        if scenario == "rank_spin" and spun.exists():
            faults.append({"kind": "rank spin", "host": cluster.hosts[5 // RANKS_PER_NODE],
                           "time": float(spun.read_text()), "step": FAULT_STEP})
        if status is None:
            print(output[-6000:])
            check(False, f"{scenario}: hardy run finished within {RUN_TIMEOUT_S} s")
            check.finish(f"cluster scenario {scenario}")
        # What any rank said went wrong, then the end of the story.
        for line in output.splitlines():
            if "error" in line.lower() and "NBC_" not in line:
                print(f"[output] {line[:400]}")
        print(output[-5000:], flush=True)
        events = job.events()
        metrics = read_jsonl(run / "metrics.jsonl")
        for e in events:  # what a launch that failed said about itself
            if e["event"] == "job_finished" and e.get("status") == "failed":
                print(f"a launch's job_finished: {e}", flush=True)
        victims = sorted({f["host"] for f in faults})

        check(len(faults) == {"two_nodes": 2, "during_relaunch": 2, "loaded": 0}.get(scenario, 1),
              f"{scenario}: faults injected: {faults}")
        check(status == 0, f"{scenario}: hardy run exits 0 ({status}, {elapsed:.1f} s)")
        finished = [e for e in events if e["event"] == "job_finished"]
        check(finished and finished[-1]["status"] == "completed" and finished[-1]["steps"] == STEPS,
              f"{scenario}: job_finished completed at step {STEPS}: {finished[-1:] if finished else None}")
        supervisor = [e for e in events if e["event"] == "supervisor_finished"]
        check(supervisor and supervisor[-1]["status"] == 0, f"{scenario}: supervisor_finished status 0")
        committed = committed_steps(metrics, events)
        check(committed == list(range(1, STEPS + 1)), f"{scenario}: every step 1..{STEPS} committed")
        complete, wrong = complete_epochs_exact(run, SAMPLES)
        check(len(complete) >= STEPS * 16 // SAMPLES - 1 and not wrong,
              f"{scenario}: {len(complete)} complete epochs each cover every sample exactly once (wrong: {wrong})")
        final = metrics[-1]["loss"]
        check(abs(final - expected_final) <= 0.02 * abs(expected_final),
              f"{scenario}: final loss {final:.5f} within 2% of the failure-free {expected_final:.5f}")
        check(all(m["global_batch"] == 16 for m in metrics), f"{scenario}: the global batch stays 16")

        # A runtime daemon that fails to start before the job's first step (seen under CI load:
        # "A daemon failed to report back", exit status 213) is relaunched at once on the same
        # nodes; that relaunch is not the scenario's, and no other may come before the fault.
        def failed_start(relaunch):
            return "no step committed" in relaunch["verdict"] and relaunch["excluded_nodes"] == [] and any(
                "never reported back" in evidence for kept in relaunch.get("kept_despite_reports", [])
                for evidence in kept["evidence"])
        relaunches = [e for e in events if e["event"] == "job_relaunched"]
        restarts = [r for r in relaunches if failed_start(r)]
        relaunches = [r for r in relaunches if not failed_start(r)]
        if restarts:
            print(f"note: {len(restarts)} relaunch(es) after a runtime daemon failed to start, before the first step")
        excluded = {x["host"]: x for r in relaunches for x in r.get("excluded", [])}
        detected_hosts = {h for e in events if e["event"] == "failure_detected" for h in e.get("failed_hosts", [])}
        if scenario == "loaded":
            hangs = [e for e in events if e["event"] in ("hang_detected", "failure_detected")]
            check(not hangs and not relaunches, f"{scenario}: nobody called hung, nothing failed: {hangs}")
            check(metrics[-1]["world_size"] == 8, f"{scenario}: 8 ranks at the end")
            steps = sorted(m["step_s"] for m in metrics)
            print(f"loaded: step time median {statistics.median(steps):.3f} s, slowest {steps[-1]:.3f} s", flush=True)
        elif scenario in ("rank_stop", "rank_spin"):
            check(not relaunches, f"{scenario}: survived inside the job, no relaunch")
            hangs = [e for e in events if e["event"] == "hang_detected"]
            check(len(hangs) == 1 and hangs[0]["rank"] == 5 and hangs[0]["host"] == cluster.hosts[2],
                  f"{scenario}: hang_detected names rank 5 on {cluster.hosts[2]}: {hangs}")
            expect_by = "rank 4 on its host" if scenario == "rank_stop" else "its own monitor"
            check(hangs and hangs[0]["detected_by"] == expect_by,
                  f"{scenario}: ended by {expect_by}: {hangs[0]['detected_by'] if hangs else None}")
            check(metrics[-1]["world_size"] == 7, f"{scenario}: 7 ranks at the end ({metrics[-1]['world_size']})")
            phases = timeline(job, faults) if faults else {}
            median = statistics.median(m["step_s"] for m in metrics if m["step"] < FAULT_STEP - 1)
            bound = max(10.0, 5 * median)
            check(phases.get("total_s") is not None and phases["total_s"] <= bound,
                  f"{scenario}: training again {phases.get('total_s')} s after the hang (bound {bound:.1f} s, "
                  f"median step {median:.3f} s)")
        elif scenario == "rank_stop_watchdog":
            check(len(relaunches) == 1 and not any(e["event"] == "hang_detected" for e in events),
                  f"{scenario}: the watchdog's relaunch, no hang monitor: {len(relaunches)} relaunch(es)")
            check(metrics[-1]["world_size"] == 8, f"{scenario}: relaunched on every node (8 ranks)")
        elif scenario == "rank_crash":
            check(not relaunches, f"{scenario}: survived inside the job, no relaunch")
            check(victims[0] in detected_hosts, f"{scenario}: failure_detected names {victims[0]} ({detected_hosts})")
            # Seen once in about seven runs: Open MPI took a second survivor down with the killed
            # rank (libnbc's aborted schedules over TCP); the job still recovered inside. Named, not
            # hidden.
            failed = sorted({r for e in events if e["event"] == "failure_detected" for r in e.get("failed_ranks", [])})
            check(metrics[-1]["world_size"] == 7 or (metrics[-1]["world_size"] == 6 and 5 in failed),
                  f"{scenario}: {metrics[-1]['world_size']} ranks at the end, failed ranks {failed}")
            if metrics[-1]["world_size"] != 7:
                print(f"NOTE: {scenario}: a second rank failed with rank 5: {failed}", flush=True)
        elif scenario not in ("loaded",):
            for host in victims:
                check(host in excluded or host in detected_hosts,
                      f"{scenario}: {host} named as failed: {excluded.get(host, {}).get('evidence')} / in-job {detected_hosts}")
            relaunched_on = relaunches[-1]["nodes"] if relaunches else []
            check(not any(h in relaunched_on for h in victims), f"{scenario}: the last relaunch runs on {relaunched_on}, "
                  f"without {victims}")
            restored = [e for e in events if e["event"] == "state_restored"]
            # A relaunch after a crash finds no checkpoint newer than the nodes' snapshots; a later
            # one may tie with a final checkpoint the ended job wrote (a tie goes to the checkpoint).
            check(restored and restored[0]["source"] in ("node-local", "memory"),
                  f"{scenario}: the first restore comes from node-local snapshots or memory: "
                  f"{[e['source'] for e in restored]}")
            for launch, ended_at, restored_at, _ in relaunch_restores(events):
                check(ended_at - restored_at <= 1, f"{scenario}: {ended_at - restored_at} committed step(s) lost "
                      f"across launch {launch} (ended at {ended_at}, restored {restored_at})")
            expected_world = {"node_crash_spare": 8, "two_nodes": 4, "during_relaunch": 4}.get(scenario, 6)
            check(metrics[-1]["world_size"] == expected_world,
                  f"{scenario}: {metrics[-1]['world_size']} ranks at the end (expected {expected_world})")
            if scenario == "node_crash_spare":
                swap = excluded.get(victims[0], {}).get("replaced_by")
                check(swap == cluster.hosts[4], f"{scenario}: the spare {cluster.hosts[4]} took {victims[0]}'s place ({swap})")
        # Every node of the run, a lost one included when it still answers, removed the run's
        # node-local state at the end; one that does not answer is named (node_state_removed).
        _, problems = node_state_left(snapshot_dir, events)
        check(not problems, f"{scenario}: nothing of the run left in node memory: {problems}")
        # Nothing of the job is left on the nodes that are still up (a frozen node's stopped
        # processes stay until the node is rebooted: the harness's teardown plays that part).
        down = {f["host"] for f in faults if f["kind"] in ("freeze",)}
        deadline = time.time() + 10  # the daemons leave about 0.6 s after mpirun
        while (left := [line for line in cluster.leftovers() if line.split(":")[0] not in down]) \
                and time.time() < deadline:
            time.sleep(0.1)
        check(not left, f"{scenario}: no process left on the nodes that are up: {left}")

        phases = timeline(job, faults) if faults else {}
        if scenario in ("rank_stop", "rank_spin"):
            hang = next((e for e in events if e["event"] == "hang_detected"), None)
            if hang and faults:
                # Decided and killed are one moment: the decision is written, then SIGKILL.
                at = faults[0]["time"]
                phases["decided_killed_s"] = hang["detected_unix_time"] - at
                shrunk = next((e for e in events if e["event"] == "communicator_shrunk" and e["unix_time"] >= at), None)
                resumed = next((e for e in events if e["event"] == "training_resumed" and e["unix_time"] >= at), None)
                if shrunk:
                    phases["shrunk_s"] = shrunk["unix_time"] - at
                if resumed:
                    phases["resumed_s"] = resumed["unix_time"] - at
                phases["hang_timeout_s"] = hang["timeout_s"]
        print(f"timeline: {json.dumps(phases)}", flush=True)
        if keep:  # for `hardy simulate --relaunch-run` and for people
            shutil.copytree(run, keep, dirs_exist_ok=True)
        if json_out:
            Path(json_out).write_text(json.dumps({"scenario": scenario, "faults": faults, "phases": phases,
                                                  "elapsed_s": elapsed, "relaunches": len(relaunches)}, indent=1))
    check.finish(f"cluster scenario {scenario}")


if __name__ == "__main__":
    main()
