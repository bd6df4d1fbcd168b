#!/usr/bin/env python3
"""Turns Google Benchmark JSON (with repetitions) into vessel's benchmark CSV, and plots it and the
CSVs vessel-bench writes (one PNG per bench and metric: vessel and its peer against size).

Rows use the columns of every vessel benchmark CSV:
  bench,transport,ranks,size_bytes,metric,unit,vessel,peer,peer_value,advantage
A benchmark named BM_<family>/<size> is paired with BM_memcpy/<size> from the same program (the
peer measured in the same run). advantage > 1 means vessel is better. Medians only.
"""
import csv
import json
import os
import subprocess
import sys
from collections import defaultdict

COLUMNS = ["bench", "transport", "ranks", "size_bytes", "metric", "unit",
           "vessel", "peer", "peer_value", "advantage"]
PEER = "memcpy"


def medians(path):
    """{(family, size): {"us": float, "gbps": float or None}} from one JSON file."""
    with open(path) as f:
        data = json.load(f)
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    rows = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        parts = b["run_name"].split("/")
        family = parts[0].removeprefix("BM_")
        size = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        bps = b.get("bytes_per_second")
        rows[(family, size)] = {
            "us": b["real_time"] * scale[b["time_unit"]],
            "gbps": bps / 1e9 if bps else None,
        }
    return rows


def csv_rows(program, rows):
    out = []
    for (family, size), m in sorted(rows.items()):
        if family == PEER:
            continue
        peer = rows.get((PEER, size))
        if m["gbps"] is not None:
            metric, unit, value = "bandwidth", "GB/s", m["gbps"]
            peer_value = peer["gbps"] if peer else None
            advantage = value / peer_value if peer_value else None
        else:
            metric, unit, value = "time", "us", m["us"]
            peer_value = peer["us"] if peer else None
            advantage = peer_value / value if peer_value else None
        out.append({
            "bench": f"{program.removeprefix('bench_')}.{family}", "transport": "local", "ranks": 1,
            "size_bytes": size, "metric": metric, "unit": unit, "vessel": f"{value:.6g}",
            "peer": PEER if peer else "none",
            "peer_value": f"{peer_value:.6g}" if peer_value else "",
            "advantage": f"{advantage:.3f}" if advantage else "",
        })
    return out


def plot(out_dir, program, rows):
    """Bandwidth against size, one line per family (the peer included); skipped without gnuplot."""
    series = defaultdict(list)
    for (family, size), m in sorted(rows.items()):
        if m["gbps"] is not None and size > 0:
            series[family].append((size, m["gbps"]))
    if not series:
        return
    data_path = os.path.join(out_dir, f"{program}.dat")
    with open(data_path, "w") as f:
        for family, points in series.items():
            f.write(f'"{family}"\n')
            for size, gbps in points:
                f.write(f"{size} {gbps}\n")
            f.write("\n\n")
    png = os.path.join(out_dir, f"{program}.png")
    script = (
        "set terminal pngcairo size 900,540 noenhanced\n"
        f"set output '{png}'\n"
        f"set title '{program}: median throughput (peer: {PEER})'\n"
        "set logscale x 2\nset xlabel 'bytes'\nset ylabel 'GB/s'\nset grid\nset key left top\n"
        f"plot for [i=0:{len(series) - 1}] '{data_path}' index i using 1:2 "
        "with linespoints title columnheader(1)\n")
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"summarize: no plot for {program}: {e}", file=sys.stderr)


def plot_vessel_bench(out_dir, csv_path):
    """One PNG per (bench, metric) of a vessel-bench CSV: a line per (transport, vessel or peer)."""
    groups = defaultdict(lambda: defaultdict(list))
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            key = (r["bench"], r["metric"], r["unit"])
            size = int(r["size_bytes"])
            groups[key][f"{r['transport']} vessel"].append((size, float(r["vessel"])))
            groups[key][f"{r['transport']} {r['peer']}"].append((size, float(r["peer_value"])))
    for (bench, metric, unit), series in groups.items():
        name = f"{os.path.splitext(os.path.basename(csv_path))[0]}_{bench}_{metric}"
        data_path = os.path.join(out_dir, f"{name}.dat")
        with open(data_path, "w") as f:
            for label, points in series.items():
                f.write(f'"{label}"\n')
                for size, value in sorted(set(points)):
                    f.write(f"{size} {value}\n")
                f.write("\n\n")
        log_y = "set logscale y\n" if unit == "us" else ""
        script = (
            "set terminal pngcairo size 900,540 noenhanced\n"
            f"set output '{os.path.join(out_dir, name + '.png')}'\n"
            f"set title '{bench} {metric} (median; peer measured in the same run)'\n"
            f"set logscale x 2\n{log_y}set xlabel 'bytes'\nset ylabel '{unit}'\nset grid\n"
            "set key left top\n"
            f"plot for [i=0:{len(series) - 1}] '{data_path}' index i using 1:2 "
            "with linespoints title columnheader(1)\n")
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"summarize: no plot for {name}: {e}", file=sys.stderr)


def main():
    out_dir, paths = sys.argv[1], sys.argv[2:]
    all_rows = []
    for path in paths:
        if path.endswith(".csv"):
            plot_vessel_bench(out_dir, path)
            continue
        program = os.path.splitext(os.path.basename(path))[0]
        rows = medians(path)
        all_rows += csv_rows(program, rows)
        plot(out_dir, program, rows)
    with open(os.path.join(out_dir, "micro.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(all_rows)
    for r in all_rows:
        print(f"{r['bench']:<40} {r['size_bytes']:>9} {r['vessel']:>10} {r['unit']:<5}"
              f" {r['peer']:>7} {r['peer_value']:>10}  x{r['advantage']}")


if __name__ == "__main__":
    main()
