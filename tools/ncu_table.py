#!/usr/bin/env python3
"""Folds ncu's --csv metric rows (one row per kernel and metric) into one Markdown row per kernel
launch: name, grid, block, registers, L1/shared split, µs, DRAM MB read, DRAM % of peak."""
import csv
import re
import sys

rows = {}
order = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    key = r["ID"]
    if key not in rows:
        name = re.sub(r"\(es::[^)]*\)", "", r["Kernel Name"])
        name = re.sub(r"<.*", "", re.sub(r"^void ", "", name)).replace("es::", "")
        rows[key] = {"name": name[:48]}
        order.append(key)
    rows[key][r["Metric Name"]] = (r["Metric Value"].replace(",", ""), r["Metric Unit"])


def val(d, m, scale=1.0):
    if m not in d:
        return ""
    v, unit = d[m]
    try:
        x = float(v)
    except ValueError:
        return v
    if unit in ("nsecond", "ns"):
        x /= 1000.0
    elif unit in ("usecond", "us"):
        pass
    elif unit == "msecond":
        x *= 1000.0
    elif unit == "byte":
        x /= 1e6
    elif unit == "Kbyte":
        x /= 1e3
    elif unit == "Mbyte":
        pass
    elif unit == "Gbyte":
        x *= 1e3
    return f"{x * scale:.2f}"


print("| kernel | grid | block | regs | smem cfg | µs | DRAM MB | DRAM % |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
total = 0.0
for k in order:
    d = rows[k]
    us = val(d, "gpu__time_duration.sum")
    total += float(us) if us else 0.0
    print(f"| {d['name']} | {val(d, 'launch__grid_size')} | {val(d, 'launch__block_size')} | "
          f"{val(d, 'launch__registers_per_thread')} | {d.get('launch__shared_mem_config_size', ('', ''))[0]} | {us} | "
          f"{val(d, 'dram__bytes_read.sum')} | {val(d, 'dram__throughput.avg.pct_of_peak_sustained_elapsed')} |")
print(f"\n{len(order)} launches, {total:.1f} µs in all")
