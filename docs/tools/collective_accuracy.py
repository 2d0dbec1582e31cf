#!/usr/bin/env python3
"""Collective accuracy tables: measured NCCL times (a `clustersim calibrate --suite
collectives,p2p` raw database) against `clustersim collective` on the same group, with a
calibration profile and with the model alone (datasheet defaults).

  docs/tools/collective_accuracy.py build/clustersim RAW.sqlite PROFILE.yaml [--cluster dgx-h200]

Writes Markdown to stdout: a summary per series (median and worst |error| of busbw below
and from 1 MiB) and, for NCCL's own choice of algorithm and protocol, busbw per size.
"""
import argparse
import json
import sqlite3
import statistics
import subprocess
from collections import defaultdict


def busbw_factor(op, n):
    if op == "all-reduce":
        return 2.0 * (n - 1) / n
    if op in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    return 1.0


def simulate(binary, cluster, op, algo, proto, ranks, lo, hi, profile):
    cmd = [binary, "collective", "--op", op, "--gpus", str(ranks), "--cluster", cluster,
           "--min", str(lo), "--max", str(hi), "--json"]
    if op != "send-recv":
        cmd += ["--algo", "auto" if algo == "nccl" else algo]
    cmd += ["--proto", proto]
    if profile:
        cmd += ["--profile", profile]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {r["bytes"]: r["time_s"] for r in out["results"]}


def size(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b // k} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("raw")
    ap.add_argument("profile")
    ap.add_argument("--cluster", default="dgx-h200")
    a = ap.parse_args()

    series = defaultdict(dict)  # (op, algo, proto, ranks) -> {bytes: seconds}
    for key, seconds in sqlite3.connect(a.raw).execute(
            "SELECT key, seconds FROM calibration_measurements WHERE key LIKE 'coll %'"):
        _, op, algo, proto, ranks, b = key.split()
        series[(op, algo, proto, int(ranks))][int(b)] = seconds

    summary = []
    auto_rows = defaultdict(list)
    for (op, algo, proto, ranks), real in sorted(series.items()):
        lo, hi = min(real), max(real)
        cal = simulate(a.binary, a.cluster, op, algo, proto, ranks, lo, hi, a.profile)
        try:
            mod = simulate(a.binary, a.cluster, op, algo, proto, ranks, lo, hi, None)
        except subprocess.CalledProcessError:
            mod = {}
        errs = {"cal": ([], []), "mod": ([], [])}
        f = busbw_factor(op, ranks)
        for b, t in sorted(real.items()):
            big = b >= (1 << 20)
            for name, sim in (("cal", cal), ("mod", mod)):
                if b in sim and sim[b] > 0:
                    errs[name][big].append(abs(t / sim[b] - 1))  # busbw error = t_real / t_sim - 1
            if algo in ("nccl", "p2p") and proto == "auto":
                auto_rows[(op, ranks)].append(
                    (b, f * b / t / 1e9, f * b / cal[b] / 1e9 if cal.get(b) else None,
                     f * b / mod[b] / 1e9 if mod.get(b) else None))
        summary.append((op, algo, proto, ranks, errs))

    for name, label in (("cal", "calibrated"), ("mod", "model (defaults)")):
        small = sorted(x for *_, e in summary for x in e[name][0])
        big = sorted(x for *_, e in summary for x in e[name][1])
        if small and big:
            print(f"- {label}: ≥ 1 MiB {sum(x <= 0.05 for x in big)}/{len(big)} sizes within 5 % "
                  f"(median {100 * statistics.median(big):.1f} %, p95 {100 * big[int(0.95 * len(big))]:.1f} %); "
                  f"< 1 MiB {sum(x <= 0.15 for x in small)}/{len(small)} within 15 % "
                  f"(median {100 * statistics.median(small):.1f} %, p95 {100 * small[int(0.95 * len(small))]:.1f} %)")
    print()

    def stat(v):
        return f"{100 * statistics.median(v):.1f} / {100 * max(v):.1f}" if v else "–"

    print("| operation | algorithm | protocol | ranks | calibrated < 1 MiB | calibrated ≥ 1 MiB "
          "| model < 1 MiB | model ≥ 1 MiB |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for op, algo, proto, ranks, e in summary:
        print(f"| {op} | {algo} | {proto} | {ranks} | {stat(e['cal'][0])} | {stat(e['cal'][1])} "
              f"| {stat(e['mod'][0])} | {stat(e['mod'][1])} |")
    print()
    for (op, ranks), rows in sorted(auto_rows.items()):
        print(f"**{op}, {ranks} ranks, NCCL's choice** — busbw GB/s: measured, calibrated (error), model (error)")
        print()
        print("| size | measured | calibrated | error | model | error |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for b, real, cal, mod in rows:
            ce = f"{100 * (cal / real - 1):+.1f} %" if cal else "–"
            me = f"{100 * (mod / real - 1):+.1f} %" if mod else "–"
            print(f"| {size(b)} | {real:.2f} | {cal:.2f} | {ce} | "
                  f"{mod:.2f} | {me} |" if cal and mod else f"| {size(b)} | {real:.2f} | – | {ce} | – | {me} |")
        print()


if __name__ == "__main__":
    main()
