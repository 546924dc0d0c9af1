#!/usr/bin/python3
"""A rank killed in a job's first steps on 8 emulated nodes: the survivors recover inside the job
and nobody waits for ever (CTest label `cluster`).

Usage: early_rank_kill.py HARDY [TRIALS]

Each trial trains 8 emulated nodes of one rank, each in a CPU group of its own (an eighth of a
CPU, as bench/cluster/goodput_bench.py), on 256 samples of 16x128x128 read from files, under
`hardy run` with a spare; once the job has committed step 30 + 4 x the trial's number, rank 2's
process is killed (SIGKILL from outside, at whatever point of its step it is). The job must
detect it, shrink and complete within 150 s, with every step committed and every sample once per
epoch. Before `hardy run` had Open MPI make every connection at MPI_Init (mpi_preconnect_mpi,
jobs/src/launchers.cpp) 4 of 6 such jobs hung: the revoke blocked in PMIx_Get while opening a
connection to pass itself on, two survivors waited in their gradient allreduce for ever and the
others in the recovery's agreement, until --collective-timeout (2026-11-30).
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import Checks, complete_epochs_exact, on_dataset, read_jsonl, small_job  # noqa: E402
import straggler  # noqa: E402

hardy = sys.argv[1]
trials = int(sys.argv[2]) if len(sys.argv) > 2 else 3
NODES, SAMPLES, STEPS, BATCH, SIZE, VICTIM = 8, 256, 300, 32, 128, 2

ok, why = namespaces_available()
if ok:
    ok, why = straggler.cgroups_available()
if not ok:
    print(f"skipped: cannot emulate a cluster with a CPU share per node here: {why}")
    sys.exit(77)
check = Checks()
with tempfile.TemporaryDirectory(prefix="hardy-early-kill-") as tmp:
    tmp = Path(tmp)
    subprocess.run([hardy, "data", "generate", "--out", str(tmp / "data"), "--samples", str(SAMPLES),
                    "--height", str(SIZE), "--width", str(SIZE), "--seed", "5"], check=True, capture_output=True)
    for trial in range(trials):
        kill_after = 30 + 4 * trial
        with EmulatedCluster(nodes=NODES + 1) as cluster, \
                straggler.NodeCpuGroups(cluster, cpus=1.0, active_nodes=NODES):
            run = tmp / f"run-{trial}"
            train = on_dataset(small_job(SAMPLES, STEPS, BATCH), tmp / "data")
            at = train.index("--snapshot-every")
            train = train[:at] + train[at + 2:] + ["--threads", "1"]
            command = [hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
                       "--ranks-per-node", "1", "--spare-nodes", "1", "--run-dir", str(run),
                       "--probe-timeout", "2", "--", *train]
            job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, **cluster.mpi_env(), **straggler.SLEEP_WHEN_IDLE})
            killed, deadline = None, time.time() + 150
            while job.poll() is None and time.time() < deadline:
                if killed is None:
                    metrics = read_jsonl(run / "metrics.jsonl")
                    if metrics and metrics[-1]["step"] >= kill_after:
                        started = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "rank_started"
                                   and e["rank"] == VICTIM]
                        if started:
                            killed = metrics[-1]["step"]
                            cluster.kill_pid(started[-1]["pid"])
                time.sleep(0.05)
            hung = job.poll() is None
            if hung:
                job.kill()
            output = job.communicate()[0]
            events = read_jsonl(run / "events.jsonl")
            detected = [e for e in events if e["event"] == "failure_detected"]
            shrunk = [e for e in events if e["event"] == "communicator_shrunk"]
            label = f"trial {trial} (rank {VICTIM} killed at step {killed})"
            check(killed is not None and not hung and job.returncode == 0,
                  f"{label}: the job completes within 150 s (hung: {hung}, status {job.returncode})")
            if hung or job.returncode != 0:
                print(output[-2000:])
            check(detected and shrunk and shrunk[0]["new_size"] == NODES - 1,
                  f"{label}: the failure detected, the job shrank to {NODES - 1}: "
                  f"{[(e.get('detected_by'), e.get('step')) for e in detected]}")
            steps = sorted({m["step"] for m in read_jsonl(run / "metrics.jsonl")})
            complete, wrong = complete_epochs_exact(run, SAMPLES)
            check(steps == list(range(1, STEPS + 1)) and complete and not wrong,
                  f"{label}: every step committed, epochs {complete} each cover every sample once")
check.finish("early_rank_kill")
