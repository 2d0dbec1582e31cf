"""The host side of torchmetrics' cross-rank sync of one scalar state, on one GPU.

Composer 0.17 computes each training metric once a batch (Trainer._compute_and_log_metrics calls
Metric.compute), which syncs every state over all ranks with torchmetrics' gather_all_tensors
(torchmetrics 0.11-1.0; Composer 0.17 pins torchmetrics < 1.1). For a 0-dim state on n ranks:

  torch.distributed.barrier()                      NCCL: a one-element all-reduce, then the host waits
                                                   for the device (cudaDeviceSynchronize)
  out = [torch.zeros_like(x) for _ in range(n)]    n fill kernels
  torch.distributed.all_gather(out, x)             ProcessGroupNCCL: a flat buffer, ncclAllGather, then
                                                   on its stream record_stream and copy_ into each of the n
  torch.stack(out).sum(0)                          the metric's dist_reduce_fx 'sum'

The collectives need n ranks; this times the parts whose host work grows with n on one GPU, each
started with the device idle (as after the barrier) and timed on the host (issue) and to the
device's end (drain):
  zeros  : [torch.zeros_like(x) for _ in range(n)]
  copies : with the side stream: out[j].record_stream(s); out[j].copy_(flat[j], non_blocking=True)
  stack  : torch.stack(out).sum(0)
and, on a one-rank NCCL group, barrier() and all_gather([y], x) (their fixed host cost).
n = 64, 256, 512, 1024, 4096; median of 21. One JSON line per (part, n).
"""
import json, os, statistics, time
import torch
import torch.distributed as dist

dev = torch.device('cuda', 0)
x = torch.tensor(1.5, device=dev)
side = torch.cuda.Stream()


def timed(make, run, reps=21):
    issue, drain = [], []
    for _ in range(3):
        run(make())
    for _ in range(reps):
        arg = make()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run(arg)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        issue.append(t1 - t0)
        drain.append(t2 - t0)
    return statistics.median(issue), statistics.median(drain)


def zeros(n):
    return [torch.zeros_like(x) for _ in range(n)]


def copies(arg):
    out, flat = arg
    with torch.cuda.stream(side):
        for j in range(len(out)):
            out[j].record_stream(side)
            out[j].copy_(flat[j], non_blocking=True)


def emit(part, n, t):
    print(json.dumps({'part': part, 'n': n, 'issue_s': t[0], 'drain_s': t[1],
                      'issue_per_element_us': t[0] / n * 1e6 if n else None}), flush=True)


for n in (64, 256, 512, 1024, 4096):
    emit('zeros', n, timed(lambda: n, zeros))
    emit('copies', n, timed(lambda: (zeros(n), torch.empty(n, device=dev)), copies))
    emit('stack', n, timed(lambda: zeros(n), lambda out: torch.stack(out).sum(0)))

os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
os.environ.setdefault('MASTER_PORT', '29555')
dist.init_process_group('nccl', rank=0, world_size=1, device_id=dev)
emit('barrier', 1, timed(lambda: None, lambda _: dist.barrier()))
emit('all_gather', 1, timed(lambda: [torch.zeros_like(x)], lambda out: dist.all_gather(out, x)))
emit('all_reduce', 1, timed(lambda: torch.zeros(1, device=dev), lambda t: dist.all_reduce(t)))
dist.destroy_process_group()
print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,
                  'nccl': '.'.join(map(str, torch.cuda.nccl.version()))}), flush=True)
