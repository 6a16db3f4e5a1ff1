"""Benchmark processes that write a JSON (no GPU or PyTorch needed here): run one, check it, read
what it wrote. The drivers that spread a measurement over processes use it (bench/ab_prefill.py,
bench/compare_sdpa.py --processes), since on the H200 medians move 1-5% from one process to the
next."""
import json
import subprocess
import sys


def run_json_process(cmd, json_path, timeout, label, quiet=True):
    """Runs cmd, which writes its JSON to json_path, and returns that JSON. quiet: capture the
    process's output (shown only when it fails); otherwise it goes to this process's. Exits with a
    message naming label when the process fails, runs past timeout seconds or writes no JSON."""
    print(f"{label}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, capture_output=quiet, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"{label} ran past its timeout of {timeout} s")
    if done.returncode != 0:
        tail = f":\n{done.stderr[-2000:]}" if quiet else ""
        sys.exit(f"{label} exited {done.returncode}{tail}")
    try:
        with open(json_path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{label} wrote no readable JSON at {json_path}: {e}")


def without_options(argv, names):
    """argv less each option of names and its value, as "--name value" or "--name=value"."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not any(a.startswith(n + "=") for n in names):
            out.append(a)
    return out
