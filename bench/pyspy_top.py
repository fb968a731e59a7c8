"""Summarise a py-spy raw profile: the functions (and lines) with the most samples, self and inclusive.

    py-spy record -r 200 -f raw -o profile.txt -- python bench/bench_scale.py --one 100000 10000 volcano-binpack
    python bench/pyspy_top.py profile.txt [--self 25] [--incl 40] [--match backfill]

(py-spy is not a kant dependency: ``pip install py-spy``.) Each raw line is a ``;``-separated stack
and a sample count; "self" counts the innermost frame, "inclusive" every distinct frame on the stack.
"""

from __future__ import annotations

import argparse
import collections


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--self", dest="n_self", type=int, default=25)
    ap.add_argument("--incl", dest="n_incl", type=int, default=40)
    ap.add_argument("--match", default="", help="only frames containing this text")
    args = ap.parse_args()
    self_t: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(args.profile) as fh:
        for line in fh:
            stack, _, count = line.rstrip().rpartition(" ")
            n = int(count)
            total += n
            frames = stack.split(";")
            self_t[frames[-1]] += n
            for f in set(frames):
                incl[f] += n
    print(f"{total} samples")
    for title, counter, n_top in (("self", self_t, args.n_self), ("inclusive", incl, args.n_incl)):
        print(f"--- {title}")
        rows = [(f, c) for f, c in counter.most_common() if args.match in f][:n_top]
        for f, c in rows:
            print(f"{100 * c / total:5.1f}%  {f[:150]}")


if __name__ == "__main__":
    main()
