#!/usr/bin/env python3
"""`hardy export RUN_DIR --onnx FILE` for each network: onnxruntime's predictions on held-out
samples equal `hardy eval`'s (argmax agreement >= 99.9% of pixels, logits within 1e-4 of their
largest magnitude: both run float32, hardy on oneDNN, onnxruntime on its own kernels; CosmoFlow's
regression outputs within 1e-4 of the largest).

Usage: onnx_export.py HARDY   (exit 77, skipped, without onnxruntime in this Python)
"""
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import SMALL_COMPACT, SMALL_COSMOFLOW, SMALL_TIRAMISU, Checks, skip  # noqa: E402

try:
    import h5py
    import numpy as np
    import onnxruntime
except ImportError as error:
    skip(f"no onnxruntime, h5py or numpy in {sys.executable} ({error}); scripts/test installs them")

hardy = sys.argv[1]
JOB = ["--synthetic", "--samples", "64", "--eval-samples", "16", "--global-batch", "8",
       "--optimizer", "adam", "--lr", "0.003", "--seed", "3", "--log-every", "100"]
# Each network, trained a few steps (batch norm's running statistics move, so inference differs
# from training); DeepCAM's at its full 56M parameters on 32x32 crops.
NETWORKS = {
    "compact": [*SMALL_COMPACT, "--height", "32", "--width", "40", "--steps", "20"],
    "compact, batch norm": [*SMALL_COMPACT, "--norm", "batch", "--height", "32", "--width", "40",
                            "--steps", "20"],
    "tiramisu": [*SMALL_TIRAMISU, "--height", "32", "--width", "40", "--steps", "20"],
    "deepcam": ["--model", "deepcam", "--height", "32", "--width", "48", "--steps", "4"],
    "cosmoflow": [*SMALL_COSMOFLOW, "--steps", "4"],
}
check = Checks()
with tempfile.TemporaryDirectory(prefix="hardy-onnx-") as tmp:
    for name, options in NETWORKS.items():
        run = Path(tmp) / name.replace(", ", "-").replace(" ", "-")
        subprocess.run([hardy, "train", *JOB, *options, "--run-dir", str(run)], check=True,
                       stdout=subprocess.DEVNULL)
        onnx_file, predictions = run / "model.onnx", run / "predictions.h5"
        exported = subprocess.run([hardy, "export", str(run), "--onnx", str(onnx_file)],
                                  capture_output=True, text=True)
        check(exported.returncode == 0 and onnx_file.is_file(),
              f"{name}: exported ({exported.stdout.strip() or exported.stderr.strip()[-300:]})")
        if exported.returncode != 0:
            continue
        subprocess.run([hardy, "eval", "--run-dir", str(run), "--predictions", str(predictions)], check=True,
                       stdout=subprocess.DEVNULL)
        output = "outputs" if name == "cosmoflow" else "logits"
        with h5py.File(predictions, "r") as f:
            fields, expected = np.asarray(f["fields"]), np.asarray(f[output])
        session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
        got = session.run([output], {"fields": fields})[0]
        difference = float(np.abs(got - expected).max() / np.abs(expected).max())
        if output == "outputs":
            check(got.shape == expected.shape == (len(fields), 4) and difference <= 1e-4,
                  f"{name}: onnxruntime on {len(fields)} held-out volumes {fields.shape[1:]} agrees "
                  f"with hardy eval, outputs within {difference:.1e} of the largest")
            continue
        agreement = float((got.argmax(1) == expected.argmax(1)).mean())
        check(got.shape == expected.shape and agreement >= 0.999 and difference <= 1e-4,
              f"{name}: onnxruntime on {len(fields)} held-out samples agrees with hardy eval on "
              f"{agreement:.2%} of pixels, logits within {difference:.1e} of the largest")
check.finish("onnx export")
