#!/usr/bin/python3
"""The supervisor is never fooled by its launcher (CTest labels `fault`, `e2e`).

Usage: supervisor_judgement.py HARDY

`hardy run` drives fake_launcher.py in place of mpirun and fake_agent.sh in place of ssh, so each
misbehaviour is exact and takes seconds:
  - a launcher that exits 0 although the job never logged job_finished is a failure, relaunched
    and finally reported as one (exit status 1), never as completed;
  - the node the launcher names in Open MPI's "lost communication with a remote daemon" message,
    and a node that does not answer the probe, are left out of the relaunch, each with its
    evidence; a spare that does not answer is passed over and the next spare takes the place;
    spares are asked as the relaunch needs them, in order, not all at each failure;
  - a job that stops committing steps while a node does not answer (frozen, cut off: nothing
    reports it) has its launch ended by the stall watch within seconds, before any keepalive
    would, and is relaunched without that node; one that stops while every node answers is
    probed (launch_stalled, ended false) and left to go on;
  - a launcher that goes on waiting after the job logged job_finished is ended after
    --finish-grace, and the job counts as completed;
  - a launch whose job never starts (no job_started: a daemon that never spawns the ranks) is
    ended after --start-timeout and relaunched, with or without fault domains (the other domain
    trains on meanwhile), and the start of the launch that did start is logged (launch_started);
  - one run at a time: while `hardy run` supervises a run directory, a second `hardy run` and a
    `hardy train` of it are refused (exit status 2, naming the holder) and write nothing there,
    while the launches of the first run under its lock (--run-lock-token);
  - a --launch-agent with arguments ("AGENT -x") is split for the probe, so healthy nodes answer;
  - a user's --resume (either spelling) holds until the run wrote a checkpoint of its own, then
    relaunches resume from latest, and never with two --resume options;
  - a SIGUSR1 that reaches hardy run during the backoff reaches the next launch (exit status 4);
  - inside a Slurm job, a node loss that leaves fewer than --min-world-size ranks makes hardy run
    ask for a requeue (exit status 4, requeue_requested, the lost node in RUN_DIR/exclude-nodes for
    the batch script to exclude); a requeued run that loses a node again without committing a new
    step stops once --max-requeues such requests were made (exit status 3), not for ever.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

hardy = sys.argv[1]
check = Checks()


def supervise(run, plan, *options, dead="", env_extra=None, train=(), backoff="0"):
    env = {**os.environ, "FAKE_LAUNCHER_PLAN": plan, "FAKE_AGENT_DEAD": dead, **(env_extra or {})}
    command = [hardy, "run", "--run-dir", str(run), "--launcher-path", str(HERE / "fake_launcher.py"),
               "--backoff", backoff, *options, "--", "--steps", "5", *train]
    started = time.time()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    print(result.stderr[-2500:], flush=True)
    return result.returncode, time.time() - started, read_jsonl(run / "events.jsonl")


with tempfile.TemporaryDirectory(prefix="hardy-judgement-") as tmp:
    tmp = Path(tmp)

    status, _, events = supervise(tmp / "exit0", "exit0", "--max-restarts", "1")
    ended = [e for e in events if e["event"] == "launch_ended"]
    finished = [e for e in events if e["event"] == "supervisor_finished"]
    check(status == 1, f"a launcher that exits 0 without job_finished is a failure (hardy run exit {status})")
    check(len(ended) == 2 and all("no job_finished" in e["verdict"] for e in ended),
          f"both launches judged failed: {[e['verdict'] for e in ended]}")
    check(finished and finished[-1]["gave_up"] and finished[-1]["status"] == 1,
          f"supervisor_finished gives up with status 1: {finished}")

    hosts = "n0,n1,n2,s0,s1"
    status, _, events = supervise(tmp / "lost", "lost:n1,finish", "--hosts", hosts, "--spare-nodes", "2",
                                  "--launch-agent", str(HERE / "fake_agent.sh"), "--probe-timeout", "1",
                                  dead="n2,s0")
    relaunched = [e for e in events if e["event"] == "job_relaunched"]
    check(status == 0, f"after the relaunch the job completes (exit {status})")
    check(len(relaunched) == 1, f"one relaunch: {len(relaunched)}")
    if relaunched:
        r = relaunched[0]
        excluded = {x["host"]: x for x in r["excluded"]}
        check(sorted(excluded) == ["n1", "n2"], f"n1 and n2 left out: {r['excluded']}")
        check(any("launcher" in e for e in excluded.get("n1", {}).get("evidence", [])),
              f"n1 on the launcher's word: {excluded.get('n1')}")
        check(any("probe" in e for e in excluded.get("n2", {}).get("evidence", [])),
              f"n2 on the probe's: {excluded.get('n2')}")
        check([x["host"] for x in r["spares_lost"]] == ["s0"], f"the silent spare s0 is passed over: {r['spares_lost']}")
        check(excluded.get("n1", {}).get("replaced_by") == "s1" and r["nodes"] == ["n0", "s1"],
              f"s1 takes n1's place in rank order, n2 has no spare left: {r['nodes']} {r['excluded']}")
        check(r["world_size"] == 2, f"world size {r['world_size']}: two healthy nodes left (one spare used)")
        check("last committed step 3 of 5" in r["verdict"], f"the verdict names the progress: {r['verdict']}")
    args = json.loads((tmp / "lost" / "fake-launch-2.args").read_text())
    check(args[args.index("--host") + 1] == "n0:1,s1:1", f"the relaunch runs on n0 and s1: {args[args.index('--host') + 1]}")
    check(args[args.index("--prtemca") + 1:].count("plm_ssh_agent") == 1 and "--resume" in args,
          "the relaunch goes through the launch agent and resumes")

    # Spares are asked as the relaunch needs them, in order: the launcher lost n1 and n2 does not
    # answer, with five spares of which s0 does not answer either. The decision asks the active
    # nodes with s0 and s1 (one spare for n1, one more); n2's silence and s0's leave a replacement
    # missing, so s2 and s3 are asked next, and s4 never.
    agent_log = tmp / "spares-agent.log"
    status, _, events = supervise(tmp / "spares", "lost:n1,finish", "--hosts", "n0,n1,n2,s0,s1,s2,s3,s4",
                                  "--spare-nodes", "5", "--launch-agent", str(HERE / "fake_agent.sh"),
                                  "--probe-timeout", "1", dead="n2,s0",
                                  env_extra={"FAKE_AGENT_LOG": str(agent_log)})
    relaunched = [e for e in events if e["event"] == "job_relaunched"]
    check(status == 0 and len(relaunched) == 1, f"spares asked as needed: one relaunch, then done (exit {status})")
    if relaunched:
        r = relaunched[0]
        check(r["nodes"] == ["n0", "s1", "s2"] and [x["host"] for x in r["spares_lost"]] == ["s0"]
              and r["spare_nodes"] == ["s3", "s4"],
              f"s1 and s2 take n1's and n2's places, s0 is lost, s3 and s4 stay spares: {r['nodes']} "
              f"{r['spares_lost']} {r['spare_nodes']}")
        probes = [line.split() for line in agent_log.read_text().splitlines() if line.split()[2:] == ["true"]]
        asked = [(float(t), host) for t, host, *_ in probes if float(t) <= r["unix_time"]]
        first = [host for t, host in asked if t < min([t for t, host in asked if host in ("s2", "s3")] or [1e18])]
        check(sorted(first) == ["n0", "n1", "n2", "s0", "s1"]
              and sorted(host for _, host in asked) == ["n0", "n1", "n2", "s0", "s1", "s2", "s3"],
              f"the active nodes with s0 and s1 first, then s2 and s3, never s4: {asked}")

    # A node the launcher lost that does not answer its probe either (frozen, cut off): the probe
    # does not wait out its timeout for it, since the launcher's word leaves it out anyway.
    status, _, events = supervise(tmp / "silent", "lost:n1,finish", "--hosts", "n0,n1,n2,s0", "--spare-nodes", "1",
                                  "--launch-agent", str(HERE / "fake_agent.sh"), "--probe-timeout", "8", dead="n1")
    relaunched = [e for e in events if e["event"] == "job_relaunched"]
    check(status == 0 and len(relaunched) == 1, f"a silent lost node: one relaunch, then done (exit {status})")
    if relaunched:
        r = relaunched[0]
        check(r["decide_s"] < 4, f"the decision did not wait out the 8 s probe timeout: {r['decide_s']:.2f} s")
        check([x["host"] for x in r["excluded"]] == ["n1"] and r["nodes"] == ["n0", "s0", "n2"],
              f"n1 left out for s0: {r['excluded']} {r['nodes']}")

    # A job that stops committing while n1 does not answer: the stall watch probes after 0.5 s
    # without a commit (ten 50 ms steps), n1 is silent while the others answer at once, and the
    # launch is ended (it would never end by itself) and relaunched on s0 in n1's place, without
    # waiting out the 8 s probe timeout, neither in the stall's probe nor in the decision.
    agent_log = tmp / "stall-agent.log"
    status, elapsed, events = supervise(tmp / "stall", "stall,finish", "--hosts", "n0,n1,n2,s0", "--spare-nodes", "1",
                                        "--launch-agent", str(HERE / "fake_agent.sh"), "--probe-timeout", "8",
                                        "--stall-probe-after", "0.5", dead="n1",
                                        env_extra={"FAKE_AGENT_LOG": str(agent_log)})
    stalled = [e for e in events if e["event"] == "launch_stalled"]
    relaunched = [e for e in events if e["event"] == "job_relaunched"]
    ended = [e for e in events if e["event"] == "launch_ended"]
    check(status == 0 and len(relaunched) == 1, f"a stalled launch with a silent node: one relaunch, then done (exit {status})")
    check(len(stalled) == 1 and stalled[0]["ended"] and [x["host"] for x in stalled[0]["silent"]] == ["n1"]
          and 0.5 <= stalled[0]["quiet_s"] < 2 and stalled[0]["probe_s"] < 2,
          f"one probe named n1 silent, soon after the last commit, within 2 s: {stalled}")
    check(ended and "no step committed" in ended[0]["how"] and "n1" in ended[0]["how"],
          f"the supervisor ended the launch for n1: {ended[:1]}")
    if relaunched:
        r = relaunched[0]
        check([x["host"] for x in r["excluded"]] == ["n1"] and r["nodes"] == ["n0", "s0", "n2"]
              and any("stall watch" in line for line in r["excluded"][0]["evidence"]),
              f"n1 left out on the stall watch's evidence, s0 in its place: {r['excluded']} {r['nodes']}")
        check(r["decide_s"] < 4, f"the decision did not wait out the 8 s probe timeout: {r['decide_s']:.2f} s")
        # The stall's probe asked every active node; the decision asks only the spare.
        probes = [line.split() for line in agent_log.read_text().splitlines() if line.split()[2:] == ["true"]]
        at_stall = {host for t, host, *_ in probes if float(t) <= stalled[0]["unix_time"]}
        between = [host for t, host, *_ in probes if stalled[0]["unix_time"] < float(t) <= r["unix_time"]]
        check(at_stall == {"n0", "n1", "n2"} and between == ["s0"],
              f"the active nodes probed at the stall ({sorted(at_stall)}), the spare alone after it ({between})")
    cleaned = [e for e in events if e["event"] == "node_state_removed"]
    check(cleaned and cleaned[0]["seconds"] < 4 and [x["host"] for x in cleaned[0]["unreachable"]] == ["n1"],
          f"the run's cleanup did not wait out the 8 s probe timeout for n1, left out before: {cleaned}")
    check(elapsed < 8, f"stall to the run's end in seconds ({elapsed:.1f} s)")

    # Fault domains: domain 1's node n1 goes silent (its launch hangs, its agent never answers)
    # while domain 0 waits for it, committing nothing after its 30th step. The stall watch probes
    # both domains' nodes, ends domain 1's launch and relaunches it on s0, without waiting out
    # the 8 s probe timeout; domain 0 finishes.
    status, elapsed, events = supervise(tmp / "domain-stall", "stall:4", "--hosts", "n0,n1,s0", "--spare-nodes", "1",
                                        "--nodes-per-domain", "1", "--launch-agent", str(HERE / "fake_agent.sh"),
                                        "--probe-timeout", "8", "--stall-probe-after", "0.5", dead="n1",
                                        env_extra={"FAKE_LAUNCHER_PLAN_D1": "hang,finish"})
    stalled = [e for e in events if e["event"] == "launch_stalled" and e["ended"]]
    lost = [e for e in events if e["event"] == "domain_lost"]
    relaunched = [e for e in events if e["event"] == "domain_relaunched"]
    check(status == 0, f"the job of two domains completes (exit {status})")
    check(len(stalled) == 1 and stalled[0]["domains"] == [0, 1] and [x["host"] for x in stalled[0]["silent"]] == ["n1"],
          f"the stall watch named n1 silent among both domains' nodes: {stalled}")
    check(len(lost) == 1 and lost[0]["domain"] == 1 and "no step committed" in lost[0]["how"]
          and not lost[0]["evicting"]
          and [x["host"] for x in lost[0]["excluded"]] == ["n1"]
          and any("stall watch" in line for line in lost[0]["excluded"][0]["evidence"]),
          f"domain 1 ended for n1, left out on the stall watch's word: {lost}")
    check(len(relaunched) == 1 and relaunched[0]["nodes"] == ["s0"], f"domain 1 relaunched on s0: {relaunched}")
    # The others regroup before the silent domain's launcher is torn down, not after.
    without = [e for e in events if e["event"] == "domain_generation_published" and 1 not in e["members"]]
    check(bool(without) and bool(lost) and without[0]["unix_time"] <= lost[0]["unix_time"]
          and "went silent" in without[0]["reason"],
          f"the generation without domain 1 published at the stall, before its teardown: {without[:1]}")
    check(elapsed < 12, f"within seconds, not the probe timeout ({elapsed:.1f} s for the run)")

    # Stuck for 3 s while every node answers (a file system that stalls): probed, not ended.
    status, _, events = supervise(tmp / "stuck", "stall:3", "--hosts", "n0,n1", "--launch-agent",
                                  str(HERE / "fake_agent.sh"), "--stall-probe-after", "0.5")
    stalled = [e for e in events if e["event"] == "launch_stalled"]
    check(status == 0 and not [e for e in events if e["event"] == "job_relaunched"],
          f"a job stuck while every node answers goes on and completes (exit {status})")
    check(1 <= len(stalled) <= 3 and not any(e["ended"] or e["silent"] for e in stalled),
          f"probed, each wait twice the last, every node answering: {stalled}")

    status, elapsed, events = supervise(tmp / "hang", "finish-and-hang", "--finish-grace", "1")
    ended = [e for e in events if e["event"] == "launch_ended"]
    check(status == 0, f"a launcher that hangs after job_finished: the job completed (exit {status})")
    check(ended and "ended by the supervisor" in ended[0]["how"], f"the supervisor ended it: {ended}")
    check(elapsed < 15, f"within the grace period ({elapsed:.1f} s)")

    status, elapsed, events = supervise(tmp / "start", "hang-at-start,finish", "--start-timeout", "2")
    ended = [e for e in events if e["event"] == "launch_ended"]
    started = [e for e in events if e["event"] == "launch_started"]
    check(status == 0, f"a launch that never starts is relaunched and the job completes (exit {status})")
    check(len(ended) == 2 and "not started within 2 s" in ended[0]["how"],
          f"the first launch was ended for not starting: {ended[:1]}")
    check(len(started) == 1 and started[0]["launch"] == 2 and started[0]["start_s"] < 10,
          f"the second launch's start is logged: {started}")
    check(elapsed < 30, f"the hung start cost about its timeout ({elapsed:.1f} s)")

    # Fault domains: domain 1's job logs its end (failed: it lost its leader) 2 s before its
    # launcher exits. The others regroup without it at once, not when the launcher has gone.
    status, _, events = supervise(tmp / "domain-ending", "slow-finish", "--hosts", "n0,n1,s0", "--spare-nodes", "1",
                                  "--nodes-per-domain", "1", env_extra={"FAKE_LAUNCHER_PLAN_D1": "fail-linger,slow-finish"})
    failed = [e for e in events if e["event"] == "job_finished" and e.get("domain") == 1 and e["status"] == "failed"]
    without = [e for e in events if e["event"] == "domain_generation_published" and 1 not in e["members"]]
    lost = [e for e in events if e["event"] == "domain_lost"]
    check(bool(failed) and bool(without) and bool(lost)
          and without[0]["unix_time"] - failed[0]["unix_time"] < 1.0
          and without[0]["unix_time"] < lost[0]["unix_time"] - 1.0,
          f"the generation without domain 1 published within 1 s of its job's end, before its launcher "
          f"exited (exit {status}): {failed[:1]} {without[:1]} {lost[:1]}")

    # Two fault domains: domain 1's first launch never starts while domain 0 trains on; it is
    # ended and relaunched, and the job completes.
    status, elapsed, events = supervise(tmp / "domain-start", "slow-finish",
                                        "--hosts", "n0,n1", "--nodes-per-domain", "1", "--start-timeout", "2",
                                        "--launch-agent", str(HERE / "fake_agent.sh"), "--probe-timeout", "1",
                                        env_extra={"FAKE_LAUNCHER_PLAN_D1": "hang-at-start"})
    lost = [e for e in events if e["event"] == "domain_lost"]
    relaunched = [e for e in events if e["event"] == "domain_relaunched"]
    check(status == 0, f"the job of two domains completes (exit {status})")
    check(len(lost) >= 1 and lost[0]["domain"] == 1 and "not started within 2 s" in lost[0]["how"],
          f"domain 1 was ended for not starting: {lost[:1]}")
    check(relaunched and relaunched[0]["domain"] == 1, f"and relaunched: {relaunched[:1]}")
    check(any(e["event"] == "launch_started" and e.get("domain") == 0 for e in events),
          "domain 0's start is logged")

    # One run at a time in a run directory.
    run = tmp / "locked"
    env = {**os.environ, "FAKE_LAUNCHER_PLAN": "slow-finish"}
    first = subprocess.Popen([hardy, "run", "--run-dir", str(run), "--launcher-path", str(HERE / "fake_launcher.py"),
                              "--", "--steps", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while time.time() < deadline and not any(e["event"] == "job_started" for e in read_jsonl(run / "events.jsonl")):
        time.sleep(0.05)
    second = subprocess.run([hardy, "run", "--run-dir", str(run), "--launcher-path", str(HERE / "fake_launcher.py"),
                             "--", "--steps", "5"], capture_output=True, text=True, env=env, timeout=60)
    by_hand = subprocess.run([hardy, "train", "--run-dir", str(run), "--steps", "1", "--samples", "8", "--height", "16",
                              "--width", "16"], capture_output=True, text=True, timeout=120)
    _, err = first.communicate(timeout=60)
    events = read_jsonl(run / "events.jsonl")
    check(second.returncode == 2 and f"is in use: hardy run (pid {first.pid}" in second.stderr,
          f"a second hardy run of the directory is refused, naming the first (exit {second.returncode}): "
          f"{second.stderr.strip()[-300:]}")
    check(by_hand.returncode == 2 and "is in use: hardy run" in by_hand.stderr,
          f"so is a hardy train by hand (exit {by_hand.returncode}): {by_hand.stderr.strip()[-300:]}")
    check(first.returncode == 0 and len([e for e in events if e["event"] == "supervisor_started"]) == 1
          and not any(e["event"] == "job_started" and e.get("world_size") != 4 for e in events),
          f"the first run completed and nothing of the refused ones is in its log (exit {first.returncode})")
    args = json.loads((run / "fake-launch-1.args").read_text())
    check("--run-lock-token" in args, "the first run's launch runs under its lock (--run-lock-token)")

    # A launch agent with arguments is split as Open MPI splits it: the probe reaches every node.
    status, _, events = supervise(tmp / "agent-args", "lost:n1,finish", "--hosts", "n0,n1,n2",
                                  "--launch-agent", f"{HERE / 'fake_agent.sh'} -x", "--probe-timeout", "1")
    relaunched = [e for e in events if e["event"] == "job_relaunched"]
    check(status == 0 and relaunched and relaunched[0]["nodes"] == ["n0", "n2"]
          and relaunched[0]["excluded_nodes"] == ["n1"],
          f"--launch-agent 'AGENT -x': only the lost node is left out (exit {status}): {relaunched}")

    # A user's --resume holds until the run has written a checkpoint of its own; after that a
    # relaunch resumes from the newest state, whichever way the option was spelled.
    status, _, events = supervise(tmp / "resume", "crash,checkpoint-crash,finish", "--max-restarts", "3",
                                  train=["--resume=/old/ckpt-5.h5"])
    launches = [json.loads((tmp / "resume" / f"fake-launch-{n}.args").read_text()) for n in (1, 2, 3)]
    check(status == 0, f"the resumed job completes (exit {status})")
    check(all(a.count("--resume=/old/ckpt-5.h5") == 1 and "--resume" not in a for a in launches[:2]),
          f"launches 1 and 2 resume from the user's checkpoint, once: {launches[1]}")
    check(launches[2].count("--resume") == 1 and launches[2][launches[2].index("--resume") + 1] == "latest"
          and not any("ckpt-5" in a for a in launches[2]),
          f"after a checkpoint of its own the relaunch resumes from latest only: {launches[2]}")

    # SIGUSR1 (a time-limit warning) that comes while the supervisor waits between launches is
    # kept and reaches the next launch once it handles it: the job stops preempted (status 4).
    run = tmp / "signal"
    env = {**os.environ, "FAKE_LAUNCHER_PLAN": "crash,await-signal"}
    supervisor = subprocess.Popen([hardy, "run", "--run-dir", str(run), "--launcher-path",
                                   str(HERE / "fake_launcher.py"), "--backoff", "3", "--", "--steps", "5"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while time.time() < deadline and not any(e["event"] == "launch_ended" for e in read_jsonl(run / "events.jsonl")):
        time.sleep(0.05)
    supervisor.send_signal(signal.SIGUSR1)  # during the 3 s backoff: no launch runs
    _, err = supervisor.communicate(timeout=60)
    print(err[-1500:], flush=True)
    check((run / "fake-signal-2").exists(), "the second launch received the SIGUSR1 sent during the backoff")
    check(supervisor.returncode == 4, f"the job was preempted: hardy run exits 4 (got {supervisor.returncode})")

    # Inside a Slurm job of three nodes that needs all three.
    slurm = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[0-2]", "SLURM_NTASKS_PER_NODE": "1"}
    requeue = ("--min-world-size", "3", "--max-requeues", "1", "--launch-agent", str(HERE / "fake_agent.sh"),
               "--probe-timeout", "1")
    status, _, events = supervise(tmp / "requeue", "lost:n1", *requeue, env_extra=slurm)
    asked = [e for e in events if e["event"] == "requeue_requested"]
    finished = [e for e in events if e["event"] == "supervisor_finished"]
    check(status == 4, f"too few nodes inside a Slurm job: hardy run asks for a requeue (exit {status})")
    check(len(asked) == 1 and asked[0]["exclude_nodes"] == ["n1"] and asked[0]["scheduler_job_id"] == "77"
          and asked[0]["step"] == 3, f"requeue_requested names the node to exclude and the step: {asked}")
    check((tmp / "requeue" / "exclude-nodes").read_text() == "n1\n", "RUN_DIR/exclude-nodes lists n1")
    check(finished and finished[-1]["status"] == 4, f"supervisor_finished status 4: {finished[-1:]}")
    # The requeued run loses the node again at the same step: one request without progress is
    # all --max-requeues 1 allows.
    status, _, events = supervise(tmp / "requeue", "lost:n1", *requeue,
                                  env_extra={**slurm, "SLURM_RESTART_COUNT": "1"})
    finished = [e for e in events if e["event"] == "supervisor_finished"]
    check(status == 3, f"no progress since the last requeue: hardy run stops (exit {status})")
    check(finished and "--max-requeues 1" in finished[-1]["reason"] and "step past 3" in finished[-1]["reason"],
          f"supervisor_finished says why: {finished[-1:]}")
    check(len([e for e in events if e["event"] == "requeue_requested"]) == 1, "no second requeue request")

    # The backoff doubles over a crash loop (launches that commit nothing new), and starts again
    # from --backoff after a launch that made progress: a long job's sixth failure must not wait
    # a minute.
    for plan, expected in (("crash,crash,crash,finish", [0.2, 0.4, 0.8]),
                           ("progress-crash,progress-crash,progress-crash,finish", [0.2, 0.2, 0.2])):
        status, _, events = supervise(tmp / plan.split(",")[0], plan, "--max-restarts", "3", backoff="0.2")
        waited = [e["backoff_s"] for e in events if e["event"] == "job_relaunched"]
        check(status == 0 and waited == expected, f"{plan}: the relaunches wait {waited} s (expected {expected})")

    # A launch that made progress and lost a node the relaunch leaves out is relaunched at once:
    # its cause is gone. The next one, lost without progress (steps 1-3 again), waits.
    status, _, events = supervise(tmp / "lost-at-once", "lost:n1,lost:n2,finish", "--hosts", "n0,n1,n2,s0,s1",
                                  "--spare-nodes", "2", "--max-restarts", "3",
                                  "--launch-agent", str(HERE / "fake_agent.sh"), "--probe-timeout", "1", backoff="0.2")
    waited = [e["backoff_s"] for e in events if e["event"] == "job_relaunched"]
    check(status == 0 and waited == [0, 0.2], f"lost nodes left out: the relaunches wait {waited} s (expected [0, 0.2])")

check.finish("supervisor judgement")
