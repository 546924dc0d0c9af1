#!/usr/bin/env python3
"""Runs hardy's GPU measurements and writes them, with date, machine and commands, to
bench/results/gpu-<date>.json:

  peak      hardy_gpu_bench --peak: the device's measured dense BF16 GEMM rate (cuBLAS)
  step      per model configuration (the compact network at three sizes; deepcam and tiramisu,
            the seed runs' networks, at 768x1152; cosmoflow at 128^3) and precision, in rotating order over --rounds rounds:
              hardy   hardy_gpu_bench (CUDA backend, cuDNN/cuBLAS, conv TFLOP/s per shape)
              torch   torch_gpu_step.py, tuned for speed: AMP with the input in its dtype,
                      fused Adam, channels_last, cudnn.benchmark, no synchronisation in the
                      timed steps; eager, torch.compile and torch.compile(reduce-overhead)
            each in its own process; a variant's result is its best per-round step time;
            ratio = the fastest PyTorch mode / hardy (> 1: hardy is faster)
  nccl      hardy_nccl_bench: allreduce, bucketed gradient allreduce and restore broadcast
  converge  hardy_gpu_bench --converge: examples/tiny.ini's job (synthetic climate, 300 steps) on
            the CPU and on the GPU from the same weights and samples: loss curves, held-out mIoU

On the GPU machine, from the checkout with the kit of bench/gpu/make_kit.sh:

    source bench/gpu/device_env.sh build-cuda/gpu-kit
    python3 bench/gpu/bench_gpu.py --bin build-cuda/gpu-kit/bin
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from benchlib import ROOT, option_list, write_results  # noqa: E402
import benchlib  # noqa: E402

# Model configurations both benchmarks take (ModelConfig's fields); sizes for one H200.
CONFIGS = {
    # The CPU benchmark's "large" configuration, for continuity with bench/step.
    "small": {"batch": 8, "height": 128, "width": 128, "model-width": 32, "aspp-channels": 64,
              "decoder-channels": 64, "low-level-channels": 16},
    "medium": {"batch": 16, "height": 256, "width": 256, "model-width": 64,
               "aspp-channels": 128, "decoder-channels": 128, "low-level-channels": 48},
    # CAM5-sized climate fields (768 x 1152, 16 variables).
    "climate": {"batch": 8, "height": 768, "width": 1152, "model-width": 64,
                "aspp-channels": 128, "decoder-channels": 128, "low-level-channels": 48},
    # The seed runs' networks at the climate fields' full size (issue #42), at MLPerf HPC
    # DeepCAM's local batch of 2 per GPU: their published shapes, no knobs.
    "deepcam": {"model": "deepcam", "batch": 2, "height": 768, "width": 1152},
    "tiramisu": {"model": "tiramisu", "batch": 2, "height": 768, "width": 1152},
    # MLPerf HPC CosmoFlow as published (issue #44): 4 x 128^3 volumes, its reference's local
    # batch of 4; MSE on 4 targets.
    "cosmoflow": {"model": "cosmoflow", "batch": 4, "volume": 128},
}
COMMON = {"input-channels": 16, "classes": 3}
# The compact network's shape beyond its configuration (the networks above have none).
COMPACT = {"depth": 1, "aspp-rates": "2,4,6", "groups": 8}
ASSUMED_PEAK_TFLOPS = 790.0  # the H200's measured dense BF16 rate quoted in the issue


def run_json(command, log, required=True):
    """The JSON line a measurement prints. A failed measurement that is not required is reported
    and returns None, so that one variant's failure (a PyTorch mode, an out-of-memory size) does
    not lose the others' figures."""
    log.append(" ".join(shlex.quote(part) for part in command))
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=False)
    program = os.path.basename(command[1] if command[0] == sys.executable else command[0])
    print(f"  ({time.monotonic() - started:.0f} s: {program})", file=sys.stderr, flush=True)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    message = f"bench_gpu.py: {log[-1]} failed ({done.returncode}):\n{done.stderr[-3000:]}"
    if required:
        sys.exit(message)
    print(message, file=sys.stderr, flush=True)
    return None


def machine_info():
    info = benchlib.machine_info()
    query = "name,memory.total,driver_version,clocks.max.sm,power.limit"
    smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    info["nvidia_smi"] = smi.stdout.strip() or None
    try:
        import torch  # only for versions; the timed runs are separate processes
        info["torch_version"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        info["torch_cudnn"] = torch.backends.cudnn.version()
        info["torch_nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except ImportError:
        info["torch_version"] = None
    info["ld_library_path"] = os.environ.get("LD_LIBRARY_PATH")
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "build-cuda", "bin"),
                        help="folder with hardy_gpu_bench and hardy_nccl_bench")
    benchlib.add_round_arguments(parser, CONFIGS, "small,medium,climate", warmup=5)
    parser.add_argument("--precisions", default="bf16,fp16")
    parser.add_argument("--parts", default="peak,step,nccl,converge")
    parser.add_argument("--torch-modes", default="eager,compile,reduce-overhead",
                        help="torch_gpu_step.py --modes")
    parser.add_argument("--torch-norm-precision", default="autocast", choices=["autocast", "low"])
    parser.add_argument("--torch-precisions",
                        help="precisions PyTorch runs too (default: all of --precisions); the "
                             "others are hardy alone, e.g. fp16 against hardy's bf16")
    parser.add_argument("--output", help="JSON file (default bench/results/gpu-<date>.json)")
    args = parser.parse_args()
    configs = benchlib.chosen_configs(parser, args, CONFIGS)
    parts = set(args.parts.split(","))
    hardy_bench = os.path.join(args.bin, "hardy_gpu_bench")
    nccl_bench = os.path.join(args.bin, "hardy_nccl_bench")
    torch_step = [sys.executable, os.path.join(HERE, "torch_gpu_step.py")]

    output = args.output or os.path.join(ROOT, "bench", "results",
                                          f"gpu-{datetime.date.today().isoformat()}.json")
    log = []
    report = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": machine_info(), "commands": log,
              "assumed_peak_tflops": ASSUMED_PEAK_TFLOPS}
    peak = ASSUMED_PEAK_TFLOPS
    if "peak" in parts:
        report["peak"] = run_json([hardy_bench, "--peak"], log)
        peak = report["peak"]["tflops"]
        print(f"dense BF16 GEMM: {peak:.0f} TFLOP/s")

    if "step" in parts:
        report["step"] = []
        print(f"{'config':<8} {'prec':<5} {'hardy ms':>9} {'torch ms':>9} {'ratio':>6} "  # fastest mode
              f"{'step TF/s':>9} {'conv TF/s':>9} {'% peak':>6} {'act':>5}")
        for name in configs:
            for precision in args.precisions.split(","):
                shape = COMPACT if "model" not in CONFIGS[name] else {}
                options = option_list(COMMON, shape, CONFIGS[name],
                                      {"precision": precision, "warmup": args.warmup,
                                       "steps": args.steps})
                commands = {"hardy": [hardy_bench] + options}
                if precision in (args.torch_precisions or args.precisions).split(","):
                    commands["torch"] = torch_step + options + [
                        "--modes", args.torch_modes, "--norm-precision", args.torch_norm_precision]
                runs = {variant: [] for variant in commands}
                order = list(commands)
                for round_index in range(args.rounds):
                    shift = round_index % len(order)
                    for variant in order[shift:] + order[:shift]:
                        result = run_json(commands[variant], log, required=False)
                        if result is not None:
                            runs[variant].append(result)
                best = {v: min(runs[v], key=lambda r: r["median_s"]) for v in runs if runs[v]}
                if "hardy" not in best:
                    report["step"].append({"config": name, "precision": precision,
                                           "error": "hardy_gpu_bench failed", "runs": runs})
                    continue
                hardy = best["hardy"]
                row = {"config": name, "precision": precision, "options": CONFIGS[name],
                       "hardy_ms": 1e3 * hardy["median_s"],
                       "hardy_activation_dtype": hardy["activation_dtype"],
                       "hardy_skipped_steps": hardy.get("skipped_steps"),
                       "step_tflops": hardy["step_tflops"], "conv_tflops": hardy["conv_tflops"],
                       "conv_tflops_share_of_peak": hardy["conv_tflops"] / peak,
                       "step_tflops_share_of_peak": hardy["step_tflops"] / peak,
                       "hardy_non_conv_share": 1 - hardy["conv_share_of_step"],
                       "hardy_op_profile": hardy.get("operations"),
                       # As the trainer queues the step (no waits after forward and backward),
                       # back to back: host clock and device events.
                       "hardy_back_to_back_ms": 1e3 * hardy.get("back_to_back_s", float("nan")),
                       "hardy_back_to_back_device_ms": 1e3 * hardy.get("back_to_back_device_s",
                                                                         float("nan")),
                       "runs": runs}
                torch_run = best.get("torch")
                if torch_run:
                    row.update({
                        "torch_ms": 1e3 * torch_run["median_s"],
                        "ratio_torch_over_hardy": torch_run["median_s"] / hardy["median_s"],
                        "torch_fastest_mode": torch_run["fastest_mode"],
                        "torch_ms_by_mode": {m["mode"]: 1e3 * min(
                            mode["step_s"] for r in runs["torch"] for mode in r["modes"]
                            if mode["mode"] == m["mode"]) for m in torch_run["modes"]},
                        "torch_failed_modes": torch_run.get("failed_modes", {})})
                report["step"].append(row)
                torch_ms = f"{row['torch_ms']:9.2f}" if torch_run else f"{'-':>9}"
                ratio = f"{row['ratio_torch_over_hardy']:6.2f}" if torch_run else f"{'-':>6}"
                print(f"{name:<8} {precision:<5} {row['hardy_ms']:9.2f} {torch_ms} {ratio} "
                      f"{hardy['step_tflops']:9.1f} {hardy['conv_tflops']:9.1f} "
                      f"{100 * hardy['conv_tflops'] / peak:6.1f} {hardy['activation_dtype']:>5}")
                print(f"  hardy as the trainer queues it, back to back: "
                      f"{row['hardy_back_to_back_ms']:.2f} ms per step "
                      f"({row['hardy_back_to_back_device_ms']:.2f} ms on the device's clock)")
                if torch_run:
                    print("  torch by mode (ms): " + ", ".join(
                        f"{m} {ms:.2f}" for m, ms in row["torch_ms_by_mode"].items()) +
                        (f"; failed: {row['torch_failed_modes']}"
                         if row["torch_failed_modes"] else ""))
                print(f"  hardy outside convolutions: {100 * row['hardy_non_conv_share']:.0f}%; "
                      "slowest operations (ms/step): " + ", ".join(
                          f"{op['operation']} {op['ms_per_step']:.2f}"
                          for op in (row["hardy_op_profile"] or [])[:6]))
                if hardy["activation_dtype"] != precision.replace("fp", "f"):
                    print(f"  note: hardy's model allocated {hardy['activation_dtype']} activations "
                          f"(the layers do not yet use the backend's activation dtype)")
                # Written after every row: a part cut short by its time limit keeps what it had.
                write_results(report, output, None)

    if "nccl" in parts:
        report["nccl"] = run_json([nccl_bench], log)
        for row in report["nccl"]["allreduce_in_place"]:
            print(f"allreduce {row['bytes'] / 2**20:8.0f} MiB: {row['busbw_gb_s']:8.1f} GB/s bus")
        print(f"gradient buckets: {report['nccl']['gradient_buckets']['busbw_gb_s']:.1f} GB/s bus, "
              f"restore broadcast: {report['nccl']['restore_broadcast']['busbw_gb_s']:.1f} GB/s "
              f"({report['nccl']['bootstrap']})")

    if "converge" in parts:
        report["converge"] = []
        for precision in args.precisions.split(","):
            run = run_json([hardy_bench, "--converge", "--precision", precision], log)
            report["converge"].append(run)
            for side in ("cpu", "cuda"):
                r = run[side]
                print(f"tiny job on {side:<4} ({r['activation_dtype']}): loss {r['first_5_mean_loss']:.4f} -> "
                      f"{r['last_10_mean_loss']:.4f}, held-out mIoU {r['held_out_mean_iou']:.3f}, "
                      f"{r['skipped_steps']} skipped steps, {r['seconds']:.1f} s")

    write_results(report, output, None)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
