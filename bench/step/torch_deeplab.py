#!/usr/bin/python3
"""hardy's compact DeepLabv3+ (core/src/nn/architectures/compact_deeplab.cpp) in PyTorch, for
benchmarks and cross-checks.

The module tree mirrors hardy's layer paths, so that every torch parameter name equals the
hardy parameter name (for example "encoder.stem.0.conv.weight", "encoder.stem.0.norm.gamma",
"decoder.classifier.bias"), and parameters are registered in hardy's order
(DeepLabV3Plus::parameters()). load_hardy_model() copies a hardy model.h5 (/model/<name>) in,
for this network and for the others (bench/step/torch_networks.py: tiramisu and deepcam, and
build_model(), which makes any of them from a model configuration).

Run as a script it times training steps (forward, loss, backward, Adam) of any of the networks
(--model compact, the default, tiramisu or deepcam) on random inputs and prints one JSON line,
like bench/step/hardy_step_bench.cpp does for hardy:

    /usr/bin/python3 bench/step/torch_deeplab.py --batch 8 --height 64 --width 64 --threads 2
    /usr/bin/python3 bench/step/torch_deeplab.py --model deepcam --batch 2 --threads 2
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def initialize_like_hardy(model, seed):
    """hardy's initialisation (Model::initialize): Kaiming-normal weights, std sqrt(2 / fan_in)
    with fan_in from dims 1..3 as PyTorch counts it, zero biases and betas, unit scales; the
    random numbers themselves differ from hardy's."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 4:
                fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                p.copy_(torch.randn(p.shape, generator=generator) * math.sqrt(2.0 / fan_in))
            elif name.endswith(".gamma"):
                p.fill_(1.0)
            else:
                p.zero_()


def group_count(channels, wanted):
    """The largest group count <= wanted that divides channels (hardy's group_count)."""
    for g in range(min(wanted, channels), 1, -1):
        if channels % g == 0:
            return g
    return 1


class GroupNormRelu(nn.Module):
    """Group normalization with hardy's parameter names (gamma, beta) and the fused ReLU.

    low_precision (a class-wide switch, off by default): under autocast, normalize in the
    activations' own dtype instead of autocast's float32 (its policy for group_norm), which is
    what a user tuning for speed would try (bench/gpu/torch_gpu_step.py --norm-precision low)."""

    low_precision = False

    def __init__(self, channels, groups, eps):
        super().__init__()
        self.groups = group_count(channels, groups)
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        if self.low_precision and torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
            with torch.autocast(x.device.type, enabled=False):
                return F.relu(F.group_norm(x.to(dtype), self.groups, self.gamma.to(dtype),
                                           self.beta.to(dtype), self.eps))
        return F.relu(F.group_norm(x, self.groups, self.gamma, self.beta, self.eps))


class BatchNormRelu(nn.Module):
    """Batch normalization with hardy's names (gamma, beta; running_mean and running_var as
    buffers) and the fused ReLU: batch statistics in training, the running ones in inference,
    momentum 0.1 and the unbiased variance, as hardy's Norm (and PyTorch's own)."""

    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x):
        return F.relu(F.batch_norm(x, self.running_mean, self.running_var, self.gamma, self.beta,
                                   training=self.training, momentum=0.1, eps=self.eps))


class ConvNormRelu(nn.Module):
    """hardy's ConvNormRelu: conv without bias -> group (or batch) norm -> relu."""

    def __init__(self, in_channels, out_channels, kernel, stride, dilation, c):
        super().__init__()
        padding = dilation * (kernel - 1) // 2  # "same" padding, as hardy's same()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding,
                              dilation=dilation, bias=False)
        self.norm = (BatchNormRelu(out_channels, c.norm_eps) if c.norm == "batch"
                     else GroupNormRelu(out_channels, c.groups, c.norm_eps))

    def forward(self, x):
        return self.norm(self.conv(x))


def make_stage(depth, in_channels, out_channels, stride, dilation, c):
    return nn.ModuleList(
        ConvNormRelu(in_channels if i == 0 else out_channels, out_channels, 3,
                     stride if i == 0 else 1, dilation, c) for i in range(depth))


def run_stage(blocks, x):
    for block in blocks:
        x = block(x)
    return x


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        w = c.width
        self.stem = make_stage(c.depth, c.input_channels, w, 2, 1, c)
        self.stage4x = make_stage(c.depth, w, 2 * w, 2, 1, c)
        self.stage8x = make_stage(c.depth, 2 * w, 4 * w, 2, 1, c)
        self.atrous = make_stage(c.depth, 4 * w, 4 * w, 1, 2, c)

    def forward(self, x):
        low = run_stage(self.stage4x, run_stage(self.stem, x))
        high = run_stage(self.atrous, run_stage(self.stage8x, low))
        return low, high


class Aspp(nn.Module):
    def __init__(self, c):
        super().__init__()
        high, a = 4 * c.width, c.aspp_channels
        self.rates = list(c.aspp_rates)
        self.branch1x1 = ConvNormRelu(high, a, 1, 1, 1, c)
        for rate in self.rates:
            self.add_module(f"rate{rate}", ConvNormRelu(high, a, 3, 1, rate, c))
        self.image_pool = ConvNormRelu(high, a, 1, 1, 1, c)
        self.projection = ConvNormRelu(a * (len(self.rates) + 2), a, 1, 1, 1, c)

    def forward(self, high):
        branches = [self.branch1x1(high)]
        branches += [getattr(self, f"rate{rate}")(high) for rate in self.rates]
        pooled = self.image_pool(F.adaptive_avg_pool2d(high, 1))
        branches.append(F.interpolate(pooled, size=high.shape[-2:], mode="bilinear",
                                      align_corners=False))
        return self.projection(torch.cat(branches, dim=1))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.low_level = ConvNormRelu(2 * c.width, c.low_level_channels, 1, 1, 1, c)
        self.fuse1 = ConvNormRelu(c.aspp_channels + c.low_level_channels, c.decoder_channels, 3,
                                  1, 1, c)
        self.fuse2 = ConvNormRelu(c.decoder_channels, c.decoder_channels, 3, 1, 1, c)
        self.classifier = nn.Conv2d(c.decoder_channels, c.num_classes, 1, bias=True)

    def forward(self, low, pyramid, size):
        up = F.interpolate(pyramid, size=low.shape[-2:], mode="bilinear", align_corners=False)
        fused = self.fuse2(self.fuse1(torch.cat([up, self.low_level(low)], dim=1)))
        return F.interpolate(self.classifier(fused), size=size, mode="bilinear",
                             align_corners=False)


class DeepLabV3Plus(nn.Module):
    """Attribute order is hardy's construction order, so parameters() lists the same tensors in
    the same order as hardy's DeepLabV3Plus::parameters()."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.aspp = Aspp(config)
        self.decoder = Decoder(config)

    def forward(self, x):
        low, high = self.encoder(x)
        return self.decoder(low, self.aspp(high), x.shape[-2:])

    def initialize(self, seed):
        initialize_like_hardy(self, seed)


class ModelConfig:
    """hardy::core::ModelConfig, with the same defaults."""

    def __init__(self, input_channels=16, num_classes=3, width=16, depth=1, aspp_channels=32,
                 aspp_rates=(2, 4, 6), low_level_channels=16, decoder_channels=32, groups=8,
                 norm_eps=1e-5, norm="group"):
        self.input_channels = input_channels
        self.num_classes = num_classes
        self.width = width
        self.depth = depth
        self.aspp_channels = aspp_channels
        self.aspp_rates = list(aspp_rates)
        self.low_level_channels = low_level_channels
        self.decoder_channels = decoder_channels
        self.groups = groups
        self.norm_eps = norm_eps
        if norm not in ("group", "batch"):
            raise ValueError(f"unknown norm '{norm}' (group or batch)")
        self.norm = norm

    def as_dict(self):
        return dict(vars(self))


def load_hardy_model(model, path):
    """Copies every /model/<name> dataset of a hardy model file into the parameter or buffer
    (batch-norm running statistics) of the same name; fails on a missing tensor, a shape
    mismatch (another model configuration) or a tensor in the file that the model lacks."""
    import h5py
    import numpy as np

    tensors = list(model.named_parameters()) + list(model.named_buffers())
    with h5py.File(path, "r") as f:
        group = f["model"]
        with torch.no_grad():
            for name, tensor in tensors:
                if name not in group:
                    raise KeyError(f"{path} has no /model/{name}")
                value = torch.from_numpy(np.asarray(group[name], dtype=np.float32))
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(f"{path}: /model/{name} has shape {tuple(value.shape)}, "
                                     f"torch expects {tuple(tensor.shape)}")
                tensor.copy_(value)
        extra = set(group.keys()) - {name for name, _ in tensors}
        if extra:
            raise ValueError(f"{path} holds tensors the torch model lacks: {sorted(extra)}")


def weighted_cross_entropy(logits, labels, class_weights):
    """hardy's loss: sum over pixels of weight[label] * -log softmax, over (batch * H * W)."""
    n, _, h, w = logits.shape
    return F.cross_entropy(logits, labels, weight=class_weights, reduction="sum") / (n * h * w)


def make_optimizer(model, lr, weight_decay, fused=None):
    """Adam with L2 decay on convolution and dense weights only (hardy's Parameter::weight_decay:
    not on biases and normalization scales, the 1-D parameters; CosmoFlow's 5-D and 2-D weights
    decay too). fused=True: PyTorch's fused CUDA Adam (one kernel over all parameters)."""
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                             {"params": others, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=fused)


def time_steps(forward_loss, optimizer, warmup, steps):
    """Runs warmup + steps training steps (forward_loss() returns the step's loss) and returns the
    timed steps' figures: median, mean and fastest step, the CPU time of all threads per step
    (spin-waiting OpenMP threads included), the forward (with the loss and zero_grad) / backward /
    optimizer split, the first and last loss, and the warm-up's seconds (compiling included)."""
    step_s, cpu, forward, backward, update, losses = [], [], [], [], [], []
    started = time.perf_counter()
    warmup_s = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            warmup_s = time.perf_counter() - started
        start = time.perf_counter()
        cpu_start = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = forward_loss()
        after_forward = time.perf_counter()
        loss.backward()
        after_backward = time.perf_counter()
        optimizer.step()
        end = time.perf_counter()
        cpu_end = time.process_time()
        losses.append(loss.item())
        if i >= warmup:
            step_s.append(end - start)
            cpu.append(cpu_end - cpu_start)
            forward.append(after_forward - start)
            backward.append(after_backward - after_forward)
            update.append(end - after_backward)
    return {"warmup_s": warmup_s, "median_s": statistics.median(step_s),
            "mean_s": statistics.fmean(step_s), "min_s": min(step_s),
            "cpu_median_s": statistics.median(cpu), "forward_median_s": statistics.median(forward),
            "backward_median_s": statistics.median(backward),
            "optimizer_median_s": statistics.median(update),
            "first_loss": losses[0], "last_loss": losses[-1]}


def benchmark(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = model_config(args)
    model = model_from_arguments(args)
    model.train()
    regression = args.model == "cosmoflow"
    if regression:  # 3-D volumes in (channels_last_3d), 4 targets out, as hardy_step_bench
        memory_format = (torch.channels_last_3d if args.memory_format == "channels_last"
                         else torch.contiguous_format)
        x = torch.randn(args.batch, 4, args.volume, args.volume, args.volume)
        targets = torch.rand(args.batch, 4) * 2 - 1
    else:
        memory_format = (torch.channels_last if args.memory_format == "channels_last"
                         else torch.contiguous_format)
        x = torch.randn(args.batch, args.input_channels, args.height, args.width)
        labels = torch.randint(0, args.classes, (args.batch, args.height, args.width))
        class_weights = torch.linspace(0.5, 2.0, args.classes)
    model = model.to(memory_format=memory_format)
    x = x.contiguous(memory_format=memory_format)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)

    def forward_loss():
        return (F.mse_loss(model(x), targets) if regression
                else weighted_cross_entropy(model(x), labels, class_weights))

    timed = time_steps(forward_loss, optimizer, args.warmup, args.steps)

    result = {
        "bench": "torch_step",
        "torch_version": torch.__version__,
        "memory_format": args.memory_format,
        "threads": torch.get_num_threads(),
        "batch": args.batch, "height": args.height, "width": args.width,
        "model": config,
        "parameters": sum(p.numel() for p in model.parameters()),
        "warmup": args.warmup, "steps": args.steps,
        **{key: value for key, value in timed.items() if key != "warmup_s"},
    }
    print(json.dumps(result))


def model_config(args):
    """The model configuration that add_model_arguments() describes, as hardy's model_json()
    writes it (bench/common/bench_support.hpp): the architecture and its fields."""
    config = {"architecture": args.model, "input_channels": args.input_channels,
              "num_classes": args.classes}
    if args.model == "compact":
        config.update(width=args.model_width, depth=args.depth, aspp_channels=args.aspp_channels,
                      aspp_rates=parse_rates(args.aspp_rates),
                      low_level_channels=args.low_level_channels,
                      decoder_channels=args.decoder_channels, groups=args.groups)
    elif args.model == "tiramisu":
        config.update(dense_layers=parse_rates(args.dense_layers), growth=args.growth,
                      first_channels=args.first_channels, dense_kernel=args.dense_kernel,
                      dropout=args.dropout)
    elif args.model == "cosmoflow":  # its 4 redshifts and 4 targets are fixed, as in hardy
        config.update(input_channels=4, num_classes=4, volume=args.volume)
    return config


def model_from_arguments(args):
    """The model that add_model_arguments() describes, initialised as hardy initialises it."""
    import torch_networks  # it imports this module

    model = torch_networks.build_model(model_config(args))
    model.initialize(args.seed)
    return model


def parse_rates(text):
    return [int(r) for r in text.split(",") if r]


def add_model_arguments(parser, batch, height, width):
    """The batch and model-shape flags, the same as hardy's benchmarks take (bench/common/
    bench_support.hpp apply_shape_flag)."""
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--height", type=int, default=height)
    parser.add_argument("--width", type=int, default=width)
    parser.add_argument("--input-channels", type=int, default=16)
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--model", choices=["compact", "tiramisu", "deepcam", "cosmoflow"],
                        default="compact", help="the network (hardy's ModelConfig::architecture)")
    parser.add_argument("--volume", type=int, default=128, help="cosmoflow: the input cube's edge")
    parser.add_argument("--model-width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--aspp-channels", type=int, default=32)
    parser.add_argument("--aspp-rates", default="2,4,6")
    parser.add_argument("--low-level-channels", type=int, default=16)
    parser.add_argument("--decoder-channels", type=int, default=32)
    parser.add_argument("--groups", type=int, default=8)
    # tiramisu's (hardy's defaults: the Gordon Bell run's settings); deepcam has no knobs.
    parser.add_argument("--dense-layers", default="2,2,2,4,5")
    parser.add_argument("--growth", type=int, default=32)
    parser.add_argument("--first-channels", type=int, default=64)
    parser.add_argument("--dense-kernel", type=int, default=5)
    parser.add_argument("--dropout", type=float, default=0.2)


def add_step_arguments(parser):
    """The network's options (add_model_arguments) and a timed step's: threads, warm-up and timed
    steps, seed, Adam's rate and weight decay, as hardy_step_bench takes them."""
    add_model_arguments(parser, batch=8, height=64, width=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(parser)
    parser.add_argument("--memory-format", choices=["channels_last", "contiguous"],
                        default="channels_last")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
