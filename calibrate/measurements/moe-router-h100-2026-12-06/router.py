"""A MoE layer's routing bookkeeping, forward and backward, as Megatron-Core runs it unfused.

Each configuration builds the router's work after its GEMM, written from Megatron-Core's
sources (core_r0.10.0 and core_r0.12.0, megatron/core/transformer/moe/router.py and
moe_utils.py: topk_softmax_with_capacity, group_limited_topk, the switch and the
sequence-level load-balancing losses, the aux-loss tracker, the expert-bias counts) on the
logits of one micro-batch's own tokens, and backpropagates a gradient through the
routing probabilities as the experts' combine would.

Timed three ways, each the median of 7 repeats of n iterations (n = 8: an iteration launches up
to ~90 kernels, and CUDA's launch queue, about a thousand deep, must hold them all behind the spin):
  seq    the iterations queued behind a spin kernel, one event pair around them all
         (the GPU's time when the host keeps its queue full, as in a training step)
  host   the iterations issued to an idle GPU, synchronized at the end (the host's cost)
  count  kernels an iteration launches (torch.profiler)

Then the device-to-host syncs of the unfused permutation: `masked_select` sizes its output
on the host. `sync` times a 4096^3 BF16 GEMM, the op, and the GEMM again, against the same
with an op of the same work and no sync (index_select of a fixed index), issued from an
idle queue, to price one sync the way a step meets it.

One JSON line per (configuration, mode).
"""
import json
import math
import sys

import torch

DEV = "cuda"


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def spin_cycles(seconds):
    return int(seconds * torch.cuda.get_device_properties(0).clock_rate * 1e3)


def capacity(tokens, experts, factor):
    return int(math.ceil(tokens / experts * factor))


class Tracker:
    def __init__(self, layers):
        self.values = torch.zeros(layers, device=DEV)


def group_limited_topk(scores, topk, groups, group_topk):
    t, e = scores.shape
    group_scores = scores.view(t, groups, -1).topk(topk // group_topk, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=group_topk, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(t, groups, e // groups).reshape(t, -1)
    masked = scores.masked_fill(~score_mask.bool(), float("-inf"))
    return torch.topk(masked, k=topk, dim=-1)


def route(cfg, logits, tracker, bias_counts):
    """The routing probabilities [T, E] (differentiable) and the routing map."""
    t, e = logits.shape
    k = cfg["topk"]

    def compute_topk(s):
        if cfg.get("groups"):
            return group_limited_topk(s, k, cfg["groups"], cfg["group_topk"])
        return torch.topk(s, k=k, dim=1)

    if cfg["score"] == "softmax":
        scores, idx = compute_topk(logits)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(logits)
    else:
        scores = torch.sigmoid(logits.float()).type_as(logits)
        if cfg.get("expert_bias") is not None:
            _, idx = compute_topk(scores + cfg["expert_bias"])
            scores = torch.gather(scores, dim=1, index=idx).type_as(logits)
        else:
            scores, idx = compute_topk(scores)
        probs = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)
    if cfg.get("scaling"):
        probs = probs * cfg["scaling"]
    gates = torch.zeros_like(logits).scatter(1, idx, probs)
    topk_map = torch.zeros_like(logits).int().scatter(1, idx, 1).bool()
    tokens_per_expert = topk_map.sum(dim=0)
    if cfg.get("capacity"):
        cap = capacity(t * k, e, cfg["capacity"])
        _, cap_idx = torch.topk(gates, k=cap, dim=0, sorted=False)
        cap_mask = torch.zeros_like(logits).scatter(0, cap_idx, 1).bool()
        final_map = cap_mask if cfg.get("pad") else torch.logical_and(topk_map, cap_mask)
        final_probs = gates * final_map
    else:
        final_map, final_probs = topk_map, gates
    coeff = cfg.get("aux_coeff", 0.0)
    if cfg["aux"] != "none" and (coeff > 0 or cfg.get("aux_always")):
        if cfg["score"] == "softmax":
            aux_scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
        else:
            aux_scores = torch.sigmoid(logits)
            aux_scores = aux_scores / (aux_scores.sum(dim=-1, keepdim=True) + 1e-20)
        if cfg["aux"] == "aux_loss":
            agg = aux_scores.sum(dim=0)
            aux = torch.sum(agg * tokens_per_expert) * (e * coeff / (t * t * k))
        else:  # seq_aux_loss, one sequence of t tokens
            m = final_map.view(t, 1, -1)
            cost = m.sum(dim=0, dtype=torch.float).div_(t * k / e)
            aux = (cost * aux_scores.view(t, 1, -1).mean(dim=0)).sum(dim=1).mean()
            aux = aux * coeff
        tracker.values[3] += (aux / coeff).detach()
        final_probs = AuxScaler.apply(final_probs, aux)
    if bias_counts is not None:
        with torch.no_grad():
            bias_counts += final_map.sum(dim=0)
    return final_probs, final_map


class AuxScaler(torch.autograd.Function):
    scale = None

    @staticmethod
    def forward(ctx, out, aux):
        ctx.save_for_backward(aux)
        return out

    @staticmethod
    def backward(ctx, g):
        (aux,) = ctx.saved_tensors
        return g, torch.ones_like(aux) * AuxScaler.scale


CONFIGS = {
    # DGX Cloud's Grok 1 314B (NeMo 24.12, core_r0.10.0): 8192 tokens / CP 2 / TP 4 routed a rank,
    # 8 experts top 2, softmax after top-k, capacity 1.0 padded (drop policy probs), the switch
    # aux loss at 0.01 (r0.10 computes it whatever the coefficient).
    "grok-r010": dict(tokens=1024, experts=8, topk=2, score="softmax", capacity=1.0, pad=True,
                      aux="aux_loss", aux_coeff=0.01, aux_always=True, dtype=torch.bfloat16),
    # DGX Cloud's DeepSeek-V3 (NeMo 25.04, core_r0.12.0): 4096 tokens / TP 2, 256 experts top 8,
    # sigmoid scores with the expert bias, 8 groups of which 4, scaling 2.5, capacity 1.0 padded,
    # the sequence-level aux loss at 1e-4, FP32 router logits.
    "deepseek-r012": dict(tokens=2048, experts=256, topk=8, score="sigmoid", bias=True, groups=8, group_topk=4,
                          scaling=2.5, capacity=1.0, pad=True, aux="seq_aux_loss", aux_coeff=1e-4,
                          dtype=torch.float32),
    # Dropless routers of Megatron-Core's defaults with the switch loss (Mixtral's shape, and a
    # fine-grained 128-expert top-8 router), BF16 logits.
    "mixtral-dropless": dict(tokens=4096, experts=8, topk=2, score="softmax", aux="aux_loss", aux_coeff=0.01,
                             dtype=torch.bfloat16),
    "e128k8-dropless": dict(tokens=4096, experts=128, topk=8, score="softmax", aux="aux_loss", aux_coeff=1e-3,
                            dtype=torch.bfloat16),
    # Without the aux loss: the router's own selection alone.
    "mixtral-noaux": dict(tokens=4096, experts=8, topk=2, score="softmax", aux="none", dtype=torch.bfloat16),
}


def make_iter(cfg, n_buf=4, backward=True):
    torch.manual_seed(0)
    t, e = cfg["tokens"], cfg["experts"]
    logits = [torch.randn(t, e, device=DEV, dtype=cfg["dtype"], requires_grad=True) for _ in range(n_buf)]
    grads = [torch.randn(t, e, device=DEV, dtype=cfg["dtype"]) for _ in range(n_buf)]
    tracker = Tracker(8)
    counts = torch.zeros(e, device=DEV) if cfg.get("bias") else None
    cfg = dict(cfg)
    if cfg.get("bias"):
        cfg["expert_bias"] = torch.zeros(e, device=DEV, dtype=torch.float32)
    AuxScaler.scale = torch.tensor(1.0, device=DEV)
    state = {"i": 0}

    def one():
        i = state["i"] % n_buf
        state["i"] += 1
        if not backward:
            with torch.no_grad():
                route(cfg, logits[i], tracker, counts)
            return
        probs, _ = route(cfg, logits[i], tracker, counts)
        probs.backward(grads[i].to(probs.dtype))

    return one


def time_seq(one, n, spin_s=0.2):
    out = []
    for _ in range(7):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin_cycles(spin_s))
        s.record()
        for _ in range(n):
            one()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e-3 / n)
    return median(out)


def time_host(one, n):
    import time
    out = []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            one()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / n)
    return median(out)


def count_kernels(one):
    from torch.profiler import profile, ProfilerActivity
    one()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        one()
        torch.cuda.synchronize()
    kernels, names = 0, {}
    gpu_s = 0.0
    for ev in prof.profiler.kineto_results.events():
        if ev.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        name = ev.name()
        if name.startswith("Memcpy") or name.startswith("Memset"):
            key = name[:60]
        kernels += 1
        gpu_s += ev.duration_ns() * 1e-9
        key = name[:60]
        names[key] = names.get(key, 0) + 1
    return kernels, gpu_s, names


def permutations(version, pad, tokens=4096, experts=8, topk=2, hidden=1024):
    """One permutation and unpermutation with the probabilities, forward and backward, as
    core_r0.10.0 (masked_select throughout) or core_r0.12.0 (a padded router's rows sorted
    on the device) run them unfused; the tokens' rows are `hidden` wide. `r012-dispatch`:
    as core_r0.12.0's all-to-all dispatcher calls them, the probabilities masked_select-ed
    in the permutation (padded or not) and weighted into the rows there, the unpermutation
    without them."""
    torch.manual_seed(1)
    x = torch.randn(tokens, hidden, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    logits = torch.randn(tokens, experts, device=DEV)
    idx = torch.topk(logits, topk, dim=1)[1]
    routing_map = torch.zeros(tokens, experts, device=DEV, dtype=torch.int32).scatter(1, idx, 1).bool()
    probs = torch.rand(tokens, experts, device=DEV, dtype=torch.bfloat16) * routing_map
    probs.requires_grad_(True)
    cap = capacity(tokens * topk, experts, 1.0)
    gout = torch.randn(tokens, hidden, device=DEV, dtype=torch.bfloat16)

    def dispatch():
        if pad:
            m = routing_map.to(dtype=torch.int8).T.contiguous()
            sorted_indices = m.argsort(dim=-1, descending=True, stable=True)[:, :cap].contiguous().view(-1)
            m = m.bool()
        else:
            m = routing_map.bool().T.contiguous()
            token_indices = torch.arange(tokens, device=DEV).unsqueeze(0).expand(experts, -1)
            sorted_indices = token_indices.masked_select(m)
        permuted = x.index_select(0, sorted_indices)
        permuted_probs = probs.T.contiguous().masked_select(m)
        permuted = permuted * permuted_probs.unsqueeze(-1)
        out = torch.zeros(tokens, hidden, dtype=permuted.dtype, device=DEV)
        out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, hidden), permuted)
        out.backward(gout)

    if version == "r012-dispatch":
        return dispatch

    def one():
        if version == "r012" and pad:
            m = routing_map.to(dtype=torch.int8).T.contiguous()
            sorted_indices = m.argsort(dim=-1, descending=True, stable=True)[:, :cap].contiguous().view(-1)
        else:
            m = routing_map.bool().T.contiguous()
            token_indices = torch.arange(tokens, device=DEV).unsqueeze(0).expand(experts, -1)
            sorted_indices = token_indices.masked_select(m)
        permuted = x.index_select(0, sorted_indices)
        if version == "r012" and pad:
            probs_1d = probs.T.contiguous().view(-1)
            rows = torch.arange(experts, device=DEV).unsqueeze(-1)
            flat = (rows * tokens + sorted_indices.view(experts, cap)).view(-1)
            permuted_probs = probs_1d.index_select(0, flat)
        else:
            permuted_probs = probs.T.contiguous().masked_select(routing_map.T.contiguous())
        permuted = permuted * permuted_probs.unsqueeze(-1)
        out = torch.zeros(tokens, hidden, dtype=permuted.dtype, device=DEV)
        out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, hidden), permuted)
        out.backward(gout)

    return one


def sync_cost(n=50):
    """One masked_select between two GEMMs, against an index_select of the same output."""
    a = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    t, e, k = 4096, 8, 2
    mask = torch.zeros(e, t, device=DEV, dtype=torch.bool)
    mask[:, : t * k // e] = True
    src = torch.arange(t, device=DEV).unsqueeze(0).expand(e, -1)
    fixed = torch.arange(t * k // e, device=DEV)

    def with_sync():
        torch.mm(a, b, out=c)
        src.masked_select(mask)
        torch.mm(a, b, out=c)

    def without():
        torch.mm(a, b, out=c)
        src[0].index_select(0, fixed)
        torch.mm(a, b, out=c)

    res = {}
    for name, f in (("masked_select", with_sync), ("index_select", without)):
        for _ in range(5):
            f()
        res[name] = time_host(f, n)
    return res


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    props = torch.cuda.get_device_properties(0)
    print(json.dumps({"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda}), flush=True)
    only = sys.argv[2] if len(sys.argv) > 2 else None  # a permutation version alone
    for name, cfg in ({} if only else CONFIGS).items():
        one = make_iter(cfg)
        for _ in range(10):
            one()
        torch.cuda.synchronize()
        kernels, prof_gpu_s, names = count_kernels(one)
        seq = time_seq(one, n)
        host = time_host(one, n)
        print(json.dumps({"config": name, "kernels": kernels, "seq_s": seq, "host_s": host,
                          "profiled_kernel_s": prof_gpu_s, "kernel_names": names}), flush=True)
    for name, cfg in ({} if only else CONFIGS).items():
        one = make_iter(cfg, backward=False)
        for _ in range(5):
            one()
        torch.cuda.synchronize()
        kernels, prof_gpu_s, names = count_kernels(one)
        print(json.dumps({"config": name + " forward", "kernels": kernels, "seq_s": time_seq(one, n),
                          "host_s": time_host(one, n), "profiled_kernel_s": prof_gpu_s, "kernel_names": names}),
              flush=True)
    for version, pad in (("r010", True), ("r012", True), ("r012", False), ("r012-dispatch", True),
                         ("r012-dispatch", False)):
        if only and version != only:
            continue
        one = permutations(version, pad)
        for _ in range(5):
            one()
        torch.cuda.synchronize()
        kernels, prof_gpu_s, names = count_kernels(one)
        print(json.dumps({"config": f"permute {version} {'padded' if pad else 'dropless'}", "kernels": kernels,
                          "host_s": time_host(one, n), "profiled_kernel_s": prof_gpu_s, "kernel_names": names}),
              flush=True)
    if only:
        return
    s = sync_cost()
    print(json.dumps({"config": "sync", **s, "sync_s": s["masked_select"] - s["index_select"]}), flush=True)


if __name__ == "__main__":
    main()
