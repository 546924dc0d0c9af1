#!/usr/bin/python3
"""Cross-checks one hardy training step against PyTorch on the same weights and batch.

hardy_step_bench --dump writes hardy's initial model, a random batch, hardy's loss, logits,
parameter gradients, batch-norm running statistics and the parameters after one Adam step, for
each of its networks (--model compact, tiramisu, deepcam). This script builds the torch version
of the same network from the dump's configuration (bench/step/torch_networks.py build_model()),
loads the same weights and buffers, checks that its parameters and buffers are hardy's, by name,
shape and order, runs the step in float64 as the reference, and compares:
  loss                  relative error <= 1e-4
  logits                max |difference| / max |reference| <= 1e-4
  every gradient        ||hardy - torch|| / ||torch|| <= 1e-3 (per parameter tensor; one that
                        is zero by construction: ||hardy - torch|| <= 1e-6 of the largest)
  running statistics    ||hardy - torch|| / ||torch|| <= 1e-4 (per buffer, after the forward)
  Adam update           max |hardy update - torch update| <= 1e-2 * lr, torch's Adam applied to
                        hardy's gradients, where the decayed gradient is well above float32
                        noise (Adam's first step is about lr * sign(g) there, noise elsewhere)
deepcam's logits and gradients have looser limits, measured and explained at CASES. It prints
one line per failing tensor (all of them with --verbose), the worst error of each kind per case,
and exits 1 on any failure.

    /usr/bin/python3 tests/core/test_torch_crosscheck.py build/bin/hardy_step_bench
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "step"))
import torch_deeplab  # noqa: E402
import torch_networks  # noqa: E402

# What hardy's float32 step must match the float64 reference to (see the docstring).
LIMITS = {"loss": 1e-4, "logits": 1e-4, "grad": 1e-3, "buffer": 1e-4, "adam": 1e-2}

# Model configurations to check, with any limits of their own. The compact ones exercise group
# counts that do and do not divide evenly (group_count), several blocks per stage (depth 2) and
# a non-square input. The tiramisu one is small (three blocks of one and two layers) on a
# non-square input, with dropout off: hardy's masks are its own hash
# (core/src/compute/dropout_mask.hpp), torch's are random. The deepcam one is the whole published
# network (56,454,720 parameters) at batch 2, 32x32 (2x2 at output stride 16); about 12 s here
# (2 cores), mostly writing and reading its 0.9 GB of dumps and the float64 step.
#
# deepcam's logits and gradients get looser limits, because no float32 implementation can meet
# the others on it (measured 2026-11-27, this machine, seeds 1 to 5 of hardy_step_bench):
# - its float32 forward drifts from float64 layer by layer, through 76 batch norms (over 8 values
#   per channel from the middle flow on), to about 1e-4 of the logits: hardy 0.99e-4 to 1.65e-4,
#   PyTorch's own float32 step on the same weights and batch 1.1e-4 to 1.6e-4;
# - a ReLU whose input lies within that drift of zero then flips, and a flipped element passes
#   all of its gradient, or none, to everything below it, so gradients differ by about the
#   square root of the drift: PyTorch float32 against float64 1.1e-2 to 1.9e-2 (median over
#   tensors), 1.4e-2 to 2.6e-2 (worst tensor); hardy 1.1e-2 to 3.0e-2 (worst tensor) for seeds
#   2 to 5;
# - seed 1, the one below, is the worst seen: 8.9e-2 (aspp.rate12.weight) and 4.5e-2 to 6.5e-2
#   across the encoder, all from one ReLU in aspp.rate12.bn (channel 244, normalized value
#   -2.1e-4 in float64) that hardy's float32 forward puts on the other side of zero; flipping
#   that one element in the float64 reference brings hardy's gradients to a median of 1.8e-2
#   and a worst of 2.5e-2, PyTorch float32's level.
# Hence 1e-3 for the logits and 2e-1 for gradients here (about twice the worst seen); the
# running statistics (worst 3.3e-5), the loss (worst 5.3e-6) and Adam (computed from hardy's
# gradients, worst 7.3e-5) keep the common limits. A wrong layer, dilation, stride, padding or
# weight layout moves the logits by far more than 1e-3.
CASES = [
    {"args": ["--batch", "2", "--height", "32", "--width", "32", "--model-width", "8",
              "--aspp-channels", "8", "--decoder-channels", "8", "--low-level-channels", "8",
              "--groups", "4"]},
    {"args": ["--batch", "3", "--height", "24", "--width", "40", "--model-width", "6",
              "--depth", "2", "--aspp-channels", "12", "--aspp-rates", "1,3",
              "--decoder-channels", "10", "--low-level-channels", "6", "--groups", "4"]},
    # The compact network with batch norm (its statistics over the batch, the running ones
    # moved): the twin hardy export traces for a run trained with --norm batch.
    {"args": ["--batch", "3", "--height", "24", "--width", "32", "--model-width", "6",
              "--aspp-channels", "8", "--aspp-rates", "1,2", "--decoder-channels", "8",
              "--low-level-channels", "6", "--norm", "batch"]},
    {"args": ["--model", "tiramisu", "--batch", "2", "--height", "32", "--width", "48",
              "--dense-layers", "1,2,2", "--growth", "4", "--first-channels", "6",
              "--dense-kernel", "3", "--dropout", "0"]},
    {"args": ["--model", "deepcam", "--batch", "2", "--height", "32", "--width", "32"],
     "limits": {"logits": 1e-3, "grad": 2e-1}},
    # CosmoFlow at 32^3 (its dense layers see 512 features), the MSE of 4 targets; dropout off
    # on both sides (hardy_step_bench dumps its forward in inference mode).
    {"args": ["--model", "cosmoflow", "--volume", "32", "--batch", "3"]},
]


def relative(a, b):
    scale = np.linalg.norm(b)
    return np.linalg.norm(a - b) / scale if scale > 0 else np.linalg.norm(a)


def check_case(bench, args, directory, verbose, limits):
    subprocess.run([bench, "--dump", directory] + args, check=True, stdout=subprocess.DEVNULL)
    step = h5py.File(os.path.join(directory, "step.h5"), "r")
    config = json.loads(step.attrs["config"])
    model = torch_networks.build_model(config)
    failures = []

    # The same tensors in the same order: what the optimizer and checkpoints see.
    for what, hardy_names, torch_names in (
            ("parameters", step.attrs["parameters"], [n for n, _ in model.named_parameters()]),
            ("buffers", step.attrs.get("buffers", []), [n for n, _ in model.named_buffers()])):
        hardy_names = [str(n) for n in hardy_names]
        if hardy_names != torch_names:
            first = next((i for i, (a, b) in enumerate(zip(hardy_names, torch_names)) if a != b),
                         min(len(hardy_names), len(torch_names)))
            failures.append(f"  {what}: hardy has {len(hardy_names)}, torch {len(torch_names)}; "
                            f"first difference at {first}: {hardy_names[first:first + 1]} "
                            f"against {torch_names[first:first + 1]}")
            print(failures[-1] + "  FAIL")
    torch_deeplab.load_hardy_model(model, os.path.join(directory, "model.h5"))
    model = model.double()
    regression = "targets" in step
    model.train(not regression)  # see hardy_step_bench's dump_step
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    x = torch.from_numpy(np.asarray(step["input"], dtype=np.float64))
    logits = model(x)
    if regression:
        loss = torch.nn.functional.mse_loss(logits, torch.from_numpy(np.asarray(step["targets"], dtype=np.float64)))
    else:
        labels = torch.from_numpy(np.asarray(step["labels"]).astype(np.int64))
        weights = torch.from_numpy(np.asarray(step["class_weights"], dtype=np.float64))
        loss = torch_deeplab.weighted_cross_entropy(logits, labels, weights)
    loss.backward()

    worst = {}

    def report(name, error, limit, what):
        line = f"  {what:<8} {name:<44} error {error:.2e} (limit {limit:.0e})"
        if what not in worst or not error <= worst[what][0]:
            worst[what] = (error, name)
        if error > limit or not np.isfinite(error):
            failures.append(line)
            print(line + "  FAIL")
        elif verbose:
            print(line)

    hardy_loss = float(np.asarray(step["loss"])[0])
    report("loss", abs(hardy_loss - loss.item()) / abs(loss.item()), limits["loss"], "loss")
    reference_logits = logits.detach().numpy()
    report("logits", np.abs(np.asarray(step["logits"]) - reference_logits).max() /
           np.abs(reference_logits).max(), limits["logits"], "logits")
    # A gradient that the network's structure makes zero (deepcam at 32x32: a batch-norm shift
    # that the next batch norm removes) is float32 noise in hardy and float64 noise in torch;
    # it is compared against the largest gradient of the model instead of its own size.
    largest = max(p.grad.norm().item() for p in model.parameters())
    for name, p in model.named_parameters():
        hardy_grad, reference = np.asarray(step["grads"][name]), p.grad.numpy()
        if np.linalg.norm(reference) > 1e-10 * largest:
            report(name, relative(hardy_grad, reference), limits["grad"], "grad")
        else:
            report(name, np.linalg.norm(hardy_grad - reference) / largest, 1e-6, "zerograd")
    for name, b in model.named_buffers():  # the running statistics after the forward
        report(name, relative(np.asarray(step["buffers"][name]), b.numpy()), limits["buffer"],
               "buffer")

    # One Adam step with hardy's settings, in float64, on hardy's own gradients (compared
    # above), so that this checks the update alone.
    lr, weight_decay = float(step.attrs["lr"]), float(step.attrs["weight_decay"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(before[name])
            p.grad.copy_(torch.from_numpy(np.asarray(step["grads"][name], dtype=np.float64)))
    torch_deeplab.make_optimizer(model, lr, weight_decay).step()
    for name, p in model.named_parameters():
        hardy_update = np.asarray(step["after_step"][name], dtype=np.float64) - before[name].numpy()
        torch_update = (p.detach() - before[name]).numpy()
        # Adam's first step is lr * g' / (|g'| + eps) with g' = g + weight_decay * w: where g'
        # is not far above float32 rounding (g and weight_decay * w cancel) or near eps, its
        # sign and size are noise.
        grad = p.grad.numpy()
        decay = weight_decay if p.dim() >= 2 else 0.0  # convolution and dense weights
        decayed = grad + decay * before[name].numpy()
        usable = np.abs(decayed) > max(1e-4 * np.abs(grad).max(), 1e-6)
        error = np.abs(hardy_update - torch_update)[usable].max(initial=0.0) / lr
        report(name, error, limits["adam"], "adam")
    print("  worst: " + ", ".join(f"{what} {error:.2e} ({name})"
                                  for what, (error, name) in worst.items()))
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", help="path of hardy_step_bench")
    parser.add_argument("--keep", help="write the dumps here instead of a temporary directory")
    parser.add_argument("--verbose", action="store_true", help="print every comparison")
    parser.add_argument("--cases", help="comma-separated indices into CASES (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    failures = []
    with tempfile.TemporaryDirectory() as temporary:
        chosen = [int(i) for i in args.cases.split(",")] if args.cases else range(len(CASES))
        for index in chosen:
            case = CASES[index]
            directory = os.path.join(args.keep or temporary, f"case{index}")
            print(f"case {index}: {' '.join(case['args'])}")
            start = time.monotonic()
            failures += check_case(args.bench, case["args"], directory, args.verbose,
                                   dict(LIMITS, **case.get("limits", {})))
            print(f"  {time.monotonic() - start:.1f} s")
    print(f"{len(failures)} comparisons failed" if failures else "all comparisons passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
