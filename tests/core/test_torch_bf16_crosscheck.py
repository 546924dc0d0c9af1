#!/usr/bin/python3
"""hardy's bf16 training step against PyTorch's bf16 autocast step, both measured from float64.

bf16 keeps 8 significant bits, so a bf16 step's gradients are far from the exact ones (up to tens
of percent for a first convolution's weights, whose gradient sums many products of small
terms): no fixed bound tells a correct bf16 implementation from a wrong one. PyTorch's CPU
autocast is the reference users trust, so for each case `hardy_step_bench --precision bf16
--dump` writes hardy's bf16 step on its initial weights and a batch, and this script runs the
same network (bench/step/torch_networks.py) on those weights and that batch in float64 and under
torch.autocast('cpu', dtype=torch.bfloat16), then requires, per parameter gradient and for the
loss and the outputs:

    ||hardy_bf16 - float64|| / ||float64||  <=  1.5 * (the same for torch's bf16) + 2e-2

A layer computed in f32 where bf16 was expected passes (it is closer), a bf16 layer that drops
a term, swaps a layout or rounds twice does not. Dropout is off (hardy's masks are its own hash).

    /usr/bin/python3 tests/core/test_torch_bf16_crosscheck.py build/bin/hardy_step_bench
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
import torch_networks  # noqa: E402

FACTOR, SLACK = 1.5, 2e-2
CASES = [
    # Groups of at least 4 channels: the image-pooling branch normalizes one pixel per channel, and a
    # group of 2 values normalizes to +-1 whatever they were, so its exact gradient is almost zero
    # and every precision's is noise (hardy's and torch's then differ by 2x and more).
    ["--batch", "2", "--height", "32", "--width", "32", "--model-width", "8", "--aspp-channels", "16",
     "--decoder-channels", "16", "--low-level-channels", "8", "--groups", "4"],
    ["--batch", "3", "--height", "24", "--width", "32", "--model-width", "6", "--aspp-channels", "8",
     "--aspp-rates", "1,2", "--decoder-channels", "8", "--low-level-channels", "6", "--norm", "batch"],
    ["--model", "tiramisu", "--batch", "2", "--height", "32", "--width", "48", "--dense-layers", "1,2,2",
     "--growth", "4", "--first-channels", "6", "--dense-kernel", "3", "--dropout", "0"],
    ["--model", "cosmoflow", "--volume", "32", "--batch", "4"],
]


# Autocast's CPU op lists: Debian's PyTorch 1.13 has group_norm in neither, and its kernel refuses
# bf16 inputs with f32 parameters; PyTorch 2.x runs it in f32 ("fp32 ops"), which is what this
# does, so the reference is the autocast of a current PyTorch.
_group_norm = torch.nn.functional.group_norm


def _group_norm_in_f32(x, *args, **kwargs):
    return _group_norm(x.float() if x.dtype == torch.bfloat16 else x, *args, **kwargs)


torch.nn.functional.group_norm = _group_norm_in_f32


def relative(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def torch_step(config, directory, step, bf16):
    model = torch_networks.build_model(config)
    torch_deeplab.load_hardy_model(model, os.path.join(directory, "model.h5"))
    regression = "targets" in step
    model.train(not regression)  # hardy_step_bench dumps a regression's step in inference mode
    x = torch.from_numpy(np.asarray(step["input"], dtype=np.float64))
    if not bf16:
        model = model.double()
    else:
        x = x.float()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        outputs = model(x)
    outputs = outputs.double() if not bf16 else outputs.float()
    if regression:
        target = torch.from_numpy(np.asarray(step["targets"], dtype=np.float64)).to(outputs.dtype)
        loss = torch.nn.functional.mse_loss(outputs, target)
    else:
        labels = torch.from_numpy(np.asarray(step["labels"]).astype(np.int64))
        weights = torch.from_numpy(np.asarray(step["class_weights"], dtype=np.float64)).to(outputs.dtype)
        loss = torch_deeplab.weighted_cross_entropy(outputs, labels, weights)
    loss.backward()
    grads = {name: p.grad.double().numpy() for name, p in model.named_parameters()}
    return float(loss), outputs.detach().double().numpy(), grads


def check_case(bench, args, directory):
    subprocess.run([bench, "--precision", "bf16", "--dump", directory, *args], check=True,
                   stdout=subprocess.DEVNULL)
    step = h5py.File(os.path.join(directory, "step.h5"), "r")
    config = json.loads(step.attrs["config"])
    exact_loss, exact_outputs, exact = torch_step(config, directory, step, bf16=False)
    torch_loss, torch_outputs, autocast = torch_step(config, directory, step, bf16=True)
    rows = [("loss", abs(float(step["loss"][0]) - exact_loss) / abs(exact_loss),
             abs(torch_loss - exact_loss) / abs(exact_loss)),
            ("outputs", relative(np.asarray(step["logits"]), exact_outputs),
             relative(torch_outputs, exact_outputs))]
    rows += [(f"grad {name}", relative(np.asarray(step["grads"][name]), exact[name]),
              relative(autocast[name], exact[name])) for name in exact]
    failures = []
    worst = max(rows, key=lambda row: row[1] - FACTOR * row[2])
    for name, hardy_error, torch_error in rows:
        if hardy_error > FACTOR * torch_error + SLACK:
            failures.append(f"  {name}: hardy bf16 {hardy_error:.3g} from float64, torch bf16 {torch_error:.3g}"
                            f" (limit {FACTOR * torch_error + SLACK:.3g})  FAIL")
            print(failures[-1])
    print(f"  {len(rows)} comparisons; closest to its limit: {worst[0]} (hardy {worst[1]:.3g}, torch {worst[2]:.3g})")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", help="path of hardy_step_bench")
    args = parser.parse_args()
    probe = subprocess.run([args.bench, "--precision", "bf16", "--steps", "1", "--warmup", "0", "--batch", "1",
                            "--height", "16", "--width", "16", "--model-width", "4", "--aspp-channels", "4",
                            "--decoder-channels", "4", "--low-level-channels", "4", "--groups", "2"],
                           capture_output=True, text=True)
    if probe.returncode != 0 and "AVX512-BF16" in probe.stderr:
        print(f"skipped: this CPU has no native bf16 ({probe.stderr.strip()[-160:]})")
        return 77
    torch.set_num_threads(1)
    failures = []
    with tempfile.TemporaryDirectory() as temporary:
        for index, case in enumerate(CASES):
            print(f"case {index}: {' '.join(case)}")
            failures += check_case(args.bench, case, os.path.join(temporary, f"case{index}"))
    print(f"{len(failures)} comparisons failed" if failures else "all comparisons passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
