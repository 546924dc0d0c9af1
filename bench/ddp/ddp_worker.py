#!/usr/bin/python3
"""One rank of PyTorch DistributedDataParallel (gloo) training hardy's DeepLabv3+ mirror
(bench/step/torch_deeplab.py) on fixed random inputs, with no protection: what hardy's users
would otherwise run. Started as torchrun starts it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
in the environment; bench/ddp/ddp_bench.py does); rank 0 prints one JSON line with the median
step time of the timed steps, the slowest rank's.

--batch is the global batch; each rank trains on its share, as hardy's ranks do.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "step"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch_deeplab import add_model_arguments, make_optimizer, model_from_arguments, weighted_cross_entropy  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser, batch=8, height=64, width=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.batch % size:
        sys.exit(f"--batch {args.batch} does not split over {size} ranks")
    torch.manual_seed(args.seed + rank)
    model = model_from_arguments(args).to(memory_format=torch.channels_last)
    model.train()
    ddp = DistributedDataParallel(model)
    local = args.batch // size
    x = torch.randn(local, args.input_channels, args.height, args.width).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, args.classes, (local, args.height, args.width))
    class_weights = torch.linspace(0.5, 2.0, args.classes)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    steps = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        # The loss of a global batch: each rank's sum over its pixels, over the global pixel count
        # (DDP averages gradients over ranks, so the local mean is the same scale).
        loss = weighted_cross_entropy(ddp(x), labels, class_weights)
        loss.backward()
        optimizer.step()
        if i >= args.warmup:
            steps.append(time.perf_counter() - start)
    # Every rank waits for the slowest: the job's step is the slowest rank's median.
    median = torch.tensor([statistics.median(steps)])
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"median_s": median.item(), "ranks": size, "threads": args.threads,
                          "steps": args.steps, "torch_version": torch.__version__}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
