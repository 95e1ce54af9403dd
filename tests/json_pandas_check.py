#!/usr/bin/env python3
"""Every JSON file qlens writes follows docs/JSON.md and loads in pandas.

Runs each subcommand that writes JSON on stories260K (small settings), then
checks the common header (tool, schema_version, qlens_version, inputs as
paths or null, settings), that the header flattens to one row and the rows
load with pandas.json_normalize into non-empty frames with the documented
columns (docs/JSON.md, "Per tool"), and that layer is null outside the
blocks in the files that follow schema 2's names.

Exit 77 (skipped) when pandas or ../shared is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qlens", required=True)
    ap.add_argument("--shared", required=True)
    args = ap.parse_args()
    try:
        import pandas as pd
    except ImportError:
        print("skipped: PyPI's pandas is not installed (pip install pandas)")
        return SKIP
    model = os.path.join(args.shared, "models", "stories260K.gguf")
    text_src = os.path.join(args.shared, "data", "tinystories", "tinystories_val.txt")
    if not (os.path.exists(model) and os.path.exists(text_src)):
        print("skipped: needs ../shared/models/stories260K.gguf and data/tinystories/tinystories_val.txt")
        return SKIP

    d = tempfile.mkdtemp(prefix="qlens-json-")
    text = os.path.join(d, "text.txt")
    with open(text_src, "rb") as f, open(text, "wb") as g:
        g.write(f.read(120000))

    def run(*a, stdout_to=None):
        cmd = [args.qlens, *a]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"FAILED: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
        if stdout_to:
            with open(stdout_to, "w") as f:
                f.write(r.stdout)

    p = lambda name: os.path.join(d, name)
    common = ["-c", "128", "-b", "128", "-t", "2"]
    run("perplexity", "-m", model, "-f", text, *common, "--chunks", "4", "--json", p("perplexity.json"))
    run("imatrix", "-m", model, "-f", text, *common, "--chunks", "4", "-o", p("imatrix.gguf"),
        "--json", p("imatrix_run.json"))
    run("imatrix", "--in-file", p("imatrix.gguf"), "--show-statistics", "--json", p("imatrix_stats.json"))
    run("quantize-stats", model, "--type", "Q4_0", "--type", "Q8_0", "--json", p("quantize_stats.json"))
    run("quantize", model, "Q4_K_M", "--dry-run", "--json", p("quantize.json"))
    run("inspect", model, "--json", stdout_to=p("inspect.json"))
    run("bench", "-m", model, "-p", "32", "-n", "8", "-r", "1", "--json", p("bench.json"), "-o", "json",
        stdout_to=p("bench_rows.json"))
    run("compare", "--ref", model, "-m", model, "-f", text, *common, "--chunks", "2", "--json", p("compare.json"))
    run("sensitivity", "-m", model, "-f", text, *common, "--chunks", "2", "--types", "Q4_0,Q8_0",
        "--json", p("sensitivity.json"))
    run("plan", "--sensitivity", p("sensitivity.json"), "--target-bpw", "10", "-o", p("plan.txt"),
        "--json", p("plan.json"))

    # file -> (tool, the path of its rows for json_normalize, columns the rows
    # must have, whether layer is null outside the blocks).
    files = {
        "perplexity.json": ("qlens perplexity", None, [], True),
        "imatrix_run.json": ("qlens imatrix", ["tensors"], ["tensor", "layer", "role", "rows"], True),
        "imatrix_stats.json": ("qlens imatrix", ["tensors"], ["tensor", "layer", "role", "sum_act2"], True),
        "quantize_stats.json": ("qlens quantize-stats", ["tensors"], ["tensor", "type", "n_elements", "bits_per_weight"],
                                True),
        "quantize.json": ("qlens quantize", ["tensors"], ["tensor", "layer", "role", "type", "n_elements", "bytes",
                                                          "bits_per_weight"], True),
        "inspect.json": ("qlens inspect", ["tensors"], ["tensor", "type", "bytes", "bits_per_weight"], True),
        "bench.json": ("qlens bench", ["results"], ["model_filename", "test", "avg_ts", "stddev_ts"], True),
        "compare.json": ("qlens compare", ["nodes"], ["node", "layer", "kind", "nmse"], True),
        "sensitivity.json": ("qlens sensitivity", ["tensors"], ["tensor", "layer", "role", "n_elements"], True),
        "plan.json": ("qlens plan", ["tensors"], ["tensor", "layer", "role", "type", "bytes", "bits_per_weight"], True),
    }
    failures = []
    for name, (tool, record_path, columns, null_layers) in files.items():
        doc = json.load(open(p(name)))
        where = f"{name}:"
        for key in ("tool", "schema_version", "qlens_version", "inputs", "settings"):
            if key not in doc:
                failures.append(f"{where} no '{key}' in the header")
        if doc.get("tool") != tool:
            failures.append(f"{where} tool is {doc.get('tool')!r}, want {tool!r}")
        if not isinstance(doc.get("schema_version"), int):
            failures.append(f"{where} schema_version is not an integer")
        for k, v in (doc.get("inputs") or {}).items():
            if v is not None and not isinstance(v, str):
                failures.append(f"{where} inputs.{k} is neither a path nor null")
        flat = pd.json_normalize({k: v for k, v in doc.items() if not isinstance(v, list)})
        if len(flat) != 1:
            failures.append(f"{where} the header does not flatten to one row")
        if record_path:
            rows = pd.json_normalize(doc, record_path=record_path)
            if rows.empty:
                failures.append(f"{where} no rows in {record_path}")
            for c in columns:
                if c not in rows.columns:
                    failures.append(f"{where} rows lack column '{c}' (have {sorted(rows.columns)[:12]}...)")
            if null_layers and "layer" in rows.columns:
                bad = [v for v in rows["layer"] if not (v is None or (isinstance(v, float) and v != v) or
                                                        float(v).is_integer() and v >= 0)]
                if bad:
                    failures.append(f"{where} layer holds {bad[:3]} (an index >= 0, or null outside the blocks)")
        for legacy in ("name", "bpw"):
            if record_path and legacy in pd.json_normalize(doc, record_path=record_path).columns:
                failures.append(f"{where} rows still use the schema-1 name '{legacy}'")
        for key in ("model", "text", "file", "meta", "path"):
            if key in doc:
                failures.append(f"{where} '{key}' at the top level (paths belong under inputs)")
        print(f"{name}: {doc.get('tool')} v{doc.get('schema_version')}, "
              f"{len(pd.json_normalize(doc, record_path=record_path)) if record_path else 1} rows")
    failures += check_bench_rows(pd, p("bench_rows.json"), p("bench.json"))
    if failures:
        print("\n".join(failures))
        return 1
    print("ok")
    return 0


def check_bench_rows(pd, rows_path, doc_path):
    """`bench -o json` prints llama-bench's shape: a bare array of rows (no
    header), the same objects as the --json file's results (docs/JSON.md)."""
    rows = json.load(open(rows_path))
    where = "bench -o json:"
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return [f"{where} not a bare array of objects, as llama-bench prints it"]
    failures = []
    frame = pd.json_normalize(rows)
    if len(frame) != 2:
        failures.append(f"{where} {len(frame)} rows, want 2 (pp32, tg8)")
    for c in ("model_filename", "model_size", "model_n_params", "n_prompt", "n_gen", "avg_ts", "stddev_ts", "test"):
        if c not in frame.columns:
            failures.append(f"{where} rows lack column '{c}'")
    if rows != json.load(open(doc_path)).get("results"):
        failures.append(f"{where} the rows differ from the --json file's results of the same run")
    print(f"bench_rows.json: bare array, {len(frame)} rows")
    return failures


if __name__ == "__main__":
    sys.exit(main())
