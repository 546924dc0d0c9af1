"""A small dataset in the layout of the ClimateNet release, for tests only: netCDF-4 files written
with netCDF4 (Debian's python3-netcdf4) as the release has them (docs/data.md,
core/include/hardy/core/data/climatenet.hpp), holding hardy's synthetic samples (learnable
cyclones and rivers) in the CAM5 variables' physical units.

  ROOT/train/data-YYYY-MM-DD-01-1.nc, ROOT/test/...   one snapshot each
    dimensions time = 1, lat, lon; coordinates lat (-90..90), lon (0..360), time (the file name)
    TMQ, U850, ..., ZBOT   float32 (time, lat, lon) with description and units
    LABELS                 int64 (time, lat, lon): 0 background, 1 tropical cyclone, 2 atm. river

Variants exercise what real files may differ in: LABELS without the time axis, zlib-compressed
(chunked) variables, and a variable packed as float with scale_factor/add_offset.

Usage as a script: climatenet_files.py HARDY ROOT TRAIN TEST HEIGHT WIDTH [SEED]"""
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
from netCDF4 import Dataset

# The CAM5 variables in ClimateNet's order, with units and the (offset, scale, floor) that maps
# hardy's zero-mean, unit-variance synthetic fields to plausible physical values.
VARIABLES = [
    ("TMQ", "total (vertically integrated) precipitable water", "kg/m^2", 24.0, 14.0, 0.0),
    ("U850", "zonal wind at 850 mbar pressure surface", "m/s", 2.0, 9.0, None),
    ("V850", "meridional wind at 850 mbar pressure surface", "m/s", 0.0, 7.0, None),
    ("UBOT", "lowest level zonal wind", "m/s", 1.0, 7.0, None),
    ("VBOT", "lowest model level meridional wind", "m/s", 0.0, 6.0, None),
    ("QREFHT", "reference height humidity", "kg/kg", 0.010, 0.005, 0.0),
    ("PS", "surface pressure", "Pa", 98500.0, 1500.0, None),
    ("PSL", "sea level pressure", "Pa", 101300.0, 1100.0, None),
    ("T200", "temperature at 200 mbar pressure surface", "K", 218.0, 6.0, None),
    ("T500", "temperature at 500 mbar pressure surface", "K", 257.0, 9.0, None),
    ("PRECT", "total (convective and large-scale) precipitation rate (liq + ice)", "m/s", 0.0, 5.0e-8, 0.0),
    ("TS", "surface temperature (radiative)", "K", 288.0, 14.0, None),
    ("TREFHT", "reference height temperature", "K", 287.0, 13.0, None),
    ("Z1000", "geopotential Z at 1000 mbar pressure surface", "m", 120.0, 80.0, None),
    ("Z200", "geopotential Z at 200 mbar pressure surface", "m", 11800.0, 300.0, None),
    ("ZBOT", "lowest modal level height", "m", 62.0, 6.0, None),
]
NAMES = [v[0] for v in VARIABLES]


def synthetic_samples(hardy, count, height, width, seed):
    """(fields (count, 16, H, W) float32 in physical units, labels (count, H, W) int64) of hardy's
    synthetic generator."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([hardy, "data", "generate", "--out", tmp, "--samples", str(count), "--height", str(height),
                        "--width", str(width), "--seed", str(seed)], check=True, capture_output=True)
        fields, labels = [], []
        for path in sorted(Path(tmp).glob("climate-*.h5")):
            with h5py.File(path, "r") as f:
                fields.append(f["fields"][:])
                labels.append(f["labels"][:])
    fields, labels = np.concatenate(fields), np.concatenate(labels).astype(np.int64)
    for c, (_, _, _, offset, scale, floor) in enumerate(VARIABLES):
        fields[:, c] = offset + scale * fields[:, c]
        if floor is not None:
            fields[:, c] = np.maximum(fields[:, c], floor)
    return fields.astype(np.float32), labels


def write_file(path, fields, labels, labels_time_axis=True, compress=False, packed=None, names=NAMES,
               file_format="NETCDF4"):
    """One snapshot: fields (16, H, W) in VARIABLES order, labels (H, W). `packed`: a variable stored
    as (value - add_offset) / scale_factor with those attributes; `names`: the variables written."""
    height, width = labels.shape
    with Dataset(path, "w", format=file_format) as nc:
        nc.createDimension("time", 1)
        nc.createDimension("lat", height)
        nc.createDimension("lon", width)
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat[:] = np.linspace(-90.0, 90.0, height)
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon[:] = np.arange(width) * (360.0 / width)
        if file_format == "NETCDF4":
            time = nc.createVariable("time", str, ("time",))
            time[0] = path.name
        for c, (name, description, units, *_) in enumerate(VARIABLES):
            if name not in names:
                continue
            variable = nc.createVariable(name, "f4", ("time", "lat", "lon"), zlib=compress)
            variable.description, variable.units = description, units
            values = fields[c]
            if name == packed:
                variable.scale_factor, variable.add_offset = np.float32(2.0), np.float32(values.mean())
                variable.set_auto_scale(False)
                values = (values - variable.add_offset) / variable.scale_factor
            variable[0, :, :] = values
        dims = ("time", "lat", "lon") if labels_time_axis else ("lat", "lon")
        # netCDF-3 has no 64-bit integers.
        mask = nc.createVariable("LABELS", "i8" if file_format == "NETCDF4" else "i4", dims, zlib=compress)
        mask.description = "0: Background, 1: Tropical Cyclone, 2: Athmospheric river"
        if labels_time_axis:
            mask[0, :, :] = labels
        else:
            mask[:, :] = labels


def file_name(k):
    day = datetime.date(2003, 6, 1) + datetime.timedelta(days=k)
    return f"data-{day:%Y-%m-%d}-01-1.nc"


def write_dataset(hardy, root, train, test, height, width, seed=1):
    """ROOT/train (train files) and ROOT/test (test files), samples in order; every third file has
    LABELS without the time axis, every fourth is compressed, the fifth packs PSL. Returns
    (fields, labels) of every sample, train first, in physical units."""
    root = Path(root)
    fields, labels = synthetic_samples(hardy, train + test, height, width, seed)
    for k in range(train + test):
        split = root / ("train" if k < train else "test")
        split.mkdir(parents=True, exist_ok=True)
        write_file(split / file_name(k), fields[k], labels[k], labels_time_axis=k % 3 != 2, compress=k % 4 == 3,
                   packed="PSL" if k == 4 else None)
    return fields, labels


if __name__ == "__main__":
    hardy, root, train, test, height, width = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
    write_dataset(hardy, root, train, test, height, width, int(sys.argv[7]) if len(sys.argv) > 7 else 1)
