#!/usr/bin/python3
"""hardy with its protections against PyTorch DistributedDataParallel without any, and what
each of hardy's protections costs per step (issue #27).

For each model configuration (bench/step's tiny and large) and rank count (1 and 2; threads per
rank = cores / ranks, so more ranks would oversubscribe this machine), in rotating order over
--rounds rounds, each in its own processes:
  ddp                 PyTorch DDP (gloo), bench/ddp/ddp_worker.py, one process per rank with
                      torchrun's environment: fixed random inputs, Adam, no protection
  hardy               `hardy train` under mpirun with every protection on: the step agreement,
                      the in-memory copy, node-local snapshots as often as they cost at most 1%
                      (--snapshot-every auto; the defaults) and an asynchronous checkpoint every
                      50 steps; the hang monitor
  hardy-every-step    the same with a node-local snapshot of every step (--snapshot-every 1)
  hardy-no-snapshot   the same with --snapshot-every 0
  hardy-no-checkpoint the same with --checkpoint-every 0
  hardy-no-memory     the same with --memory-snapshots false
  hardy-bare          all three off (the agreement stays: it is how a step commits)
  hardy-audited       every protection plus --audit-samples and --verify-replicas-every 10
  hardy-lagged        every protection plus --gradient-lag 1 (a step's allreduce overlaps the next
                      step's forward and backward; its update is one step late)
hardy's figure is the median `step_s` of metrics.jsonl past the warm-up (the whole step as its
user sees it: the samples from memory once the sample cache holds them (64 distinct samples,
generated on the loader thread the first time), batch assembly, the agreement and the logs
included); DDP's is the slowest rank's median step on a fixed batch.
A variant's result is the median of its per-round medians. ratio = ddp / hardy, so > 1 means
hardy is faster; a protection's price is (with - without) / hardy-bare.

    /usr/bin/python3 bench/ddp/ddp_bench.py [--configs tiny,large] [--ranks 1,2] [--rounds 3]

Writes bench/results/ddp-<date>.json.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "step"))
import benchlib  # noqa: E402
from bench_step import COMMON, CONFIGS  # noqa: E402

PROTECTED = {"checkpoint-every": 50}
VARIANTS = {
    "hardy": {},
    "hardy-every-step": {"snapshot-every": 1},
    "hardy-no-snapshot": {"snapshot-every": 0},
    "hardy-no-checkpoint": {"checkpoint-every": 0},
    "hardy-no-memory": {"memory-snapshots": "false"},
    "hardy-bare": {"snapshot-every": 0, "checkpoint-every": 0, "memory-snapshots": "false"},
    "hardy-audited": {"audit-samples": "true", "verify-replicas-every": 10},
    "hardy-lagged": {"gradient-lag": 1},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hardy_train_options(config, threads, steps, run_dir, extra):
    c = {**COMMON, **CONFIGS[config]}
    # 64 distinct samples (8 batches; DDP trains on one fixed batch), so that after its first
    # epochs hardy feeds from memory too (--sample-cache-mib) and the comparison is of the steps.
    options = {"synthetic": "true", "samples": 64, "eval-samples": 0, "global-batch": c["batch"],
               "height": c["height"], "width": c["width"], "model-width": c["model-width"],
               "model-depth": c["depth"], "aspp-channels": c["aspp-channels"], "aspp-rates": c["aspp-rates"],
               "decoder-channels": c["decoder-channels"], "low-level-channels": c["low-level-channels"],
               "norm": "group", "groups": c["groups"], "optimizer": "adam", "lr": 0.003,
               "weight-decay": 0.0001, "steps": steps, "threads": threads, "log-every": 100000,
               "run-dir": run_dir, "snapshot-dir": os.path.join(run_dir, "node-local")}
    return benchlib.option_list(options, PROTECTED, extra)


def run_hardy(hardy, mpirun, config, ranks, threads, warmup, steps, extra, tmp):
    run_dir = tempfile.mkdtemp(prefix="run-", dir=tmp)
    command = [mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "none", "--allow-run-as-root",
               hardy, "train"] + hardy_train_options(config, threads, warmup + steps, run_dir, extra)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"ddp_bench: {' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    metrics = benchlib.read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    shutil.rmtree(run_dir, ignore_errors=True)
    return statistics.median(m["step_s"] for m in metrics if m["step"] > warmup)


def run_ddp(config, ranks, threads, warmup, steps):
    """One process per rank with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT):
    Debian's torch 1.13 launcher fails under Python 3.11 (torch.distributed.elastic's
    start_processes), and what it would start is exactly this."""
    c = {**COMMON, **CONFIGS[config]}
    command = [sys.executable, os.path.join(HERE, "ddp_worker.py"), "--threads", str(threads),
               "--warmup", str(warmup), "--steps", str(steps)] + benchlib.option_list(c)
    port = str(free_port())
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, OMP_NUM_THREADS=str(threads), RANK=str(rank),
                                         LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                                         MASTER_PORT=port))
               for rank in range(ranks)]
    outputs = [worker.communicate() for worker in workers]
    for worker, (_, err) in zip(workers, outputs):
        if worker.returncode != 0:
            sys.exit(f"ddp_bench: {' '.join(command)} failed ({worker.returncode}):\n{err[-3000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])["median_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_round_arguments(parser, CONFIGS, "tiny,large", warmup=10)
    parser.set_defaults(steps=60)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--hardy", help="path of hardy (default build/bin/hardy)")
    parser.add_argument("--mpirun", default=os.path.join(benchlib.ROOT, ".venv", "bin", "mpirun"))
    parser.add_argument("--output", help="JSON file (default bench/results/ddp-<date>.json)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="hardy's variants to run besides ddp, hardy and hardy-bare (more rounds of fewer "
                             "variants in the same time)")
    args = parser.parse_args()
    hardy = benchlib.find_binary("hardy", args.hardy, "ddp_bench")
    configs = benchlib.chosen_configs(parser, args, CONFIGS)
    cores = os.cpu_count() or 1
    chosen = set(args.variants.split(",")) | {"hardy", "hardy-bare"}
    unknown = chosen - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    names = ["ddp"] + [name for name in VARIANTS if name in chosen]
    results = {"machine": dict(benchlib.machine_info(), load_average_start=os.getloadavg()),
               "warmup": args.warmup, "steps": args.steps, "rounds": args.rounds, "runs": []}
    table = []
    with tempfile.TemporaryDirectory(prefix="hardy-ddp-bench-") as tmp:
        for config in configs:
            for ranks in [int(r) for r in args.ranks.split(",")]:
                threads = max(1, cores // ranks)
                per_round = {name: [] for name in names}
                for round_index in range(args.rounds):
                    order = names[round_index % len(names):] + names[:round_index % len(names)]
                    for name in order:
                        if name == "ddp":
                            seconds = run_ddp(config, ranks, threads, args.warmup, args.steps)
                        else:
                            seconds = run_hardy(hardy, args.mpirun, config, ranks, threads, args.warmup,
                                                args.steps, VARIANTS[name], tmp)
                        per_round[name].append(seconds)
                        results["runs"].append({"config": config, "ranks": ranks, "threads": threads,
                                                "round": round_index, "variant": name, "median_s": seconds})
                        print(f"{config} {ranks}x{threads} round {round_index + 1} {name}: {1000 * seconds:.2f} ms",
                              flush=True)
                m = {name: statistics.median(values) for name, values in per_round.items()}
                bare = m["hardy-bare"]
                # A protection's price is what turning it off saves; only for the variants that ran.
                offs = {"snapshot": "hardy-no-snapshot", "checkpoint": "hardy-no-checkpoint",
                        "memory_copy": "hardy-no-memory"}
                price = {"all": (m["hardy"] - bare) / bare,
                         # Each round's own difference (run back to back), which the load's drift between
                         # rounds moves less than the ratio of the two medians.
                         "all_paired": statistics.median((h - b) / b for h, b in
                                                         zip(per_round["hardy"], per_round["hardy-bare"]))}
                price.update({key: (m["hardy"] - m[off]) / bare for key, off in offs.items() if off in m})
                if "hardy-audited" in m:
                    price["audit_and_replicas"] = (m["hardy-audited"] - m["hardy"]) / bare
                if "hardy-lagged" in m:  # negative: lagged steps are faster
                    price["lag"] = (m["hardy-lagged"] - m["hardy"]) / m["hardy"]
                    price["lag_paired"] = statistics.median(
                        (g - h) / h for g, h in zip(per_round["hardy-lagged"], per_round["hardy"]))
                row = {"config": config, "ranks": ranks, "threads": threads,
                       "ms": {name: 1000 * value for name, value in m.items()},
                       "samples_per_s": {name: CONFIGS[config]["batch"] / value for name, value in m.items()},
                       "ratio_ddp_over_hardy": m["ddp"] / m["hardy"],
                       "ratio_ddp_over_hardy_bare": m["ddp"] / bare,
                       "price": price}
                table.append(row)
    results["table"] = table
    results["machine"]["load_average_end"] = os.getloadavg()
    prices = ["all", "all_paired", "snapshot", "checkpoint", "memory_copy", "audit_and_replicas", "lag",
              "lag_paired"]
    print("\n| config | ranks x threads | DDP ms | hardy (protected) ms | hardy bare ms | DDP/hardy | DDP/bare | "
          + " | ".join(prices) + " |")
    print("|" + "---|" * (7 + len(prices)))
    for r in table:
        p = r["price"]
        print(f"| {r['config']} | {r['ranks']}x{r['threads']} | {r['ms']['ddp']:.2f} | {r['ms']['hardy']:.2f} | "
              f"{r['ms']['hardy-bare']:.2f} | {r['ratio_ddp_over_hardy']:.2f} | {r['ratio_ddp_over_hardy_bare']:.2f} | "
              + " | ".join(f"{100 * p[k]:+.1f}%" if k in p else "-" for k in prices) + " |")
    path = benchlib.write_results(results, args.output, f"ddp-{datetime.date.today().isoformat()}.json")
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
