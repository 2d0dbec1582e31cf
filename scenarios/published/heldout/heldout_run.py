"""What the held-out scripts share: the repository's root, the --set pairs given on their command line, and one run of
the built binary with its result or the reason it gave none."""
import json, os, re, subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
BINARY = os.path.join(ROOT, 'build', 'clustersim')


def extra_sets(argv):
    """The values of every `--set key=value` in argv, applied to every row."""
    return [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == '--set']


def run_json(path, sets):
    """`clustersim run PATH --json --set S ...`: (the parsed result, '') or (None, the binary's last line)."""
    cmd = [BINARY, 'run', path, '--json']
    for s in sets:
        cmd += ['--set', s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        return json.loads(p.stdout), ''
    except ValueError:
        return None, (p.stderr.strip().splitlines() or ['no output'])[-1]


def memory_refusal(msg):
    """(needed, available), e.g. ('82.9 GiB', '79.1 GiB'), when msg is the memory check's refusal; else None."""
    m = re.search(r'([0-9.]+ GiB) per GPU needed, ([0-9.]+ GiB) available', msg)
    return m.groups() if m else None
