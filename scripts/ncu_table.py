# Nsight Compute CSV (gpu__time_duration.sum) -> kernels grouped by name: calls and ms per repetition, share,
# largest first.   ncu_table.py CSV [REPETITIONS]
import csv, re, sys
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "nsecond")
    v = float(r["Metric Value"].replace(",", ""))
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    name = r["Kernel Name"]
    name = re.sub(r"\(.*", "", name)           # drop argument lists
    name = re.sub(r"<.*", "", name) if len(name) > 90 else name
    rows.append((name, v * scale))
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
agg = {}
for n, ms in rows:
    c, t = agg.get(n, (0, 0.0))
    agg[n] = (c + 1, t + ms)
total = sum(t for _, t in agg.values()) / steps
print(f"{'kernel':70} {'calls':>6} {'ms/step':>9} {'share':>6}")
for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:45]:
    print(f"{n[:70]:70} {c / steps:6.0f} {t / steps:9.3f} {100 * t / steps / total:5.1f}%")
print(f"{'total':70} {sum(c for c, _ in agg.values()) / steps:6.0f} {total:9.3f}")
