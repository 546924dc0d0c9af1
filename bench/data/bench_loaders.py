#!/usr/bin/env python3
"""The DeepCAM loader and the packed-sample loader against a plain memcpy of the same bytes, per
core, at the published grid.

Writes a DeepCAM-layout dataset of full-size samples (16 x 768 x 1152 float32 fields and float32
labels, 60 MB each as stored; `hardy data generate --format deepcam`) into /dev/shm (node
memory: what a staged copy on a node's fastest storage gives), packs its training split (`hardy
data pack`: bf16 fields, int8 labels, 28 MB each), then runs `hardy_pipeline_bench --measure
load,copy,pipeline` on each: at each loader thread count, `copy` (T threads each memcpy'ing a
sample's stored bytes between buffers of their own: the floor) and `pipeline` (a
SamplePrefetcher with T loader threads: for DeepCAM pread, normalisation by stats.h5, layout
(H, W, C) to (C, H, W), labels to int32, every value checked; packed, a read in cache-sized
pieces as stored, every value checked, widened to fp32 by the consumer's take), side by side,
over --rounds rounds. With --before OLD_BENCH it runs
an older build of hardy_pipeline_bench the same way, alternating (DeepCAM only).

    python3 bench/data/bench_loaders.py [--bench build/bin/hardy_pipeline_bench]
        [--before OLD_BENCH] [--samples 16] [--threads 1,2] [--rounds 2] [--out FILE]

Prints, per build, source and thread count: samples/s per thread of the loaders and of memcpy,
and the loaders' share of memcpy; and the packed loaders' samples/s over DeepCAM's. Results go to
bench/results/loaders-cpu-<date>.json.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib  # noqa: E402

MODEL = ["--model-width", "16", "--aspp-channels", "32", "--decoder-channels", "32", "--low-level-channels", "16"]


def run(bench, source, data, samples, threads):
    command = [bench, "--source", source, "--data", data, "--measure", "load,copy,pipeline",
               "--loader-threads", threads, "--load-samples", str(samples), *MODEL]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench_loaders.py: {' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench")
    parser.add_argument("--before", help="an older hardy_pipeline_bench to run the same way")
    parser.add_argument("--hardy", help="hardy, to write the dataset (default build/bin/hardy)")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    bench = benchlib.find_binary("hardy_pipeline_bench", args.bench, "bench_loaders.py")
    hardy = benchlib.find_binary("hardy", args.hardy, "bench_loaders.py")
    builds = {"after": bench, **({"before": args.before} if args.before else {})}
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    scratch = tempfile.mkdtemp(prefix="hardy-bench-loaders-", dir=shm)
    try:
        data = os.path.join(scratch, "deepcam")
        subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", data, "--samples",
                        str(args.samples), "--validation-samples", "1", "--seed", "11"],
                       check=True, stdout=subprocess.DEVNULL)
        packed = os.path.join(scratch, "packed")
        subprocess.run([hardy, "data", "pack", "--dataset", data, "--out", packed, "--split", "train"],
                       check=True, stdout=subprocess.DEVNULL)
        # (build, source): the packed reader is measured with the current build only.
        runs = [(name, "deepcam") for name in builds] + [("after", "packed")]
        raw = {f"{name}/{source}": [] for name, source in runs}
        for round_ in range(args.rounds):
            for name, source in (runs if round_ % 2 == 0 else list(reversed(runs))):
                raw[f"{name}/{source}"].append(run(builds[name], source, data if source == "deepcam" else packed,
                                                   args.samples, args.threads))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    results = {"benchmark": "loaders", "machine": benchlib.machine_info(), "builds": builds,
               "samples": args.samples, "rounds": args.rounds, "load_average": os.getloadavg(),
               "summary": {}, "raw": raw}
    print(f"{'build/source':15} {'threads':>7} {'loaders/thread':>15} {'memcpy/thread':>14} {'share':>7}   (samples/s)")
    for name, rounds in raw.items():
        results["summary"][name] = {}
        for threads in (int(t) for t in args.threads.split(",")):
            loaders = [l["samples_per_s_per_thread"] for lines in rounds for l in lines
                       if l["measurement"] == "pipeline" and l["loader_threads"] == threads]
            copies = [l["samples_per_s_per_thread"] for lines in rounds for l in lines
                      if l["measurement"] == "copy" and l["threads"] == threads]
            loader, copy = statistics.median(loaders), statistics.median(copies)
            results["summary"][name][threads] = {"loaders_per_thread": loader, "memcpy_per_thread": copy,
                                                 "share": loader / copy}
            print(f"{name:15} {threads:>7} {loader:>15.1f} {copy:>14.1f} {100 * loader / copy:>6.0f}%")
    results["packed_over_deepcam"] = {
        threads: results["summary"]["after/packed"][threads]["loaders_per_thread"]
        / results["summary"]["after/deepcam"][threads]["loaders_per_thread"]
        for threads in results["summary"]["after/packed"]}
    print("packed loaders over DeepCAM's, samples/s: " +
          ", ".join(f"{ratio:.2f}x at {threads} thread(s)" for threads, ratio in results["packed_over_deepcam"].items()))
    path = benchlib.write_results(results, args.out, f"loaders-cpu-{datetime.date.today()}.json")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
