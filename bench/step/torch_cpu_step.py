#!/usr/bin/env python3
"""The current-PyTorch baseline of bench/step/hardy_step_bench.cpp: one variant of one network's
CPU training step per process, as someone tuning PyTorch for speed on a CPU node would run it.

The networks are hardy's twins (torch_deeplab.py and torch_networks.py: the same layers, sizes,
initialisation and optimizer, Adam with L2 decay on the weights), trained on a fixed random batch
with the same loss as hardy (weighted softmax cross-entropy; CosmoFlow: MSE). A variant is
  --mode eager | compile   PyTorch eager, or torch.compile over forward and loss (inductor's C++
                           kernels on the CPU; backward is compiled with it, Adam outside);
  --precision f32 | bf16   float32, or torch.autocast('cpu', dtype=torch.bfloat16) around forward
                           and loss (weights, gradients and Adam in float32; the input arrives in
                           bf16, as a bf16 data pipeline would deliver it);
  --memory-format channels_last | contiguous (channels_last_3d for CosmoFlow).

Prints one JSON line like torch_deeplab.py's: the median, mean and fastest step of --steps timed
steps after --warmup (the first of which compiles), the CPU time per step, the forward (with the
loss) / backward / Adam split, and what was run. Runs under the bench-only environment
(bench/step/baselines_env.sh):

    .venv-bench/bin/python bench/step/torch_cpu_step.py --model cosmoflow --volume 32 --batch 4 \\
        --threads 2 --mode compile --precision bf16
"""
import argparse
import contextlib
import json
import os
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_deeplab import (add_step_arguments, make_optimizer, model_config,  # noqa: E402
                           model_from_arguments, time_steps, weighted_cross_entropy)


def onednn_version():
    """The oneDNN inside torch (torch.backends.mkldnn has no version call; the build info has)."""
    match = re.search(r"MKL-DNN v([0-9.]+)", torch.__config__.show())
    return match.group(1) if match else None


def make_step(args):
    """The model and a training step of the variant, on a fixed batch."""
    torch.manual_seed(args.seed)
    model = model_from_arguments(args).train()
    regression = args.model == "cosmoflow"
    if args.memory_format == "channels_last":
        memory_format = torch.channels_last_3d if regression else torch.channels_last
    else:
        memory_format = torch.contiguous_format
    model = model.to(memory_format=memory_format)
    bf16 = args.precision == "bf16"
    if regression:  # cubes of 4 redshifts in, 4 parameters out, as hardy_step_bench
        x = torch.randn(args.batch, 4, args.volume, args.volume, args.volume)
        targets = torch.rand(args.batch, 4) * 2 - 1
    else:
        x = torch.randn(args.batch, args.input_channels, args.height, args.width)
        targets = torch.randint(0, args.classes, (args.batch, args.height, args.width))
    x = x.to(torch.bfloat16 if bf16 else torch.float32).contiguous(memory_format=memory_format)
    class_weights = torch.linspace(0.5, 2.0, args.classes)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)

    def forward_loss(inputs, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            out = model(inputs)
            if regression:  # in float32, as hardy's loss
                return F.mse_loss(out.float(), targets)
            return weighted_cross_entropy(out.float(), targets, class_weights)

    loss_fn = torch.compile(forward_loss) if args.mode == "compile" else forward_loss
    return model, optimizer, lambda: loss_fn(x, targets)


def benchmark(args):
    torch.set_num_threads(args.threads)
    model, optimizer, forward_loss = make_step(args)
    timed = time_steps(forward_loss, optimizer, args.warmup, args.steps)
    print(json.dumps({
        "bench": "torch_cpu_step",
        "torch_version": torch.__version__,
        "onednn_version": onednn_version(),
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "mode": args.mode, "precision": args.precision, "memory_format": args.memory_format,
        "threads": torch.get_num_threads(),
        "batch": args.batch, "height": args.height, "width": args.width,
        "model": model_config(args),
        "parameters": sum(p.numel() for p in model.parameters()),
        "warmup": args.warmup, "steps": args.steps, **timed,
    }))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(parser)
    parser.add_argument("--mode", choices=["eager", "compile"], default="eager")
    parser.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--memory-format", choices=["channels_last", "contiguous"],
                        default="channels_last")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    if args.mode == "compile" and args.warmup < 1:
        parser.error("--mode compile needs --warmup >= 1 (the first step compiles)")
    benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
