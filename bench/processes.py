"""Benchmark processes that write a JSON (no GPU or PyTorch needed here): run one, check it, read
what it wrote. The drivers that spread a measurement over processes use it (bench/ab_prefill.py,
--processes of bench/compare_sdpa.py and bench/decode_sdpa.py), since on the H200 medians move
1-5% from one process to the next."""
import contextlib
import json
import os
import subprocess
import sys
import tempfile

from timing_stats import across_processes


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


def script_in_processes(script, argv, processes, timeout, label):
    """Runs `python3 script argv` in `processes` processes, one after another, each with
    --processes 1 and a --json of its own (argv's --processes, --timeout and --json left out; the
    last of an option wins, so an abbreviation of them is overridden too), its output shown as it
    runs; returns their JSONs."""
    own = without_options(argv, ("--processes", "--timeout", "--json"))
    docs = []
    with tempfile.TemporaryDirectory() as work:
        for i in range(processes):
            out = os.path.join(work, f"process_{i}.json")
            cmd = [sys.executable, os.path.abspath(script), *own, "--processes", "1", "--json", out]
            docs.append(run_json_process(cmd, out, timeout,
                                         f"{label}: process {i + 1}/{processes}", quiet=False))
    return docs


def write_json(path, doc):
    """Writes doc to path through a temporary file, so that no half-written JSON is left."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2, allow_nan=False)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    os.replace(tmp, path)


def summarize_in_processes(script, args, label, print_summary):
    """The --processes mode of a side-by-side benchmark whose parsed args hold processes, timeout,
    json and git_revision: runs `script` in that many processes, prints the summary over them
    (timing_stats.across_processes) with print_summary, and writes it with every process's JSON to
    args.json."""
    docs = script_in_processes(script, sys.argv[1:], args.processes, args.timeout, label)
    summary = across_processes(docs)
    print(f"median over {args.processes} processes (ranges: the least and the greatest process)")
    print_summary(summary)
    if args.json:
        write_json(args.json, {
            "command": " ".join(sys.argv), "git_revision": args.git_revision,
            "gpu": docs[0].get("gpu"), "processes": args.processes,
            "timing": "per arm, the median over the processes of each process's median and of "
                      "its ratios; *_range: the least and the greatest process's. runs: each "
                      "process's own JSON",
            "summary": summary, "runs": docs})
