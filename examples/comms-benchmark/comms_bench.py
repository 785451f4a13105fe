"""Collective communication benchmark for torch.distributed (gloo by default).

Start one process per rank, e.g. for two ranks:

    python comms_bench.py --dist-url tcp://10.0.0.1:23456 --rank 0 --world-size 2
    python comms_bench.py --dist-url tcp://10.0.0.1:23456 --rank 1 --world-size 2

Rank 0 prints a table in the style of nccl-tests: per size, the mean and fastest time of an
operation, the algorithm bandwidth (size / time) and the bus bandwidth (what each rank's link
carried: for all_reduce 2(n-1)/n x the algorithm bandwidth). --json also prints JSON lines: on
every rank, how long joining the process group took, then one per operation and size.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

DESCRIPTION = "Collective communication benchmark for torch.distributed (gloo by default)."


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * UNITS[unit])


def human(n: int) -> str:
    for unit in ("G", "M", "K"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]}{unit}"
    return str(n)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factors (PERFORMANCE.md there)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "all_gather":
        return (n - 1) / n
    return 1.0  # broadcast


def run_op(op: str, tensor: torch.Tensor, gathered: list[torch.Tensor]) -> None:
    if op == "all_reduce":
        dist.all_reduce(tensor)
    elif op == "all_gather":
        dist.all_gather(gathered, tensor)
    else:
        dist.broadcast(tensor, src=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--dist-url", required=True, help="tcp://HOST:PORT of rank 0")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl", "mpi"])
    parser.add_argument(
        "--ops", default="all_reduce", help="comma-separated: all_reduce, all_gather, broadcast"
    )
    parser.add_argument(
        "--sizes",
        default="1K,64K,1M,16M",
        help="bytes per rank, comma-separated (K, M, G: powers of 1024)",
    )
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="also print JSON lines")
    args = parser.parse_args()

    start = time.perf_counter()
    dist.init_process_group(
        args.backend, init_method=args.dist_url, rank=args.rank, world_size=args.world_size
    )
    if args.json:
        took = time.perf_counter() - start
        print(json.dumps({"metric": "init_time", "value": took, "rank": args.rank}), flush=True)
    n, dtype = dist.get_world_size(), DTYPES[args.dtype]
    itemsize = torch.tensor([], dtype=dtype).element_size()
    ops = [o.strip() for o in args.ops.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rank == 0:
        print(
            f"# {args.backend}, {n} ranks, {args.dtype}, {args.warmup} warm-up and "
            f"{args.iters} timed iterations"
        )
        print(
            f"# {'op':>10} {'size':>8} {'count':>10} {'mean(ms)':>10} {'min(ms)':>10} "
            f"{'algbw(MB/s)':>12} {'busbw(MB/s)':>12}"
        )
    for op in ops:
        for size in sizes:
            count = max(1, size // itemsize)
            tensor = torch.ones(count, dtype=dtype)
            gathered = [torch.empty_like(tensor) for _ in range(n)]
            for _ in range(args.warmup):
                run_op(op, tensor, gathered)
            times = []
            for _ in range(args.iters):
                dist.barrier()
                start = time.perf_counter()
                run_op(op, tensor, gathered)
                times.append(time.perf_counter() - start)
            mean = statistics.fmean(times)
            algbw = count * itemsize / mean / 1e6
            busbw = algbw * bus_factor(op, n)
            if args.rank == 0:
                print(
                    f"  {op:>10} {human(count * itemsize):>8} {count:>10} {mean * 1e3:>10.3f} "
                    f"{min(times) * 1e3:>10.3f} {algbw:>12.2f} {busbw:>12.2f}",
                    flush=True,
                )
            if args.json:
                print(
                    json.dumps(
                        {
                            "metric": f"{op}_time",
                            "value": mean,
                            "min": min(times),
                            "bytes": count * itemsize,
                            "algbw_MBps": algbw,
                            "busbw_MBps": busbw,
                            "rank": args.rank,
                            "world_size": n,
                            "iters": args.iters,
                        }
                    ),
                    flush=True,
                )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
