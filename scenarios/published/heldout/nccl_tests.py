"""Published nccl-tests all_reduce_perf tables (nccl_tests/*.txt) against `clustersim collective`.

Each table file names its source, hardware and NCCL version in its header, and the collective command that
expresses its machine (`# clustersim: collective ...`; `none` when no preset or flag does). Every size the
table and the sweep share is compared: the published out-of-place time against the model's time for NCCL's
own choice of algorithm and protocol (the command without --algo or --proto), with the model's choice printed.

    python3 scenarios/published/heldout/nccl_tests.py [--table NAME]
"""
import json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(__file__))
from heldout_run import BINARY  # noqa: E402

TABLES = os.path.join(os.path.dirname(__file__), 'nccl_tests')
BANDS = [('< 64 KiB', 0, 64 << 10), ('64 KiB - 16 MiB', 64 << 10, 16 << 20), ('>= 16 MiB', 16 << 20, 1 << 62)]


def read_table(path):
    """(header lines, clustersim args or None, [(bytes, published seconds)])."""
    header, args, rows = [], None, []
    for line in open(path):
        line = line.rstrip('\n')
        if line.startswith('# clustersim:'):
            words = line.split(':', 1)[1].split()
            args = words if words and words[0] == 'collective' else None
        elif line.startswith('#'):
            header.append(line[2:])
        elif line.strip():
            size, op, t_us, _busbw = line.split()
            if op == 'all-reduce':
                rows.append((int(size), float(t_us) * 1e-6))
    return header, args, rows


def model(args, lo, hi):
    cmd = [BINARY] + args + ['--min', f'{lo}B', '--max', f'{hi}B', '--json']
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {r['bytes']: r for r in json.loads(out)['results']}


def main(argv):
    only = argv[argv.index('--table') + 1] if '--table' in argv else None
    for name in sorted(os.listdir(TABLES)):
        if not name.endswith('.txt') or (only and only not in name):
            continue
        header, args, rows = read_table(os.path.join(TABLES, name))
        print(f'== {name}')
        for h in header[:4]:
            print(f'   {h}')
        if args is None or not rows:
            print('   not run: no collective command expresses this machine\n')
            continue
        sim = model(args, rows[0][0], rows[-1][0])
        errs = []
        print(f'   {"bytes":>12} {"published us":>13} {"model us":>10} {"model choice":>14} {"error":>8}')
        for size, t in rows:
            if size not in sim:
                continue
            r = sim[size]
            e = 100 * (r['time_s'] / t - 1)
            errs.append((size, e))
            choice = f"{r['algorithm']}/{r['protocol']}"
            print(f'   {size:>12} {t * 1e6:>13.2f} {r["time_s"] * 1e6:>10.2f} {choice:>14} {e:>+7.1f}%')
        for label, lo, hi in BANDS:
            band = [abs(e) for s, e in errs if lo <= s < hi]
            if band:
                signed = statistics.median([e for s, e in errs if lo <= s < hi])
                print(f'   {label:>16}: {len(band)} sizes, median |error| {statistics.median(band):.1f} %, '
                      f'median error {signed:+.1f} %')
        print()


if __name__ == '__main__':
    main(sys.argv[1:])
