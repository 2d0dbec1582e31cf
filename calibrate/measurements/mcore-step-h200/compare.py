#!/usr/bin/env python3
"""A measured training step (a replica's --json) against the simulator's step, kernel class by kernel class.

    python3 compare.py STEP.json SCENARIO.yaml [--set key=value]... [--binary build/clustersim]

Runs the scenario with its timeline in a temporary SQLite file and sums the compute stream of rank 0 into the
classes both sides can name: GEMMs (the simulator's `gemm` spans; the profiler's cuBLAS / CUTLASS kernels), the
attention core (`attention` spans; cuDNN's or FlashAttention's fused kernels) and everything else (the
memory-bound and elementwise kernels, the loss, the optimizer). The replica's own finer classes are printed beside
it. Works with any replica JSON that carries `step_s`, `classes_s` and `profiled_kernel_s` (this folder's
mcore_step.py, ../megatron2021-step-h200-2026-12-05/step.py).
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, '..', '..', '..'))


def simulate(binary, scenario, sets):
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, 'run.sqlite')
        cmd = [binary, 'run', scenario, '--json', '--set', f'output.sqlite={db}']
        for s in sets:
            cmd += ['--set', s]
        out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        con = sqlite3.connect(db)
        rows = con.execute("select kind, sum(end_ps - start_ps) from spans where rank = 0 and stream = 'compute' "
                           "group by kind").fetchall()
        con.close()
    by_kind = {k: ps * 1e-12 for k, ps in rows}
    classes = {'gemm': by_kind.get('gemm', 0.0), 'attention': by_kind.get('attention', 0.0)}
    classes['other'] = sum(v for k, v in by_kind.items() if k not in ('gemm', 'attention'))
    return out['iteration_time_s'], classes


def measured_classes(step):
    c = step['classes_s']
    gemm = c.get('gemm', 0.0)
    attention = c.get('attention', 0.0)
    return {'gemm': gemm, 'attention': attention, 'other': step['profiled_kernel_s'] - gemm - attention}


def main():
    p = argparse.ArgumentParser()
    p.add_argument('step')
    p.add_argument('scenario')
    p.add_argument('--set', action='append', default=[])
    p.add_argument('--binary', default=os.path.join(ROOT, 'build', 'clustersim'))
    a = p.parse_args()
    step = json.load(open(a.step))
    sim_step, sim = simulate(a.binary, a.scenario, a.set)
    meas = measured_classes(step)
    print(f"{'':<12}{'measured':>12}{'model':>12}{'model/meas':>12}")
    for k in ('gemm', 'attention', 'other'):
        ratio = f"{sim[k] / meas[k]:.3f}" if meas[k] > 0 else '-'
        print(f"{k:<12}{meas[k] * 1e3:>10.1f}ms{sim[k] * 1e3:>10.1f}ms{ratio:>12}")
    kern = step['profiled_kernel_s']
    print(f"{'kernels':<12}{kern * 1e3:>10.1f}ms{sum(sim.values()) * 1e3:>10.1f}ms{sum(sim.values()) / kern:>12.3f}")
    print(f"{'step':<12}{step['step_s'] * 1e3:>10.1f}ms{sim_step * 1e3:>10.1f}ms{sim_step / step['step_s']:>12.3f}")
    print('replica classes:', ', '.join(f"{k} {v * 1e3:.1f} ms" for k, v in step['classes_s'].items()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
