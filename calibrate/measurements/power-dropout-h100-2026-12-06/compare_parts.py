"""Each power_parts.py case's energy a call above the idle floor, measured (board power over its last 6 s less the
idle window's, times the call's time at that rate), beside the model's for the same kernel of the README 1.7B
step (power_windows --ops, run with the H100 preset):
    /tmp/power_windows --ops ../mcore-step-h200/readme-1.7b-1xh200.yaml cluster.gpu=h100-sxm > ops.txt
    python3 compare_parts.py OUT ops.txt"""
import datetime, json, statistics, sys

out, ops_path = sys.argv[1], sys.argv[2]
# part -> (the model's kernels it runs, in --ops names; how many of the model's calls one part call is)
MODEL = {
    "attn-fwdbwd-drop-1x16": (["attention", "attention-backward"], 1),
    "attn-fwd-drop-1x16": (["attention"], 1),
    "gemm-qkv": (["qkv"], 1),
    "gemm-fc1": (["mlp-up"], 1),
    "gemm-fc2": (["mlp-down"], 1),
    "wgrad-fc1-fp32": (["mlp-up-wgrad"], 1),
    "xent": (["cross-entropy"], 1),
    "layernorm": (["layernorm-1"], 1),
    "adam": (["optimizer-step"], 16.0 * (1 << 24) / 1.75e9),  # the part's 256 Mi parameters of the step's
}


def ts(s):
    return datetime.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp()


rows = []
for line in open(f"{out}/smi.csv"):
    p = [v.strip() for v in line.split(",")]
    try:
        rows.append((ts(p[0]), float(p[1]), float(p[2])))
    except (ValueError, IndexError):
        pass


def median(t0, t1, i):
    return statistics.median(r[i] for r in rows if t0 <= r[0] <= t1)


model = {}
for line in open(ops_path):
    p = line.split()
    if len(p) == 5 and p[0] != "kernel":
        model[p[0]] = (float(p[1]) * 1e-6, float(p[2]) * 1e-3, float(p[3]), float(p[4]))
k = json.load(open(f"{out}/power_parts.json"))
idle = median(*k["idle_window"], 2)
print(f"idle {idle:.1f} W")
print(f"{'part':22s} {'call_us':>8s} {'clock':>6s} {'power_W':>8s} {'E_meas_mJ':>10s} {'E_model_mJ':>10s} "
      f"{'model/meas':>10s} {'burst_us':>8s} {'model_us':>8s}")
for c in k["cases"]:
    names, share = MODEL.get(c["case"], ([], 1))
    clock, power = median(*c["window"], 1), median(*c["window"], 2)
    t_cap, t_burst = c["per_call"] / c["sustained"], c["per_call"] / c["burst"]  # a call's seconds
    e_meas = (power - idle) * t_cap
    e_model = sum(model[n][1] for n in names) * share if names else float("nan")
    t_model = sum(model[n][0] for n in names) * share if names else float("nan")
    print(f"{c['case']:22s} {t_cap * 1e6:8.1f} {clock:6.0f} {power:8.1f} {e_meas * 1e3:10.3f} "
          f"{e_model * 1e3:10.3f} {e_model / e_meas:10.3f} {t_burst * 1e6:8.1f} {t_model * 1e6:8.1f}")
