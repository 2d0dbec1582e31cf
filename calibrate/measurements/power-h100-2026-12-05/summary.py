"""The power model's constants (docs/model.md, "Clocks under the power cap") from one board's power.json and
shapes.json, derived as the H200's were: the idle floor (busy between kernels, clocks up), the streaming power,
the BF16 rate at the cap, an FP8 FLOP's energy over a BF16 one's, attention's energy per FLOP over a GEMM's, and
each kind's clock-bound share a (t_cap / t_burst = a / x + 1 - a, x the settled clock over the boost clock).
    python3 summary.py DIR [BOOST_MHZ]     (DIR holding power.json and shapes.json)"""
import json, statistics, sys

d = sys.argv[1]
boost = float(sys.argv[2]) if len(sys.argv) > 2 else 1980.0
power = json.load(open(f"{d}/power.json"))
shapes = json.load(open(f"{d}/shapes.json"))
cases = {c["case"]: c for c in power["cases"]}
idle = power["idle"]["power_w"]
limit = 700.0
print(f"{power['gpu']}: idle floor {idle:.1f} W at {power['idle']['sm_mhz']:.0f} MHz")
for name in ("stream-add", "stream-copy"):
    c = cases[name]
    # the H200's power.json came from power.py's first version, which counted 12 bytes an element for the add
    gbps = c["sustained"] * (8.0 / 12.0 if name == "stream-add" and "H200" in power["gpu"] else 1.0)
    print(f"  {name:11s} {gbps:7.0f} GB/s at {c['sm_mhz']:.0f} MHz, {c['power_w']:.1f} W")
stream = statistics.mean(cases[n]["power_w"] for n in ("stream-add", "stream-copy"))
g = cases["gemm"]
e_gemm = (g["power_w"] - idle) / g["sustained"]


def share(c):
    x = c["sm_mhz"] / boost
    r = c["burst"] / c["sustained"] if "burst" in c else c["burst_tflops"] / c["sustained_tflops"]
    return (r - 1) / (1 / x - 1) if x < 1 else float("nan")


print(f"  stream power {stream:.1f} W (mean of the two)")
print(f"  bf16 8192^3: burst {g['burst']:.1f}, at the cap {g['sustained']:.1f} TFLOP/s, {g['sm_mhz']:.0f} MHz, "
      f"{g['power_w']:.1f} W; clock-bound share {share(g):.2f}")
for name in ("attn-fwd", "attn-fwdbwd"):
    c = cases[name]
    e = (c["power_w"] - idle) / c["sustained"]
    print(f"  {name:11s} burst {c['burst']:.1f}, at the cap {c['sustained']:.1f} TFLOP/s; energy per FLOP "
          f"{e / e_gemm:.2f} x a GEMM's; clock-bound share {share(c):.2f}")
for name in ("gemm-1add", "gemm-ln"):
    c = cases[name]
    print(f"  {name:11s} burst {c['burst']:.1f}, at the cap {c['sustained']:.1f} TFLOP/s (a held-out mix)")
bf16, ratios = [], []
print(f"  {'shape':14s} {'bf16 burst':>10s} {'at cap':>7s} {'fp8 burst':>10s} {'at cap':>7s} {'fp8 energy':>10s}")
by = {}
for c in shapes["cases"]:
    by.setdefault(c["case"], {})[c["dtype"]] = c
for name, p in by.items():
    b, f = p["bf16"], p["fp8"]
    eb = (b["power_w"] - idle) / b["sustained_tflops"]
    ef = (f["power_w"] - idle) / f["sustained_tflops"]
    bf16.append(b["sustained_tflops"])
    ratios.append(ef / eb)
    print(f"  {name:14s} {b['burst_tflops']:10.1f} {b['sustained_tflops']:7.1f} {f['burst_tflops']:10.1f} "
          f"{f['sustained_tflops']:7.1f} {ef / eb:10.3f}   ({b['power_w']:.0f} / {f['power_w']:.0f} W)")
print(f"  bf16 at the cap over the shapes: {min(bf16):.0f}-{max(bf16):.0f}, median {statistics.median(bf16):.0f} "
      f"TFLOP/s; FP8 energy ratio median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
print(f"  energy per BF16 FLOP at the cap (limit {limit:.0f} W): "
      f"{(limit - idle) / statistics.median(bf16):.3f} pJ")
