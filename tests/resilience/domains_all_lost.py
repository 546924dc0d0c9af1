#!/usr/bin/env python3
"""Every domain that holds committed state is lost while another one comes back (CTest label
`fault`).

Usage: domains_all_lost.py HARDY MPIRUN [--no-snapshots]

`hardy run --nodes 2 --nodes-per-domain 1` on this host: 2 domains of 1 rank, a checkpoint every
CHECKPOINT_EVERY steps. Once the job has committed FAULT_STEP steps, domain 0's rank is killed
(SIGKILL); the supervisor relaunches it. As soon as it does (domain_relaunched), before the
relaunched domain can be let in, domain 1's rank is killed too: no live domain holds the job's
state, only what persists does: the run directory's checkpoints and the node-local snapshots
(every step here). The relaunched domains must go on from the newest of those (domains_resumed,
source node-local: at most a step or two behind the last step committed before the second kill)
instead of the job ending with "every domain was lost" or going back further; with
--no-snapshots (--snapshot-every 0) from the newest checkpoint (source checkpoint).

Asserts: exit 0 with job_finished completed at the last step; every step committed; every
complete epoch covers every sample exactly once; domains_resumed from that state, with one
state_restored naming it;
the final loss within 2% of the same job as one MPI job; every domain ends with the same
parameters.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
from hardy_test import Checks, check_completed, complete_epochs_exact, read_jsonl, read_jsonl_tail, run_watched, small_job  # noqa: E402

SAMPLES, STEPS, FAULT_STEP, CHECKPOINT_EVERY = 48, 400, 60, 20


def main():
    hardy, mpirun = sys.argv[1], sys.argv[2]
    snapshots_on = "--no-snapshots" not in sys.argv[3:]
    train = small_job(SAMPLES, STEPS, 12) + ["--checkpoint-every", str(CHECKPOINT_EVERY), "--threads", "1"]
    if not snapshots_on:
        at = train.index("--snapshot-every")
        train = train[:at] + ["--snapshot-every", "0"] + train[at + 2:]
    check = Checks()
    with tempfile.TemporaryDirectory(prefix="hardy-domains-all-lost-") as tmp:
        tmp = Path(tmp)
        snapshots = tmp / "node-local"
        reference = tmp / "reference"
        subprocess.run([mpirun, "-n", "2", "--oversubscribe", "--bind-to", "none", "--allow-run-as-root", hardy,
                        "train", *train, "--run-dir", str(reference), "--snapshot-dir", str(snapshots)],
                       check=True, stdout=subprocess.DEVNULL, timeout=300)
        expected = read_jsonl(reference / "metrics.jsonl")[-1]["loss"]
        run = tmp / "run"
        command = [hardy, "run", "--nodes", "2", "--nodes-per-domain", "1", "--run-dir", str(run), "--backoff", "0.2",
                   "--", *train, "--snapshot-dir", str(snapshots)]
        fault = {}

        def kill_domain(domain):
            started = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "rank_started"
                       and e.get("domain") == domain]
            pid = started[-1]["pid"]
            os.kill(pid, signal.SIGKILL)
            return pid

        def inject():
            deadline = time.time() + 120
            while time.time() < deadline:
                last = read_jsonl_tail(run / "metrics.jsonl")
                if last and last["step"] >= FAULT_STEP:
                    break
                time.sleep(0.02)
            else:
                return
            fault["first"] = kill_domain(0)
            while time.time() < deadline:
                events = read_jsonl(run / "events.jsonl")
                if any(e["event"] == "domain_relaunched" and e.get("domain") == 0 for e in events):
                    fault["committed"] = read_jsonl_tail(run / "metrics.jsonl")["step"]
                    fault["second"] = kill_domain(1)
                    fault["joined_before"] = any(e["event"] == "domain_joined" for e in events)
                    return
                time.sleep(0.005)

        status, output = run_watched(command, inject, 300)
        print(output[-3000:], flush=True)
        check(status == 0, f"hardy run exits 0 ({status})")
        check("second" in fault and not fault.get("joined_before"),
              f"both domains were killed, the second before the relaunched one joined: {fault}")
        events = read_jsonl(run / "events.jsonl")
        metrics = read_jsonl(run / "metrics.jsonl")
        check_completed(check, events, STEPS, "all lost")
        steps = sorted({m["step"] for m in metrics})
        check(steps == list(range(1, STEPS + 1)), f"every step committed: {steps[:3]}..{steps[-3:]}")
        complete, wrong = complete_epochs_exact(run, SAMPLES)
        check(complete and not wrong, f"every complete epoch exactly once ({len(complete)} complete, wrong: {wrong})")
        resumed = [e for e in events if e["event"] == "domains_resumed"]
        committed = fault.get("committed", 0)
        if snapshots_on:
            source = "node-local"
            fits = lambda step: committed - 2 <= step <= committed + 2  # noqa: E731
            what = f"a node-local snapshot within 2 steps of step {committed}"
        else:
            source = "checkpoint"
            fits = lambda step: step % CHECKPOINT_EVERY == 0 and step <= committed  # noqa: E731
            what = f"the newest checkpoint before step {committed}"
        check(resumed and all(e["source"] == source and fits(e["step"]) for e in resumed)
              and len({e["step"] for e in resumed}) == 1,
              f"the relaunched domains went on from {what}: {resumed}")
        restored = [e for e in events if e["event"] == "state_restored" and e.get("source") == source
                    and resumed and e["unix_time"] >= resumed[0]["unix_time"] - 5]
        check(len(restored) == 1 and restored[0]["step"] == resumed[0]["step"],
              f"one state_restored names it: {restored}")
        final = metrics[-1]["loss"]
        check(abs(final - expected) <= 0.02 * abs(expected),
              f"final loss {final:.5f} within 2% of one MPI job's {expected:.5f}")
        ends = [e for e in events if e["event"] in ("job_finished", "domain_finished") and e.get("status") == "completed"]
        digests = {e.get("domain"): e.get("parameter_digest") for e in ends}
        check(len(digests) == 2 and len(set(digests.values())) == 1,
              f"both domains end with the same parameters: {digests}")
    check.finish("domains_all_lost")


if __name__ == "__main__":
    main()
