#!/usr/bin/env python3
"""A job of several fault domains loses one and trains on (CTest label `fault`).

Usage: fault_domains.py HARDY SCENARIO

`hardy run --nodes-per-domain 1` on this host makes every "node" a domain: its own mpirun, its
own ranks. Once the job has committed FAULT_STEP steps, one domain's ranks are killed from
outside (SIGKILL), as a node crash would:

  leader   4 domains x 1 rank; domain 2 dies (its leader with it)
  owner    3 domains x 1 rank; domain 0 dies: the domain that writes the run directory's
           metrics, audit and checkpoints, whose duties the lowest survivor takes over
  member   2 domains x 2 ranks; only rank 1 of domain 1 dies: the domain shrinks around it
           inside (ULFM), settles the step in flight with the other domain and trains on with
           one rank less; nothing is relaunched
  leader_rank  2 domains x 2 ranks; rank 0 of domain 1 dies: a domain that lost its leader
           ends and comes back like a lost node's
  sync_every   3 domains x 1 rank meeting every 4th step (--domain-sync-every 4); domain 1 dies
           between meetings: the survivors find out at the next meeting and rewind to the last
           one (domain_rewound), so the steps since are redone over the new split
  sync_every_lagged  the sync_every scenario with --gradient-lag 1 and batch norm: at a meeting
           the next step computes while the states cross the domains, and the statistics it saw
           give way to the domains' average (the state committed, healed from and rewound to)
  late_loss    2 domains x 1 rank; domain 1 dies 15 steps before the end: the survivor finishes
           the job while the lost domain is relaunched, which is stopped, not let in (it would
           wait for a member that is gone); hardy run ends completed at once
  owner_redis  the owner scenario with the leaders meeting in a redis-server that hardy run
           starts (--rendezvous redis), with a password: the server is gone at the end
  lagged   the leader scenario's loss (3 domains x 1 rank, domain 1) with --gradient-lag 1: each
           domain holds the next step computed while a step's sums cross the domains; the
           survivors compute it again over the new split (the reference job is lagged too)
  lagged_member  the member scenario with --gradient-lag 1: the domain that shrank settles the
           step in flight, and the step every domain computed ahead over the old split is
           computed again
  cosmoflow  the leader scenario's loss (3 domains x 1 rank, domain 1) training CosmoFlow's 3-D
           regression network (32^3 volumes, 4 targets, MSE): its targets cross the domains'
           exchange, rebalance and heal as the segmentation's labels do
  sharded_member  the member scenario with --domain-exchange sharded: rank i of every domain sums
           the i-th shard with the others' rank i, so the domain that lost rank 1 cannot shrink
           around it: it ends, comes back and heals like a lost node's, and the survivor's rank 1,
           whose shard's peer died, trains on all the same (buckets of 16 KiB, each bucket's shard
           sent on while backward runs)
  sharded_leader  the leader scenario's loss (4 domains x 2 ranks, both of domain 2's) with the
           sharded exchange and --gradient-lag 1 (each shard's sums cross the domains while the
           next step computes)
  staged   3 domains x 1 rank train on DeepCAM-layout files staged to node-local storage
           (--stage-to); domain 1 dies. Each domain stages the whole dataset over its own nodes,
           in a directory of its own; the relaunched domain stages again before it joins

Each asserts: exit 0 with job_finished at the last step; every step committed once (with
--domain-sync-every: the last record of each step, after the rewind); every complete epoch covers
every sample exactly once; the mean loss of the last tenth of the steps within 2% of the same job
as one MPI job (with --domain-sync-every, within 5% of the same job without the failure); every
rank of every domain
ends with the same parameters (their digests in job_finished and domain_finished); the other domains' ranks never restarted (their rank_started pids are those of the
start); the lost domain named, relaunched, healed from a live domain and admitted back; the
survivors committed a step again within 2 s of the kill; nothing left behind (processes, the
rendezvous store, node-local snapshots).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
from hardy_test import SMALL_COSMOFLOW, Checks, check_completed, check_private_staging, on_dataset, complete_epochs_exact, read_jsonl, read_jsonl_tail, run_watched, small_job, snapshot_files  # noqa: E402

SCENARIOS = {  # domains, ranks per domain, victim domain, victim ranks (in the domain)
    "leader": (4, 1, 2, [0]),
    "owner": (3, 1, 0, [0]),
    "member": (2, 2, 1, [1]),
    "leader_rank": (2, 2, 1, [0]),
    "sync_every": (3, 1, 1, [0]),
    "sync_every_lagged": (3, 1, 1, [0]),
    "late_loss": (2, 1, 1, [0]),
    "owner_redis": (3, 1, 0, [0]),
    "lagged": (3, 1, 1, [0]),
    "lagged_member": (2, 2, 1, [1]),
    "staged": (3, 1, 1, [0]),
    "cosmoflow": (3, 1, 1, [0]),
    "sharded_member": (2, 2, 1, [1]),
    "sharded_leader": (4, 2, 2, [0, 1]),
}
RUN_OPTIONS = {"owner_redis": ["--rendezvous", "redis", "--rendezvous-host", "127.0.0.1"]}  # hardy run's
SYNC_EVERY = {"sync_every": 4, "sync_every_lagged": 4}  # --domain-sync-every
SHRINKS = {"member", "lagged_member"}  # survived inside the domain: no relaunch
SAMPLES, FAULT_STEP = 48, 20
# The survivors train fast enough here to finish 40 steps before a relaunched domain is up
# (about 2 s, more on a loaded machine: 150 steps were once not enough, and 300 failed one run in
# two once a snapshot of every step became a copy into node memory): the scenarios that relaunch
# one train longer, so that it comes back. Domains that train alone between meetings step faster
# still: longer again.
# CosmoFlow's step is about 30 times the compact network's: 60 steps leave the relaunched domain
# as long to come back (it healed at step 24 of 150 after the kill at 20, 2026-11-27).
STEPS = {"member": 60, "lagged_member": 60, "sync_every": 1200, "sync_every_lagged": 1200, "late_loss": 60, "cosmoflow": 60}.get(sys.argv[2] if len(sys.argv) > 2 else "", 700)
FAULT_AT = {"late_loss": STEPS - 15}  # the committed step at which the fault is injected (the
# harness acts on the clock: steps of a few ms left 5 steps too little room, and the kill landed
# after the last step)

def train_options(scenario):
    every = SYNC_EVERY.get(scenario, 1)
    # A checkpoint holds a step every domain committed: a multiple of the meeting interval.
    checkpoint_every = 25 if every == 1 else 6 * every
    network = [SMALL_COSMOFLOW] if scenario == "cosmoflow" else []
    options = small_job(SAMPLES, STEPS, 12, *network) + ["--checkpoint-every", str(checkpoint_every), "--threads",
                                                         "1", "--domain-sync-every", str(every)]
    if scenario == "late_loss":
        # A long held-out evaluation after the last step: the lost domain's relaunch asks to join
        # while the survivor is past its last vote but has not ended yet.
        options[options.index("--eval-samples") + 1] = "6000"
    if scenario.startswith("lagged") or scenario in ("sharded_leader", "sync_every_lagged"):
        options += ["--gradient-lag", "1"]
    if scenario == "sync_every_lagged":
        options += ["--norm", "batch"]
    if scenario.startswith("sharded"):
        # Buckets of 16 KiB (about 8 for this network): without the lag each bucket's shards
        # leave for the other domains as soon as the domain has summed the bucket.
        options += ["--domain-exchange", "sharded", "--bucket-mib", "0.016"]
    return options


def check_staging(check, scenario, events, stage, domains, victim):
    """Every domain staged the whole dataset into its own private directory, the relaunched one
    again before it joined; nothing half-copied, nothing another user could have written."""
    staged = [e for e in events if e["event"] == "data_staged"]
    for d in range(domains):
        mine = [e for e in staged if e.get("domain") == d]
        expected = 2 if d == victim else 1
        check(len(mine) == expected and all(e["files"] == SAMPLES and str(stage / f"domain-{d}") in e["directory"]
                                            for e in mine),
              f"{scenario}: domain {d} staged all {SAMPLES} files into its own directory {expected} time(s): {mine}")
    joined = [e for e in events if e["event"] == "domain_joined" and e.get("domain") == victim]
    restaged = [e for e in staged if e.get("domain") == victim][1:]
    check(joined and restaged and restaged[0]["unix_time"] < joined[0]["unix_time"],
          f"{scenario}: the relaunched domain staged its share before it joined")
    check_private_staging(check, scenario, stage, events)


def main():
    hardy, scenario = sys.argv[1], sys.argv[2]
    if "redis" in " ".join(RUN_OPTIONS.get(scenario, [])) and not shutil.which("redis-server"):
        print("SKIPPED: redis-server is not on PATH (Debian: apt-get install redis-server)")
        sys.exit(77)
    domains, ranks, victim, victim_ranks = SCENARIOS[scenario]
    sync_every = SYNC_EVERY.get(scenario, 1)
    train = train_options(scenario)
    mpirun = str(Path(hardy).resolve().parents[2] / ".venv/bin/mpirun")
    check = Checks()
    with tempfile.TemporaryDirectory(prefix=f"hardy-domains-{scenario}-") as tmp:
        tmp = Path(tmp)
        snapshots = tmp / "node-local"
        stage = tmp / "stage"
        if scenario == "staged":
            root = tmp / "deepcam"
            subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", str(root), "--samples",
                            str(SAMPLES), "--validation-samples", "1", "--height", "32", "--width", "32"],
                           check=True, stdout=subprocess.DEVNULL)
            train = on_dataset(train, root, "--stage-to", str(stage))

        def domains_job(run_dir):
            return [hardy, "run", "--nodes", str(domains), "--nodes-per-domain", "1", "--ranks-per-node", str(ranks),
                    "--run-dir", str(run_dir), "--backoff", "0.2", *RUN_OPTIONS.get(scenario, []), "--",
                    *train, "--snapshot-dir", str(snapshots)]

        # The loss to compare with: the same job as one MPI job, or, for domains that train alone
        # between meetings (which one job cannot), the same job of domains without the failure.
        reference = tmp / "reference"
        if sync_every == 1:
            subprocess.run([mpirun, "-n", str(domains * ranks), "--oversubscribe", "--bind-to", "none",
                            "--allow-run-as-root", hardy, "train", *train, "--ranks-per-node", str(ranks),
                            "--run-dir", str(reference), "--snapshot-dir", str(snapshots)],
                           check=True, stdout=subprocess.DEVNULL, timeout=300)
        else:
            subprocess.run(domains_job(reference), check=True, stdout=subprocess.DEVNULL, timeout=300)

        run = tmp / "run"
        shutil.rmtree(stage, ignore_errors=True)  # the domains stage afresh
        command = domains_job(run)
        fault = {}

        def inject():
            deadline = time.time() + 120
            while time.time() < deadline:
                last = read_jsonl_tail(run / "metrics.jsonl")
                if last and last["step"] >= FAULT_AT.get(scenario, FAULT_STEP):
                    break
                time.sleep(0.02)
            else:
                return
            started = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "rank_started"]
            pids = [e["pid"] for e in started if e.get("domain") == victim and e["rank"] in victim_ranks]
            fault.update(time=time.time(), step=read_jsonl_tail(run / "metrics.jsonl")["step"], pids=pids)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            print(f"--- killed domain {victim}'s rank(s) {victim_ranks} (pids {pids}) at step {fault['step']}",
                  flush=True)

        status, output = run_watched(command, inject, 400)
        ended = time.time()
        print(output[-4000:], flush=True)
        check(status == 0, f"{scenario}: hardy run exits 0 ({status})")
        check(bool(fault.get("pids")), f"{scenario}: the fault was injected: {fault}")
        events = read_jsonl(run / "events.jsonl")
        metrics = read_jsonl(run / "metrics.jsonl")
        named = lambda name: [e for e in events if e["event"] == name]  # noqa: E731
        check_completed(check, events, STEPS, scenario)
        steps = [m["step"] for m in metrics]
        if sync_every == 1:
            twice = sorted({s for s in steps if steps.count(s) > 1})
            never = sorted(set(range(1, STEPS + 1)) - set(steps))
            check(steps == list(range(1, STEPS + 1)),
                  f"{scenario}: every step committed once: {steps[:5]}..{steps[-5:]} (twice: {twice}, never: {never}, "
                  f"around them: {[(m['step'], m.get('world_size')) for m in metrics if any(abs(m['step'] - t) <= 2 for t in twice + never)]})")
        else:
            check(sorted(set(steps)) == list(range(1, STEPS + 1)) and steps[-1] == STEPS,
                  f"{scenario}: every step committed, the last at the end: {steps[:5]}..{steps[-5:]}")
            rewound = named("domain_rewound")
            # Back to the last meeting, never further: each survivor redoes what it did since.
            check(rewound and all(e["to_step"] % sync_every == 0 and 1 <= e["steps_redone"] < sync_every
                                  and e["step"] == e["to_step"] + sync_every for e in rewound),
                  f"{scenario}: the survivors rewound to the last meeting: {rewound}")
            # The fault step is the run files' last committed step when the kill came. When the
            # next step is a meeting, its exchange may already have completed with the victim
            # (the lead commits and logs it after), and the survivors find out at the meeting
            # after that one (a clean-clone CI run: killed at 23, found out at 28).
            fault_step = fault.get("step", 0)
            first_meeting = (fault_step // sync_every + 1) * sync_every
            meetings = {first_meeting} | ({first_meeting + sync_every} if first_meeting == fault_step + 1 else set())
            check(rewound and rewound[0]["step"] in meetings,
                  f"{scenario}: found out at the next meeting (fault at step {fault_step}, meetings "
                  f"{sorted(meetings)}): {rewound[:1]}")
            # Between meetings the steps are one domain's own: redone after the rewind, so the
            # metrics go back to the meeting and count up again.
            back = [(a, b) for a, b in zip(steps, steps[1:]) if b <= a]
            check(back and all(b - 1 in [e["to_step"] for e in rewound] for _, b in back),
                  f"{scenario}: metrics go back only to a meeting: {back}")
            written = [e["step"] for e in named("checkpoint_written")]
            check(written and all(s % sync_every == 0 or s == STEPS for s in written),
                  f"{scenario}: checkpoints hold only steps every domain committed: {written}")
        complete, wrong = complete_epochs_exact(run, SAMPLES)
        # Every epoch the steps finished is complete: a step committed but never audited (the
        # writer died before logging it) leaves its epoch short.
        check(len(complete) >= STEPS * 12 // SAMPLES and not wrong,
              f"{scenario}: {len(complete)} complete epochs cover every sample exactly once (wrong: {wrong})")
        check(all(m["global_batch"] == 12 for m in metrics), f"{scenario}: the global batch stays 12")
        if scenario == "staged":
            check_staging(check, scenario, events, stage, domains, victim)
        # One step's loss (12 samples) is noise that training amplifies from the order of float
        # sums: compared one step against one step, `lagged` ran -0.8% to +0.9% from one MPI job
        # over 6 runs and once 2.2%. The last tenth's mean.
        def tail_mean(rows):
            last = {m["step"]: m["loss"] for m in rows}
            tail = [last[s] for s in sorted(last)[-STEPS // 10:]]
            return sum(tail) / len(tail)

        if sync_every == 1:
            # Before the fault the domains sum what one job sums, only grouped otherwise: over the
            # first 10 steps the losses agree but for float rounding, which training amplifies
            # (1.4e-5 apart at step 13 on the staged files, 1e-8 on synthetic ones). A wrong sum
            # is 0.6% off at step 2 (the sharded exchange's sums once reached only its leader).
            one_job = {m["step"]: m["loss"] for m in read_jsonl(reference / "metrics.jsonl")}
            apart = [(m["step"], m["loss"], one_job.get(m["step"])) for m in metrics
                     if m["step"] <= min(fault.get("step", 0), 10)
                     and abs(m["loss"] - one_job.get(m["step"], 0)) > 1e-3 * abs(m["loss"])]
            check(not apart, f"{scenario}: the steps before the fault match one MPI job's losses: {apart[:3]}")
            mine, theirs = tail_mean(metrics), tail_mean(read_jsonl(reference / "metrics.jsonl"))
            check(abs(mine - theirs) <= 0.02 * abs(theirs),
                  f"{scenario}: the last {STEPS // 10} steps' mean loss {mine:.5f} within 2% of one MPI job's "
                  f"{theirs:.5f}")
        else:
            # Domains that train alone average different states when fewer of them share a step,
            # so the run follows another path than the one without the failure: what must hold
            # is that it gets as far.
            mine, theirs = tail_mean(metrics), tail_mean(read_jsonl(reference / "metrics.jsonl"))
            check(abs(mine - theirs) <= 0.05 * theirs,
                  f"{scenario}: the last {STEPS // 10} steps' mean loss {mine:.5f} within 5% of the run "
                  f"without the failure ({theirs:.5f})")
        # Every rank of every domain, at the end: the same parameters to the bit.
        ends = [e for e in events if e["event"] in ("job_finished", "domain_finished")
                and e.get("status") == "completed"]
        digests = {e.get("domain"): e.get("parameter_digest") for e in ends}
        finishing = domains - (1 if scenario == "late_loss" else 0)  # there the lost one is not let back
        check(len(digests) == finishing and None not in digests.values() and len(set(digests.values())) == 1,
              f"{scenario}: every domain ends with the same parameters: {digests}")
        started = named("rank_started")
        if scenario == "late_loss":
            lost = named("domain_lost")
            check(len(lost) == 1 and lost[0]["domain"] == victim, f"{scenario}: domain_lost names domain {victim}: {lost}")
            check(not any(e["event"] in ("domain_joined", "domain_admitted") for e in events),
                  f"{scenario}: the job was done: the relaunched domain was not let in")
            finished_by = [e for e in events if e["event"] == "supervisor_finished"]
            check(finished_by and finished_by[-1]["status"] == 0,
                  f"{scenario}: the supervisor says completed: {finished_by[-1:]}")
            # Not after the membership timeout (120 s) of a joiner waiting for a finished domain.
            took = ended - fault.get("time", ended)
            check(took < 30, f"{scenario}: hardy run ended {took:.1f} s after the kill")
            check(not any((run / "rendezvous").rglob("*")), f"{scenario}: the rendezvous store was removed")
            leftovers = subprocess.run(["pgrep", "-f", f"--run-dir {run}"], capture_output=True, text=True).stdout.split()
            check(not leftovers, f"{scenario}: no process of the job left: {leftovers}")
            check.finish(f"fault domains: {scenario}")
            return
        if scenario in SHRINKS:
            check(metrics[-1]["world_size"] == domains * ranks - len(victim_ranks),
                  f"{scenario}: one rank less at the end ({metrics[-1]['world_size']} ranks)")
            for d in range(domains):
                count = sum(1 for e in started if e.get("domain") == d)
                check(count == ranks, f"{scenario}: domain {d}'s ranks never restarted ({count} starts)")
            check(not named("domain_lost"), f"{scenario}: no domain lost: {named('domain_lost')}")
            detected = named("failure_detected")
            check(detected and detected[0].get("domain") == victim and detected[0]["failed_ranks"] == victim_ranks,
                  f"{scenario}: the domain's own recovery names rank {victim_ranks}: {detected[:1]}")
            rolled = named("step_rolled_forward")
            print(f"steps rolled forward: {[e['step'] for e in rolled]}", flush=True)
            after = [m for m in metrics if m["unix_time"] > fault.get("time", 0)]
            if after and fault:
                stall = after[0]["unix_time"] - fault["time"]
                print(f"next committed step {stall:.3f} s after the kill", flush=True)
                check(stall < 2.0, f"{scenario}: training again within 2 s ({stall:.3f} s)")
            check.finish(f"fault domains: {scenario}")
            return
        check(metrics[-1]["world_size"] == domains * ranks,
              f"{scenario}: back to full strength at the end ({metrics[-1]['world_size']} ranks)")
        for d in range(domains):
            count = sum(1 for e in started if e.get("domain") == d)
            expected = ranks * (2 if d == victim else 1)
            check(count == expected, f"{scenario}: domain {d}'s ranks started {count} times (expected {expected}: "
                  f"{'relaunched once' if d == victim else 'never restarted'})")
        lost = named("domain_lost")
        check(len(lost) == 1 and lost[0]["domain"] == victim, f"{scenario}: domain_lost names domain {victim}: {lost}")
        # Open MPI's launcher may exit 0 after its ranks were killed: that must not read as success.
        check(lost and lost[0]["how"] != "exit status 0", f"{scenario}: how the domain ended: {lost[:1]}")
        print(f"domain_lost: {lost[0]['how'] if lost else None}", flush=True)
        # A survivor whose collective failed before the vote reached it, while another's vote
        # completed, takes that one's state too; the relaunched domain always heals.
        healed = [e for e in named("domain_healed") if e["domain"] == victim]
        check(len(healed) == 1 and healed[0]["from_domain"] != victim and healed[0]["bytes"] > 0,
              f"{scenario}: the relaunched domain healed from a live one: {named('domain_healed')}")
        check(any(e["event"] == "domain_joined" and e["domain"] == victim for e in events),
              f"{scenario}: the relaunched domain joined the running job")
        changed = named("domain_quorum_changed")
        check(changed and all(victim in e["lost_domains"] for e in changed),
              f"{scenario}: the survivors' leaders regrouped without domain {victim}: {changed}")
        # Recovery, as the survivors feel it: from the kill to their next committed step.
        after = [m for m in metrics if m["unix_time"] > fault.get("time", 0)]
        if after and fault:
            stall = after[0]["unix_time"] - fault["time"]
            print(f"survivors' next committed step {stall:.3f} s after the kill "
                  f"(step {after[0]['step']}, {after[0]['world_size']} ranks)", flush=True)
            check(stall < 2.0, f"{scenario}: the survivors trained again within 2 s ({stall:.3f} s)")
        if scenario.startswith("owner"):
            check(any(e["event"] == "checkpoint_written" and e.get("domain", 0) != 0 for e in events),
                  f"{scenario}: the next owner writes checkpoints")
        if scenario == "owner_redis":
            store = next((e["rendezvous_store"] for e in named("supervisor_started")), "")
            check(store.startswith("redis://127.0.0.1:"), f"{scenario}: the leaders met in Redis: {store}")
            port = store.rsplit(":", 1)[-1]
            servers = subprocess.run(["pgrep", "-f", f"redis-server.*:{port}"], capture_output=True,
                                     text=True).stdout.split()
            check(port.isdigit() and not servers, f"{scenario}: the redis-server is gone: {servers}")
        check((run / "model.h5").exists(), f"{scenario}: model.h5 written")
        check(not any((run / "rendezvous").rglob("*")), f"{scenario}: the rendezvous store was removed")
        left = sorted(str(p) for p in snapshot_files(snapshots))
        check(not left, f"{scenario}: node-local snapshots removed at the end: {left[:3]}")
        leftovers = subprocess.run(["pgrep", "-f", f"--run-dir {run}"], capture_output=True, text=True).stdout.split()
        check(not leftovers, f"{scenario}: no process of the job left: {leftovers}")
    check.finish(f"fault domains: {scenario}")


if __name__ == "__main__":
    main()
