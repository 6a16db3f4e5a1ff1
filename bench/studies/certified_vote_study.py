#!/usr/bin/env python3
"""How many skip decisions a cheap, certified vote takes on the benchmark's inputs. No GPU needed.

The vote skips a tile when every row's maximum score lies below m_run + ln(lambda). A certified
pre-filter computes the scores from 8-bit copies of Q and K with a rigorous bound on their error,
and skips a tile only where the bound proves the exact rule would: max(S8 + E) < m_run + ln(lambda)
for every row. Every other tile goes to the exact (16-bit) vote, so the decisions are the exact
rule's and the bound on each skipped weight holds. This counts, per (64-row slice, KV tile) in the
kernels' sink-reverse order and tile shape, the tiles the 8-bit vote settles.

The bound: with q8, k8 the 8-bit copies (dequantized), q.k - q8.k8 = q8.(k - k8) + (q - q8).k, so
|S - S8| <= |q8| |k - k8| + |q - q8| |k| (Cauchy-Schwarz). Per tile it takes the largest residual
and key norms of the tile's keys (two numbers a tile, as a kernel would read them), times the
softmax scale. Integer products accumulate exactly in int32; the check adds a 1e-4 relative slack
for the fp32 rescaling. Quantizers: int8 with one scale per query row and one per K tile, optionally
after balancing the channels (K's channel i multiplied and Q's divided by max |Q_i| over the
sequence: an attention sink's channel otherwise sets every row's int8 step), and e4m3 (3 mantissa
bits) with power-of-two scales.

Inputs: the real-structure recipe of the benchmarks (decode_balance_model.structured), rounded to
bf16, one query head; or, with --inputs, a capture of `skipsoftmax capture` (post-RoPE q and k of
real text, its manifest.json naming the layers' files), every query head of the chosen layers,
with each KV head's channels balanced by the largest |q| of its query group; the captured values
are rounded to bf16, the kernels' input type, as the recipe's are. Writes JSON with --json.

  python3 bench/studies/certified_vote_study.py --length 8192 --head-dim 128 \
      --lambdas 1e-3 3e-3 1e-2
  python3 bench/studies/certified_vote_study.py --inputs CAPTURE_DIR --layers 5 20 \
      --lambdas 1e-3 1e-2
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys

import numpy as np

from decode_balance_model import structured


def bf16(x):
    """Round to bfloat16 (nearest even), returned as float64."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def int8_copy(x, maxabs):
    s = 127.0 / np.maximum(maxabs, 1e-30)
    return np.clip(np.round(x * s), -127, 127) / s


def e4m3_copy(x, maxabs):
    """e4m3 (max 448, 3 mantissa bits, subnormal step 2^-9) after a power-of-two scale."""
    s = 2.0 ** np.floor(np.log2(448.0 / np.maximum(maxabs, 1e-30)))
    a = np.abs(x * s)
    e = np.maximum(np.floor(np.log2(np.maximum(a, 1e-300))), -6)
    step = 2.0 ** (e - 3)
    return np.sign(x) * np.round(a / step) * step / s


def quantize(q, k, kind, balance, block_n, q_group=None):
    """8-bit copies of q (per row) and k (per tile of block_n keys), in the balanced space, whose
    channel scales come from q_group (the KV head's whole query group; default q)."""
    c = np.abs(q if q_group is None else q_group).max(0) if balance else np.ones(q.shape[1])
    c = np.where(c > 0, c, 1.0)
    qs, ks = q / c, k * c
    copy = int8_copy if kind == "int8" else e4m3_copy
    q8 = copy(qs, np.abs(qs).max(1, keepdims=True))
    k8 = np.empty_like(ks)
    for t in range(0, len(ks), block_n):
        sl = slice(t, t + block_n)
        k8[sl] = copy(ks[sl], np.abs(ks[sl]).max())
    return qs, ks, q8, k8


VARIANTS = (("int8 balanced", "int8", True), ("int8", "int8", False), ("e4m3", "e4m3", False))


def exact_visits(q, k, lam, rows, block_n, scale):
    """The exact rule over the 64-row slices starting at `rows`, tile by tile in the kernels'
    sink-reverse order. Yields per visited tile (r0, r1, t, seen, none, m, gap, skip): the
    slice's rows r0:r1, the tile t, which of its keys each row sees, the rows that see none, the
    running maximum m before the tile, ln(lambda) and the rule's verdict."""
    L = len(k)
    gap = math.log(lam)
    for r0 in rows:
        r1 = min(L, r0 + 64)
        last = (r1 - 1) // block_n
        order = [0] + list(range(last, 0, -1))  # sink-reverse: the sink, then the diagonal back
        m = np.full(r1 - r0, -np.inf)
        qi = np.arange(r0, r1)[:, None]
        for t in order:
            k0, k1 = t * block_n, min(L, t * block_n + block_n)
            seen = np.arange(k0, k1)[None, :] <= qi
            none = ~seen.any(1)
            mx = np.where(seen, (q[r0:r1] @ k[k0:k1].T) * scale, -np.inf).max(1)
            with np.errstate(invalid="ignore"):
                skip = bool(np.all((mx < m + gap) | none))
            yield r0, r1, t, seen, none, m, gap, skip
            if not skip:
                m = np.maximum(m, mx)


def proves(hi, m, gap, none, skip, what):
    """Whether row bounds `hi` prove the tile skipped; raises if they prove a tile the rule keeps."""
    with np.errstate(invalid="ignore"):
        sure = bool(np.all((hi < m + gap) | none))
    if sure and not skip:
        raise AssertionError(f"the bound failed: {what}")
    return sure


def count(q, k, lam, rows, block_n, scale, q_group=None):
    """Visited tiles, exactly skipped, and per variant of VARIANTS skipped by its certified vote."""
    copies = []
    for _, kind, balance in VARIANTS:
        qs, ks, q8, k8 = quantize(q, k, kind, balance, block_n, q_group)
        copies.append((q8, k8, np.linalg.norm(q8, axis=1), np.linalg.norm(qs - q8, axis=1),
                       np.linalg.norm(ks, axis=1), np.linalg.norm(ks - k8, axis=1)))
    visited = skipped = 0
    certain = [0] * len(VARIANTS)
    for r0, r1, t, seen, none, m, gap, skip in exact_visits(q, k, lam, rows, block_n, scale):
        keys = slice(t * block_n, t * block_n + seen.shape[1])
        for i, (q8, k8, q8_norm, q_res, k_norm, k_res) in enumerate(copies):
            s8 = (q8[r0:r1] @ k8[keys].T) * scale
            e = (q8_norm[r0:r1] * k_res[keys].max() + q_res[r0:r1] * k_norm[keys].max())
            e = e * scale * (1 + 1e-4) + 1e-6  # slack for the kernel's fp32 rescaling
            hi = np.where(seen, s8, -np.inf).max(1) + e
            certain[i] += proves(hi, m, gap, none, skip, f"{VARIANTS[i][0]}, rows {r0}-{r1}, "
                                                         f"tile {t}")
        visited += 1
        skipped += skip
    return visited, skipped, certain


def capture_cases(p, directory, layers):
    """(name, q, k, query group, softmax scale) per query head of the capture's chosen layers."""
    path = os.path.join(directory, "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except OSError as e:
        p.error(f"--inputs: cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        p.error(f"--inputs: {path} is not valid JSON: {e}")
    hq, hkv = manifest["heads_q"], manifest["heads_kv"]
    scale = manifest.get("softmax_scale") or 1 / math.sqrt(manifest["head_dim"])
    entries = {entry["layer"]: entry for entry in manifest["layers"]}
    cases = []
    # By default the layers that can skip: sliding-window layers never do.
    chosen = layers or [l for l in sorted(entries) if entries[l].get("window", 0) == 0]
    for layer in chosen:
        if layer not in entries:
            p.error(f"--layers: layer {layer} is not in {directory}'s capture")
        if entries[layer].get("window", 0) > 0:
            p.error(f"--layers: layer {layer} is a sliding-window layer (window "
                    f"{entries[layer]['window']}), where skipping is not applied")
        q_all = bf16(np.load(os.path.join(directory, entries[layer]["q"])).astype(np.float32))
        k_all = bf16(np.load(os.path.join(directory, entries[layer]["k"])).astype(np.float32))
        g = hq // hkv
        for h in range(hq):
            group = q_all[:, h // g * g:(h // g + 1) * g].reshape(-1, q_all.shape[2])
            cases.append((f"layer {layer} head {h}", q_all[:, h], k_all[:, h // g], group, scale))
    return cases, f"capture {directory}: {manifest.get('tokens')} tokens"


def add_study_options(p):
    """The options the CPU studies share: their inputs, lambdas, sampled rows and JSON."""
    p.add_argument("--length", type=int, help="the recipe's tokens (default 8192)")
    p.add_argument("--head-dim", type=int, choices=[64, 128, 256],
                   help="the recipe's head dim (default 128)")
    p.add_argument("--lambdas", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    p.add_argument("--slices", type=int, default=48, help="64-row query slices sampled evenly")
    p.add_argument("--seed", type=int, help="the recipe's random seed (default 0)")
    p.add_argument("--inputs", help="a capture directory (manifest.json) instead of the recipe")
    p.add_argument("--layers", type=int, nargs="+", help="with --inputs: layers (default all)")
    p.add_argument("--json", help="write the counts here")
    p.add_argument("--git-revision", help="the revision to record (default: git rev-parse)")


def study_inputs(p, args):
    """Checks add_study_options' options. Returns the cases (name, q [n, d] of one query head,
    k [n, d] of its KV head, the KV head's query group or None, the softmax scale), the words
    naming them, the first rows of the sampled 64-row slices and the vote tile's keys."""
    if any(not 0 < x < 1 for x in args.lambdas):
        p.error("--lambdas must lie in (0, 1)")
    if args.slices < 1:
        p.error("--slices must be >= 1")
    recipe = (args.length, args.head_dim, args.seed)
    if args.inputs and any(x is not None for x in recipe):
        p.error("--length, --head-dim and --seed describe the recipe's inputs, not --inputs")
    length, head_dim, seed = (x if x is not None else d for x, d in zip(recipe, (8192, 128, 0)))
    if length < 64:
        p.error("--length must be >= 64")
    if args.layers and not args.inputs:
        p.error("--layers needs --inputs")
    if args.inputs:
        cases, source = capture_cases(p, args.inputs, args.layers)
    else:
        rng = np.random.default_rng(seed)
        pos = np.arange(length)
        q = bf16(structured(rng, pos, 1, head_dim, "q")[:, 0])
        k = bf16(structured(rng, pos, 1, head_dim, "k")[:, 0])
        cases = [("recipe", q, k, None, 1 / math.sqrt(head_dim))]
        source = "real-structure recipe, bf16, one head"
    length, head_dim = cases[0][1].shape
    block_n = 64 if head_dim == 256 else 128  # prefill_vote_tiles
    n_slices = (length + 63) // 64
    rows = sorted({64 * int(i) for i in np.linspace(0, n_slices - 1, min(args.slices, n_slices))
                   .round()})
    print(f"L={length} d={head_dim}, {len(cases)} heads, {len(rows)} slices of 64 rows each, "
          f"tiles of {block_n} keys, sink-reverse; share of visited tiles")
    return cases, source, rows, block_n


def write_study(args, cases, source, rows, block_n, results):
    """Writes a study's counts to args.json (if given) with its command and revision."""
    if not args.json:
        return
    revision = args.git_revision or subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
        text=True).stdout.strip() or "unknown"
    length, head_dim = cases[0][1].shape
    doc = {"command": " ".join(sys.argv), "git_revision": revision, "gpu": None,
           "date": datetime.date.today().isoformat(), "length": length,
           "head_dim": head_dim, "block_n": block_n, "heads": len(cases),
           "slices": len(rows), "order": "sink-reverse", "inputs": source,
           "results": results}
    with open(args.json + ".tmp", "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(args.json + ".tmp", args.json)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_options(p)
    args = p.parse_args()
    cases, source, rows, block_n = study_inputs(p, args)
    results = []
    for lam in args.lambdas:
        row = {"lambda": lam, "visited": 0, "skipped": 0}
        row.update({name: 0 for name, _, _ in VARIANTS})
        for _, q, k, group, scale in cases:
            visited, skipped, certain = count(q, k, lam, rows, block_n, scale, group)
            row["visited"] += visited
            row["skipped"] += skipped
            for (name, _, _), c in zip(VARIANTS, certain):
                row[name] += c
        results.append(row)
        line = [f"{name} {100 * row[name] / row['visited']:.1f}%" for name, _, _ in VARIANTS]
        print(f"  lambda {lam:g}: exact skip {100 * row['skipped'] / row['visited']:.1f}% | "
              f"certain skip: {', '.join(line)}")
    write_study(args, cases, source, rows, block_n, results)


if __name__ == "__main__":
    main()
