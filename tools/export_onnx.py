#!/usr/bin/env python3
"""Writes a trained hardy network as ONNX; `hardy export RUN_DIR --onnx FILE` runs it.

It builds the network's PyTorch twin (bench/step/torch_networks.py build_model(): the same layers,
parameters and batch-norm statistics by hardy's names), loads the weights from a hardy model or
checkpoint file (/model/<name>), switches it to inference (batch norm on its running statistics,
no dropout) and traces it at the run's sample size with a free batch dimension:

    export_onnx.py --config JSON --weights model.h5 [--depth D] --height H --width W \
        [--output logits|outputs] --out model.onnx

JSON is the network's configuration as hardy's core::to_json(ModelConfig) writes it. The input is
`fields`, (N, C, H, W), or (N, C, D, H, W) for a volume; the output `logits` (a segmentation's, N,
K, H, W) or `outputs` (a regression's, N, targets).
"""
import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Installed: the torch models sit beside this file (share/hardy/tools); in the source tree, in
# bench/step.
for place in (HERE, HERE.parent / "bench" / "step"):
    if (place / "torch_networks.py").exists():
        sys.path.insert(0, str(place))
        break

import torch  # noqa: E402

import torch_deeplab  # noqa: E402
import torch_networks  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the network's configuration (JSON)")
    parser.add_argument("--weights", required=True, help="hardy model or checkpoint file")
    parser.add_argument("--depth", type=int, help="a volume's depth (CosmoFlow)")
    parser.add_argument("--height", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--output", choices=("logits", "outputs"), default="logits",
                        help="the output's name: a segmentation's logits, a regression's outputs")
    parser.add_argument("--out", required=True, help="ONNX file to write")
    args = parser.parse_args()
    config = json.loads(args.config)
    model = torch_networks.build_model(config)
    torch_deeplab.load_hardy_model(model, args.weights)
    model.eval()
    sample = [config["input_channels"], *([args.depth] if args.depth else []), args.height, args.width]
    example = torch.zeros(1, *sample)
    with torch.no_grad():
        torch.onnx.export(model, example, args.out, input_names=["fields"], output_names=[args.output],
                          dynamic_axes={"fields": {0: "batch"}, args.output: {0: "batch"}},
                          opset_version=13)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"hardy export: {config.get('architecture', 'compact')} network, {parameters:,} parameters, "
          f"input (N, {', '.join(map(str, sample))}) -> {args.output}, {args.out}")


if __name__ == "__main__":
    main()
