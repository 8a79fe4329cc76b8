#!/usr/bin/env python3
"""Compares the answers the query benchmarks kept (scripts/lib/
dashboard-queries.sh): Sluice's against Prometheus 3.5.3's exactly (the
same series, timestamps, values equal to 1e-9 relative; for topk the same
values at each step, as ties are broken by storage order), against
VictoriaMetrics' (MetricsQL, whose answers may differ) by series, reported
but not required. One line per query: name, series, verdict (naming a
problem with "differ" or "empty"), VictoriaMetrics' series.

Usage: compare-answers.py <work dir> <tag> <query names...>
"""
import json, math, sys
work, tag, keys = sys.argv[1], sys.argv[2], sys.argv[3:]

def load(name, key):
    d = json.load(open(f"{work}/{name}.{tag}.{key}.json"))["data"]
    out = {}
    for s in d["result"]:
        labels = tuple(sorted(s["metric"].items()))
        pts = s.get("values") or [s["value"]]
        out[labels] = [(float(t), float(v)) for t, v in pts]
    return out

def close(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))

def by_time(answer):
    out = {}
    for pts in answer.values():
        for t, v in pts:
            out.setdefault(t, []).append(v)
    return {t: sorted(vs) for t, vs in out.items()}

for key in keys:
    s, p, v = load("sluice", key), load("prom", key), load("vm", key)
    problems = []
    if not p:
        problems.append("Prometheus' answer is empty: nothing to compare (was the load taken?)")
    if key.startswith("topk"):
        # Among equal values, which series topk keeps follows the order
        # the storage hands series out (Prometheus' head: creation order;
        # Sluice: label order): compare the values kept at each step.
        a, b = by_time(s), by_time(p)
        if a.keys() != b.keys() or any(
            len(a[t]) != len(b[t]) or not all(close(x, y) for x, y in zip(a[t], b[t])) for t in a
        ):
            problems.append("values kept differ from Prometheus")
    elif set(s) != set(p):
        problems.append(f"series differ from Prometheus ({len(s)} vs {len(p)})")
    else:
        for labels, pts in s.items():
            other = p[labels]
            if len(pts) != len(other) or any(
                ta != tb or not close(va, vb) for (ta, va), (tb, vb) in zip(pts, other)
            ):
                problems.append(f"points differ from Prometheus for {dict(labels)}")
                break
    vm_same = "same series" if set(s) == set(v) else f"VictoriaMetrics: {len(v)} series, Sluice {len(s)}"
    print(f"{key}\t{len(s)}\t{'; '.join(problems) or 'as Prometheus'}\t{vm_same}")
