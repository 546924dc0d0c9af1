#!/usr/bin/python3
"""Times one CPU training step of hardy's networks against the baselines a user would pick today.

For every configuration and thread count it runs these variants, each in its own process, in
rotating order over several rounds, on the same batch, input size and model configuration:
  hardy-f32            build/bin/hardy_step_bench (forward, loss, backward, Adam; oneDNN)
  hardy-bf16           the same with --precision bf16
  torch-eager-f32-L    current PyTorch from PyPI (bench/step/torch_cpu_step.py), eager, float32
  torch-eager-bf16-L   the same under torch.autocast('cpu', dtype=torch.bfloat16)
  torch-compile-f32    torch.compile over forward and loss, float32, channels_last
  torch-compile-bf16   the same under bf16 autocast
  tf-f32, tf-bf16      CosmoFlow only: current TensorFlow (bench/step/tf_cosmoflow.py), float32 and
                       Keras's mixed_bfloat16 policy, NDHWC, no XLA
L is eager PyTorch's memory format, cl (channels_last; channels_last_3d for CosmoFlow) and nchw
(contiguous): which one helps depends on the network and precision, so both run (--torch-layouts
picks). Compiled variants take channels_last inputs and weights (inductor also chooses
convolution layouts itself).
torch1.13-cl and torch1.13 (Debian's PyTorch, bench/step/torch_deeplab.py under /usr/bin/python3,
the baseline before) run only when --variants names them.

OMP_NUM_THREADS and each framework's thread count get the thread count. Each run reports the
median of its timed steps (warm-up excluded; the first warm-up step of torch.compile compiles,
TensorFlow's traces); a variant's result is the best (lowest) of its per-round medians, the
least disturbed estimate on a shared machine. The baseline is the fastest baseline variant;
ratio = that baseline / the faster hardy variant, so > 1 means hardy is faster. A variant that
fails (hardy-bf16 on a hardy_step_bench without --precision, say) is reported as failed, with its
error, and not rerun in later rounds; the others go on.

The baselines run in the bench-only environment .venv-bench (bench/step/baselines_env.sh, which
this script runs first: it installs on first use, about 5.5 GB, and is a no-op afterwards).

Prints a table per configuration and a summary, and writes everything, raw runs included, with
the machine, library versions, load average and git commit, to bench/results/step-cpu-<date>.json
(step-cpu-<network>-<date>.json when all configurations are one network; never overwriting: -b,
-c, ... are appended). Run from anywhere:

    /usr/bin/python3 bench/step/bench_step.py          # CosmoFlow 32^3, Tiramisu, DeepCAM, CosmoFlow 128^3
    /usr/bin/python3 bench/step/bench_step.py --configs cosmoflow --rounds 1 --steps 3
    /usr/bin/python3 bench/step/bench_step.py --configs tiramisu --variants hardy,torch-eager
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from benchlib import ROOT, find_binary, option_list, write_results  # noqa: E402
import benchlib  # noqa: E402

# The model options both sides take, with ModelConfig's defaults filled in per config.
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
    # reference's local batch; dropout 0.5 on both sides, hardy's hash masks and the frameworks'
    # random ones. The SC18 run trained it on CPU nodes.
    "cosmoflow": {"model": "cosmoflow", "batch": 4, "volume": 32},
    "cosmoflow-64": {"model": "cosmoflow", "batch": 4, "volume": 64},
    "cosmoflow-128": {"model": "cosmoflow", "batch": 4, "volume": 128},  # as published
}
NETWORK_COMMON = {"input-channels": 16, "classes": 3}
ALL_CONFIGS = {**CONFIGS, **NETWORK_CONFIGS}
MODELS = ("compact", "tiramisu", "deepcam", "cosmoflow")
# Issue 67's cases: the default.
DEFAULT_CONFIGS = "cosmoflow,tiramisu,deepcam,cosmoflow-128"
# Rounds, warm-up and timed steps per configuration unless given on the command line: the
# published CosmoFlow takes seconds a step, so one short round.
RUN_LENGTH = {"cosmoflow-128": {"rounds": 1, "warmup": 1, "steps": 3},
              "deepcam": {"rounds": 3, "warmup": 2, "steps": 5},
              "tiramisu": {"rounds": 3, "warmup": 2, "steps": 10}}
DEFAULT_LENGTH = {"rounds": 3, "warmup": 3, "steps": 20}
LAYOUT_FLAGS = {"cl": "channels_last", "nchw": "contiguous"}
BASELINE_PREFIXES = ("torch-", "tf-")


def model_of(config):
    return ALL_CONFIGS[config].get("model", "compact")


def variant_commands(config, hardy_bench, bench_python, options, layouts):
    """Every variant's command for one configuration, in the default order."""
    model = model_of(config)
    compile_options = _with_compile_warmup(options)
    commands = {"hardy-f32": [hardy_bench] + options,
                "hardy-bf16": [hardy_bench] + options + ["--precision", "bf16"]}
    torch_step = [bench_python, os.path.join(HERE, "torch_cpu_step.py")]
    for precision in ("f32", "bf16"):
        for layout in layouts:
            commands[f"torch-eager-{precision}-{layout}"] = torch_step + options + [
                "--mode", "eager", "--precision", precision,
                "--memory-format", LAYOUT_FLAGS[layout]]
    for precision in ("f32", "bf16"):
        commands[f"torch-compile-{precision}"] = torch_step + compile_options + [
            "--mode", "compile", "--precision", precision, "--memory-format", "channels_last"]
    if model == "cosmoflow":
        for precision in ("f32", "bf16"):
            commands[f"tf-{precision}"] = [bench_python, os.path.join(HERE, "tf_cosmoflow.py")] + \
                compile_options + ["--precision", precision]
    debian = ["/usr/bin/python3", os.path.join(HERE, "torch_deeplab.py")] + options
    commands["torch1.13-cl"] = debian + ["--memory-format", "channels_last"]
    commands["torch1.13"] = debian + ["--memory-format", "contiguous"]
    return commands


def _with_compile_warmup(options):
    """The options with --warmup raised to 2: compiling and tracing happen in the first step
    (and a guard that fails on the second, a recompilation, in the second)."""
    options = list(options)
    index = options.index("--warmup") + 1
    options[index] = str(max(2, int(options[index])))
    return options


def chosen_variants(commands, selection):
    """The default variants (all but Debian's torch), or those --variants names or prefixes."""
    if not selection:
        return [v for v in commands if not v.startswith("torch1.13")]
    wanted = selection.split(",")
    return [v for v in commands
            if any(v == w or (v.startswith(w) and (w.startswith("torch1")
                                                   or not v.startswith("torch1")))
                   for w in wanted)]


def run_variant(command, env, timeout):
    """The JSON line a run printed, or {"failed": ...} with why (a variant's failure must not
    stop the others)."""
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"no result within {timeout} s"}
    except OSError as error:
        return {"failed": str(error)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-3:]
        return {"failed": f"exit {done.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def library_versions(bench_python):
    """torch (and its oneDNN), TensorFlow and Keras in the bench environment."""
    script = (
        "import json, os, re\n"
        "os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')\n"
        "import torch, tensorflow, keras, numpy\n"
        "m = re.search(r'MKL-DNN v([0-9.]+)', torch.__config__.show())\n"
        "print(json.dumps({'torch': torch.__version__, 'torch_onednn': m and m.group(1),\n"
        "  'torch_mkldnn_available': torch.backends.mkldnn.is_available(),\n"
        "  'tensorflow': tensorflow.__version__, 'keras': keras.__version__,\n"
        "  'numpy': numpy.__version__, 'python': __import__('platform').python_version()}))\n")
    done = subprocess.run([bench_python, "-c", script], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, check=False)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None


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
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, check=False)
    info["git_dirty_paths"] = len(dirty.stdout.splitlines())
    return info


def bench_environment(variants):
    """The bench environment's python, installed on first use, when a baseline needs it."""
    if not any(v.startswith(BASELINE_PREFIXES) for v in variants):
        return None
    script = os.path.join(HERE, "baselines_env.sh")
    if subprocess.run([script], check=False).returncode != 0:
        sys.exit(f"bench_step.py: {script} failed; the baselines need it")
    return subprocess.run([script, "--python"], stdout=subprocess.PIPE, text=True,
                          check=True).stdout.strip()


def summarize(name, threads, runs, length):
    """The row of one configuration: each variant's best per-round median, and hardy against
    the fastest baseline."""
    best, failed = {}, {}
    for variant, results in runs.items():
        good = [r for r in results if "failed" not in r]
        if good:
            best[variant] = min(r["median_s"] for r in good)
        else:
            failed[variant] = results[0]["failed"] if results else "not run"
    hardy = [v for v in best if v.startswith("hardy")]
    baselines = [v for v in best if v.startswith(BASELINE_PREFIXES + ("torch1.13",))]
    row = {"config": name, "model": model_of(name), "threads": threads,
           "options": ALL_CONFIGS[name], **length,
           "ms": {v: 1e3 * s for v, s in best.items()}, "failed": failed, "runs": runs}
    if hardy:
        fastest_hardy = min(hardy, key=best.get)
        hardy_run = min((r for r in runs[fastest_hardy] if "failed" not in r),
                        key=lambda r: r["median_s"])
        row.update(hardy_variant=fastest_hardy, hardy_ms=1e3 * best[fastest_hardy],
                   hardy_phases_ms={p: 1e3 * hardy_run[f"{p}_median_s"]
                                    for p in ("forward", "backward", "optimizer")
                                    if f"{p}_median_s" in hardy_run},
                   parameters=hardy_run.get("parameters"),
                   onednn_version_hardy=hardy_run.get("onednn_version"))
    if baselines:
        fastest = min(baselines, key=best.get)
        row.update(baseline=fastest, baseline_ms=1e3 * best[fastest])
    if hardy and baselines:
        row["ratio_baseline_over_hardy"] = best[row["baseline"]] / best[row["hardy_variant"]]
    return row


def print_row(row):
    print(f"\n{row['config']} ({', '.join(f'{k} {v}' for k, v in row['options'].items())}), "
          f"{row['threads']} threads: best per-round median over {row['rounds']} round(s) of "
          f"{row['steps']} steps (+{row['warmup']} warm-up; torch.compile and TensorFlow at least 2)")
    for variant in row["runs"]:
        if variant in row["ms"]:
            print(f"  {variant:<22} {row['ms'][variant]:>10.1f} ms")
        else:
            print(f"  {variant:<22} {'FAILED':>10}     {row['failed'][variant]}")
    if "ratio_baseline_over_hardy" in row:
        print(f"  hardy (best precision: {row['hardy_variant']}) {row['hardy_ms']:.1f} ms against "
              f"the fastest baseline {row['baseline']} {row['baseline_ms']:.1f} ms: "
              f"{row['ratio_baseline_over_hardy']:.2f}x (> 1: hardy faster)")


def print_summary(results):
    print("\n| config | threads | hardy f32 ms | hardy bf16 ms | fastest baseline | its ms | "
          "hardy against it |")
    print("|---|---|---|---|---|---|---|")
    for row in results:
        def ms(variant):
            if variant in row["ms"]:
                return f"{row['ms'][variant]:.1f}"
            return "failed" if variant in row["failed"] else "-"

        baseline = row.get("baseline", "-")
        baseline_ms = f"{row['baseline_ms']:.1f}" if "baseline_ms" in row else "-"
        ratio = row.get("ratio_baseline_over_hardy")
        print(f"| {row['config']} | {row['threads']} | {ms('hardy-f32')} | {ms('hardy-bf16')} | "
              f"{baseline} | {baseline_ms} | {f'{ratio:.2f}x' if ratio else '-'} |")


def output_path(explicit, configs, now):
    if explicit:
        return explicit
    networks = {model_of(c) for c in configs}
    prefix = f"step-cpu-{networks.pop()}-" if len(networks) == 1 and "compact" not in networks \
        else "step-cpu-"
    base = os.path.join(ROOT, "bench", "results", f"{prefix}{now.strftime('%Y-%m-%d')}")
    path, suffix = base + ".json", "b"
    while os.path.exists(path):
        path = f"{base}-{suffix}.json"
        suffix = chr(ord(suffix) + 1)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", help=f"comma-separated, from {', '.join(ALL_CONFIGS)} "
                                          f"(default: {DEFAULT_CONFIGS})")
    parser.add_argument("--model", choices=MODELS, help="every configuration of this network")
    parser.add_argument("--rounds", type=int, help="default: 3 (cosmoflow-128: 1)")
    parser.add_argument("--warmup", type=int, help="default: 3 (deepcam, tiramisu: 2; "
                                                   "cosmoflow-128: 1)")
    parser.add_argument("--steps", type=int, help="timed steps per run (default: 20; tiramisu "
                                                  "10, deepcam 5, cosmoflow-128 3)")
    parser.add_argument("--threads", default="2", help="comma-separated thread counts (default 2)")
    parser.add_argument("--variants", help="comma-separated variant names or prefixes (hardy, "
                                           "torch-eager, torch-compile-bf16, tf, torch1.13, ...;"
                                           " default: all but torch1.13)")
    parser.add_argument("--torch-layouts", default="cl,nchw",
                        help="eager PyTorch's memory formats, comma-separated (default cl,nchw)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    parser.add_argument("--hardy-bench", help="path of hardy_step_bench")
    parser.add_argument("--output", help="JSON file (default bench/results/step-cpu-<date>.json)")
    args = parser.parse_args()
    if args.configs is None:
        args.configs = ",".join(n for n in ALL_CONFIGS if model_of(n) == args.model) \
            if args.model else DEFAULT_CONFIGS
    configs = benchlib.chosen_configs(parser, args, ALL_CONFIGS)
    if args.model and any(model_of(name) != args.model for name in configs):
        parser.error(f"--configs {args.configs} are not all --model {args.model}")
    layouts = args.torch_layouts.split(",")
    if any(layout not in LAYOUT_FLAGS for layout in layouts):
        parser.error("--torch-layouts takes cl and nchw")
    thread_counts = [int(t) for t in args.threads.split(",")]

    # Every variant any configuration will run, to know what to set up.
    plans = {}
    for name in configs:
        commands = variant_commands(name, "hardy_step_bench", "python", ["--warmup", "1"],
                                    layouts)
        plans[name] = chosen_variants(commands, args.variants)
    everything = {v for variants in plans.values() for v in variants}
    if not everything:
        parser.error(f"--variants {args.variants} names no variant")
    hardy_bench = find_binary("hardy_step_bench", args.hardy_bench, "bench_step.py",
                              ("build", "build-bench"), "build it or pass --hardy-bench") \
        if any(v.startswith("hardy") for v in everything) else None
    bench_python = bench_environment(everything)

    info = machine_info()
    info["libraries"] = library_versions(bench_python) if bench_python else None
    results = []
    for name in configs:
        variants = plans[name]
        length = {key: getattr(args, key) if getattr(args, key) is not None
                  else RUN_LENGTH.get(name, DEFAULT_LENGTH)[key]
                  for key in ("rounds", "warmup", "steps")}
        for threads in thread_counts:
            common = COMMON if model_of(name) == "compact" else NETWORK_COMMON
            options = option_list(common, ALL_CONFIGS[name],
                                  {"threads": threads, "warmup": length["warmup"],
                                   "steps": length["steps"]})
            commands = variant_commands(name, hardy_bench, bench_python, options, layouts)
            runs = {variant: [] for variant in variants}
            env = dict(os.environ, OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
            load_start = os.getloadavg()
            for round_index in range(length["rounds"]):
                # Rotate the order so that no variant always runs first (or right after another).
                shift = round_index % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    if runs[variant] and "failed" in runs[variant][-1]:
                        continue  # it failed before: not again
                    result = run_variant(commands[variant], env, args.timeout)
                    runs[variant].append(result)
                    shown = result["failed"] if "failed" in result else \
                        f"{1e3 * result['median_s']:.1f} ms"
                    print(f"{name} threads={threads} round {round_index + 1}: {variant}: {shown}",
                          file=sys.stderr, flush=True)
            row = summarize(name, threads, runs, length)
            row["load_average"] = {"start": load_start, "end": os.getloadavg()}
            results.append(row)
            print_row(row)

    info["load_average_end"] = os.getloadavg()
    print("\nratio: the fastest baseline's ms / the faster hardy variant's ms (> 1: hardy faster)")
    print_summary(results)
    libraries = info["libraries"] or {}
    hardy_onednn = next((r.get("onednn_version_hardy") for r in results
                         if r.get("onednn_version_hardy")), None)
    print(f"\n{info.get('model_name', '?')}, {info['cpus_online']} cpus; torch "
          f"{libraries.get('torch')} (oneDNN {libraries.get('torch_onednn')}), tensorflow "
          f"{libraries.get('tensorflow')}, hardy oneDNN {hardy_onednn}; load average "
          f"{info['load_average_start'][0]:.1f} -> {info['load_average_end'][0]:.1f}")

    now = datetime.datetime.now()
    output = write_results({"date": now.isoformat(timespec="seconds"), "machine": info,
                            "hardy_bench": hardy_bench, "bench_python": bench_python,
                            "results": results},
                           output_path(args.output, configs, now), None)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
