#!/usr/bin/python3
"""Cross-checks one hardy training step against PyTorch on the same weights and batch.

hardy_step_bench --dump writes hardy's initial model, a random batch, hardy's loss, logits,
parameter gradients and the parameters after one Adam step. This script loads the same model
into bench/step/torch_deeplab.py, runs the step in float64 as the reference, and compares:
  loss                  relative error <= 1e-4
  logits                max |difference| / max |reference| <= 1e-4
  every gradient        ||hardy - torch|| / ||torch|| <= 1e-3 (per parameter tensor)
  Adam update           max |hardy update - torch update| <= 1e-2 * lr, where the decayed
                        gradient is well above float32 noise (Adam's first step is about
                        lr * sign(g) there, and noise elsewhere)
It prints one line per failing tensor (all of them with --verbose) and exits 1 on any failure.

    /usr/bin/python3 tests/core/test_torch_crosscheck.py build/bin/hardy_step_bench
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "step"))
import torch_deeplab  # noqa: E402

# Model configurations to check: each exercises group counts that do and do not divide evenly
# (group_count), several blocks per stage (depth 2), and a non-square input.
CASES = [
    ["--batch", "2", "--height", "32", "--width", "32", "--model-width", "8",
     "--aspp-channels", "8", "--decoder-channels", "8", "--low-level-channels", "8",
     "--groups", "4"],
    ["--batch", "3", "--height", "24", "--width", "40", "--model-width", "6", "--depth", "2",
     "--aspp-channels", "12", "--aspp-rates", "1,3", "--decoder-channels", "10",
     "--low-level-channels", "6", "--groups", "4"],
]


def relative(a, b):
    scale = np.linalg.norm(b)
    return np.linalg.norm(a - b) / scale if scale > 0 else np.linalg.norm(a)


def check_case(bench, args, directory, verbose):
    subprocess.run([bench, "--dump", directory] + args, check=True, stdout=subprocess.DEVNULL)
    step = h5py.File(os.path.join(directory, "step.h5"), "r")
    config = json.loads(step.attrs["config"])
    config.pop("norm_eps")  # float32 in hardy; torch_deeplab uses the same 1e-5 default
    model = torch_deeplab.DeepLabV3Plus(torch_deeplab.ModelConfig(**config))
    torch_deeplab.load_hardy_model(model, os.path.join(directory, "model.h5"))
    model = model.double()
    model.train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    x = torch.from_numpy(np.asarray(step["input"], dtype=np.float64))
    labels = torch.from_numpy(np.asarray(step["labels"]).astype(np.int64))
    weights = torch.from_numpy(np.asarray(step["class_weights"], dtype=np.float64))
    logits = model(x)
    loss = torch_deeplab.weighted_cross_entropy(logits, labels, weights)
    loss.backward()

    failures = []

    def report(name, error, limit, what):
        line = f"  {what:<8} {name:<34} error {error:.2e} (limit {limit:.0e})"
        if error > limit or not np.isfinite(error):
            failures.append(line)
            print(line + "  FAIL")
        elif verbose:
            print(line)

    hardy_loss = float(np.asarray(step["loss"])[0])
    report("loss", abs(hardy_loss - loss.item()) / abs(loss.item()), 1e-4, "loss")
    reference_logits = logits.detach().numpy()
    report("logits", np.abs(np.asarray(step["logits"]) - reference_logits).max() /
           np.abs(reference_logits).max(), 1e-4, "logits")
    for name, p in model.named_parameters():
        report(name, relative(np.asarray(step["grads"][name]), p.grad.numpy()), 1e-3, "grad")

    # One Adam step with hardy's settings, in float64.
    lr, weight_decay = float(step.attrs["lr"]), float(step.attrs["weight_decay"])
    torch_deeplab.make_optimizer(model, lr, weight_decay).step()
    for name, p in model.named_parameters():
        hardy_update = np.asarray(step["after_step"][name], dtype=np.float64) - before[name].numpy()
        torch_update = (p.detach() - before[name]).numpy()
        # Adam's first step is lr * g' / (|g'| + eps) with g' = g + weight_decay * w: where g'
        # is not far above the float32 error of g (or near eps) its sign and size are noise.
        grad = p.grad.numpy()
        decay = weight_decay if p.dim() == 4 else 0.0
        decayed = grad + decay * before[name].numpy()
        usable = np.abs(decayed) > max(1e-4 * np.abs(grad).max(), 1e-6)
        error = np.abs(hardy_update - torch_update)[usable].max(initial=0.0) / lr
        report(name, error, 1e-2, "adam")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", help="path of hardy_step_bench")
    parser.add_argument("--keep", help="write the dumps here instead of a temporary directory")
    parser.add_argument("--verbose", action="store_true", help="print every comparison")
    args = parser.parse_args()
    torch.set_num_threads(1)
    failures = []
    with tempfile.TemporaryDirectory() as temporary:
        for index, case in enumerate(CASES):
            directory = os.path.join(args.keep or temporary, f"case{index}")
            print(f"case {index}: {' '.join(case)}")
            failures += check_case(args.bench, case, directory, args.verbose)
    print(f"{len(failures)} comparisons failed" if failures else "all comparisons passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
