"""Issue 31 quality table: the last eval_loss of each train_QUANT_sSEED.log in a folder, the bf16 runs' mean and
spread (max - min), and each quantized run's difference from the bf16 mean against the bars (fp8 2%, nf4 5%).
  python3 quality_summary.py LOG_DIR   (prints a table and one JSON line)
"""
import glob, json, os, re, sys

bars = {"fp8": 0.02, "nf4": 0.05}
final = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "train_*_s*.log"))):
    m = re.match(r"train_(\w+?)_s(\d+)\.log", os.path.basename(path))
    losses = re.findall(r"eval_loss[\"=: ]+([0-9.]+)", open(path, errors="replace").read())
    if m and losses:
        final[(m.group(1), int(m.group(2)))] = float(losses[-1])
base = [v for (q, _), v in final.items() if q == "none"]
out = {"runs": {f"{q}_s{s}": v for (q, s), v in final.items()}}
if base:
    mean = sum(base) / len(base)
    out.update(bf16_mean=mean, bf16_spread=max(base) - min(base), bf16_spread_rel=(max(base) - min(base)) / mean)
    print(f"bf16: {len(base)} seeds, mean {mean:.4f}, spread {max(base) - min(base):.4f} "
          f"({100 * (max(base) - min(base)) / mean:.2f}%)")
    for (q, s), v in sorted(final.items()):
        if q in bars:
            rel = (v - mean) / mean
            out[f"{q}_s{s}_rel"] = rel
            print(f"{q} seed {s}: {v:.4f} ({100 * rel:+.2f}% vs bf16 mean; bar {100 * bars[q]:.0f}%: "
                  f"{'MET' if abs(rel) <= bars[q] else 'NOT MET'})")
print(json.dumps(out))
