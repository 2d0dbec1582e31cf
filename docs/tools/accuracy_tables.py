#!/usr/bin/env python3
"""Rewrite docs/accuracy.md's published-runs summary from `clustersim accuracy --json`.

    build/clustersim accuracy scenarios/published --jobs 2 --json > acc.json
    python3 docs/tools/accuracy_tables.py acc.json docs/accuracy.md "2026-12-08, 21 s on 2 cores"

Replaces the command's summary block, the per-source table (each source's rows matched by
the prefix of its case files) and the per-case table; everything else is left as it is.
"""
import json
import os
import re
import sys

# Per-source table rows: (title, kind, file-name prefix).
SOURCES = [
    ("LMDeploy v0.1.0a1 A100 FP16 benchmark", "serving", "lmdeploy-"),
    ("NVIDIA NIM 1.8.0 benchmarks", "serving", "nim-"),
    ("TensorRT-LLM perf-overview (v0.17 offline, v0.14 Triton online)", "serving", "trtllm-"),
    ("vLLM CI latency benchmarks", "serving", "vllm-ci-"),
    ("BigScience BLOOM-176B training log", "training", "bigscience"),
    ("NVIDIA DGX Cloud benchmarking v25.02 (NeMo 24.12)", "training", "dgxc2502-"),
    ("NVIDIA DGX Cloud benchmarking v25.05 (NeMo 25.04.01)", "training", "dgxc2505-"),
    ("Dubey et al. 2024 (Llama 3), Table 4", "training", "dubey2024-"),
    ("Korthikanti et al. 2022, Table 5", "training", "korthikanti2022-"),
    ("MosaicML LLM Foundry benchmarks", "training", "llmfoundry-"),
    ("Megatron-Bridge 25.11 performance summary", "training", "mbridge2511-"),
    ("Megatron-LM README, H100 table", "training", "megatron-core-"),
    ("Narayanan et al. 2021 (SC21), Table 1", "training", "narayanan2021-"),
]


def number(x):
    if x == int(x) and abs(x) >= 1000:
        return str(int(x))
    return f"{x:.4g}"


def main(acc_json, doc, when):
    d = json.load(open(acc_json))
    cases = sorted(d["cases"], key=lambda c: os.path.basename(c["file"]))
    stem = {id(c): os.path.splitext(os.path.basename(c["file"]))[0] for c in cases}
    text = open(doc).read()

    def block(kind):
        k = d[kind]
        return f"  {kind:<8} {k['cases']}: MAPE {k['mape_pct']:.2f} %, worst {k['max_abs_error_pct']:.1f} %"

    summary = "\n".join([
        f"$ build/clustersim accuracy scenarios/published --jobs 2    # {when}",
        f"{len(cases)} cases: MAPE {d['mape_pct']:.2f} %, worst {d['max_abs_error_pct']:.1f} %",
        block("training"), block("serving"),
        f"  unstated settings: {d['unstated_cases']} cases predicted over what their sources leave open; "
        f"{d['in_band_cases']} hold the reference within that band",
        f"  memory: the check would refuse {len(d['memory_refused'])} of these runs, which ran on their GPUs"])
    text, n = re.subn(r"\$ build/clustersim accuracy scenarios/published --jobs 2 +#[^\n]*\n(?:[^`\n][^\n]*\n)+",
                      summary + "\n", text, count=1)
    assert n == 1, "summary block not found"

    rows = ["| source | kind | cases | MAPE | worst |", "| --- | --- | --- | --- | --- |"]
    for title, kind, prefix in SOURCES:
        errs = [abs(c["error_pct"]) for c in cases if stem[id(c)].startswith(prefix) and c["kind"] == kind]
        if errs:
            rows.append(f"| {title} | {kind} | {len(errs)} | {sum(errs) / len(errs):.1f} % | {max(errs):.1f} % |")
    text, n = re.subn(r"\| source \| kind \| cases \| MAPE \| worst \|\n(?:\|[^\n]*\n)+", "\n".join(rows) + "\n",
                      text, count=1)
    assert n == 1, "per-source table not found"

    rows = ["| case | metric | reference | predicted | error |", "| --- | --- | --- | --- | --- |"]
    for c in cases:
        rows.append(f"| {stem[id(c)]} | {c['metric']} | {number(c['reference'])} | {number(c['predicted'])} | "
                    f"{c['error_pct']:+.1f} % |")
    text, n = re.subn(r"\| case \| metric \| reference \| predicted \| error \|\n(?:\|[^\n]*\n)+",
                      "\n".join(rows) + "\n", text, count=1)
    assert n == 1, "per-case table not found"
    open(doc, "w").write(text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
