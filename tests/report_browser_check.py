#!/usr/bin/env python3
"""qlens report in a real browser: runs a small pipeline on stories260K
(imatrix, its statistics, sensitivity, plan --validate, compare, perplexity,
each with --json), writes the report, and renders it in headless Chromium:

  1. the page as written: no console message at all (the page has no script,
     so any message is an error: a blocked request, a CSP violation, ...),
     and a full-page screenshot;
  2. a copy with a probe script (errors raised into the DOM, the charts'
     sizes from getBoundingClientRect), read back through --dump-dom: every
     expected section and chart exists with a non-zero size;
  3. the screenshot, decoded with zlib and numpy: each chart's box has
     pixel variance (something was drawn there).

Exit status 77 (ctest's SKIP_RETURN_CODE) with a message when Chromium,
numpy or ../shared is missing. Python standard library and numpy only.
"""
import argparse
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77

EXPECTED_SECTIONS = ["compare", "sensitivity", "plan", "imatrix", "perplexity"]
EXPECTED_CHARTS = [
    "compare-kld-percentiles", "compare-error-depth", "compare-l-out-growth",
    "sensitivity-heatmap-Q4_0", "sensitivity-heatmap-Q8_0",
    "plan-type-grid", "plan-kld-vs-size",
    "imatrix-layer-importance", "imatrix-layer-shape",
]
WINDOW_WIDTH = 1280

# Installed first in <head>: anything that goes wrong lands in window.__probeErrors.
HEAD_PROBE = """<script>
window.__probeErrors = [];
window.addEventListener('error', function (e) {
  window.__probeErrors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || 'unknown'));
}, true);
document.addEventListener('securitypolicyviolation', function (e) {
  window.__probeErrors.push('CSP: ' + e.violatedDirective + ' ' + e.blockedURI);
});
['error', 'warn'].forEach(function (level) {
  var original = console[level];
  console[level] = function () {
    window.__probeErrors.push('console.' + level + ': ' + Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
});
</script>"""

# Last in <body>: the measurements, as JSON in a <pre> that --dump-dom returns.
BODY_PROBE = """<script>
(function () {
  var out = {errors: window.__probeErrors, charts: [], sections: [],
             page: {width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight}};
  document.querySelectorAll('svg.chart').forEach(function (svg) {
    var r = svg.getBoundingClientRect();
    out.charts.push({id: svg.getAttribute('data-chart'), x: r.left + window.scrollX, y: r.top + window.scrollY,
                     width: r.width, height: r.height,
                     marks: svg.querySelectorAll('circle, rect, path').length,
                     titles: svg.querySelectorAll('title').length});
  });
  document.querySelectorAll('section[data-section]').forEach(function (s) { out.sections.push(s.id); });
  var pre = document.createElement('pre');
  pre.id = 'probe-result';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def skip(message):
    print("SKIP: " + message)
    sys.exit(SKIP)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(cmd, cwd=None, timeout=300):
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        fail("command failed (%d): %s\n%s" % (result.returncode, " ".join(cmd), result.stdout[-4000:]))
    return result.stdout


def find_chromium():
    for name in [os.environ.get("QLENS_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def make_report(qlens, shared, work):
    """The pipeline of scripts/demo.sh, sized to run in seconds."""
    model = os.path.join(shared, "models", "stories260K.gguf")
    text = os.path.join(shared, "data", "tinystories", "tinystories_val.txt")
    if not (os.path.isfile(model) and os.path.isfile(text)):
        skip("needs ../shared/models/stories260K.gguf and ../shared/data/tinystories/tinystories_val.txt")
    with open(text, encoding="utf-8", errors="replace") as f:
        full = f.read()
    cut = full.find("\n", len(full) // 2) + 1
    calibration, held_out = os.path.join(work, "calibration.txt"), os.path.join(work, "held-out.txt")
    with open(calibration, "w", encoding="utf-8") as f:
        f.write(full[:cut])
    with open(held_out, "w", encoding="utf-8") as f:
        f.write(full[cut:])
    w = lambda name: os.path.join(work, name)
    common = ["-t", "2"]
    run([qlens, "imatrix", "-m", model, "-f", calibration, "-c", "128", "-b", "128", "--chunks", "8", "--no-ppl",
         "-o", w("imatrix.gguf")] + common)
    run([qlens, "imatrix", "--in-file", w("imatrix.gguf"), "--show-statistics", "--json", w("imatrix-stats.json")])
    run([qlens, "sensitivity", "-m", model, "-f", calibration, "-c", "128", "--chunks", "1", "--types", "Q4_0,Q8_0",
         "--imatrix", w("imatrix.gguf"), "--json", w("sensitivity.json"), "--top", "0"] + common)
    run([qlens, "plan", "--sensitivity", w("sensitivity.json"), "--target-bpw", "12", "-o", w("plan.txt"),
         "--json", w("plan.json"), "--validate", "-f", held_out, "-c", "128", "--chunks", "4",
         "--imatrix", w("imatrix.gguf"), "--work-dir", work] + common)
    run([qlens, "compare", "--ref", model, "-m", w("validate-plan.gguf"), "-f", held_out, "-c", "128",
         "--chunks", "4", "--json", w("compare.json"), "--top", "0"] + common)
    run([qlens, "perplexity", "-m", model, "-f", held_out, "-c", "128", "--chunks", "4", "--json",
         w("perplexity.json")] + common)
    report = w("report.html")
    run([qlens, "report", "--compare", w("compare.json"), "--sensitivity", w("sensitivity.json"),
         "--plan", w("plan.json"), "--imatrix-stats", w("imatrix-stats.json"), "--perplexity", w("perplexity.json"),
         "-o", report])
    return report


def chromium(browser, profile, url, extra, timeout=120):
    cmd = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--no-default-browser-check",
           "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1",
           "--user-data-dir=" + profile] + extra + [url]
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail("chromium did not finish within %d s: %s" % (timeout, " ".join(cmd)))


def probe(browser, profile, report, work):
    with open(report, encoding="utf-8") as f:
        page = f.read()
    if "<head>" not in page or "</body>" not in page:
        fail("the report has no <head> or </body>")
    probed = page.replace("<head>", "<head>" + HEAD_PROBE, 1).replace("</body>", BODY_PROBE + "</body>", 1)
    probed_path = os.path.join(work, "report-probe.html")
    with open(probed_path, "w", encoding="utf-8") as f:
        f.write(probed)
    result = chromium(browser, profile, "file://" + probed_path,
                      ["--window-size=%d,1000" % WINDOW_WIDTH, "--dump-dom"])
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', result.stdout, re.S)
    if not m:
        fail("the probe wrote no result; chromium said:\n" + result.stderr[-3000:])
    return json.loads(html.unescape(m.group(1)))


def check_layout(measured):
    if measured["errors"]:
        fail("errors in the page: %s" % measured["errors"])
    missing = [s for s in EXPECTED_SECTIONS if s not in measured["sections"]]
    if missing:
        fail("sections missing: %s (found %s)" % (missing, measured["sections"]))
    charts = {c["id"]: c for c in measured["charts"]}
    for cid in EXPECTED_CHARTS:
        c = charts.get(cid)
        if not c:
            fail("chart %s missing (found %s)" % (cid, sorted(charts)))
        if not (c["width"] > 100 and c["height"] > 100):
            fail("chart %s has size %.0f x %.0f" % (cid, c["width"], c["height"]))
        if c["marks"] < 5 or c["titles"] < 1:
            fail("chart %s has %d marks and %d hover titles" % (cid, c["marks"], c["titles"]))
    print("layout: %d sections, %d charts, page %d x %d px" % (len(measured["sections"]), len(measured["charts"]),
                                                              measured["page"]["width"], measured["page"]["height"]))
    return charts


def screenshot(browser, profile, report, height, path):
    result = chromium(browser, profile, "file://" + report,
                      ["--window-size=%d,%d" % (WINDOW_WIDTH, height), "--screenshot=" + path,
                       "--enable-logging=stderr", "--v=0"])
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    if console:
        fail("the report logged to the console:\n" + "\n".join(console))
    if not os.path.isfile(path):
        fail("no screenshot written; chromium said:\n" + result.stderr[-3000:])


def decode_png(path, np):
    """8-bit RGB or RGBA, not interlaced (what Chromium writes). The filters
    are undone along anti-diagonals: a pixel depends on its left, upper and
    upper-left neighbours only, so each diagonal is one vectorized step."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + " is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data[pos + 8:pos + 21])
        elif kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        fail("unexpected PNG format: depth %d, colour type %d, interlace %d" % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * bpp)
    filters = rows[:, 0].astype(np.int32)
    raw = rows[:, 1:].reshape(height, width, bpp).astype(np.int32)
    out = np.zeros((height + 1, width + 1, bpp), np.int32)  # a zero row above and column to the left
    for d in range(height + width - 1):
        r = np.arange(max(0, d - width + 1), min(height - 1, d) + 1)
        x = d - r
        a, b, c = out[r + 1, x], out[r, x + 1], out[r, x]
        f = filters[r][:, None]
        p = a + b - c
        pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
        predicted = np.select([f == 1, f == 2, f == 3, f == 4], [a, b, (a + b) >> 1, paeth], 0)
        out[r + 1, x + 1] = (raw[r, x] + predicted) & 255
    return out[1:, 1:, :3].astype(np.uint8)


def check_pixels(png, charts, np):
    image = decode_png(png, np)
    for cid in EXPECTED_CHARTS:
        c = charts[cid]
        x0, y0 = int(c["x"]), int(c["y"])
        box = image[y0:y0 + int(c["height"]), x0:x0 + int(c["width"])]
        if box.size == 0:
            fail("chart %s lies outside the screenshot (%s)" % (cid, image.shape))
        grey = box.astype(np.float64).mean(axis=2)
        drawn = float((grey < 245).mean())  # share of pixels that are not the white background
        colours = len(np.unique(box.reshape(-1, 3), axis=0))
        if grey.std() < 5 or drawn < 0.01 or colours < 4:
            fail("chart %s looks empty: std %.1f, %.1f%% drawn, %d colours" % (cid, grey.std(), 100 * drawn, colours))
    print("pixels: every chart's box has content (%s, %d x %d)" % (png, image.shape[1], image.shape[0]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qlens", required=True)
    parser.add_argument("--shared", required=True)
    parser.add_argument("--work", help="folder for the run (default: a temporary one, removed)")
    parser.add_argument("--report", help="check this report instead of making one (layout checks then skip)")
    parser.add_argument("--screenshot", help="also keep the screenshot here")
    args = parser.parse_args()
    try:
        import numpy as np
    except ImportError:
        skip("needs numpy (python3 -m pip install numpy; scripts/install-deps.sh does)")
    browser = find_chromium()
    if not browser:
        skip("Chromium not found (Debian's chromium package; scripts/install-deps.sh installs it)")

    work = args.work or tempfile.mkdtemp(prefix="qlens-report-browser-")
    os.makedirs(work, exist_ok=True)
    try:
        report = os.path.abspath(args.report) if args.report else make_report(args.qlens, args.shared, work)
        profile = os.path.join(work, "chromium-profile")
        measured = probe(browser, profile, report, work)
        if args.report:
            global EXPECTED_SECTIONS, EXPECTED_CHARTS
            EXPECTED_SECTIONS = measured["sections"]
            EXPECTED_CHARTS = [c["id"] for c in measured["charts"]]
        charts = check_layout(measured)
        png = os.path.join(work, "report.png")
        screenshot(browser, profile, report, int(measured["page"]["height"]) + 16, png)
        check_pixels(png, charts, np)
        if args.screenshot:
            shutil.copyfile(png, args.screenshot)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print("PASS: the report renders in %s without errors, %d charts drawn" % (os.path.basename(browser),
                                                                            len(EXPECTED_CHARTS)))


if __name__ == "__main__":
    main()
