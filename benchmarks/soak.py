"""Soak: the stress scenario of the test suite, repeated for a given time, with the totals.

    python benchmarks/soak.py [--minutes 2] [--clients 8] [--workers 4]

Each round runs tests/pool/stress.py's scenario (8 client threads, 2 models,
random batch sizes, cancellations, deadlines, injected kernel and callback
errors, then close() partway) with a new seed, and checks every invariant
(every Future ended, results correct, callback counts consistent, no thread
left). Prints the totals and writes benchmarks/results/soak.json.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import write_results  # noqa: E402
from tests.pool.stress import run_stress  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--round-seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    # the injected callback errors are logged with tracebacks by design: keep the output readable
    logging.getLogger("pooled_predictor").setLevel(logging.CRITICAL)
    end = time.monotonic() + args.minutes * 60
    totals, rounds, requests, seconds = Counter(), 0, 0, 0.0
    while time.monotonic() < end:
        result = run_stress(seconds=args.round_seconds, clients=args.clients, workers=args.workers,
                            seed=rounds, inline=rounds % 2 == 0)
        outcomes = result.check()
        totals.update(outcomes)
        requests += len(result.requests)
        seconds += result.seconds
        rounds += 1
        print(f"round {rounds}: {len(result.requests)} requests in {result.seconds:.1f} s, all checks passed: "
              f"{dict(outcomes)}", flush=True)
    print(f"\n{rounds} rounds, {requests} requests in {seconds:.0f} s ({requests / max(seconds, 1e-9):.0f}/s); "
          f"every invariant held in every round")
    for k, v in totals.most_common():
        print(f"  {k:<28} {v}")
    path = write_results("soak", [{"outcome": k, "count": v} for k, v in totals.most_common()],
                         rounds=rounds, requests=requests, seconds=seconds, clients=args.clients,
                         workers=args.workers)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
