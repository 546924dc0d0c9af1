#!/usr/bin/python3
"""Cross-checks the CPU backend's operations for volumetric regression networks against PyTorch.

hardy_ops_dump DIRECTORY writes seeded inputs and hardy's outputs and gradients of conv3d (a
'same' one and a strided, dilated one), max_pool3d (CosmoFlow's 2x2x2 / 2 and overlapping 3x3x3
/ 2 windows with padding), flatten, dense, leaky relu, the scaled tanh and the MSE loss; this
script recomputes each with torch in float64 from the same float32 inputs (forward, then
autograd with the dumped upstream gradient dy) and compares:
  every output and gradient   max |hardy - torch| <= 1e-5 * (1 + max |torch|)
  the MSE loss                relative error <= 1e-6
It prints the worst error per tensor and exits 1 on any failure (77 when torch is missing).

    /usr/bin/python3 tests/core/test_torch_ops_crosscheck.py build/bin/hardy_ops_dump
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the machines hardy targets have it
    print("torch is not importable: skipped")
    sys.exit(77)

TOLERANCE = 1e-5


def load(directory, manifest):
    tensors, scalars = {}, {}
    for name, entry in manifest.items():
        if "value" in entry:
            scalars[name] = entry["value"]
            continue
        values = np.fromfile(os.path.join(directory, name + ".f32"), dtype="<f4")
        tensors[name] = torch.from_numpy(values.reshape(entry["dims"]).astype(np.float64))
    return tensors, scalars


def leaf(t):
    return t.clone().requires_grad_(True)


def main():
    dump_binary = sys.argv[1]
    failures = []

    def compare(name, hardy, reference):
        reference = reference.detach()
        worst = (hardy - reference).abs().max().item() if reference.numel() else 0.0
        limit = TOLERANCE * (1.0 + reference.abs().max().item())
        ok = hardy.shape == reference.shape and worst <= limit
        print(f"{'ok  ' if ok else 'FAIL'} {name:40s} max |hardy - torch| {worst:.3e} (limit {limit:.1e})")
        if not ok:
            failures.append(name)

    with tempfile.TemporaryDirectory() as directory:
        subprocess.run([dump_binary, directory], check=True)
        with open(os.path.join(directory, "manifest.json")) as f:
            tensors, scalars = load(directory, json.load(f))
    t, s = tensors, scalars

    for name in ("conv3d_same", "conv3d_strided_dilated"):
        x, weight, bias = leaf(t[name + ".x"]), leaf(t[name + ".weight"]), leaf(t[name + ".bias"])
        y = F.conv3d(x, weight, bias, stride=int(s[name + ".stride"]),
                     padding=int(s[name + ".padding"]), dilation=int(s[name + ".dilation"]))
        compare(name + " y", t[name + ".y"], y)
        y.backward(t[name + ".dy"])
        compare(name + " dx", t[name + ".dx"], x.grad)
        compare(name + " dweight", t[name + ".dweight"], weight.grad)
        compare(name + " dbias", t[name + ".dbias"], bias.grad)

    for name in ("max_pool3d", "max_pool3d_overlapping"):
        x = leaf(t[name + ".x"])
        y = F.max_pool3d(x, int(s[name + ".kernel"]), int(s[name + ".stride"]),
                         int(s[name + ".padding"]))
        compare(name + " y", t[name + ".y"], y)
        y.backward(t[name + ".dy"])
        compare(name + " dx", t[name + ".dx"], x.grad)

    flat = torch.flatten(t["flatten.x"], 1)
    compare("flatten y", t["flatten.y"], flat)

    x, weight, bias = leaf(t["flatten.y"]), leaf(t["dense.weight"]), leaf(t["dense.bias"])
    y = F.linear(x, weight, bias)
    compare("dense y", t["dense.y"], y)
    y.backward(t["dense.dy"])
    compare("dense dx", t["dense.dx"], x.grad)
    compare("dense dweight", t["dense.dweight"], weight.grad)
    compare("dense dbias", t["dense.dbias"], bias.grad)

    x = leaf(t["leaky_relu.x"])
    y = F.leaky_relu(x, s["leaky_relu.slope"])
    compare("leaky_relu y", t["leaky_relu.y"], y)
    y.backward(t["leaky_relu.dy"])
    compare("leaky_relu dx", t["leaky_relu.dx"], x.grad)

    x = leaf(t["scaled_tanh.x"])
    y = s["scaled_tanh.scale"] * torch.tanh(x)
    compare("scaled_tanh y", t["scaled_tanh.y"], y)
    y.backward(t["scaled_tanh.dy"])
    compare("scaled_tanh dx", t["scaled_tanh.dx"], x.grad)

    # The caller's loss is the mean over the global batch: grad_scale * sum of squared errors.
    prediction = leaf(t["mse.prediction"])
    loss = F.mse_loss(prediction, t["mse.target"], reduction="sum")
    relative = abs(s["mse.loss"] - loss.item()) / abs(loss.item())
    ok = relative <= 1e-6
    print(f"{'ok  ' if ok else 'FAIL'} {'mse loss':40s} relative error {relative:.3e} (limit 1e-6)")
    if not ok:
        failures.append("mse loss")
    (s["mse.grad_scale"] * loss).backward()
    compare("mse dprediction", t["mse.dprediction"], prediction.grad)

    if failures:
        print(f"{len(failures)} tensors differ from torch: {', '.join(failures)}")
        return 1
    print("all outputs and gradients match torch (float64)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
