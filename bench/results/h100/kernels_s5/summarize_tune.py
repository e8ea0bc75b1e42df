"""Summarise the ROW lines of a kernel_tune log (also of a sweep cut short by its time limit): per kernel, M and
config, the median and minimum speedup over fp16 across the shapes measured, and the shape count.

    python3 bench/results/h100/kernels_s5/summarize_tune.py tune.log [kernel-prefix]
"""

import re
import statistics
import sys
from collections import defaultdict

ROW = re.compile(r"^ROW (\S+) M=(\d+) N=(\d+) K=(\d+) (\{.*\}) us (\S+) fp16_us (\S+) speedup (\S+) err (\S+)")


def main(path: str, prefix: str = "") -> None:
    rows = defaultdict(dict)
    for line in open(path):
        m = ROW.match(line)
        if m and m.group(1).startswith(prefix):
            kern, mm, n, k, cfg, us, f16, sp, err = m.groups()
            rows[(kern, int(mm), cfg)][(int(n), int(k))] = (float(us), float(f16), float(sp), float(err))
    for (kern, mm, cfg), shapes in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                         -statistics.median(v[2] for v in kv[1].values()))):
        sps = [v[2] for v in shapes.values()]
        worst_err = max(v[3] for v in shapes.values())
        print(f"{kern:14s} M={mm:<4d} med {statistics.median(sps):5.2f}x min {min(sps):5.2f}x n={len(sps)} "
              f"err {worst_err:.1e} {cfg}  " + " ".join(f"{n}x{k}:{v[0]:.1f}/{v[1]:.1f}" for (n, k), v in shapes.items()))


if __name__ == "__main__":
    main(*sys.argv[1:])
