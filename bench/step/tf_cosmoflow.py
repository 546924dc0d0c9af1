#!/usr/bin/env python3
"""The TensorFlow baseline of CosmoFlow's CPU training step (MLPerf HPC CosmoFlow's reference is
a Keras model): hardy's CosmoFlow (core/src/nn/architectures/cosmoflow.cpp, torch twin in
torch_networks.py) as a Keras model, timed as hardy_step_bench times hardy's, one variant per
process. Prints one JSON line like torch_cpu_step.py's.

The network, layer for layer: five times Conv3D (32 << i filters, 3^3, same padding, bias),
LeakyReLU 0.3, MaxPool3D 2; Flatten; Dense 128, LeakyReLU 0.3, Dropout 0.5; Dense 64, LeakyReLU
0.3, Dropout 0.5; Dense 4; 1.2 tanh (4,778,788 parameters at 32^3, 8,907,556 at 128^3, as
hardy's). Glorot-uniform weights and zero biases (Keras's defaults, and hardy's). Channels-last
(NDHWC), TensorFlow's layout for oneDNN on the CPU. The step: forward, MSE in float32, gradients,
L2 decay 1e-4 added to the conv and dense kernels' gradients, Adam (lr 1e-3, betas 0.9/0.999,
eps 1e-8): hardy's step bench's optimizer. One tf.function without XLA (jit_compile=False:
XLA made this step 5x slower on the CPU).

  --precision f32    float32;
  --precision bf16   Keras's mixed_bfloat16 policy (bf16 compute, float32 variables, gradients
                     and Adam), the input in bf16, the output activation in float32.

    .venv-bench/bin/python bench/step/tf_cosmoflow.py --batch 4 --volume 32 --threads 2 --precision bf16
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the banner of CPU features is noise here

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

SLOPE, DROPOUT, OUTPUT_SCALE, TARGETS, REDSHIFTS = 0.3, 0.5, 1.2, 4, 4


def cosmoflow(volume, input_dtype):
    inputs = keras.Input((volume, volume, volume, REDSHIFTS), dtype=input_dtype)
    x = inputs
    for block in range(5):
        x = layers.Conv3D(32 << block, 3, padding="same", name=f"conv{block}")(x)
        x = layers.MaxPool3D(2, 2)(layers.LeakyReLU(negative_slope=SLOPE)(x))
    x = layers.Flatten()(x)
    x = layers.Dropout(DROPOUT)(layers.LeakyReLU(negative_slope=SLOPE)(layers.Dense(128, name="dense0")(x)))
    x = layers.Dropout(DROPOUT)(layers.LeakyReLU(negative_slope=SLOPE)(layers.Dense(64, name="dense1")(x)))
    x = layers.Dense(TARGETS, name="output")(x)
    # In float32, as the mixed-precision guide keeps a model's outputs.
    outputs = layers.Activation(lambda t: OUTPUT_SCALE * keras.ops.tanh(t), dtype="float32")(x)
    return keras.Model(inputs, outputs, name="cosmoflow")


def benchmark(args):
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    keras.utils.set_random_seed(args.seed)
    bf16 = args.precision == "bf16"
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if bf16 else "float32")
    input_dtype = "bfloat16" if bf16 else "float32"
    model = cosmoflow(args.volume, input_dtype)
    rng = np.random.default_rng(args.seed)
    x = tf.constant(rng.standard_normal((args.batch, args.volume, args.volume, args.volume,
                                         REDSHIFTS), dtype=np.float32), dtype=input_dtype)
    y = tf.constant(rng.uniform(-1, 1, (args.batch, TARGETS)).astype(np.float32))
    optimizer = keras.optimizers.Adam(learning_rate=args.lr, beta_1=0.9, beta_2=0.999,
                                      epsilon=1e-8)
    variables = model.trainable_variables
    decayed = [len(v.shape) >= 2 for v in variables]  # kernels, not biases (hardy's rule)
    optimizer.build(variables)

    @tf.function(jit_compile=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(prediction, tf.float32) - y))
        grads = tape.gradient(loss, variables)
        grads = [g + args.weight_decay * v if d else g
                 for g, v, d in zip(grads, variables, decayed)]
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    steps, cpu, losses = [], [], []
    started = time.perf_counter()
    warmup_s = 0.0
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            warmup_s = time.perf_counter() - started  # tracing the graph included
        start = time.perf_counter()
        cpu_start = time.process_time()
        losses.append(float(step(x, y).numpy()))  # .numpy() waits for the step
        end = time.perf_counter()
        cpu_end = time.process_time()
        if i >= args.warmup:
            steps.append(end - start)
            cpu.append(cpu_end - cpu_start)
    print(json.dumps({
        "bench": "tf_cosmoflow_step",
        "tensorflow_version": tf.__version__, "keras_version": keras.__version__,
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
        "precision": args.precision, "policy": keras.mixed_precision.global_policy().name,
        "memory_format": "channels_last (NDHWC)", "xla": False,
        "threads": args.threads, "inter_op_threads": args.inter_op_threads,
        "batch": args.batch, "volume": args.volume,
        "model": {"architecture": "cosmoflow", "input_channels": REDSHIFTS,
                  "num_classes": TARGETS, "volume": args.volume},
        "parameters": int(sum(np.prod(v.shape) for v in variables)),
        "warmup": args.warmup, "steps": args.steps, "warmup_s": warmup_s,
        "median_s": statistics.median(steps), "mean_s": statistics.fmean(steps),
        "min_s": min(steps), "cpu_median_s": statistics.median(cpu),
        "first_loss": losses[0], "last_loss": losses[-1],
    }))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--volume", type=int, default=128, help="the input cube's edge")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="intra-op threads (oneDNN's and Eigen's pool)")
    parser.add_argument("--inter-op-threads", type=int, default=1,
                        help="independent operations run at once (default 1: on a few cores "
                             "more would only share the intra-op threads' cores)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    # hardy_step_bench's shape flags, which a CosmoFlow run ignores (the driver passes them all).
    for ignored in ("--height", "--width", "--input-channels", "--classes"):
        parser.add_argument(ignored, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=["cosmoflow"], default="cosmoflow")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be >= 1 (the first step traces the graph)")
    if args.volume % 32:
        parser.error(f"--volume {args.volume} is not a multiple of 32")
    benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
