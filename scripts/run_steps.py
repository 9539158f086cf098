"""A napkin run's median step, for the GPU scripts' summaries (scripts/gpu_check.sh).

median_step(root, run, key[, fallback]): the median of report.json's steps[].key (each step's
`fallback` where it lacks `key`) in ROOT/RUN, leaving out the first `skip` (3) steps, the warm-up's;
None when the run or its report is missing or unreadable (a failed run shows as missing).

fastest_step(root, names[, repeats]): per name, the fastest of the runs ROOT/NAME-1, NAME-2, ...
(each its median step on the device, or on the host where the device did not time it), in
seconds; a name none of whose runs has a report is left out.
"""

import json
import os
import statistics


def median_step(root, run, key, fallback=None, skip=3):
    try:
        with open(os.path.join(root, run, "report.json")) as f:
            steps = json.load(f)["steps"][skip:]
        return statistics.median(s[key] if key in s or fallback is None else s[fallback] for s in steps)
    except (OSError, KeyError, ValueError, statistics.StatisticsError):
        return None


def fastest_step(root, names, repeats=(1, 2)):
    best = {}
    for name in names:
        t = [median_step(root, f"{name}-{i}", "device_seconds", "seconds") for i in repeats]
        t = [v for v in t if v is not None]
        if t:
            best[name] = min(t)
    return best
