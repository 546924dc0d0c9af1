#!/usr/bin/env python3
"""A hardy checkpoint read with h5py and numpy alone, checked against what hardy reports.

    h5py_reads.py HARDY [CHECKPOINT]

Without CHECKPOINT, trains a tiny job with `hardy train --checkpoint-every 1` into a temporary run
directory and takes its `latest`. Then, with nothing from hardy:
  - the root says format "hardy-checkpoint", version 1, checksum algorithm xxh64, and carries a
    JSON manifest listing every dataset of the file with dtype, shape and checksum;
  - every dataset has that dtype and shape, a uint64 `checksum` attribute equal to the
    manifest's, and its stored bytes hash (xxHash64, in pure Python below) to it;
and against `hardy ckpt inspect --json`: the same datasets and checksums, the same step, epoch,
loss and world size, and each tensor's min, max and mean as numpy computes them from the values
h5py read. Finally a copy with one flipped byte (located with h5py) fails `hardy ckpt verify`
with exit status 1, naming the dataset; `hardy ckpt list` and `diff` agree, and bad input exits
with status 2. Exit status 0 when all holds, 1 otherwise, 77 (skipped)
when this Python has no h5py.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as missing:
    print(f"h5py_reads.py: skipped, this Python ({sys.executable}) lacks {missing.name}")
    sys.exit(77)

MASK = (1 << 64) - 1
P1, P2, P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
P4, P5 = 9650029242287828579, 2870177450012600261


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK


def xxh64_round(acc, lane):
    return (rotl((acc + lane * P2) & MASK, 31) * P1) & MASK


def xxh64(data, seed=0):
    """xxHash64 (Yann Collet's specification), so that the check needs nothing but Python."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed, (seed - P1) & MASK]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [xxh64_round(v[k], lanes[k]) for k in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK
        for lane in v:
            h = ((h ^ xxh64_round(0, lane)) * P1 + P4) & MASK
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h ^= xxh64_round(0, struct.unpack_from("<Q", data, i)[0])
        h = (rotl(h, 27) * P1 + P4) & MASK
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & MASK
        h = (rotl(h, 23) * P2 + P3) & MASK
        i += 4
    while i < n:
        h ^= (data[i] * P5) & MASK
        h = (rotl(h, 11) * P1) & MASK
        i += 1
    h ^= h >> 33
    h = (h * P2) & MASK
    h ^= h >> 29
    h = (h * P3) & MASK
    return h ^ (h >> 32)


DTYPES = {"f32": "<f4", "f64": "<f8", "i64": "<i8", "u64": "<u8"}

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def text(attribute):
    """hardy writes fixed-length string attributes, which h5py returns as bytes."""
    return attribute.decode() if isinstance(attribute, bytes) else str(attribute)


def stored_bytes(dataset):
    array = np.empty(dataset.shape, dtype=dataset.dtype)
    dataset.read_direct(array)
    return array


def check_with_h5py(path):
    """Validates the file from the format description alone; returns {path: array}."""
    arrays = {}
    with h5py.File(path, "r") as f:
        check(text(f.attrs["format"]) == "hardy-checkpoint", f"root format is {f.attrs['format']!r}")
        check(int(f.attrs["format_version"]) == 1, "root format_version is not 1")
        check(text(f.attrs["checksum_algorithm"]) == "xxh64", "root checksum_algorithm is not xxh64")
        manifest = json.loads(text(f.attrs["manifest"]))
        listed = {entry["path"] for entry in manifest["datasets"]}
        present = set()
        f.visititems(lambda name, obj: present.add("/" + name) if isinstance(obj, h5py.Dataset) else None)
        check(listed == present, f"manifest and file differ: {sorted(listed ^ present)}")
        for group in ("model", "optimizer", "train", "job"):
            check(group in f, f"no /{group} group")
        for entry in manifest["datasets"]:
            dataset = f[entry["path"]]
            check(list(dataset.shape) == entry["shape"], f"{entry['path']}: shape {dataset.shape} vs {entry['shape']}")
            if entry["dtype"] == "str":
                check(dataset.dtype.kind == "S", f"{entry['path']}: {dataset.dtype} is not a fixed-length string")
            else:
                check(dataset.dtype == np.dtype(DTYPES[entry["dtype"]]), f"{entry['path']}: dtype {dataset.dtype}")
            check(text(dataset.attrs["checksum_algorithm"]) == "xxh64", f"{entry['path']}: checksum_algorithm")
            attribute = int(dataset.attrs["checksum"])
            check(f"{attribute:016x}" == entry["checksum"], f"{entry['path']}: attribute vs manifest checksum")
            array = stored_bytes(dataset)
            check(f"{xxh64(array.tobytes()):016x}" == entry["checksum"], f"{entry['path']}: data checksum")
            arrays[entry["path"]] = array
    return arrays


def hardy(binary, *args):
    return subprocess.run([binary, "ckpt", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def check_against_hardy(binary, path, arrays):
    done = hardy(binary, "inspect", "--json", path)
    check(done.returncode == 0, f"hardy ckpt inspect failed: {done.stderr}")
    report = json.loads(done.stdout)
    check({d["path"] for d in report["datasets"]} == set(arrays), "hardy and h5py list different datasets")
    for d in report["datasets"]:
        array = arrays[d["path"]]
        check(d["checksum"] == f"{xxh64(array.tobytes()):016x}", f"{d['path']}: hardy's checksum differs")
        if "min" in d:
            values = array.astype(np.float64).ravel()
            same = (np.isclose(d["min"], values.min(), rtol=0, atol=0) and np.isclose(d["max"], values.max(), rtol=0, atol=0)
                    and np.isclose(d["mean"], values.mean(), rtol=1e-9, atol=1e-12))
            check(same, f"{d['path']}: hardy reports min/max/mean {d['min']}/{d['max']}/{d['mean']}, "
                        f"h5py finds {values.min()}/{values.max()}/{values.mean()}")
    for name, dataset in (("step", "/train/step"), ("epoch", "/train/epoch"), ("world_size", "/job/world_size")):
        check(report[name] == int(arrays[dataset]), f"{name}: hardy says {report[name]}, h5py {arrays[dataset]}")
    check(report["loss"] == float(arrays["/train/loss"]), "loss differs")
    check(report["config"] == arrays["/job/config"].tobytes().rstrip(b"\0").decode(), "configuration differs")


def check_damage_detected(binary, path, workdir):
    damaged = os.path.join(workdir, "damaged.h5")
    shutil.copyfile(path, damaged)
    with h5py.File(damaged, "r") as f:
        name = next(n for n in f["model"])
        offset = f["model"][name].id.get_offset()
    with open(damaged, "r+b") as stream:
        stream.seek(offset + 2)
        byte = stream.read(1)
        stream.seek(offset + 2)
        stream.write(bytes([byte[0] ^ 0x10]))
    done = hardy(binary, "verify", damaged)
    check(done.returncode == 1, f"hardy ckpt verify of a damaged file exited {done.returncode}")
    check(f"checksum mismatch in /model/{name}" in done.stderr, f"verify did not name the dataset: {done.stderr}")
    check(hardy(binary, "verify", path).returncode == 0, "hardy ckpt verify rejects the intact file")


def check_command_line(binary, path, workdir):
    """The other `hardy ckpt` commands on the same file, and bad input (exit status 2)."""
    listing = hardy(binary, "list", os.path.dirname(os.path.realpath(path)))
    name = os.path.basename(os.path.realpath(path))
    step = re.fullmatch(r"ckpt-(\d+)\.h5", name).group(1)
    rows = [line.split() for line in listing.stdout.splitlines()[2:]]  # after the two header lines
    check(listing.returncode == 0 and any(row[:1] == [step] and "valid" in row for row in rows),
          f"hardy ckpt list does not show {name} as valid:\n{listing.stdout}")
    same = hardy(binary, "diff", "--json", path, path)
    check(same.returncode == 0 and json.loads(same.stdout)["max_abs_diff"] == 0, "diff of a file with itself")
    notes = os.path.join(workdir, "notes.txt")
    with open(notes, "w") as stream:
        stream.write("not a checkpoint\n")
    for args in (["verify", os.path.join(workdir, "missing.h5")], ["inspect", notes], ["frobnicate"], ["diff", path]):
        done = hardy(binary, *args)
        check(done.returncode == 2 and done.stderr.strip(), f"hardy ckpt {' '.join(args)} exited {done.returncode}")
    for command in ("list", "inspect", "verify", "diff"):
        check(hardy(binary, command, "--help").returncode == 0, f"hardy ckpt {command} --help")


def train_checkpoint(binary, workdir):
    run_dir = os.path.join(workdir, "run")
    done = subprocess.run([binary, "train", "--synthetic", "--steps", "2", "--global-batch", "4", "--checkpoint-every",
                           "1", "--run-dir", run_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"h5py_reads.py: hardy train failed ({done.returncode}):\n{done.stdout}")
    return os.path.join(run_dir, "checkpoints", "latest")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="hardy-h5py-") as workdir:
        path = sys.argv[2] if len(sys.argv) == 3 else train_checkpoint(binary, workdir)
        arrays = check_with_h5py(path)
        check_against_hardy(binary, path, arrays)
        check_damage_detected(binary, path, workdir)
        check_command_line(binary, path, workdir)
        print(f"h5py_reads.py: {path}: {len(arrays)} datasets, {'FAILED' if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
