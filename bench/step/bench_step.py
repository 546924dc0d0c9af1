#!/usr/bin/python3
"""Times one CPU training step of one of hardy's networks against the same model in PyTorch.

For every model configuration and thread count it runs, in rotating order over several rounds,
  hardy    build/bin/hardy_step_bench (forward, loss, backward, Adam; NHWC, oneDNN)
  torch-cl bench/step/torch_deeplab.py with channels_last tensors
  torch    bench/step/torch_deeplab.py with default contiguous (NCHW) tensors
each in its own process with OMP_NUM_THREADS (and torch.set_num_threads) set to the thread
count, on the same batch, image size and model configuration. Each run reports the median of
its timed steps (warm-up excluded); a variant's result is the best (lowest) of its per-round
medians, which on a shared machine is the least disturbed estimate. The faster torch variant
is the baseline; ratio = torch / hardy, so > 1 means hardy is faster.

A configuration names its network (hardy's --model: compact, tiramisu or deepcam), which both
sides get; --model picks every configuration of one network (tiny and large are the compact
DeepLabv3+, tiramisu and deepcam the others at their published sizes on 64x64 inputs).

Prints a table and writes everything, raw runs included, to
bench/results/step-cpu-<date>.json (step-cpu-<network>-<date>.json for the other networks). Run
from anywhere:

    /usr/bin/python3 bench/step/bench_step.py
    /usr/bin/python3 bench/step/bench_step.py --model deepcam --threads 2 --steps 5
"""
import argparse
import datetime
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from benchlib import ROOT, find_binary, option_list, run_json, write_results  # noqa: E402
import benchlib  # noqa: E402

# The model options both benchmarks take, with ModelConfig's defaults filled in per config.
# CONFIGS and COMMON are the compact DeepLabv3+'s (ddp/ddp_bench.py and compare_step_builds.py
# use them too, the latter also with binaries older than --model, so they pass no --model).
CONFIGS = {
    "tiny": {"batch": 8, "height": 64, "width": 64, "model-width": 16, "aspp-channels": 32,
             "decoder-channels": 32, "low-level-channels": 16},
    "large": {"batch": 8, "height": 128, "width": 128, "model-width": 32, "aspp-channels": 64,
              "decoder-channels": 64, "low-level-channels": 16},
}
COMMON = {"depth": 1, "aspp-rates": "2,4,6", "groups": 8, "input-channels": 16, "classes": 3}
# The other networks, whose configurations name them (--model).
NETWORK_CONFIGS = {
    # The Gordon Bell run's Tiramisu (7,504,835 parameters; dropout 0.2 on both sides, with
    # hardy's hash masks and torch's random ones).
    "tiramisu": {"model": "tiramisu", "batch": 2, "height": 64, "width": 64,
                 "dense-layers": "2,2,2,4,5", "growth": 32, "first-channels": 64,
                 "dense-kernel": 5, "dropout": 0.2},
    # MLPerf HPC DeepCAM as published (56,454,720 parameters).
    "deepcam": {"model": "deepcam", "batch": 2, "height": 64, "width": 64},
    # MLPerf HPC CosmoFlow (8,907,556 parameters at 128^3; 4,778,788 at 32^3), batch 4 as its
    # reference's local batch; dropout 0.5 on both sides, hardy's hash masks and torch's random
    # ones. The SC18 run trained it on CPU nodes.
    "cosmoflow": {"model": "cosmoflow", "batch": 4, "volume": 32},
    "cosmoflow-64": {"model": "cosmoflow", "batch": 4, "volume": 64},
    "cosmoflow-128": {"model": "cosmoflow", "batch": 4, "volume": 128},  # as published
}
NETWORK_COMMON = {"input-channels": 16, "classes": 3}
ALL_CONFIGS = {**CONFIGS, **NETWORK_CONFIGS}
MODELS = ("compact", "tiramisu", "deepcam", "cosmoflow")


def model_of(config):
    return ALL_CONFIGS[config].get("model", "compact")


def variant_commands(hardy_bench, args):
    torch_script = [sys.executable, os.path.join(HERE, "torch_deeplab.py")]
    return {
        "hardy": [hardy_bench] + args,
        "torch-cl": torch_script + args + ["--memory-format", "channels_last"],
        "torch": torch_script + args + ["--memory-format", "contiguous"],
    }


def machine_info():
    info = dict(benchlib.machine_info(), load_average_start=os.getloadavg())
    try:
        lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
        for key in ("Model name", "Core(s) per socket", "Socket(s)", "Thread(s) per core",
                    "Flags"):
            if key in fields:
                value = fields[key].strip()
                if key == "Flags":  # only what decides oneDNN's kernels
                    value = " ".join(f for f in value.split() if f.startswith(("avx", "amx")))
                info[key.lower().replace("(s)", "s").replace(" ", "_")] = value
    except (OSError, subprocess.CalledProcessError):
        pass
    import torch  # noqa: E402 (only for the version; the timed runs are separate processes)
    info["torch_version"] = torch.__version__
    config = torch.__config__.show()
    info["torch_onednn"] = next((line.split("MKL-DNN")[-1].strip(" -()")
                                 for line in config.splitlines() if "MKL-DNN" in line), None)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, check=False)
    info["git_dirty_paths"] = len(dirty.stdout.splitlines())
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_round_arguments(parser, ALL_CONFIGS, None, warmup=3)
    parser.add_argument("--model", choices=MODELS,
                        help="every configuration of this network (default: --configs, or "
                             "tiny,large)")
    parser.add_argument("--threads", default=str(os.cpu_count()),
                        help="comma-separated thread counts (default: all cores)")
    parser.add_argument("--hardy-bench", help="path of hardy_step_bench")
    parser.add_argument("--output", help="JSON file (default bench/results/step-cpu-<date>.json)")
    args = parser.parse_args()
    if args.configs is None:
        args.configs = ",".join(name for name in ALL_CONFIGS if model_of(name) == args.model) \
            if args.model else "tiny,large"
    configs = benchlib.chosen_configs(parser, args, ALL_CONFIGS)
    if args.model and any(model_of(name) != args.model for name in configs):
        parser.error(f"--configs {args.configs} are not all --model {args.model}")
    thread_counts = [int(t) for t in args.threads.split(",")]
    hardy_bench = find_binary("hardy_step_bench", args.hardy_bench, "bench_step.py",
                              ("build", "build-bench"), "build it or pass --hardy-bench")

    info = machine_info()
    results = []
    for name in configs:
        for threads in thread_counts:
            common = COMMON if model_of(name) == "compact" else NETWORK_COMMON
            commands = variant_commands(
                hardy_bench, option_list(common, ALL_CONFIGS[name],
                                         {"threads": threads, "warmup": args.warmup,
                                          "steps": args.steps}))
            runs = {variant: [] for variant in commands}
            order = list(commands)
            for round_index in range(args.rounds):
                # Rotate the order so that no variant always runs first (or right after another).
                shift = round_index % len(order)
                for variant in order[shift:] + order[:shift]:
                    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
                    runs[variant].append(run_json(commands[variant], "bench_step.py", env))
            best = {v: min(r["median_s"] for r in rs) for v, rs in runs.items()}
            best_cpu = {v: min(r["cpu_median_s"] for r in rs) for v, rs in runs.items()}
            hardy_best = min(runs["hardy"], key=lambda r: r["median_s"])
            torch_variant = min(("torch-cl", "torch"), key=lambda v: best[v])
            row = {
                "config": name, "model": model_of(name), "threads": threads,
                "options": ALL_CONFIGS[name],
                "hardy_ms": 1e3 * best["hardy"],
                "torch_channels_last_ms": 1e3 * best["torch-cl"],
                "torch_contiguous_ms": 1e3 * best["torch"],
                "torch_baseline": torch_variant,
                "ratio_torch_over_hardy": best[torch_variant] / best["hardy"],
                # The same from CPU time (all threads): steadier than wall time on a busy
                # machine for one thread; with several it also counts OpenMP spin-waiting.
                "hardy_cpu_ms": 1e3 * best_cpu["hardy"],
                "torch_cpu_ms": 1e3 * best_cpu[torch_variant],
                "cpu_ratio_torch_over_hardy": best_cpu[torch_variant] / best_cpu["hardy"],
                "hardy_phases_ms": {phase: 1e3 * hardy_best[f"{phase}_median_s"]
                                    for phase in ("forward", "backward", "optimizer")},
                "parameters": hardy_best["parameters"],
                "onednn_version_hardy": hardy_best["onednn_version"],
                "runs": runs,
            }
            results.append(row)
            print(f"{name} threads={threads}: hardy {row['hardy_ms']:.2f} ms, "
                  f"torch {1e3 * best[torch_variant]:.2f} ms ({torch_variant})", file=sys.stderr)

    info["load_average_end"] = os.getloadavg()
    header = (f"{'config':<8} {'thr':>3} {'hardy ms':>9} {'torch-cl ms':>11} {'torch ms':>9} "
              f"{'ratio':>6} {'cpu ratio':>9}  hardy fwd/bwd/opt ms")
    print(f"best per-round median ms/step over {args.rounds} rounds of {args.steps} steps; "
          "ratio = faster torch / hardy (> 1: hardy faster); cpu ratio: the same in CPU time")
    print(header)
    for row in results:
        phases = row["hardy_phases_ms"]
        print(f"{row['config']:<8} {row['threads']:>3} {row['hardy_ms']:>9.2f} "
              f"{row['torch_channels_last_ms']:>11.2f} {row['torch_contiguous_ms']:>9.2f} "
              f"{row['ratio_torch_over_hardy']:>6.2f} {row['cpu_ratio_torch_over_hardy']:>9.2f}  "
              f"{phases['forward']:.1f}/"
              f"{phases['backward']:.1f}/{phases['optimizer']:.1f}")
    print(f"{info.get('model_name', '?')}, {info['cpus_online']} cpus, torch "
          f"{info['torch_version']} (oneDNN {info['torch_onednn']}), hardy oneDNN "
          f"{results[0]['onednn_version_hardy']}, load average {info['load_average_start'][0]:.1f}"
          f" -> {info['load_average_end'][0]:.1f}")

    now = datetime.datetime.now()
    networks = "".join(f"{m}-" for m in MODELS[1:] if any(model_of(c) == m for c in configs))
    output = write_results({"date": now.isoformat(timespec="seconds"), "machine": info,
                            "rounds": args.rounds, "warmup": args.warmup, "steps": args.steps,
                            "hardy_bench": hardy_bench, "results": results},
                           args.output, f"step-cpu-{networks}{now.strftime('%Y-%m-%d')}.json")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
