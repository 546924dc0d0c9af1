#!/usr/bin/env python3
"""Plot a few channels and the label mask of one sample of a hardy climate dataset to a PNG.

A visual check of the data layer (synthetic generator and HDF5 files), not part of the tests:

    python3 -m venv --system-site-packages .venv   # or: pip install h5py numpy matplotlib
    .venv/bin/python tools/plot_sample.py DATASET_DIR_OR_FILE --sample 3 --output sample.png

Samples are numbered across the files of a directory in index.json order (name order without one).
"""
import argparse
import json
import pathlib
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

PANELS = ["TMQ", "PSL", "PRECT", "T200", "Z200", "QREFHT"]


def dataset_files(path: pathlib.Path):
    if path.is_file():
        return [path]
    index = path / "index.json"
    if index.exists():
        return [path / entry["name"] for entry in json.loads(index.read_text())["files"]]
    return sorted(path.glob("*.h5"))


def read_sample(path: pathlib.Path, sample: int):
    for file_path in dataset_files(path):
        with h5py.File(file_path, "r") as f:
            count = f["fields"].shape[0]
            if sample < count:
                names = [str(n) for n in f.attrs.get("channel_names", [])]
                if len(names) != f["fields"].shape[1]:
                    names = [f"channel_{c}" for c in range(f["fields"].shape[1])]
                classes = [str(n) for n in f.attrs.get("class_names", [])]
                return f["fields"][sample], f["labels"][sample], names, classes, file_path
            sample -= count
    sys.exit(f"{path} has fewer samples than requested")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=pathlib.Path)
    parser.add_argument("--sample", type=int, default=0)
    parser.add_argument("--output", type=pathlib.Path, default=pathlib.Path("sample.png"))
    args = parser.parse_args()

    fields, labels, names, classes, file_path = read_sample(args.path, args.sample)
    channel = {name: fields[c] for c, name in enumerate(names)}
    panels = [name for name in PANELS if name in channel] or names[:6]

    fig, axes = plt.subplots(2, 4, figsize=(18, 7.5), constrained_layout=True)
    axes = axes.ravel()
    for ax, name in zip(axes, panels):
        image = ax.imshow(channel[name], cmap="RdBu_r" if name != "PRECT" else "Blues")
        ax.set_title(f"{name}  (mean {channel[name].mean():+.2f}, std {channel[name].std():.2f})")
        fig.colorbar(image, ax=ax, shrink=0.8)

    # Low-level wind speed with arrows, the view in which cyclones and rivers stand out.
    ax = axes[len(panels)]
    if "U850" in channel and "V850" in channel:
        u, v = channel["U850"], channel["V850"]
        image = ax.imshow(np.hypot(u, v), cmap="viridis")
        step = max(1, u.shape[0] // 24)
        rows, cols = np.mgrid[0 : u.shape[0] : step, 0 : u.shape[1] : step]
        ax.quiver(cols, rows, u[::step, ::step], v[::step, ::step], color="white", scale=60)
        ax.set_title("850 hPa wind speed and direction")
        fig.colorbar(image, ax=ax, shrink=0.8)

    ax = axes[-1]
    mask_colors = ListedColormap(["#f0f0f0", "#d62728", "#1f77b4"])
    ax.imshow(labels, cmap=mask_colors, vmin=0, vmax=2, interpolation="nearest")
    fractions = np.bincount(labels.ravel(), minlength=3) / labels.size
    ax.set_title(
        "labels: " + ", ".join(f"{n} {p:.1%}" for n, p in zip(classes or ["0", "1", "2"], fractions)),
        fontsize=8,
    )
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{file_path.name}, sample {args.sample} of {args.path}")
    fig.savefig(args.output, dpi=80)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
