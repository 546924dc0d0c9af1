#!/usr/bin/python3
"""Fault domains on an emulated cluster (CTest label `cluster`).

Usage: domain_loss.py HARDY SCENARIO [--json FILE] [--steps N] [--fault-step S]

`hardy run --hosts ... --nodes-per-domain 2 --spare-nodes S` trains on 8 emulated nodes (network
namespaces, emulated_cluster.py) as 4 fault domains, each its own mpirun, from the host namespace.
Once the job has committed FAULT_STEP steps a node fails:

  node_crash        SIGKILL every process of node 3 (domain 1's second node)
  node_crash_rpn2   the same with 2 ranks per node
  leader_crash      node 4: domain 2's first node, where its leader runs
  node_freeze       SIGSTOP node 5 and cut its link (domain 2's second node)
  node_freeze_rpn2  the same with 2 ranks per node
  two_domains       node 1 (domain 0, which writes the run directory's files), later node 6
  crash_in_heal     node 3; while domain 1 comes back on the spare, node 2 goes for good
  node_crash_redis  node_crash with the leaders meeting in the redis-server that hardy run starts
                    on the host namespace (--rendezvous redis), reached at the bridge address
  staged_node_crash node_crash on DeepCAM-layout files staged to node-local storage (--stage-to):
                    every domain stages the whole dataset over its own 2 nodes; the spare stages
                    the lost node's share of domain 1 before the domain joins again
  lagged_node_crash node_crash with --gradient-lag 1 (the reference job lagged too)
  *_sharded         node_crash, node_crash_rpn2 or node_freeze_rpn2 with --domain-exchange sharded:
                    every rank sums its shard with the other domains' ranks of its index, over the
                    cluster's network (--domain-interface), bucket by bucket while backward runs

The staged, lagged and sharded scenarios name the network the leaders exchange over by its subnet
(--domain-interface 198.18.C.0/24, the emulated cluster's): every domain's leader must listen on
its address there (domain_address of job_started and domain_started).

Each asserts what fault domains promise: exit 0 with job_finished at the last step; every step
committed once and no committed step lost; every complete epoch covers every sample exactly once;
the final loss within 2% of the same job as one MPI job; every domain ending with the same
parameters (their digests); the other domains' ranks never restarted
(one rank_started each); the lost node named with its evidence and left out; the lost domain back
at full strength on a spare, healed from a domain live at the time; the survivors training again
within 2 s of a crash and 5 s of a freeze (fault to their next committed step after they
regrouped); nothing left on any node that is up. It prints the phases (fault, regroup, next step, relaunch, heal, admitted) and with --json
writes them for bench/cluster/domain_bench.py.
"""
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
from emulated_cluster import EmulatedCluster, namespaces_available  # noqa: E402
from hardy_test import Checks, Job, check_private_staging, on_dataset, check_completed, complete_epochs_exact, fault_job, node_state_left, read_jsonl, run_watched  # noqa: E402


NODES, PER_DOMAIN, SAMPLES = 8, 2, 48
# Long enough after the fault for the lost domain to come back (up to about 9 s for a frozen
# node) before the survivors finish.
STEPS, FAULT_STEP, TRAIN = fault_job(SAMPLES, 240, 40, ["--checkpoint-every", "50", "--threads", "1"])
# crash_in_heal loses its second node only once the first domain's relaunch has begun (about step
# 60), and that domain relaunches a second time: at 240 steps the survivors finished before it
# was back on a machine whose step took 20 ms (2026-11-29).
LONGER = {"crash_in_heal": 3 * STEPS}
RUN_TIMEOUT_S = 300
SPARES = {"two_domains": 2, "crash_in_heal": 2}
FIRST_FAULT = {"node_crash": ("crash", 3), "node_crash_rpn2": ("crash", 3), "node_crash_redis": ("crash", 3),
               "staged_node_crash": ("crash", 3), "lagged_node_crash": ("crash", 3),
               "leader_crash": ("crash", 4),
               "node_freeze": ("freeze", 5), "node_freeze_rpn2": ("freeze", 5),
               "two_domains": ("crash", 1), "crash_in_heal": ("crash", 3)}


def check_staging(check, scenario, events, stage, faults):
    """Every domain staged the whole dataset over its own nodes, each node its share; the domain
    that lost a node staged again with the spare in the lost node's place before it joined; nothing
    half-copied, nothing another user could have written or reached."""
    staged = [e for e in events if e["event"] == "data_staged"]
    victims = {f["node"] // PER_DOMAIN for f in faults}
    for d in range(NODES // PER_DOMAIN):
        mine = [e for e in staged if e.get("domain") == d]
        check(mine and all(e["files"] == SAMPLES and len(e["nodes"]) == PER_DOMAIN for e in mine)
              and len(mine) == (2 if d in victims else 1),
              f"{scenario}: domain {d} staged all {SAMPLES} files over its {PER_DOMAIN} nodes: {mine}")
    for f in faults:
        d = f["node"] // PER_DOMAIN
        again = [e for e in staged if e.get("domain") == d and e["unix_time"] > f["time"]]
        joined = [e for e in events if e["event"] == "domain_joined" and e.get("domain") == d
                  and e["unix_time"] > f["time"]]
        nodes = [n["node"].split("/")[0] for n in again[0]["nodes"]] if again else []
        check(again and joined and again[0]["unix_time"] < joined[0]["unix_time"] and f["host"] not in nodes
              and again[0]["copied"] > 0,
              f"{scenario}: domain {d} staged on {nodes} (without {f['host']}) before it joined: {again[:1]}")
    check_private_staging(check, scenario, stage, events, lost_hosts=[f["host"] for f in faults])


def reference_loss(hardy, ranks, tmp, train):
    run = Path(tmp) / "reference"
    mpirun = str(Path(hardy).resolve().parents[2] / ".venv/bin/mpirun")
    subprocess.run([mpirun, "-n", str(NODES * ranks), "--oversubscribe", "--bind-to", "none", "--allow-run-as-root",
                    hardy, "train", *train, "--ranks-per-node", str(ranks), "--run-dir", str(run),
                    "--snapshot-dir", str(Path(tmp) / "reference-node-local")],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    return read_jsonl(run / "metrics.jsonl")[-1]["loss"]


def main():
    hardy, scenario = sys.argv[1], sys.argv[2]
    sharded = scenario.endswith("_sharded")
    base = scenario.removesuffix("_sharded")  # the fault and the ranks per node
    json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    ok, why = namespaces_available()
    if not ok:
        print(f"skipped: cannot emulate a cluster here: {why}")
        sys.exit(77)
    if scenario.endswith("redis") and not shutil.which("redis-server"):
        print("skipped: redis-server is not on PATH (Debian: apt-get install redis-server)")
        sys.exit(77)
    ranks = 2 if base.endswith("_rpn2") else 1
    spares = SPARES.get(scenario, 1)
    check = Checks()
    steps = LONGER.get(scenario, STEPS)
    train = [str(steps) if previous == "--steps" else word
             for previous, word in zip([None, *TRAIN], TRAIN)]
    if scenario.startswith("lagged"):
        train += ["--gradient-lag", "1"]
    if sharded:
        # Buckets of 16 KiB (about 8 for this network): each bucket's shards leave for the other
        # domains as soon as the domain has summed it, while backward goes on.
        train += ["--domain-exchange", "sharded", "--bucket-mib", "0.016"]
    with tempfile.TemporaryDirectory(prefix=f"hardy-domains-{scenario}-") as tmp:
        stage = Path(tmp) / "stage"
        if scenario.startswith("staged"):
            root = Path(tmp) / "deepcam"
            subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", str(root), "--samples",
                            str(SAMPLES), "--validation-samples", "1", "--height", "32", "--width", "32"],
                           check=True, stdout=subprocess.DEVNULL)
            train = on_dataset(train, root)
        expected_final = reference_loss(hardy, ranks, tmp, train)
        if scenario.startswith("staged"):
            train += ["--stage-to", str(stage)]
        with EmulatedCluster(nodes=NODES + spares) as cluster:
            run = Path(tmp) / "run"
            snapshots = Path(tmp) / "node-local"
            command = [hardy, "run", "--hosts", ",".join(cluster.hosts), "--launch-agent", cluster.agent,
                       "--ranks-per-node", str(ranks), "--nodes-per-domain", str(PER_DOMAIN),
                       "--spare-nodes", str(spares), "--run-dir", str(run), "--backoff", "0.2",
                       "--probe-timeout", "2"]
            if scenario == "node_crash_redis":
                command += ["--rendezvous", "redis", "--rendezvous-host", cluster.bridge_address]
            if scenario.startswith(("staged", "lagged")) or sharded:
                command += ["--domain-interface", cluster.subnet]
            command += ["--", *train, "--snapshot-dir", str(snapshots)]
            env = {**os.environ, **cluster.mpi_env()}
            faults = []
            job = Job(run)

            def fault(kind, node):
                {"crash": cluster.crash, "freeze": cluster.freeze,
                 "crash for good": lambda n: cluster.crash(n, link_down=True)}[kind](node)
                faults.append({"kind": kind, "node": node, "host": cluster.hosts[node], "time": time.time(),
                               "step": job.step()})
                print(f"--- {kind} {cluster.hosts[node]} at step {faults[-1]['step']}", flush=True)

            def inject():
                if not job.wait(lambda: job.step() >= FAULT_STEP, f"step {FAULT_STEP}"):
                    return
                fault(*FIRST_FAULT[base])
                if scenario == "two_domains":
                    if job.wait(lambda: job.events("domain_healed") and job.step() >= FAULT_STEP + 30,
                                "the first domain to come back"):
                        fault("crash", 6)
                elif scenario == "crash_in_heal":
                    if job.wait(lambda: job.events("domain_relaunched"), "the relaunch", 60):
                        fault("crash for good", 2)

            started = time.time()
            status, output = run_watched(command, inject, RUN_TIMEOUT_S, env=env)
            elapsed = time.time() - started
            for line in output.splitlines():
                if "error" in line.lower() and "NBC_" not in line:
                    print(f"[output] {line[:300]}")
            print(output[-3000:], flush=True)
            check(status == 0, f"{scenario}: hardy run exits 0 ({status}, {elapsed:.1f} s)")
            check(len(faults) == (2 if scenario in ("two_domains", "crash_in_heal") else 1),
                  f"{scenario}: faults injected: {faults}")
            all_events = job.events()
            metrics = read_jsonl(run / "metrics.jsonl")
            named = lambda name: [e for e in all_events if e["event"] == name]  # noqa: E731
            check_completed(check, all_events, steps, scenario)
            committed = [m["step"] for m in metrics]
            check(committed == list(range(1, steps + 1)), f"{scenario}: every step committed once, none lost")
            complete, wrong = complete_epochs_exact(run, SAMPLES)
            check(len(complete) >= steps * 16 // SAMPLES and not wrong,
                  f"{scenario}: {len(complete)} complete epochs cover every sample exactly once (wrong: {wrong})")
            final = metrics[-1]["loss"] if metrics else float("nan")
            check(abs(final - expected_final) <= 0.02 * abs(expected_final),
                  f"{scenario}: final loss {final:.5f} within 2% of one MPI job's {expected_final:.5f}")
            check(metrics and metrics[-1]["world_size"] == NODES * ranks,
                  f"{scenario}: back at full strength ({metrics[-1]['world_size'] if metrics else None} ranks)")
            # Every domain, the relaunched ones too, ends with the same parameters to the bit.
            ends = [e for e in all_events if e["event"] in ("job_finished", "domain_finished")
                    and e.get("status") == "completed"]
            digests = {e.get("domain"): e.get("parameter_digest") for e in ends}
            check(len(digests) == NODES // PER_DOMAIN and None not in digests.values()
                  and len(set(digests.values())) == 1,
                  f"{scenario}: every domain ends with the same parameters: {digests}")

            victims = {f["node"] // PER_DOMAIN for f in faults}
            started_events = named("rank_started")
            for d in range(NODES // PER_DOMAIN):
                if d in victims:
                    continue
                count = sum(1 for e in started_events if e.get("domain") == d)
                check(count == PER_DOMAIN * ranks, f"{scenario}: domain {d}'s ranks never restarted ({count} starts)")
            lost = named("domain_lost")
            excluded = {x["host"]: x for e in lost for x in e.get("excluded", [])}
            for f in faults:
                check(f["host"] in excluded and excluded[f["host"]].get("replaced_by"),
                      f"{scenario}: {f['host']} named lost and replaced: {excluded.get(f['host'])}")
            # A heal's source must have been live then: not the healed domain itself, and not a
            # domain lost and not yet let back in (the second loss of two_domains may heal from
            # the first victim once it is back).
            def down_at(when):
                down = set()
                for e in sorted(named("domain_lost") + named("domain_joined"), key=lambda e: e["unix_time"]):
                    if e["unix_time"] < when:
                        (down.add if e["event"] == "domain_lost" else down.discard)(e["domain"])
                return down
            heals = named("domain_healed")
            from_dead = [e for e in heals if e["from_domain"] == e["domain"] or e["from_domain"] in down_at(e["unix_time"])]
            check(not from_dead, f"{scenario}: no domain healed from itself or from a lost one ({from_dead})")
            healed = {e["domain"] for e in heals}
            check(victims <= healed, f"{scenario}: every lost domain healed from a live one ({healed})")
            relaunched = named("domain_relaunched")
            last_nodes = {}
            for e in relaunched:
                last_nodes[e["domain"]] = e["nodes"]
            for d in victims:
                check(not any(f["host"] in last_nodes.get(d, []) for f in faults),
                      f"{scenario}: domain {d} runs without the lost nodes: {last_nodes.get(d)}")

            # The survivors' stall: from each fault to their next committed step once they have
            # regrouped without the lost domain. A step already past the leaders' exchange when
            # the node died still commits a few milliseconds after the fault; it is not a sign
            # that the survivors recovered.
            bound = {"crash": 2.0, "crash for good": 5.0, "freeze": 5.0}
            phases = []
            for f in faults:
                regroup = [e for e in named("domain_quorum_changed") if e["unix_time"] > f["time"]]
                after = [m for m in metrics if regroup and m["unix_time"] > regroup[0]["unix_time"]]
                relaunch = [e for e in relaunched if e["unix_time"] > f["time"]]
                heal = [e for e in named("domain_healed") if e["unix_time"] > f["time"]]
                # The lost domain let back in (the joiner's own record; the members' domain_admitted
                # is logged by the domain that writes the run files, which may be the joiner).
                admitted = [e for e in named("domain_joined")
                            if e["unix_time"] > f["time"] and e.get("domain") == f["node"] // PER_DOMAIN]
                phase = {"fault": f["kind"], "host": f["host"], "step": f["step"]}
                if regroup:
                    phase["regrouped_s"] = regroup[0]["unix_time"] - f["time"]
                if after:
                    phase["survivors_next_step_s"] = after[0]["unix_time"] - f["time"]
                if relaunch:
                    phase["relaunched_s"] = relaunch[0]["unix_time"] - f["time"]
                if heal:
                    phase["healed_s"] = heal[0]["unix_time"] - f["time"]
                    phase["heal_bytes"] = heal[0]["bytes"]
                    phase["heal_seconds"] = heal[0]["seconds"]
                if admitted:
                    phase["back_at_full_strength_s"] = admitted[0]["unix_time"] - f["time"]
                phases.append(phase)
            print(f"phases: {json.dumps(phases)}", flush=True)
            first = phases[0] if phases else {}
            limit = bound[faults[0]["kind"]] if faults else 0
            check(first.get("survivors_next_step_s", 1e9) <= limit,
                  f"{scenario}: the survivors trained again within {limit} s ({first.get('survivors_next_step_s')})")

            if scenario.startswith("staged"):
                check_staging(check, scenario, all_events, stage, faults)
            if scenario.startswith(("staged", "lagged")):
                subnet = ipaddress.ip_network(cluster.subnet)
                starts = [e for e in all_events if e["event"] in ("job_started", "domain_started")]
                def inside(address):
                    try:
                        return ipaddress.ip_address(address) in subnet
                    except ValueError:  # a host name: not bound to the network asked for
                        return False
                outside = [e.get("domain_address") for e in starts if not inside(e.get("domain_address", ""))]
                check(len(starts) >= NODES // PER_DOMAIN and not outside,
                      f"{scenario}: every leader listened on {cluster.subnet} ({len(starts)} starts, outside: {outside})")
                check(any(e.get("domain_interface") == cluster.subnet for e in named("supervisor_started")),
                      f"{scenario}: supervisor_started names the network")
            # Every domain's trees on every node that answers, the lost node's too when it does
            # (node_state_removed names those that do not).
            _, problems = node_state_left(snapshots, read_jsonl(run / "events.jsonl"))
            check(not problems, f"{scenario}: nothing of the run left in node memory: {problems}")
            frozen = {f["host"] for f in faults if f["kind"] == "freeze"}
            deadline = time.time() + 10
            while (left := [ln for ln in cluster.leftovers() if ln.split(":")[0] not in frozen]) \
                    and time.time() < deadline:
                time.sleep(0.1)
            check(not left, f"{scenario}: no process left on the nodes that are up: {left}")
            if scenario == "node_crash_redis":
                store = next((e["rendezvous_store"] for e in named("supervisor_started")), "")
                check(store.startswith(f"redis://{cluster.bridge_address}:"),
                      f"{scenario}: the leaders met in Redis at the bridge: {store}")
                servers = subprocess.run(["pgrep", "-f", f"redis-server.*:{store.rsplit(':', 1)[-1]}"],
                                         capture_output=True, text=True).stdout.split()
                check(not servers, f"{scenario}: the redis-server is gone: {servers}")
            if json_out:
                Path(json_out).write_text(json.dumps({"scenario": scenario, "ranks_per_node": ranks,
                                                      "phases": phases, "elapsed_s": elapsed}, indent=1))
    check.finish(f"cluster domains scenario {scenario}")


if __name__ == "__main__":
    main()
