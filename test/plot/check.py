"""bench/plot on the sample tables beside this file: it exits 0, writes a PNG and an SVG that
parses as XML, draws one bar per figure the tables hold against a limit, and prints each bar's
fraction of the limit as the tables give it (recomputed here from the raw cells); two runs give each
bar the median and spread of their fractions; a bar above its limit is refused."""
import os
import re
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

root = sys.argv[1]
here = os.path.join(root, "test", "plot")
plot = os.path.join(root, "bench", "plot")
workloads, gemm = os.path.join(here, "sample_workloads.txt"), os.path.join(here, "sample_gemm.txt")


def fail(msg):
    sys.exit("bench/plot check: " + msg)


def figures():
    """Per row with a limit: {series: fraction}, from the sample's cells."""
    lines = open(workloads).read().splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith("workload ") and " limit " in l)
    cols = lines[head].split()[2:]
    cols = cols[: cols.index("best")]
    ob = {}
    for l in open(gemm).read().splitlines():
        f = l.split()
        if len(f) > 2 and f[0] in ("512", "1024"):
            ob.setdefault(f[0], []).append(float(f[1]))
    out = {}
    for l in lines[head + 2 :]:
        if not l.startswith("W"):
            break
        label, f = l[:17].strip(), l[17:].split()
        unit, cells = f[0], dict(zip(cols, f[1 : 1 + len(cols)]))
        lower = unit in ("ms", "us/op", "us/kern")
        vals = lambda c: [float(x) for x in cells[c].split("/") if re.match(r"^[0-9.]+$", x)]
        pick = min if lower else max
        if not vals("limit"):
            continue
        lim = pick(vals("limit"))
        frac = (lambda v: lim / v) if lower else (lambda v: v / lim)
        row = {}
        two = [float(cells[d].split("/")[1]) for d in cols[2:-1] if re.match(r"^[^/]+/[0-9.]+$", cells[d])]
        if two:
            row["metagrad"] = frac(pick(two))
        if vals("Eigen"):
            row["Eigen"] = frac(pick(vals("Eigen")))
        m = re.match(r"^W4 matmul (\d+)$", label)
        if m and m.group(1) in ob:
            row["OpenBLAS"] = frac(max(ob[m.group(1)]))
        out[label] = row
    return out


with tempfile.TemporaryDirectory() as d:
    stem = os.path.join(d, "chart")
    r = subprocess.run([sys.executable, plot, workloads, gemm, "-o", stem], capture_output=True, text=True)
    if r.returncode != 0:
        fail("exit %d: %s" % (r.returncode, r.stderr))
    if f"plot: wrote {stem}.png" not in r.stdout or f"plot: wrote {stem}.svg" not in r.stdout:
        fail("it does not say where it wrote:\n" + r.stdout)
    png = open(stem + ".png", "rb").read()
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the PNG is not a PNG")
    width, height = struct.unpack(">II", png[16:24])
    if width < 600 or height < 300:
        fail("the PNG is %dx%d" % (width, height))
    try:
        ET.parse(stem + ".svg")
    except ET.ParseError as e:
        fail("the SVG is not XML: %s" % e)
    svg = open(stem + ".svg").read()
    want = figures()
    printed = {}
    for l in r.stdout.splitlines():
        if l.startswith("W"):
            label = l[:17].strip()
            printed[label] = {n: float(v) for n, v in re.findall(r"(metagrad|Eigen|OpenBLAS) ([0-9.]+)", l)}
    if set(printed) != set(want):
        fail("rows drawn %s, rows with a limit %s" % (sorted(printed), sorted(want)))
    for label, row in want.items():
        if set(row) != set(printed[label]):
            fail("%s: series %s, expected %s" % (label, sorted(printed[label]), sorted(row)))
        for n, v in row.items():
            if abs(printed[label][n] - v) > 0.0006:
                fail("%s %s: %.4f drawn, %.4f in the table" % (label, n, printed[label][n], v))
    # One bar per figure, in its series' colour (plus the legend's swatch).
    for name, colour in (("metagrad", "#d95f02"), ("Eigen", "#7570b3"), ("OpenBLAS", "#1b9e77")):
        bars = sum(name in row for row in want.values())
        found = svg.count("fill: %s" % colour)
        if found != bars + 1:
            fail("%s: %d shapes in its colour, %d bars expected (+1 legend)" % (name, found, bars))
    bad = subprocess.run([sys.executable, plot, gemm, "-o", stem], capture_output=True, text=True)
    if bad.returncode == 0 or "no bench_workloads output" not in bad.stderr:
        fail("without a workloads table it should refuse: %s" % bad.stderr)
    # Two runs: each bar the median of the runs' fractions (each against its own run's limit), the
    # spread printed; the second run's W1 2^24 limit is higher, so metagrad's fraction there drops.
    sample = open(workloads).read()
    row = next(l for l in sample.splitlines() if l.startswith("W1 a*b+c 2^24"))
    second = os.path.join(d, "second.txt")
    open(second, "w").write(sample.replace(row, row.replace("21.3/30.2", "21.3/33.2", 1)))
    two = subprocess.run([sys.executable, plot, workloads, second, gemm, "-o", stem], capture_output=True, text=True)
    if two.returncode != 0:
        fail("two runs: exit %d: %s" % (two.returncode, two.stderr))
    line = next(l for l in two.stdout.splitlines() if l.startswith("W1 a*b+c 2^24"))
    m = re.search(r"metagrad ([0-9.]+) \[([0-9.]+)-([0-9.]+)\]", line)
    lo, hi = want["W1 a*b+c 2^24"]["metagrad"] * 30.2 / 33.2, want["W1 a*b+c 2^24"]["metagrad"]
    if not m or abs(float(m.group(2)) - lo) > 6e-4 or abs(float(m.group(3)) - hi) > 6e-4 \
            or abs(float(m.group(1)) - (lo + hi) / 2) > 6e-4:
        fail("two runs: want median %.3f [%.3f-%.3f], printed: %s" % ((lo + hi) / 2, lo, hi, line))
    if "median of 2 runs" not in open(stem + ".svg").read():
        fail("two runs: the title does not say the bars are medians of 2 runs")
    # A bar above its limit (Eigen's column sums at 1.3x the bandwidth measured beside them) is refused.
    row = next(l for l in sample.splitlines() if l.startswith("W3b sum axis 0"))
    above = os.path.join(d, "above.txt")
    open(above, "w").write(sample.replace(row, row.replace("17.8/17.9", "17.8/40.0", 1)))
    bad = subprocess.run([sys.executable, plot, above, "-o", stem + "_above"], capture_output=True, text=True)
    if bad.returncode == 0 or "W3b sum axis 0 Eigen" not in bad.stderr or os.path.exists(stem + "_above.png"):
        fail("a bar above its limit should be refused, naming it: rc %d, %s" % (bad.returncode, bad.stderr))
print("bench/plot check: %d workloads drawn, PNG %dx%d, SVG well-formed; two runs give medians and spread; a bar above its limit is refused"
      % (len(want), width, height))
