#!/usr/bin/python3
"""Staging throughput: hardy's copier (`hardy data stage`, the same code --stage-to runs on each
node) against a plain parallel `cp` of the same files (xargs -P, --preserve=timestamps), rotated
over rounds, each from a cold page cache when the kernel lets us drop it (root), else warm (said
in the results). Also times a second `hardy data stage` over an unchanged copy (nothing to copy:
one stat per file on each side).

    /usr/bin/python3 bench/data/bench_staging.py [--files 24] [--height 768 --width 1152]
        [--threads 1,4] [--rounds 3] [--work DIR] [--out FILE]

The data set is generated once in --work (DeepCAM layout, `hardy data generate --format
deepcam`) and kept for later runs. Results go to bench/results/staging-<date>.json.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib  # noqa: E402


def drop_caches():
    """True when the page cache was dropped (the next reads come from the disk)."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
        return True
    except OSError:
        return False


def timed(command, **kwargs):
    """(wall seconds of the whole command, its standard output)."""
    start = time.perf_counter()
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, **kwargs)
    return time.perf_counter() - start, done.stdout


def copy_seconds(output):
    """The copy phase as `hardy data stage` reports it ("copied N file(s) (X GB) in S s, ...")."""
    match = re.search(r"copied \d+ file\(s\) \([0-9.]+ GB\) in ([0-9.]+) s", output)
    return float(match.group(1)) if match else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardy", help="hardy binary (default: build/bin/hardy)")
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--height", type=int, default=768)
    parser.add_argument("--width", type=int, default=1152)
    parser.add_argument("--threads", default="1,4", help="copy streams, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/var/tmp/hardy-staging-bench")
    parser.add_argument("--out")
    args = parser.parse_args()
    hardy = benchlib.find_binary("hardy", args.hardy, __file__)
    data = os.path.join(args.work, f"deepcam-{args.files}-{args.height}x{args.width}")
    if not os.path.exists(os.path.join(data, "stats.h5")):
        shutil.rmtree(data, ignore_errors=True)
        print(f"generating {args.files} files of {args.height}x{args.width} in {data} ...", flush=True)
        subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", data,
                        "--samples", str(args.files), "--validation-samples", "1",
                        "--height", str(args.height), "--width", str(args.width)], check=True)
    train = os.path.join(data, "train")
    names = sorted(n for n in os.listdir(train) if n.endswith(".h5"))
    total_bytes = sum(os.path.getsize(os.path.join(train, n)) for n in names)
    runs = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for round_index in range(args.rounds):
            order = ["hardy", "cp"] if round_index % 2 == 0 else ["cp", "hardy"]
            for variant in order:
                target = os.path.join(args.work, f"stage-{variant}")
                shutil.rmtree(target, ignore_errors=True)
                os.makedirs(os.path.join(target, "train"))
                cold = drop_caches()
                phase = None
                if variant == "hardy":
                    seconds, output = timed([hardy, "data", "stage", "--dataset", data, "--to", target,
                                             "--split", "train", "--threads", str(threads)])
                    phase = copy_seconds(output)
                else:
                    seconds, _ = timed(f"ls {train} | xargs -P {threads} -I{{}} cp --preserve=timestamps "
                                       f"{train}/{{}} {target}/train/", shell=True)
                runs.append({"variant": variant, "threads": threads, "round": round_index,
                             "cold_cache": cold, "seconds": seconds, "gb_per_s": total_bytes / seconds / 1e9,
                             "copy_phase_s": phase})
                print(f"  {variant:5} {threads} stream(s), round {round_index}: {seconds:6.2f} s "
                      f"{total_bytes / seconds / 1e9:6.2f} GB/s ({'cold' if cold else 'warm'} cache)", flush=True)
            # Everything current: what a relaunch pays to find nothing to do.
            target = os.path.join(args.work, "stage-hardy")
            recheck, _ = timed([hardy, "data", "stage", "--dataset", data, "--to", target,
                                "--split", "train", "--threads", str(threads)])
            runs.append({"variant": "hardy-unchanged", "threads": threads, "round": round_index,
                         "seconds": recheck})
    table = []
    for threads in sorted({r["threads"] for r in runs}):
        row = {"threads": threads}
        for variant in ("hardy", "cp", "hardy-unchanged"):
            times = [r["seconds"] for r in runs if r["variant"] == variant and r["threads"] == threads]
            row[f"{variant}_median_s"] = statistics.median(times)
        row["hardy_copy_phase_median_s"] = statistics.median(
            r["copy_phase_s"] for r in runs if r["variant"] == "hardy" and r["threads"] == threads)
        row["hardy_gb_per_s"] = total_bytes / row["hardy_median_s"] / 1e9
        row["cp_gb_per_s"] = total_bytes / row["cp_median_s"] / 1e9
        row["ratio"] = row["cp_median_s"] / row["hardy_median_s"]
        table.append(row)
    print(f"\n{len(names)} files, {total_bytes / 1e9:.2f} GB; ratio = cp time / hardy time (> 1: hardy faster)")
    print("hardy s: the whole command (start-up included; 'unchanged s' is about that alone); copy s: its copy phase")
    print(f"{'streams':>7} {'hardy s':>8} {'copy s':>7} {'GB/s':>6} {'cp s':>8} {'GB/s':>6} {'ratio':>6} {'unchanged s':>12}")
    for row in table:
        print(f"{row['threads']:>7} {row['hardy_median_s']:>8.2f} {row['hardy_copy_phase_median_s']:>7.2f} "
              f"{row['hardy_gb_per_s']:>6.2f} "
              f"{row['cp_median_s']:>8.2f} {row['cp_gb_per_s']:>6.2f} {row['ratio']:>6.2f} "
              f"{row['hardy-unchanged_median_s']:>12.3f}")
    results = {"benchmark": "staging", "files": len(names), "bytes": total_bytes,
               "shape": [args.height, args.width], "machine": benchlib.machine_info(),
               "table": table, "runs": runs}
    path = benchlib.write_results(results, args.out, f"staging-{datetime.date.today()}.json")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
