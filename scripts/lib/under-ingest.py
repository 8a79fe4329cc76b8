#!/usr/bin/env python3
"""Lines up a load's requests with the queries and checkpoints that ran
meanwhile (scripts/bench-queries-under-ingest), and prints the request
latency and throughput of each condition as a Markdown table.

usage: under-ingest.py LATENCY_LOG ROUND_LOG CHECKPOINT_LOG [LATENCY_LOG ROUND_LOG CHECKPOINT_LOG ...]

Several runs' logs (three files each) are classified run by run and
pooled: every condition's requests and time summed over the runs.

LATENCY_LOG   sluice-loadgen --latency-log: start_ms latency_ms samples ok
ROUND_LOG     one line per stretch: start_ms end_ms kind, kind "queries"
              (a round of queries) or "control" (busy loops that touch
              nothing of the receiver's)
CHECKPOINT_LOG polls of Sluice's /metrics: time_ms checkpoints last_duration_s
              [lock_wait_s lock_wait_behind_reads_s] (appends' waits for head
              shard locks, counters; when present, shown by condition)

A request counts as "queries running" when it starts and ends inside a
round of queries (one query after another, a few milliseconds apart),
"control" when inside a control stretch, "ingest alone" when it starts and
ends outside every stretch, and "across a change" otherwise (shown, not
hidden: long requests are the likeliest to straddle). A request that
overlaps a checkpoint is counted again in the rows without checkpoints
left out, so the two conditions can be compared with and without them.
"""

import sys


def merge(intervals):
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def inside(intervals, lo, hi):
    """0: [lo, hi] meets no interval; 2: lies within one; 1: otherwise."""
    for a, b in intervals:
        if b < lo:
            continue
        if a > hi:
            break
        return 2 if a <= lo and hi <= b else 1
    return 0


def overlap_ms(intervals, lo, hi):
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)


def complement(intervals, lo, hi):
    """The parts of [lo, hi] outside every interval (merged, sorted)."""
    out, at = [], lo
    for a, b in intervals:
        if a > at:
            out.append([at, min(a, hi)])
        at = max(at, b)
        if at >= hi:
            break
    if at < hi:
        out.append([at, hi])
    return [i for i in out if i[1] > i[0]]


def quantile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    i = max(0, min(len(values) - 1, int(q * len(values) + 0.999999) - 1))
    return values[i]


CONDITIONS = ("ingest alone", "queries running", "control: busy loops", "across a change")


def one_run(latency_log, round_log, checkpoint_log):
    """A run's requests by condition, and how long each condition held."""
    requests = []
    with open(latency_log) as f:
        for line in f:
            start, latency, samples, ok = line.split()
            requests.append((float(start), float(latency), int(samples), ok == "1"))
    if not requests:
        sys.exit(f"under-ingest.py: the latency log {latency_log} is empty")
    stretches = {"queries": [], "control": []}
    with open(round_log) as f:
        for line in f:
            start, end, kind = line.split()
            stretches.setdefault(kind, []).append((float(start), float(end)))
    busy = {kind: merge(v) for kind, v in stretches.items()}
    every = merge([i for v in busy.values() for i in v])
    checkpoints = []
    with open(checkpoint_log) as f:
        polls = [tuple(float(x) for x in line.split()) for line in f if line.strip()]
    # A count that falls (a poll answered wrong) is not a checkpoint.
    polls = [p for i, p in enumerate(polls) if all(p[1] >= q[1] for q in polls[:i])]
    for (t0, n0, *_), (t1, n1, duration, *_) in zip(polls, polls[1:]):
        if n1 > n0:
            # Finished between the two polls: it ran at most its duration
            # before the earlier poll's moment and ended by the later one.
            checkpoints.append((t0 - duration * 1e3, t1))
    checkpoints = merge(checkpoints)

    first = min(r[0] for r in requests)
    last = max(r[0] + r[1] for r in requests)
    # Appends' lock waits by condition: the counters' rise between two
    # polls that both fall inside one stretch of it, while the load ran.
    waits = {}
    for p0, p1 in zip(polls, polls[1:]):
        if len(p0) < 5 or len(p1) < 5:
            continue
        lo, hi = p0[0], p1[0]
        if lo < first or hi > last:
            continue
        cond = None
        if inside(every, lo, hi) == 0:
            cond = "ingest alone"
        for kind, label in (("queries", "queries running"), ("control", "control: busy loops")):
            if inside(busy[kind], lo, hi) == 2:
                cond = label
        if cond is None:
            continue
        w = waits.setdefault(cond, [0.0, 0.0, 0.0])
        w[0] += max(0.0, p1[3] - p0[3])
        w[1] += max(0.0, p1[4] - p0[4])
        w[2] += hi - lo
    rows = {}
    for start, latency, samples, ok in requests:
        end = start + latency
        cond = "across a change"
        if inside(every, start, end) == 0:
            cond = "ingest alone"
        for kind, label in (("queries", "queries running"), ("control", "control: busy loops")):
            if inside(busy[kind], start, end) == 2:
                cond = label
        ckpt = inside(checkpoints, start, end) != 0
        for key in ((cond, True), (cond, False)):
            if key[1] is False and ckpt:
                continue
            row = rows.setdefault(key, {"lat": [], "samples": 0, "errors": 0, "ckpt": 0})
            row["lat"].append(latency)
            row["samples"] += samples if ok else 0
            row["errors"] += 0 if ok else 1
            row["ckpt"] += 1 if ckpt else 0
    held = {
        "ingest alone": complement(every, first, last),
        "queries running": busy["queries"],
        "control: busy loops": busy["control"],
    }
    # Each condition's time, and its time without the checkpoints in it.
    duration = {c: overlap_ms(v, first, last) for c, v in held.items()}
    duration_without = {
        c: duration[c] - sum(overlap_ms(v, a, b) for a, b in checkpoints)
        for c, v in held.items()
    }
    return {
        "rows": rows,
        "duration": duration,
        "duration_without": duration_without,
        "span": last - first,
        "rounds": len(stretches["queries"]),
        "controls": len(stretches["control"]),
        "checkpoints": len(checkpoints),
        "checkpoint_ms": overlap_ms(checkpoints, first, last),
        "waits": waits,
    }


def main():
    args = sys.argv[1:]
    if not args or len(args) % 3 != 0:
        sys.exit(__doc__)
    runs = [one_run(*args[i : i + 3]) for i in range(0, len(args), 3)]
    rows = {}
    for run in runs:
        for key, row in run["rows"].items():
            into = rows.setdefault(key, {"lat": [], "samples": 0, "errors": 0, "ckpt": 0})
            into["lat"].extend(row["lat"])
            for k in ("samples", "errors", "ckpt"):
                into[k] += row[k]

    def total(key, cond):
        return sum(run[key][cond] for run in runs)

    print("| ingest | requests | of them during a checkpoint | samples/s | p50 ms | p90 ms | p99 ms | slowest ms | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for with_ckpt in (True, False):
        for cond in CONDITIONS:
            row = rows.get((cond, with_ckpt))
            if row is None:
                continue
            label = cond + ("" if with_ckpt else ", checkpoints left out")
            seconds = total("duration" if with_ckpt else "duration_without", cond) if cond != CONDITIONS[3] else None
            rate = f"{row['samples'] / (seconds / 1e3):,.0f}" if seconds and seconds > 0 else "–"
            lat = row["lat"]
            print(
                f"| {label} | {len(lat)} | {row['ckpt']} | {rate} | {quantile(lat, 0.5):.1f} "
                f"| {quantile(lat, 0.9):.1f} | {quantile(lat, 0.99):.1f} | {max(lat):.1f} | {row['errors']} |"
            )
    print()
    runs_said = f"{len(runs)} runs pooled: " if len(runs) > 1 else ""
    print(
        f"{runs_said}The load ran {sum(r['span'] for r in runs) / 1e3:.1f} s; queries were being answered for "
        f"{total('duration', 'queries running') / 1e3:.1f} s of it ({sum(r['rounds'] for r in runs)} rounds), the control "
        f"ran {total('duration', 'control: busy loops') / 1e3:.1f} s ({sum(r['controls'] for r in runs)} times), and "
        f"{sum(r['checkpoints'] for r in runs)} checkpoint(s) were written "
        f"({sum(r['checkpoint_ms'] for r in runs) / 1e3:.1f} s at most). "
        "Samples/s is the samples of a condition's requests over the time the condition held "
        "(without checkpoints: less the checkpoints' time in it); requests across a change are in "
        "neither, so each condition's figure is a little low."
    )
    waits = {}
    for run in runs:
        for cond, (w, r, ms) in run["waits"].items():
            into = waits.setdefault(cond, [0.0, 0.0, 0.0])
            into[0] += w
            into[1] += r
            into[2] += ms
    said = [
        f"{cond} {1e3 * w / (ms / 1e3):.0f} ({1e3 * r / (ms / 1e3):.0f} behind reads)"
        for cond in CONDITIONS
        if cond in waits
        for w, r, ms in [waits[cond]]
        if ms > 0
    ]
    if said:
        print()
        print(
            "Appends' waits for head shard locks (`sluice_head_append_lock_wait_seconds_total`, and "
            "of it `..._behind_reads_...`), ms a second, between polls of /metrics that both fell "
            "inside the condition: " + "; ".join(said) + "."
        )


if __name__ == "__main__":
    main()
