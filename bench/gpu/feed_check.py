#!/usr/bin/env python3
"""Does `hardy train` feed the GPU? The same model trained from three inputs, beside the same
model's compute-only step, in one run on one machine (#46's check).

Writes a DeepCAM-layout dataset at the chosen size to --scratch (node-local memory: /dev/shm),
packs its training split (`hardy data pack`: bf16 fields, int8 labels), then runs `hardy train`
for --steps steps on each input (`--synthetic`, the DeepCAM files, the packed files) with the
sample cache off, so that every step reads its samples as a real data set larger than memory
would, and no snapshots, so that the step is the feed and the kernels alone. The medians after
--skip steps of metrics.jsonl's step_s, compute_s, data_wait_s, input_copy_s, input_device_s (the
batch's host-to-device copy on the GPU, from events) and compute_device_s (the GPU's span of the
step's forward and backward, from events) are printed beside the
compute-only step of `hardy_gpu_bench` (the batch already on the device), with the ratio of
samples/s that #46 asks to be at least 0.8.

    python3 bench/gpu/feed_check.py --bin build-cuda/gpu-kit/bin --json $OUT/gpu-feed.json
    python3 bench/gpu/feed_check.py --backend cpu --config small   # the script itself, no GPU
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib  # noqa: E402

# The climate configuration of bench_gpu.py (CAM5's 768 x 1152 grid, 16 variables), and a small
# one for checking the script on a machine without a GPU.
CONFIGS = {
    "climate": {"global-batch": 8, "height": 768, "width": 1152, "model-width": 64,
                "aspp-channels": 128, "decoder-channels": 128, "low-level-channels": 48},
    "small": {"global-batch": 4, "height": 64, "width": 96, "model-width": 16,
              "aspp-channels": 32, "decoder-channels": 32, "low-level-channels": 16},
}
MODEL = {"model-depth": 1, "aspp-rates": "2,4,6", "norm": "group", "groups": 8,
         "optimizer": "adam", "lr": 0.001}
METRICS = ["step_s", "compute_s", "data_wait_s", "input_copy_s", "input_device_s", "compute_device_s"]


def run(command, log, env=None):
    log.append(" ".join(command))
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=False, env=env)
    print(f"  ({time.monotonic() - started:.0f} s: {' '.join(command[:3])})", file=sys.stderr,
          flush=True)
    if done.returncode != 0:
        sys.exit(f"feed_check.py: {' '.join(command)} failed ({done.returncode}):\n"
                 f"{done.stderr[-3000:]}")
    return done.stdout


def medians(metrics_path, skip):
    lines = [line for line in benchlib.read_jsonl(metrics_path) if "step_s" in line][skip:]
    if not lines:
        sys.exit(f"feed_check.py: {metrics_path} has no step after the first {skip}")
    result = {"steps": len(lines)}
    for key in METRICS + ["samples_per_s"]:
        values = [line[key] for line in lines if key in line]
        if values:
            result[key] = statistics.median(values)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                      formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", help="folder of hardy and hardy_gpu_bench (default build/bin)")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--config", default="climate", choices=list(CONFIGS))
    parser.add_argument("--inputs", default="synthetic,deepcam,packed")
    parser.add_argument("--samples", type=int, default=48, help="training samples written")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=10, help="steps left out of the medians")
    parser.add_argument("--before", help="an older hardy, run on the same inputs first")
    parser.add_argument("--loader-threads", default="auto",
                        help="comma-separated: each input runs with each (the newer build only)")
    parser.add_argument("--scratch", default="/dev/shm/hardy-feed-check")
    parser.add_argument("--json", help="results file (default bench/results/feed-<config>.json)")
    args = parser.parse_args()
    bin_dir = args.bin or os.path.join(benchlib.ROOT, "build", "bin")
    hardy = os.path.join(bin_dir, "hardy")
    if not os.access(hardy, os.X_OK):
        sys.exit(f"feed_check.py: no hardy in {bin_dir}")
    inputs = args.inputs.split(",")
    unknown = set(inputs) - {"synthetic", "deepcam", "packed"}
    if unknown:
        parser.error(f"unknown input(s) {sorted(unknown)}; choose synthetic, deepcam, packed")
    config = CONFIGS[args.config]
    log = []
    report = {"machine": benchlib.machine_info(), "config": args.config, "options": config,
              "backend": args.backend, "steps": args.steps, "skip": args.skip, "commands": log,
              "runs": {}}

    shutil.rmtree(args.scratch, ignore_errors=True)
    os.makedirs(args.scratch)
    deepcam = os.path.join(args.scratch, "deepcam")
    packed = os.path.join(args.scratch, "packed")
    if "deepcam" in inputs or "packed" in inputs:
        run([hardy, "data", "generate", "--format", "deepcam", "--out", deepcam, "--samples",
             str(args.samples), "--validation-samples", "4", "--height", str(config["height"]),
             "--width", str(config["width"]), "--seed", "5"], log)
    if "packed" in inputs:
        run([hardy, "data", "pack", "--dataset", deepcam, "--out", packed, "--split", "train",
             "--threads", str(min(16, os.cpu_count() or 1))], log)

    run_options = {"backend": args.backend, "steps": args.steps, "eval-samples": 0,
                   "sample-cache-mib": 0, "snapshot-every": 0, "log-every": 10}
    common = benchlib.option_list(MODEL, config, run_options)
    # A dataset's files set the sample size (a packed set refuses a window of its own).
    from_files = benchlib.option_list(
        MODEL, {k: v for k, v in config.items() if k not in ("height", "width")}, run_options)
    loader_threads = args.loader_threads.split(",")
    print(f"{'input':<16} {'step ms':>8} {'compute':>8} {'wait':>8} {'copy':>8} {'to dev':>8} "
          f"{'gpu':>8} {'samples/s':>10}")
    # The older build first on each input, so that both meet the same page cache.
    builds = ([("before", args.before, loader_threads[0])] if args.before else []) + [
        ("after", hardy, threads) for threads in loader_threads]
    for name, (build, binary, threads) in [(n, b) for n in inputs for b in builds]:
        label = name if build == "after" else f"{name}/before"
        if len(loader_threads) > 1 and build == "after":
            label += f"/{threads}"
        run_dir = os.path.join(args.scratch, f"run-{label.replace('/', '-')}")
        source = (["--synthetic", "--samples", str(args.samples)] if name == "synthetic"
                  else ["--dataset", deepcam if name == "deepcam" else packed])
        run([binary, "train", *(common if name == "synthetic" else from_files), *source,
             "--loader-threads", threads, "--run-dir", run_dir], log)
        result = medians(os.path.join(run_dir, "metrics.jsonl"), args.skip)
        report["runs"][label] = result
        ms = {key: 1e3 * result.get(key, float("nan")) for key in METRICS}
        print(f"{label:<16} {ms['step_s']:8.2f} {ms['compute_s']:8.2f} {ms['data_wait_s']:8.2f} "
              f"{ms['input_copy_s']:8.2f} {ms['input_device_s']:8.2f} {ms['compute_device_s']:8.2f} "
              f"{result['samples_per_s']:10.1f}", flush=True)
        benchlib.write_results(report, args.json, f"feed-{args.config}.json")

    bench = os.path.join(bin_dir, "hardy_gpu_bench")
    if args.backend == "cuda" and os.access(bench, os.X_OK):
        options = benchlib.option_list(
            {"depth": 1, "aspp-rates": "2,4,6", "groups": 8, "input-channels": 16, "classes": 3,
             "batch": config["global-batch"], "height": config["height"], "width": config["width"],
             "model-width": config["model-width"], "aspp-channels": config["aspp-channels"],
             "decoder-channels": config["decoder-channels"],
             "low-level-channels": config["low-level-channels"], "precision": "bf16",
             "warmup": 5, "steps": 20})
        compute = json.loads(run([bench, *options], log).strip().splitlines()[-1])
        samples_per_s = config["global-batch"] / compute["median_s"]
        report["compute_only"] = {"median_s": compute["median_s"], "samples_per_s": samples_per_s}
        print(f"{'compute only':<16} {1e3 * compute['median_s']:8.2f} {'':>8} {'':>8} {'':>8} {'':>8} "
              f"{'':>8} {samples_per_s:10.1f}")
        for name, result in report["runs"].items():
            result["share_of_compute_only"] = result["samples_per_s"] / samples_per_s
        print("samples/s against the compute-only step: " + ", ".join(
            f"{name} {result['share_of_compute_only']:.2f}x"
            for name, result in report["runs"].items()))
    path = benchlib.write_results(report, args.json, f"feed-{args.config}.json")
    print(f"results: {path}")
    shutil.rmtree(args.scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
