"""The back-to-back harness power_dropout.py and power_parts.py share: a 5 s idle window, then for each case
three warm-up calls, a 5 s idle pause, a burst (~20 ms of calls at full clocks) and 8 s back to back; the case's
rate is the median of its 0.1 s batches past the first quarter, and its window for summary.py the last 6 s."""
import json, statistics, time, torch


def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3


def run_cases(cases, path, width=18):
    """cases: (name, fn, (unit, amount per call)); writes the results as JSON to path."""
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "cases": []}
    idle0 = time.time()
    time.sleep(5)
    res["idle_window"] = [idle0 + 1, time.time()]
    for name, fn, (unit, per) in cases:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        time.sleep(5)
        one = timed(fn, 1)
        reps = max(2, int(0.02 / one))
        burst = reps * per / timed(fn, reps)
        t0 = time.time()
        rates = []
        while time.time() - t0 < 8:
            r = max(2, int(0.1 / one))
            rates.append(r * per / timed(fn, r))
        t1 = time.time()
        tail = rates[len(rates) // 4:]
        c = {"case": name, "unit": unit, "per_call": per, "burst": burst, "sustained": statistics.median(tail),
             "window": [t0 + 2, t1]}
        res["cases"].append(c)
        print(f"{name:{width}s} burst {burst:8.1f} sustained {c['sustained']:8.1f} {unit}", flush=True)
    json.dump(res, open(path, "w"), indent=1)
