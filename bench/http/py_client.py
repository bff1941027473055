#!/usr/bin/python3
"""Closed-loop HTTP GET load with Python requests, the baseline of
bench/http/run.sh: `threads` threads, each with its own keep-alive Session,
loop on GET for `duration` seconds. Prints one summary line in the format of
bench/http/kbrun_load.lua:

  py_client requests=41234 errors=0 seconds=10.00 rps=4123 p50_ms=15.2 p99_ms=30.1

  /usr/bin/python3 bench/http/py_client.py --url http://127.0.0.1:8080/small.json
"""
import argparse
import concurrent.futures
import sys
import time

import requests


def worker(url, stop):
    session = requests.Session()
    latencies, errors = [], 0
    while True:
        t0 = time.perf_counter()
        if t0 >= stop:
            break
        try:
            r = session.get(url)
            r.content  # read the whole body
            ok = r.status_code == 200
        except requests.RequestException:
            ok = False
        if ok:
            latencies.append(time.perf_counter() - t0)
        else:
            errors += 1
    session.close()
    return latencies, errors


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, int(round(p / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[rank]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--duration", type=float, default=10.0)
    args = ap.parse_args()

    started = time.perf_counter()
    stop = started + args.duration
    latencies, errors = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.threads) as pool:
        futures = [pool.submit(worker, args.url, stop) for _ in range(args.threads)]
        for f in futures:
            lat, err = f.result()
            latencies.extend(lat)
            errors += err
    seconds = time.perf_counter() - started
    latencies.sort()
    print("py_client requests=%d errors=%d seconds=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f" % (
        len(latencies), errors, seconds, len(latencies) / seconds,
        percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3))
    return 0 if latencies else 1


if __name__ == "__main__":
    sys.exit(main())
