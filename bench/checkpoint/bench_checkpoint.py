#!/usr/bin/python3
"""What a hardy checkpoint costs, against a plain write of the same bytes and against torch.save.

For models of about 0.15M, 5M and 50M parameters (hardy's DeepLabv3+ with its channels scaled,
Adam, so a checkpoint holds three floats per parameter), build/bin/hardy_checkpoint_bench
measures, as the best of --repeats runs (the least disturbed by other load; medians and raw runs
go to the results file) in one scratch directory:
  capture   the training stall: copying the state into fresh host buffers, and into reused
            ones (CheckpointWriter::take_spare), also as a fraction of one training step
            (batch 8, 64x64, Adam: the default job's step size)
  write     hardy's whole checkpoint (HDF5 file, checksums, fsync, rename, directory fsync,
            `latest`) against a plain sequential write(2) + fsync of as many bytes: ratio =
            plain seconds / hardy seconds, i.e. hardy's share of the plain bandwidth (goal 0.8)
  read      reading and validating every checksum
Then this script loads each size's checkpoint with h5py (the very tensors hardy wrote) and times
torch.save of them (a dict of name -> tensor, file flushed and fsynced, as hardy's are) into the
same directory: torch ratio = torch seconds / hardy seconds (> 1: hardy is faster).

Prints a table and writes everything, raw runs included, to bench/results/checkpoint-<date>.json.
Needs /usr/bin/python3 with torch and h5py (Debian's python3-torch and python3-h5py):

    /usr/bin/python3 bench/checkpoint/bench_checkpoint.py [--sizes 0.15,5,50] [--repeats 5]
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from benchlib import ROOT, find_binary, git_commit, write_results  # noqa: E402


def torch_save_seconds(checkpoint, directory, repeats):
    import h5py
    import torch
    tensors = {}
    with h5py.File(checkpoint, "r") as f:
        for group in ("model", "optimizer"):
            f[group].visititems(lambda name, obj: tensors.__setitem__(
                f"{group}/{name}", torch.from_numpy(obj[()])) if isinstance(obj, h5py.Dataset) else None)
    path = os.path.join(directory, "torch.pt")
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        with open(path, "wb") as stream:
            torch.save(tensors, stream)
            stream.flush()
            os.fsync(stream.fileno())
        times.append(time.perf_counter() - start)
        size = os.path.getsize(path)
        os.remove(path)
    return min(times), size, times, len(tensors)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.15,5,50", help="millions of parameters, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", help="scratch directory on the disk to measure (removed afterwards; default: a "
                                      "new one in the system's temporary directory)")
    parser.add_argument("--bench", help="path of hardy_checkpoint_bench")
    parser.add_argument("--out", help="results file (default bench/results/checkpoint-<date>.json)")
    args = parser.parse_args()

    bench = find_binary("hardy_checkpoint_bench", args.bench, "bench_checkpoint.py",
                        ("build", "build-bench", "build-ckpt"), "build it or pass --bench")
    scratch = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="hardy-checkpoint-bench-")
    keep = os.path.join(scratch, "kept")
    os.makedirs(scratch, exist_ok=True)
    try:
        done = subprocess.run([bench, "--sizes", args.sizes, "--repeats", str(args.repeats), "--dir", scratch,
                               "--keep", keep], stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"bench_checkpoint.py: {bench} failed ({done.returncode})")
        results = json.loads(done.stdout.strip().splitlines()[-1])
        for size in results["sizes"]:
            kept = os.path.join(keep, f"size-{size['parameters']}.h5")
            seconds, file_bytes, raw, count = torch_save_seconds(kept, scratch, args.repeats)
            size["torch_save_s"] = seconds
            size["torch_file_bytes"] = file_bytes
            size["torch_tensors"] = count
            size["torch_ratio"] = seconds / size["write_s"]
            size["raw"]["torch_save_s"] = raw
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    import torch
    results["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                          "python": platform.python_version(), "git_commit": git_commit(short=True),
                          "date": datetime.datetime.now().isoformat(timespec="seconds")}
    header = (f"{'params':>8} {'file':>9} {'capture':>9} {'reused':>9} {'step':>9} {'stall/step':>11} "
              f"{'write':>9} {'plain':>9} {'ratio':>6} {'MB/s':>7} {'read':>9} {'torch':>9} {'torch/hardy':>11}")
    print(header)
    print("-" * len(header))
    ms = lambda seconds: f"{seconds * 1e3:7.1f}ms"
    for s in results["sizes"]:
        print(f"{s['parameters'] / 1e6:7.2f}M {s['file_bytes'] / 2**20:7.1f}MB {ms(s['capture_s'])} "
              f"{ms(s['capture_reuse_s'])} {ms(s['step_s'])} "
              f"{s['stall_per_step'] * 100:4.0f}%/{s['stall_reuse_per_step'] * 100:3.0f}% "
              f"{ms(s['write_s'])} {ms(s['plain_write_s'])} {s['bandwidth_ratio']:6.2f} {s['write_mb_per_s']:7.0f} "
              f"{ms(s['read_s'])} {ms(s['torch_save_s'])} {s['torch_ratio']:11.2f}")
    print("stall/step: capture with fresh / reused buffers over one training step (batch 8, 64x64); ratio: "
          "plain write time / hardy write time; torch/hardy > 1: hardy is faster")
    out = write_results(results, args.out, f"checkpoint-{datetime.date.today().isoformat()}.json")
    print(f"results: {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
