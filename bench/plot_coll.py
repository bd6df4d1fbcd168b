#!/usr/bin/env python3
"""Plots `vessel-bench coll`'s CSV: one PNG per collective (OUT_DIR/coll_<bench>_busbw.png),
busbw against size, one panel per transport, a line for vessel and for each Open MPI
configuration (as it comes, and malloc told not to unmap) per world size. gnuplot draws it, as
for bench/summarize.py.

  plot_coll.py OUT_DIR coll.csv
"""
import csv
import os
import subprocess
import sys
from collections import defaultdict


def main():
    out_dir, csv_path = sys.argv[1], sys.argv[2]
    # bench -> transport -> label -> {size: GB/s}
    series = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            if r["metric"] != "busbw":
                continue
            size, ranks = int(r["size_bytes"]), r["ranks"]
            panel = series[r["bench"]][r["transport"]]
            panel[f"vessel {ranks} ranks"][size] = float(r["vessel"])
            if r["peer"] != "none":
                panel[f"{r['peer']} {ranks} ranks"][size] = float(r["peer_value"])
    for bench, panels in series.items():
        name = f"coll_{bench}_busbw"
        data_path = os.path.join(out_dir, f"{name}.dat")
        plots = []
        index = 0
        with open(data_path, "w") as f:
            for transport in sorted(panels):
                first = index
                for label, points in sorted(panels[transport].items()):
                    f.write(f'"{label}"\n')
                    for size in sorted(points):
                        f.write(f"{size} {points[size]}\n")
                    f.write("\n\n")
                    index += 1
                plots.append((transport, first, index - 1))
        script = [
            "set terminal pngcairo size 1400,560 noenhanced",
            f"set output '{os.path.join(out_dir, name + '.png')}'",
            f"set multiplot layout 1,{len(plots)} title '{bench}: busbw (median; Open MPI measured"
            " in the same run, interleaved)'",
            "set logscale x 2", "set xlabel 'bytes'", "set ylabel 'busbw GB/s'", "set grid",
            "set key left top",
        ]
        for transport, first, last in plots:
            script.append(f"set title '{transport}'")
            script.append(f"plot for [i={first}:{last}] '{data_path}' index i using 1:2 "
                          "with linespoints title columnheader(1)")
        script.append("unset multiplot")
        try:
            subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"plot_coll: no plot for {bench}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
