#!/usr/bin/env python3
"""Checks a rank's Prometheus exposition (scraped from `serve
--metrics-port`) against the text format and against its serve report.

  metrics_check.py METRICS_FILE [REPORT_FILE MAX_ROOM ORIGIN]

Without a report: the exposition parses, every sample's family has HELP and
TYPE, histogram buckets are cumulative and end in +Inf equal to _count. With
one: kvroom_rooms_total{state} equals the report's rooms <= MAX_ROOM by
state, and every failure counted under origin ORIGIN (local|propagated) with
cause "fault" is one of the report's failures naming an injected fault
(their numbers equal). Prints what it found; exits 1 on a mismatch."""

import json
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{({LABEL}(?:,{LABEL})*)?\}})? ([-+0-9.eE]+|\+Inf|-Inf|NaN)$")


def fail(msg):
    print(f"metrics_check: {msg}")
    sys.exit(1)


def parse(text):
    helps, types, samples = set(), {}, []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split(" ")[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            if name in types:
                fail(f"TYPE twice for {name}")
            types[name] = kind
        elif line:
            m = SAMPLE.match(line)
            if not m:
                fail(f"not an exposition line: {line!r}")
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            samples.append((m.group(1), labels, float(m.group(3).replace("+Inf", "inf"))))
    for name, _, _ in samples:
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                fam = name[: -len(suffix)]
        if fam not in types or fam not in helps:
            fail(f"{name}: its family {fam} lacks HELP or TYPE")
    for fam, kind in types.items():
        if kind != "histogram":
            continue
        series = {}
        for name, labels, v in samples:
            if name == fam + "_bucket":
                key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
                series.setdefault(key, []).append((labels["le"], v))
        for key, buckets in series.items():
            values = [v for _, v in buckets]
            if values != sorted(values) or buckets[-1][0] != "+Inf":
                fail(f"{fam}{key}: buckets not cumulative or no +Inf last")
            count = [v for n, l, v in samples if n == fam + "_count"
                     and tuple(sorted(l.items())) == key]
            if count != [values[-1]]:
                fail(f"{fam}{key}: +Inf {values[-1]} != _count {count}")
    return samples


def value(samples, name, **want):
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in want.items()))


def main():
    samples = parse(open(sys.argv[1]).read())
    print(f"metrics_check: {len(samples)} samples parse, every family has HELP and TYPE")
    if len(sys.argv) < 5:
        return
    report = json.load(open(sys.argv[2]))
    max_room, origin = int(sys.argv[3]), sys.argv[4]
    rooms = [r for r in report["rooms"] if r["room"] <= max_room]
    ok = sum(1 for r in rooms if r["state"] == "success")
    failed = [r for r in rooms if r["state"] == "failed"]
    got_ok = value(samples, "kvroom_rooms_total", state="success")
    got_failed = value(samples, "kvroom_rooms_total", state="failed")
    print(f"metrics_check: rooms_total success {got_ok:.0f} failed {got_failed:.0f}; "
          f"report {ok} / {len(failed)}")
    if (got_ok, got_failed) != (ok, len(failed)):
        fail("kvroom_rooms_total differs from the report")
    injected = sum(1 for r in failed if "injected " in r.get("reason", ""))
    faults = value(samples, "kvroom_failures_total", origin=origin, cause="fault")
    others = value(samples, "kvroom_failures_total", cause="fault") - faults
    print(f"metrics_check: failures{{origin={origin},cause=fault}} {faults:.0f}, report's "
          f"injected faults {injected}, faults under the other origin {others:.0f}")
    if faults != injected or others != 0 or injected == 0:
        fail("injected faults are not all under cause=fault, origin=" + origin)


if __name__ == "__main__":
    main()
