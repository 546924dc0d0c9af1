"""hardy's tiramisu, deepcam and cosmoflow networks in PyTorch, and build_model(): the one place that makes
the torch version of any of hardy's networks from a model configuration (bench/common/
bench_support.hpp model_json(), as hardy_step_bench prints it and writes it into its --dump).

Each network is written once, as a description that mirrors its hardy description line by line
(core/src/nn/architectures/tiramisu.cpp and deepcam_deeplab.cpp) against a small builder
interface like hardy's NetworkBuilder. The description runs twice:
- at construction, against a builder whose nodes are channel counts, which registers every
  parameter (and every batch-norm buffer) under hardy's name, in hardy's order, in a tree of
  plain container modules, one per dotted name segment (weights start at zero: initialize(seed)
  or torch_deeplab.load_hardy_model() fills them); so named_parameters() lists exactly
  hardy's Model::parameters() ("encoder.block1.sep0.depthwise.weight", "down0.layer0.bias") and
  named_buffers() hardy's Model::buffers() ("encoder.conv1.bn.running_mean");
- in forward(), against a builder whose nodes are tensors and whose layers are functional ops
  (F.conv2d with groups and dilation, F.conv_transpose2d with the output padding that gives the
  size hardy's `like` node asks for, F.batch_norm with the running buffers, ...).
So torch_deeplab.load_hardy_model() loads a hardy model.h5 into either.

Conventions (hardy's): convolution weights (O, I/groups, KH, KW), transposed convolution weights
(I, O, KH, KW); batch norm: gamma/beta, batch statistics in training, running statistics with
momentum 0.1 and the unbiased variance (PyTorch's, as hardy's Norm); ChannelAffine y = gamma[c] *
x + beta[c]; upsampling is bilinear with align_corners=False (from 1x1 a broadcast).

Dropout (tiramisu): F.dropout, inverted, only when the rate is above 0 and the module trains.
Its masks are torch's random ones, NOT hardy's hash masks (core/src/compute/dropout_mask.hpp),
so a step with dropout is not comparable element by element; the cross-check runs tiramisu with
--dropout 0, and the benchmarks time the same amount of dropout work on both sides.

The compact DeepLabv3+ is torch_deeplab.DeepLabV3Plus; build_model() returns it for
architecture "compact" (the default, also for configurations written before the others
existed).
"""
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_deeplab

# hardy::core::ModelConfig's defaults per network (tiramisu: the Gordon Bell run's settings).
TIRAMISU_DEFAULTS = {"input_channels": 16, "num_classes": 3, "dense_layers": [2, 2, 2, 4, 5],
                     "growth": 32, "first_channels": 64, "dense_kernel": 5, "dropout": 0.2,
                     "norm_eps": 1e-5}
DEEPCAM_DEFAULTS = {"input_channels": 16, "num_classes": 3, "norm_eps": 1e-5}
COSMOFLOW_DEFAULTS = {"input_channels": 4, "num_classes": 4, "volume": 128, "norm_eps": 1e-5}


class NetworkConfig(types.SimpleNamespace):
    """A network's configuration, as build_model() received it (defaults filled in)."""

    def as_dict(self):
        return dict(vars(self))


def configuration(config, defaults, architecture):
    unknown = set(config) - set(defaults)
    if unknown:
        raise ValueError(f"{architecture} takes no model fields {sorted(unknown)}")
    return NetworkConfig(architecture=architecture, **dict(defaults, **config))


class Container(nn.Module):
    """One segment of a dotted hardy name: the parameters, buffers and segments below it."""


# ---- the two builders ---------------------------------------------------------------------------
class Declare:
    """Construction: nodes are channel counts; registers what each layer owns."""

    def __init__(self, network):
        self.network = network

    @staticmethod
    def channels(x):
        return x

    def conv(self, name, x, out, kernel, stride=1, padding=0, dilation=1, groups=1, bias=False):
        if x % groups or out % groups:
            raise ValueError(f"{name}: {groups} groups do not divide {x} -> {out} channels")
        self.network.declare(name + ".weight", torch.zeros(out, x // groups, kernel, kernel))
        if bias:
            self.network.declare(name + ".bias", torch.zeros(out))
        return out

    def conv_transpose(self, name, x, like, out, kernel, stride, padding, bias):
        self.network.declare(name + ".weight", torch.zeros(x, out, kernel, kernel))
        if bias:
            self.network.declare(name + ".bias", torch.zeros(out))
        return out

    def norm(self, name, x, relu):
        self.network.declare(name + ".gamma", torch.ones(x))
        self.network.declare(name + ".beta", torch.zeros(x))
        self.network.declare(name + ".running_mean", torch.zeros(x), buffer=True)
        self.network.declare(name + ".running_var", torch.ones(x), buffer=True)
        return x

    def channel_affine(self, name, x):
        self.network.declare(name + ".gamma", torch.ones(x))
        self.network.declare(name + ".beta", torch.zeros(x))
        return x

    def relu(self, x):
        return x

    def dropout(self, x, rate):
        if not 0 <= rate < 1:
            raise ValueError(f"dropout rate {rate} is not in [0, 1)")
        return x

    def add(self, a, b):
        if a != b:
            raise ValueError(f"add of {a} and {b} channels")
        return a

    def concat(self, inputs):
        return sum(inputs)

    def upsample_like(self, x, like):
        return x

    def global_avg_pool(self, x):
        return x

    def conv3d(self, name, x, out, kernel, padding, bias=True):
        self.network.declare(name + ".weight", torch.zeros(out, x, kernel, kernel, kernel))
        if bias:
            self.network.declare(name + ".bias", torch.zeros(out))
        return out

    def max_pool3d(self, x, kernel, stride):
        return x

    def leaky_relu(self, x, slope):
        return x

    def flatten(self, x, features):
        if features % x:
            raise ValueError(f"flatten of {x} channels into {features} features")
        return features

    def dense(self, name, x, out):
        self.network.declare(name + ".weight", torch.zeros(out, x))
        self.network.declare(name + ".bias", torch.zeros(out))
        return out

    def scaled_tanh(self, x, scale):
        return x


class Run:
    """forward(): nodes are tensors, layers functional ops on the registered tensors."""

    def __init__(self, network):
        self.network = network
        self.training = network.training

    @staticmethod
    def channels(x):
        return x.shape[1]

    def conv(self, name, x, out, kernel, stride=1, padding=0, dilation=1, groups=1, bias=False):
        p = self.network.get_parameter
        return F.conv2d(x, p(name + ".weight"), p(name + ".bias") if bias else None, stride,
                        padding, dilation, groups)

    def conv_transpose(self, name, x, like, out, kernel, stride, padding, bias):
        # The output padding that makes the output like's size, as hardy's conv_transpose.
        output_padding = []
        for axis in (-2, -1):
            base = (x.shape[axis] - 1) * stride - 2 * padding + kernel
            extra = like.shape[axis] - base
            if not 0 <= extra < stride:
                raise ValueError(f"{name}: no output padding takes {x.shape[axis]} to "
                                 f"{like.shape[axis]}")
            output_padding.append(extra)
        p = self.network.get_parameter
        return F.conv_transpose2d(x, p(name + ".weight"), p(name + ".bias") if bias else None,
                                  stride, padding, tuple(output_padding))

    def norm(self, name, x, relu):
        n = self.network
        y = F.batch_norm(x, n.get_buffer(name + ".running_mean"),
                         n.get_buffer(name + ".running_var"), n.get_parameter(name + ".gamma"),
                         n.get_parameter(name + ".beta"), training=self.training, momentum=0.1,
                         eps=n.config.norm_eps)
        return F.relu(y) if relu else y

    def channel_affine(self, name, x):
        gamma = self.network.get_parameter(name + ".gamma").view(1, -1, 1, 1)
        beta = self.network.get_parameter(name + ".beta").view(1, -1, 1, 1)
        return x * gamma + beta

    def relu(self, x):
        return F.relu(x)

    def dropout(self, x, rate):
        return F.dropout(x, rate, training=True) if self.training and rate > 0 else x

    def add(self, a, b):
        return a + b

    def concat(self, inputs):
        return torch.cat(inputs, dim=1)

    def upsample_like(self, x, like):
        return F.interpolate(x, size=like.shape[-2:], mode="bilinear", align_corners=False)

    def global_avg_pool(self, x):
        return x.mean(dim=(2, 3), keepdim=True)

    def conv3d(self, name, x, out, kernel, padding, bias=True):
        p = self.network.get_parameter
        return F.conv3d(x, p(name + ".weight"), p(name + ".bias") if bias else None, 1, padding)

    def max_pool3d(self, x, kernel, stride):
        return F.max_pool3d(x, kernel, stride)

    def leaky_relu(self, x, slope):
        return F.leaky_relu(x, slope)

    def flatten(self, x, features):
        y = torch.flatten(x, 1)
        if y.shape[1] != features:
            raise ValueError(f"flatten: {features} features expected, got {tuple(x.shape)}")
        return y

    def dense(self, name, x, out):
        p = self.network.get_parameter
        return F.linear(x, p(name + ".weight"), p(name + ".bias"))

    def scaled_tanh(self, x, scale):
        return scale * torch.tanh(x)


class DescribedNetwork(nn.Module):
    """A network given by a description(builder, input) function, as hardy's are."""

    def __init__(self, config, input_multiple):
        super().__init__()
        self.config = config
        self.input_multiple = input_multiple
        self.describe(Declare(self), config.input_channels)

    def declare(self, name, value, buffer=False):
        *path, leaf = name.split(".")
        module = self
        for segment in path:
            if segment not in module._modules:
                module.add_module(segment, Container())
            module = module._modules[segment]
        if leaf in module._parameters or leaf in module._buffers:
            raise ValueError(f"two tensors are named {name}")
        if buffer:
            module.register_buffer(leaf, value)
        else:
            module.register_parameter(leaf, nn.Parameter(value))

    def forward(self, x):
        if x.shape[-2] % self.input_multiple or x.shape[-1] % self.input_multiple:
            raise ValueError(f"{self.config.architecture}: height and width must divide by "
                             f"{self.input_multiple}, got {tuple(x.shape)}")
        return self.describe(Run(self), x)

    def initialize(self, seed):
        torch_deeplab.initialize_like_hardy(self, seed)


def same(kernel, dilation=1):
    """hardy's same_padding(kernel, stride, dilation).padding."""
    return dilation * (kernel - 1) // 2


# ---- tiramisu ----------------------------------------------------------------------------------
class Tiramisu(DescribedNetwork):
    """core/src/nn/architectures/tiramisu.cpp: the Gordon Bell run's FC-DenseNet."""

    def __init__(self, config):
        config = configuration(config, TIRAMISU_DEFAULTS, "tiramisu")
        config.dense_layers = list(config.dense_layers)
        if len(config.dense_layers) < 2:
            raise ValueError("tiramisu needs at least two blocks")
        super().__init__(config, 1 << (len(config.dense_layers) - 1))

    def describe(self, b, input):
        c = self.config
        k, rate = c.dense_kernel, c.dropout

        def dense_block(name, x, layers, whole_output):
            added = []
            for i in range(layers):
                y = b.conv(f"{name}.layer{i}", x, c.growth, k, padding=same(k), bias=True)
                y = b.dropout(b.relu(y), rate)
                added.append(y)
                if i + 1 < layers or whole_output:
                    x = b.concat([x, y])
            return x, added

        x = b.dropout(b.conv("first", input, c.first_channels, k, padding=same(k), bias=True),
                      rate)
        down_blocks = len(c.dense_layers) - 1
        skips = []
        for i in range(down_blocks):
            x = dense_block(f"down{i}", x, c.dense_layers[i], True)[0]
            skips.append(x)
            x = b.conv(f"down{i}.transition", x, b.channels(x), 1, stride=2, bias=True)
            x = b.dropout(b.relu(x), rate)
        added = dense_block("bottleneck", x, c.dense_layers[-1], False)[1]
        for i in range(down_blocks):
            level = down_blocks - 1 - i
            fresh = added[0] if len(added) == 1 else b.concat(added)
            up = b.conv_transpose(f"up{i}.transition", fresh, skips[level], b.channels(fresh), 3,
                                  stride=2, padding=1, bias=True)
            x, added = dense_block(f"up{i}", b.concat([up, skips[level]]), c.dense_layers[level],
                                   level == 0)
        logits = b.conv("classifier", x, c.num_classes, 1, bias=True)
        return b.dropout(logits, rate)


# ---- deepcam -----------------------------------------------------------------------------------
class DeepCam(DescribedNetwork):
    """core/src/nn/architectures/deepcam_deeplab.cpp: MLPerf HPC DeepCAM's DeepLabv3+ on an
    aligned Xception at output stride 16, as published (56,454,720 parameters for 16 input
    channels and 3 classes)."""

    def __init__(self, config):
        super().__init__(configuration(config, DEEPCAM_DEFAULTS, "deepcam"), 16)

    def describe(self, b, input):
        c = self.config

        def separable(name, x, out, stride=1, dilation=1):
            channels = b.channels(x)
            d = b.conv(name + ".depthwise", x, channels, 3, stride=stride,
                       padding=same(3, dilation), dilation=dilation, groups=channels)
            return b.conv(name + ".pointwise", d, out, 1)

        def block(name, x, out, reps, stride, end_with_relu, grow_first=True, is_last=False):
            input_node, in_channels = x, b.channels(x)
            widths = [out] if grow_first else []
            widths += [out if grow_first else in_channels] * (reps - 1)
            if not grow_first:
                widths.append(out)
            for i, width in enumerate(widths):
                x = separable(f"{name}.sep{i}", x, width)
                x = b.norm(f"{name}.sep{i}.bn", x, relu=i + 1 < len(widths))
            if stride != 1:
                x = separable(name + ".down", x, out, stride)
            if stride == 1 and is_last:
                x = separable(name + ".last", x, out)
            skip = input_node
            if out != in_channels or stride != 1:
                skip = b.norm(name + ".skip.bn", b.conv(name + ".skip", input_node, out, 1,
                                                        stride=stride), False)
            x = b.add(x, skip)
            return b.relu(x) if end_with_relu else x

        def conv_bn_relu(name, x, out, kernel, stride=1, dilation=1):
            return b.norm(name + ".bn", b.conv(name, x, out, kernel, stride=stride,
                                               padding=same(kernel, dilation), dilation=dilation),
                          True)

        def up(name, x, like, out):
            return b.conv_transpose(name, x, like, out, 3, stride=2, padding=1, bias=False)

        # Encoder.
        x = conv_bn_relu("encoder.conv1", input, 32, 3, stride=2)
        stride2 = conv_bn_relu("encoder.conv2", x, 64, 3)
        low = b.relu(block("encoder.block1", stride2, 128, 2, 2, False))
        x = block("encoder.block2", low, 256, 2, 2, True)
        stride8 = x
        x = block("encoder.block3", x, 728, 2, 2, True)
        for i in range(4, 20):
            x = block(f"encoder.block{i}", x, 728, 3, 1, True)
        x = block("encoder.block20", x, 1024, 2, 1, False, grow_first=False, is_last=True)
        x = b.norm("encoder.conv3.bn", separable("encoder.conv3", x, 1536, 1, 2), True)
        x = b.norm("encoder.conv4.bn", separable("encoder.conv4", x, 1536, 1, 2), True)
        high = b.norm("encoder.conv5.bn", separable("encoder.conv5", x, 2048, 1, 2), True)

        # ASPP.
        branches = [conv_bn_relu("aspp.rate1", high, 256, 1)]
        for rate in (6, 12, 18):
            branches.append(conv_bn_relu(f"aspp.rate{rate}", high, 256, 3, dilation=rate))
        pooled = b.conv("aspp.image_pool", b.global_avg_pool(high), 256, 1)
        pooled = b.relu(b.channel_affine("aspp.image_pool.affine", pooled))
        branches.append(b.upsample_like(pooled, high))
        x = conv_bn_relu("aspp.projection", b.concat(branches), 256, 1)

        # Decoder.
        x = b.norm("decoder.up1.bn", up("decoder.up1", x, stride8, 256), True)
        x = b.norm("decoder.up2.bn", up("decoder.up2", x, low, 256), True)
        low_projected = conv_bn_relu("decoder.low_level", low, 48, 1)
        x = conv_bn_relu("decoder.conv1", b.concat([x, low_projected]), 256, 3)
        x = conv_bn_relu("decoder.conv2", x, 256, 3)
        x = b.conv("decoder.conv3", x, 256, 1, bias=True)
        x = b.norm("decoder.up3.bn", up("decoder.up3", x, stride2, 256), True)
        return up("decoder.classifier", x, input, c.num_classes)


# ---- cosmoflow ---------------------------------------------------------------------------------
class CosmoFlow(DescribedNetwork):
    """core/src/nn/architectures/cosmoflow.cpp: MLPerf HPC CosmoFlow's 3-D regression network
    (inputs (N, 4, V, V, V), outputs (N, 4) in (-1.2, 1.2))."""

    def __init__(self, config):
        config = configuration(config, COSMOFLOW_DEFAULTS, "cosmoflow")
        if config.volume % 32:
            raise ValueError(f"cosmoflow: volume {config.volume} is not a multiple of 32")
        super().__init__(config, 32)

    def forward(self, x):
        v = self.config.volume
        if tuple(x.shape[1:]) != (self.config.input_channels, v, v, v):
            raise ValueError(f"cosmoflow: input must be (N, {self.config.input_channels}, {v}, {v}, {v}), "
                             f"got {tuple(x.shape)}")
        return self.describe(Run(self), x)

    def describe(self, b, input):
        x, edge = input, self.config.volume
        for block in range(5):
            x = b.conv3d(f"conv{block}", x, 32 << block, 3, 1)
            x = b.max_pool3d(b.leaky_relu(x, 0.3), 2, 2)
            edge //= 2
        x = b.flatten(x, b.channels(x) * edge ** 3)
        x = b.dropout(b.leaky_relu(b.dense("dense0", x, 128), 0.3), 0.5)
        x = b.dropout(b.leaky_relu(b.dense("dense1", x, 64), 0.3), 0.5)
        return b.scaled_tanh(b.dense("output", x, self.config.num_classes), 1.2)

    def initialize(self, seed):
        """Glorot-uniform weights and zero biases, as hardy (and the reference's Keras)."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _, p in self.named_parameters():
                if p.dim() >= 2:
                    receptive = p[0][0].numel()
                    limit = (6.0 / ((p.shape[0] + p.shape[1]) * receptive)) ** 0.5
                    p.copy_(torch.rand(p.shape, generator=generator) * 2 * limit - limit)
                else:
                    p.zero_()


# ---- from a configuration ----------------------------------------------------------------------
def build_model(config):
    """The torch version of the network a model_json() configuration describes (a dict, as
    hardy_step_bench writes it): "architecture" picks the network (compact when absent), the
    other keys are that network's fields; an unknown key is an error."""
    config = dict(config)
    architecture = config.pop("architecture", "compact")
    if architecture == "compact":
        return torch_deeplab.DeepLabV3Plus(torch_deeplab.ModelConfig(**config))
    if architecture == "tiramisu":
        return Tiramisu(config)
    if architecture == "deepcam":
        return DeepCam(config)
    if architecture == "cosmoflow":
        return CosmoFlow(config)
    raise ValueError(f"unknown architecture '{architecture}' (compact, tiramisu, deepcam or cosmoflow)")
