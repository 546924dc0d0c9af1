#!/usr/bin/env python3
"""The PyTorch baseline of bench/gpu/hardy_gpu_bench.cpp: the same DeepLabv3+ (the model of
bench/step/torch_deeplab.py, which mirrors hardy's layers), batch, image size and optimizer
(Adam, L2 decay on convolution weights) on one GPU, with automatic mixed precision
(torch.autocast in bf16 or fp16, a GradScaler for fp16), channels_last tensors and
torch.backends.cudnn.benchmark on. Times forward + loss, backward and the optimizer step after
warm-up, synchronising with the GPU, and prints one JSON line.

    python3 bench/gpu/torch_gpu_step.py --batch 16 --height 256 --width 256 --model-width 32 \
        --precision bf16
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "step"))
from torch_deeplab import (add_model_arguments, make_optimizer, model_from_arguments,  # noqa: E402
                           weighted_cross_entropy)


def benchmark(args):
    if not torch.cuda.is_available():
        print("torch_gpu_step.py: no CUDA device: skipped", file=sys.stderr)
        return 77
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    model = model_from_arguments(args)
    model = model.to(device=device, memory_format=torch.channels_last).train()
    x = torch.randn(args.batch, args.input_channels, args.height, args.width, device=device)
    x = x.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, args.classes, (args.batch, args.height, args.width), device=device)
    class_weights = torch.linspace(0.5, 2.0, args.classes, device=device)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]
    # fp16 needs loss scaling; bf16 has fp32's exponent range and does not.
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")

    steps, forward, backward, update, losses = [], [], [], [], []
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = weighted_cross_entropy(model(x), labels, class_weights)
        losses.append(loss.item())  # waits for the forward pass, as hardy's loss does
        after_forward = time.perf_counter()
        scaler.scale(loss).backward()
        torch.cuda.synchronize()
        after_backward = time.perf_counter()
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.synchronize()
        end = time.perf_counter()
        if i >= args.warmup:
            steps.append(end - start)
            forward.append(after_forward - start)
            backward.append(after_backward - after_forward)
            update.append(end - after_backward)

    print(json.dumps({
        "bench": "torch_gpu_step",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(0),
        "precision": args.precision,
        "memory_format": "channels_last",
        "cudnn_benchmark": True,
        "batch": args.batch, "height": args.height, "width": args.width,
        "model": model.config.as_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "warmup": args.warmup, "steps": args.steps,
        "median_s": statistics.median(steps), "min_s": min(steps),
        "forward_median_s": statistics.median(forward),
        "backward_median_s": statistics.median(backward),
        "optimizer_median_s": statistics.median(update),
        "first_loss": losses[0], "last_loss": losses[-1],
    }))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser, batch=16, height=256, width=256)
    parser.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    return benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
