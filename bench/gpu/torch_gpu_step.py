#!/usr/bin/env python3
"""The PyTorch baseline of bench/gpu/hardy_gpu_bench.cpp, run as someone tuning PyTorch for
speed would run it: the same DeepLabv3+ (bench/step/torch_deeplab.py, which mirrors hardy's
layers), batch, image size and optimizer (Adam, L2 decay on convolution weights) on one GPU, with

  - automatic mixed precision (torch.autocast in bf16 or fp16; a GradScaler for fp16), the input
    already in the autocast dtype (no conversion inside the step), channels_last tensors and
    torch.backends.cudnn.benchmark on;
  - fused Adam (one CUDA kernel over all parameters; the GradScaler unscales inside it);
  - no synchronisation inside the timed steps: CUDA events around --steps back-to-back steps,
    repeated --repeats times (the best repeat is reported, as hardy's best round is);
  - each of the modes asked for (--modes), in this process one after another, each from the same
    initial weights:
      eager            PyTorch eager;
      compile          torch.compile over forward and loss (inductor fuses the memory-bound
                       work; backward is compiled with it), the fused Adam step outside;
      reduce-overhead  the same with mode="reduce-overhead": the compiled forward and backward
                       replayed as CUDA graphs.
    --norm-precision low normalizes in the autocast dtype rather than autocast's float32.

Prints one JSON line: per mode the seconds per step, the compile time and the first and last
loss; `fastest_mode` and `median_s` (that mode's step), which bench_gpu.py compares hardy with.
A mode that fails is reported with its error and left out of the comparison.

    python3 bench/gpu/torch_gpu_step.py --batch 16 --height 256 --width 256 --model-width 32 \\
        --precision bf16 --modes eager,compile,reduce-overhead

--device cpu --precision fp32 --modes eager runs the same code on the CPU, to check the script
on a machine without a GPU.
"""
import argparse
import contextlib
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "step"))
import torch_deeplab  # noqa: E402
from torch_deeplab import (add_model_arguments, make_optimizer, model_from_arguments,  # noqa: E402
                           weighted_cross_entropy)

MODES = ("eager", "compile", "reduce-overhead")
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


class Timer:
    """Seconds of GPU (or CPU) time between start() and stop(), without a synchronisation in
    between: CUDA events on the current stream."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.begin = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def start(self):
        if self.cuda:
            self.begin.record()
        else:
            self.began = time.perf_counter()

    def stop(self):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return 1e-3 * self.begin.elapsed_time(self.end)
        return time.perf_counter() - self.began


def make_step(args, device, mode):
    """A training step for `mode`, the model and its inputs; every mode starts from the same
    weights (the seed) and trains on the same fixed batch."""
    torch.manual_seed(args.seed)
    model = model_from_arguments(args)
    # CosmoFlow regresses 4 parameters from cubes of 4 redshifts (MSE), as hardy_gpu_bench.
    regression = args.model == "cosmoflow"
    memory_format = torch.channels_last_3d if regression else torch.channels_last
    model = model.to(device=device, memory_format=memory_format).train()
    amp_dtype = AMP_DTYPES[args.precision]
    # The input arrives in the dtype the first convolution runs in (a data loader would deliver
    # it so), so autocast converts nothing per step.
    dims = ((args.batch, 4, args.volume, args.volume, args.volume) if regression
            else (args.batch, args.input_channels, args.height, args.width))
    x = torch.randn(*dims, device=device, dtype=amp_dtype or torch.float32)
    x = x.contiguous(memory_format=memory_format)
    if regression:
        labels = torch.rand(args.batch, 4, device=device) * 2 - 1
    else:
        labels = torch.randint(0, args.classes, (args.batch, args.height, args.width), device=device)
    class_weights = torch.linspace(0.5, 2.0, args.classes, device=device)
    optimizer = make_optimizer(model, args.lr, args.weight_decay,
                               fused=True if device.type == "cuda" else None)
    # fp16 needs loss scaling; bf16 has fp32's exponent range and does not.
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None

    def forward_loss(inputs, targets):
        with (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
              else contextlib.nullcontext()):
            if regression:  # the loss in fp32, as autocast runs mse_loss
                return torch.nn.functional.mse_loss(model(inputs).float(), targets)
            return weighted_cross_entropy(model(inputs), targets, class_weights)

    if mode == "eager":
        loss_fn = forward_loss
    else:
        loss_fn = torch.compile(forward_loss, mode=None if mode == "compile" else mode)
    graphs = mode == "reduce-overhead"

    def step():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(x, labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # fused Adam unscales and skips on overflow on the device
            scaler.update()
        # A CUDA graph's output is overwritten by the next replay; keep a copy (one tiny kernel).
        return loss.detach().clone() if graphs else loss.detach()

    return model, step


def run_mode(args, device, mode):
    model, step = make_step(args, device, mode)
    started = time.perf_counter()
    first_loss = step()
    for _ in range(max(args.warmup - 1, 0)):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    warmup_s = time.perf_counter() - started  # includes compiling and cuDNN's algorithm search
    timer = Timer(device)
    per_step = []
    last_loss = first_loss
    for _ in range(args.repeats):
        timer.start()
        for _ in range(args.steps):
            last_loss = step()
        per_step.append(timer.stop() / args.steps)
    return {"mode": mode, "step_s": min(per_step), "repeats_s": per_step,
            "warmup_s": warmup_s, "first_loss": float(first_loss), "last_loss": float(last_loss),
            "parameters": sum(p.numel() for p in model.parameters()),
            "model": model.config.as_dict()}


def benchmark(args):
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_gpu_step.py: no CUDA device: skipped", file=sys.stderr)
        return 77
    torch.backends.cudnn.benchmark = True
    torch_deeplab.GroupNormRelu.low_precision = args.norm_precision == "low"
    modes = [m for m in args.modes.split(",") if m]
    results, failures = [], {}
    for mode in modes:
        try:
            results.append(run_mode(args, device, mode))
        except Exception as error:  # one mode failing must not lose the others' figures
            failures[mode] = f"{type(error).__name__}: {error}"
            traceback.print_exc(file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if not results:
        print(f"torch_gpu_step.py: every mode failed: {failures}", file=sys.stderr)
        return 1
    fastest = min(results, key=lambda r: r["step_s"])
    print(json.dumps({
        "bench": "torch_gpu_step",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "precision": args.precision,
        "norm_precision": args.norm_precision,
        "optimizer": "Adam, fused" if device.type == "cuda" else "Adam, foreach",
        "input_dtype": str(AMP_DTYPES[args.precision] or torch.float32).replace("torch.", ""),
        "memory_format": "channels_last",
        "cudnn_benchmark": True,
        "timing": f"events around {args.steps} back-to-back steps, best of {args.repeats}",
        "batch": args.batch, "height": args.height, "width": args.width,
        "model": results[0]["model"],
        "parameters": results[0]["parameters"],
        "warmup": args.warmup, "steps": args.steps, "repeats": args.repeats,
        "modes": results, "failed_modes": failures,
        "fastest_mode": fastest["mode"], "median_s": fastest["step_s"],
        "first_loss": fastest["first_loss"], "last_loss": fastest["last_loss"],
    }))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser, batch=16, height=256, width=256)
    parser.add_argument("--precision", choices=sorted(AMP_DTYPES), default="bf16")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--norm-precision", choices=["autocast", "low"], default="autocast",
                        help="group norm in autocast's float32 (its policy) or in the "
                             "activations' dtype")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to check the script")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="back-to-back steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1 or args.repeats < 1:
        parser.error("--steps, --warmup and --repeats must be >= 1")
    unknown = sorted(set(args.modes.split(",")) - set(MODES) - {""})
    if unknown:
        parser.error(f"unknown --modes {','.join(unknown)}; choose from {','.join(MODES)}")
    return benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
