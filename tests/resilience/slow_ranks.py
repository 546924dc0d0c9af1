#!/usr/bin/env python3
"""A slow rank is named, the batch shared out around it and back when it recovers (CTest labels
`fault`, `mpi`).

Usage: slow_ranks.py HARDY [--healthy-long] MPIRUN [MPIRUN FLAGS...]

With --healthy-long (nightly): only a healthy run of 10,000 steps with timing noise injected on
both ranks (each step's own work up to 30% longer at random, --inject-failure ...:noise=0.3),
which must take no action at all.

Two ranks of one thread each (one CPU each on the 2-core machines the tests run on: where ranks
share CPUs, hardy does not watch, and a third scenario checks that it says so). The small job of
the fault tests, 220 steps of 32 samples; from step 40 rank 1's own work takes 3x as long
(--inject-failure rank=1@step=40:slow=3), from step 140 it is back to full speed (slow=1):

  rebalance  (the default) rank_slow names rank 1 within 15 s of the slowdown, not at once
             (its 3 s of confirmation); shards_rebalanced (policy straggler)
             gives it fewer samples, the global batch unchanged; the step is then at most 0.75 x
             the slow, unbalanced one; rank_recovered and even shares again after step 1700.
             Every step committed once, every epoch's samples once (the audit). The same job
             without the slowdown takes no action at all (another run, up to three, if the machine
             itself slowed a rank), and hardy status names the slow rank while it is slow.
  detect     --straggler detect: rank_slow, and no share changes.
  lag        --gradient-lag 1: named and rebalanced as well, every step and sample once.
  shared     4 ranks on the 2 CPUs: "not watched", and no event, slowdown or not.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, complete_epochs_exact, median_step, read_jsonl, small_job  # noqa: E402

hardy = sys.argv[1]
healthy_long = "--healthy-long" in sys.argv[2:]
mpirun = [a for a in sys.argv[2:] if a != "--healthy-long"]
# At 2-6 ms a step the watch's least seconds (a 1 s window, 3 s to confirm) are hundreds of steps.
SAMPLES, STEPS, BATCH, SLOW_FROM, SLOW_UNTIL = 128, 3600, 32, 300, 1700
SLOW = ["--inject-failure", f"rank=1@step={SLOW_FROM}:slow=3", "--inject-failure", f"rank=1@step={SLOW_UNTIL}:slow=1"]
check = Checks()


def job(steps):
    """small_job's options without its node-local snapshot of every step (not what this tests)."""
    options = small_job(SAMPLES, steps, BATCH)
    at = options.index("--snapshot-every")
    return options[:at] + ["--snapshot-every", "0"] + options[at + 2:]


def train(run, *options, ranks=2):
    command = [*mpirun, "-n", str(ranks), hardy, "train", "--run-dir", str(run), "--threads", "1",
               *job(STEPS), *options]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
    check(result.returncode == 0, f"{run.name}: exits 0")
    events = read_jsonl(run / "events.jsonl")
    metrics = read_jsonl(run / "metrics.jsonl")
    check(sorted(m["step"] for m in metrics) == list(range(1, STEPS + 1)), f"{run.name}: every step committed once")
    complete, wrong = complete_epochs_exact(run, SAMPLES)
    check(complete and not wrong, f"{run.name}: {len(complete)} epochs, each sample once in each ({wrong})")
    return events, metrics, result.stdout


def of(events, kind, **fields):
    return [e for e in events if e["event"] == kind and all(e.get(k) == v for k, v in fields.items())]


if healthy_long:
    with tempfile.TemporaryDirectory(prefix="hardy-slow-ranks-long-") as tmp:
        STEPS = 10000
        noise = [x for r in (0, 1) for x in ("--inject-failure", f"rank={r}@step=1:noise=0.3")]
        events, metrics, _ = train(Path(tmp) / "healthy-long", *noise)
        watched = [m for m in metrics if "slowest_score" in m]
        check(len(watched) > 9000, f"healthy-long: the watch scored {len(watched)} of {STEPS} steps")
        check(not of(events, "rank_slow") and not of(events, "shards_rebalanced") and not of(events, "node_evicted"),
              f"healthy-long: 10,000 noisy steps, no rank_slow, no share change: {of(events, 'rank_slow')}")
        if watched:
            print(f"lowest score seen: {min(m['slowest_score'] for m in watched):.3f}")
    check.finish("slow ranks: a long healthy run")

with tempfile.TemporaryDirectory(prefix="hardy-slow-ranks-") as tmp:
    tmp = Path(tmp)

    # rebalance (the default)
    events, metrics, stdout = train(tmp / "rebalance", *SLOW)
    # Up to rank 1's recovery: later namings are the machine's own noise (see detect below).
    back = of(events, "rank_recovered", rank=1)
    slow = [e for e in of(events, "rank_slow") if not back or e["step"] <= back[0]["step"]]
    check(len(slow) == 1 and slow[0]["rank"] == 1 and slow[0]["host"],
          f"rebalance: one rank_slow until it recovers, naming rank 1 and its host: {slow}")
    if slow:
        slowed_at = next(m["unix_time"] for m in metrics if m["step"] == SLOW_FROM)
        named_at = slow[0]["unix_time"]
        # 3 s of flagged steps at the measured pace (a median of a few steps' durations, so
        # about 3 s), after the window turned: not at once, and within 15 s.
        check(2 <= named_at - slowed_at <= 15, f"rebalance: named {named_at - slowed_at:.1f} s "
              f"({slow[0]['step'] - SLOW_FROM} steps) after it slowed (2 to 15 s)")
        check(0.2 < slow[0]["score"] < 0.5, f"rebalance: its score {slow[0]['score']:.2f} (a third of its peers' speed)")
        check(f"rank 1 on {slow[0]['host']} is slow" in stdout, "rebalance: the lead says so")
    moved = of(events, "shards_rebalanced", policy="straggler")
    check(moved and moved[0]["reason"] == "straggler" and moved[0]["per_rank_batch"][1] < BATCH // 2,
          f"rebalance: the slow rank's share cut: {[(e['reason'], e['per_rank_batch']) for e in moved]}")
    check(all(sum(e["per_rank_batch"]) == BATCH and e["global_batch"] == BATCH for e in moved)
          and all(m["global_batch"] == BATCH for m in metrics), "rebalance: the global batch stays 32")
    if slow and moved:
        unbalanced = median_step(metrics, SLOW_FROM + 10, slow[0]["step"])
        # From the last share change while it was slow (a later one follows its recovery).
        last_while_slow = max((e["step"] for e in moved if e["step"] < SLOW_UNTIL - 50), default=SLOW_UNTIL - 50)
        balanced = median_step(metrics, last_while_slow + 5, SLOW_UNTIL - 1)
        healthy = median_step(metrics, 100, SLOW_FROM - 1)
        check(balanced <= 0.75 * unbalanced,
              f"rebalance: step {1e3 * healthy:.2f} ms healthy, {1e3 * unbalanced:.2f} ms slow, "
              f"{1e3 * balanced:.2f} ms rebalanced (at most 0.75 x slow)")
    # With a share of 5 or 6 samples its time per sample carries most of each step's fixed costs:
    # it may first be re-planned toward even (replanned) before it is seen back at speed.
    check(back and SLOW_UNTIL < back[0]["step"] <= STEPS,
          f"rebalance: rank_recovered after step {SLOW_UNTIL}: {[e['step'] for e in back]}")
    evened = [e for e in moved if back and e["step"] == back[0]["step"]]
    check(evened and evened[0]["reason"] == "recovered" and evened[0]["per_rank_batch"] == [BATCH // 2] * 2,
          f"rebalance: even shares again when it recovers: {evened or moved[-1:]}")
    scored = [m for m in metrics if "rank_scores" in m]
    check(scored and all(len(m["rank_scores"]) == 2 for m in scored) and "slowest_score" in metrics[-1],
          f"rebalance: metrics carry the scores ({len(scored)} lines with every rank's)")

    # The same job without a slowdown: nothing is done. On a shared 2-core VM another process can
    # hold one rank's CPU for seconds (CI saw rank 0 at 0.67 of its peer's speed for 4 s, 800
    # steps): a real slowdown, which the watch is right to name. Such a run is run again, up to
    # three runs in all; the watch acting in every one fails the test. Two were not enough: a
    # clean-clone run on 2026-12-01 named rank 1, then rank 0, each at 0.80 of its peer's speed.
    for attempt in ("healthy", "healthy-again", "healthy-third"):
        events, metrics, _ = train(tmp / attempt)
        acted = of(events, "rank_slow") + of(events, "shards_rebalanced")
        if not acted:
            break
        print(f"{attempt}: the watch acted on an uninjected run (the machine's own noise?): {acted}")
    check(not acted, f"healthy: no rank_slow, no share change (in one of three runs): {acted}")

    # hardy status while a rank is slow: a run that ends inside the slowdown.
    status_run = tmp / "status"
    done = subprocess.run([*mpirun, "-n", "2", hardy, "train", "--run-dir", str(status_run), "--threads", "1",
                           *job(1500), *SLOW[:2]],
                          capture_output=True, text=True, timeout=600)
    check(done.returncode == 0, "status: a 1500-step run ending while rank 1 is slow exits 0")
    shown = subprocess.run([hardy, "status", str(status_run)], capture_output=True, text=True)
    check("slow rank      1 on" in shown.stdout and "shares" in shown.stdout,
          f"status: hardy status names the slow rank and the shares:\n{shown.stdout}")
    as_json = json.loads(subprocess.run([hardy, "status", str(status_run), "--json"], capture_output=True,
                                        text=True).stdout)
    check([r["rank"] for r in as_json["slow_ranks"]] == [1] and as_json["straggler_shares"][1] < BATCH // 2,
          f"status: --json has slow_ranks and straggler_shares: {as_json['slow_ranks']}, {as_json['straggler_shares']}")

    # detect
    # What it names after the recovery is the healthy scenario's matter: here, with nothing
    # rebalanced, the machine's own noise (a rank at 0.75-0.8 of its peer's speed for seconds, seen
    # in 2 of 10 runs here) may have a rank named again.
    events, _, _ = train(tmp / "detect", *SLOW, "--straggler", "detect")
    slow = of(events, "rank_slow")
    check(slow and slow[0]["rank"] == 1 and SLOW_FROM <= slow[0]["step"] < SLOW_UNTIL
          and not of(events, "shards_rebalanced"),
          f"detect: rank 1 named while slow, no share changed: "
          f"{[(e['event'], e.get('step')) for e in events if 'rank' in e.get('event', '')]}")

    # --gradient-lag 1
    events, _, _ = train(tmp / "lag", *SLOW, "--gradient-lag", "1")
    check(of(events, "rank_slow", rank=1) and of(events, "shards_rebalanced", policy="straggler", reason="straggler"),
          "lag: named and rebalanced with --gradient-lag 1")

    # Four ranks on two CPUs: the watch stays off, and says so.
    events, _, stdout = train(tmp / "shared", *SLOW, ranks=4)
    check("slow ranks are not watched in this job" in stdout, "shared: the lead says slow ranks are not watched")
    check(not of(events, "rank_slow") and not of(events, "shards_rebalanced"), "shared: no rank_slow, no share change")

check.finish("slow ranks")
