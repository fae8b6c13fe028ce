#!/usr/bin/env python3
"""The figures table of docs/performance.md, from the JSON one run of
bench/plot.sh left in a results folder.

  table.py [RESULTS-DIR]          # prints the table (markdown)
  table.py RESULTS-DIR --into=FILE

With --into, replaces what lies between the markers
`<!-- plot.sh table -->` and `<!-- /plot.sh table -->` in FILE, so the table
is always one run's, the run that drew the picture. A file without both
markers is an error: nothing is written."""

import json
import os
import sys

BEGIN, END = "<!-- plot.sh table -->", "<!-- /plot.sh table -->"


def load(folder, name):
    path = os.path.join(folder, name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def pct(x):
    return f"{100 * x:.0f} %"


def pct_span(values):
    """"75-128 %" (or "92 %" when both ends round alike)."""
    values = [100 * v for v in values if v is not None]
    if not values:
        return "not measured"
    lo, hi = f"{min(values):.0f}", f"{max(values):.0f}"
    return f"{lo} %" if lo == hi else f"{lo}-{hi} %"


def bandwidth_rows(bw):
    rows = []
    points = [p for p in bw.get("points", []) if "ratio" in p]
    for t, base, target in (("local", "memcpy", ">= 85 %"), ("shm", "memcpy", ">= 85 %"),
                            ("tcp", "plain blocking socket stream, same buffers", ">= 90 %")):
        big = [p for p in points if p["transport"] == t and p["block_bytes"] >= 65536]
        small = [p for p in points if p["transport"] == t and p["block_bytes"] < 65536]
        if not big:
            continue
        batch = big[0].get("batch", "")
        detail = pct_span([p["ratio"] for p in big])
        if small:
            detail += " (under 64 KiB: " + pct_span([p["ratio"] for p in small]) + ")"
        rows.append((f"{t}, blocks >= 64 KiB ({batch} per batch)", detail, base, target))
    if "realistic_kv_gb_per_s" in bw:
        kv, mem = bw["realistic_kv_gb_per_s"], bw.get("realistic_kv_memcpy_gb_per_s", 0)
        rows.append(("realistic KV through rooms (32 MiB rooms)",
                     f"{kv:.1f} GB/s ({pct(kv / mem) if mem else '?'})",
                     f"memcpy of the same 4 slots {mem:.1f} GB/s", ">= 90 %"))
    sliced = bw.get("head_sliced", [])
    if sliced:
        what = " / ".join(s["layout"].split()[-1] for s in sliced)
        got = " / ".join(f"{s['gb_per_s']:.1f}" for s in sliced)
        ratios = " / ".join(pct(s["ratio"]) for s in sliced)
        alone = " / ".join(pct(s["copies_alone_ratio"]) for s in sliced if "copies_alone_ratio" in s)
        base = "2P -> 2D same order" + (f"; the same copies alone {alone}" if alone else "")
        rows.append((f"head-sliced 2P -> 4D, {what}", f"{got} GB/s ({ratios})", base, ">= 80 %"))
    for s in bw.get("scattered_pages", []):
        rows.append((f"4096 permuted 4 KiB pages through rooms, {s['transport']}",
                     f"{s['gb_per_s']:.1f} GB/s ({pct(s['ratio'])}; {s['descriptors_per_room']:.0f} "
                     "descriptors a room)", f"pages in order {s['baseline_gb_per_s']:.1f} GB/s",
                     ">= 80 %"))
    return rows


def rooms_row(rooms, shape):
    pts = rooms.get("points", [])
    if not pts:
        return None
    by = ", ".join(f"{p['concurrency']}: {p['rooms_per_s'] / 1e3:.1f} K" for p in pts)
    msgs = pts[-1].get("messages_per_room", 0)
    bound = max(p.get("caf_bound_rooms_per_s", 0) for p in pts)
    return (f"tiny rooms/s, {shape}, one process, by rooms in flight", f"{by} ({msgs:.0f} msgs/room)",
            f"CAF bound {bound / 1e3:.1f} K", "")


def process_rows(proc):
    rows = []
    for tp, shape in ((1, "1P x 1D, two processes"), (2, "2P x 2D, four processes")):
        pts = [p for p in proc.get("points", []) if p["tp"] == tp]
        if pts:
            # Steady state (from the c-th success to the (n - c)-th) where
            # the point had rooms enough, else the whole run's rate, marked.
            def rate(p):
                # Results from before the field: steady where the two rates
                # differ (a short point fell back to the whole run's).
                steady = p.get("steady_state", "rooms_per_s_whole_run" in p
                               and p["rooms_per_s"] != p["rooms_per_s_whole_run"])
                whole = "" if steady else " (whole run)"
                return f"{p['concurrency']}: {p['rooms_per_s'] / 1e3:.1f} K{whole}"
            rows.append((f"tiny rooms/s, {shape}, steady state, by rooms in flight",
                         ", ".join(rate(p) for p in pts), "", ""))
    lat = proc.get("latency")
    if lat:
        measured = (f"{lat['room_p50_us']:.0f} / {lat['room_p99_us']:.0f} us "
                    f"({lat['room_p50_us'] / lat['tcp_rtt_p50_us']:.1f} round trips")
        baseline = f"loopback TCP round trip {lat['tcp_rtt_p50_us']:.0f} / {lat['tcp_rtt_p99_us']:.0f} us"
        # Runs before the CAF floor was measured have no such field.
        if "caf_rtt_p50_us" in lat:
            measured += f", {lat['room_p50_us'] / lat['caf_rtt_p50_us']:.1f} CAF round trips"
            baseline += (f"; CAF middleman round trip {lat['caf_rtt_p50_us']:.0f} / "
                         f"{lat['caf_rtt_p99_us']:.0f} us "
                         f"({lat['caf_rtt_p50_us'] / lat['tcp_rtt_p50_us']:.1f} loopback)")
        rows.append(("one tiny room at a time across two processes, p50 / p99",
                     measured + ")", baseline, "<= 3 round trips"))
    return rows


def table(folder):
    rows = []
    poll = load(folder, "poll")
    if poll:
        rows.append((f"`poll()` with {poll['rooms_in_flight']:,} rooms in flight",
                     f"{poll['poll_ns']:.1f} ns", f"{poll['baseline_load_ns']:.2f} ns plain load",
                     "<= 50 ns"))
        rows.append(("`failure()`, first call on a Failed room",
                     f"{poll['failure_first_call_ns']:.0f} ns ({poll['failure_ns']:.0f} ns after)", "",
                     "about `poll()`"))
    mem = load(folder, "memory")
    if mem:
        rows.append(("resident bytes per in-flight room per rank",
                     f"{mem['bytes_per_room_per_rank'] / 1e3:.1f} KB",
                     f"{mem['baseline_bytes_per_idle_actor'] / 1e3:.1f} KB idle CAF actor", "<= 4 KiB"))
    bw = load(folder, "bandwidth")
    if bw:
        rows += bandwidth_rows(bw)
    for name, shape in (("rooms_1p1d", "1P x 1D"), ("rooms_2p2d", "2P x 2D")):
        rooms = load(folder, name)
        row = rooms and rooms_row(rooms, shape)
        if row:
            rows.append(row)
    proc = load(folder, "processes")
    if proc:
        rows += process_rows(proc)
    lat = load(folder, "latency")
    for r in (lat or {}).get("rooms", []):
        base = f"memcpy {r['memcpy_us'] / 1e3:.1f} ms" if r["bytes"] >= 1 << 20 else ""
        rows.append((f"room latency p50 / p99, {r['room']} ({r['bytes']:,} B)",
                     f"{r['latency_us_p50'] / 1e3:.2f} / {r['latency_us_p99'] / 1e3:.2f} ms", base, ""))
    det = load(folder, "detect")
    for s in (det or {}).get("signals", []):
        rows.append((f"{s['signal'].upper()} of a peer -> its rooms Failed on every survivor, p50 / p99",
                     f"{s['detect_ms_p50']:.0f} / {s['detect_ms_p99']:.0f} ms", "",
                     "p99 <= 100 ms" if s["signal"] == "sigkill" else ""))
    out = ["| what | measured | same-run baseline | target |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--into=")]
    into = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--into=")]
    folder = args[0] if args else os.path.join(os.path.dirname(__file__), "results")
    text = table(folder)
    if not into:
        print(text)
        return
    with open(into[0]) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc or doc.index(BEGIN) > doc.index(END):
        sys.exit(f"table.py: {into[0]} lacks the markers {BEGIN} ... {END}; nothing written")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(into[0], "w") as f:
        f.write(head + BEGIN + "\n" + text + "\n" + END + tail)
    print(f"table.py: wrote the table into {into[0]}")


if __name__ == "__main__":
    main()
