#!/usr/bin/env python3
"""Writes tests/data/price_fixture_*.json: two SYNTHETIC price lists (docs/REPORT.md) for the tests
of `skipsoftmax report`. No GPU ran and no model was evaluated: the numbers come from the simple
cost and accuracy models below, shaped like what skip-softmax does on Hopper.

- fixture-llama: pure attention (every layer global). Attention's share of the time grows with
  length, so the speedup does too; the advisor says ON; accuracy stays within 1% up to the 75%
  tier, the 80% tier drops below 0.99 at 64k only.
- fixture-hybrid: Mamba-2 with 4 attention layers in 48. Attention is a small share of the time
  and flat (the advisor says OFF); skipping buys little and costs accuracy.

Usage: scripts/make_price_fixtures.py [OUT_DIR]   (default tests/data)
"""
import json
import math
import os
import sys

LENGTHS = [4096, 8192, 16384, 32768, 65536, 131072]
ACCURACY_LENGTHS = [4096, 16384, 65536]
TASKS = ["ruler_niah_single", "ruler_niah_multikey", "ruler_vt"]
TIERS = [0.5, 0.6, 0.75, 0.8]
BINS = [4096, 8192, 16384, 32768, 49152, 65536, 81920, 98304, 114688, 131072]
DERIVED_DIGITS = 6


def key(tier):
    return f"{tier * 100:g}%"


def amdahl(share, kernel):
    return 1.0 / (1.0 - share * (1.0 - 1.0 / kernel))


def sig(x, digits=4):
    return float(f"{x:.{digits}g}")


def table(a, exponent=0.25, skip_bins=()):
    return [[b, sig(a * (b / 4096) ** exponent)] for b in BINS if b not in skip_bins]


def measured_sparsity(tier, length, wobble):
    # Slightly under target at short lengths (the guard keeps the first tiles dense).
    s = tier * (0.93 + 0.012 * math.log2(length / 4096)) + wobble
    return round(min(s, 0.99), 4)


def kernel_speedup(sparsity, skipped_cost, overhead):
    # A skipped tile still costs its QK^T and the vote; only softmax and P.V are saved.
    return round(1.0 / ((1.0 - sparsity) + sparsity * skipped_cost + overhead), 4)


def arm_points(model, skip, tier):
    points = []
    for i, length in enumerate(LENGTHS):
        wobble = 0.004 * math.sin(3.1 * i + 7 * tier)
        point = {"length": length}
        phases = {}
        times = {}
        for phase in ("prefill", "decode"):
            cost = model[phase]
            non_attention = cost["linear"] * (length if phase == "prefill" else 1) + cost["fixed"]
            attention = cost["attn"](length)
            if skip in (phase, "both"):
                sparsity = measured_sparsity(tier, length, wobble)
                kernel = kernel_speedup(sparsity, cost["skipped_cost"], cost["overhead"])
                # Per-length table lookups and the skip kernel's bookkeeping, outside attention.
                non_attention *= 1.003
            else:
                sparsity, kernel = 0.0, 1.0
            time = non_attention + attention / kernel
            times[phase] = round(time, 2 if phase == "prefill" else 4)
            phases[phase] = {
                "kernel_speedup": kernel,
                "attention_share": round(attention / kernel / time, 4),
                "tile_sparsity": sparsity,
            }
        point["ttft_ms"] = times["prefill"]
        point["tpot_ms"] = times["decode"]
        point["prefill"] = phases["prefill"]
        point["decode"] = phases["decode"]
        if length in ACCURACY_LENGTHS:
            j = ACCURACY_LENGTHS.index(length)
            arm = "dense" if skip == "none" else f"{skip} {key(tier)}"
            scores = model["scores"][arm][j]
            ppl_ratio = model["ppl_ratio"][arm] * (1 + 0.0004 * j if skip != "none" else 1)
            point["accuracy"] = {
                "scores": dict(zip(TASKS, scores)),
                "perplexity": round(model["ppl"][j] * ppl_ratio, 3),
            }
        points.append(point)
    return points


def derive(price):
    """The derived fields, as evaluation/price.cpp derive_price() computes them."""
    dense = next(a for a in price["arms"] if a["skip"] == "none")
    r = lambda x: round(x, DERIVED_DIGITS)
    for arm in price["arms"]:
        for point, d in zip(arm["points"], dense["points"]):
            for phase, t in (("prefill", "ttft_ms"), ("decode", "tpot_ms")):
                m = point[phase]
                speedup = d[t] / point[t]
                amd = amdahl(d[phase]["attention_share"], m["kernel_speedup"])
                point[phase] = {
                    "speedup": r(speedup),
                    "kernel_speedup": m["kernel_speedup"],
                    "attention_share": m["attention_share"],
                    "amdahl": r(amd),
                    "tile_sparsity": m["tile_sparsity"],
                }
            if "accuracy" not in point:
                continue
            a, da = point["accuracy"], d["accuracy"]
            mean = lambda s: sum(s.values()) / len(s)
            point["accuracy"] = {
                "scores": a["scores"],
                "task_ratios": {t: r(a["scores"][t] / da["scores"][t]) for t in TASKS},
                "score": r(mean(a["scores"])),
                "ratio": r(mean(a["scores"]) / mean(da["scores"])),
                "perplexity": a["perplexity"],
                "perplexity_ratio": r(a["perplexity"] / da["perplexity"]),
            }
    recs = []
    scopes = [s for s in ("prefill", "decode", "both") if any(a["skip"] == s for a in price["arms"])]
    for bound in (0.99, 0.97):
        for scope in scopes:
            best = None
            for arm in price["arms"]:
                if arm["skip"] != scope:
                    continue
                ratios = [p["accuracy"]["ratio"] for p in arm["points"] if "accuracy" in p]
                tier = float(arm["tier"].rstrip("%")) / 100
                if all(x >= bound - 1e-9 for x in ratios) and (best is None or tier > best[0]):
                    best = (tier, arm["tier"])
            recs.append({"bound": bound, "skip": scope, "tier": best[1] if best else None})
    price["recommendations"] = recs


def price_list(model):
    arms = [{"skip": "none", "tier": None, "points": arm_points(model, "none", 0.0)}]
    for skip, tier in model["arms"]:
        arms.append({"skip": skip, "tier": key(tier), "points": arm_points(model, skip, tier)})
    phases = {}
    for phase in ("prefill", "decode"):
        ladder = {key(t): table(a, skip_bins=model["missing_bins"].get((phase, t), ()))
                  for t, a in model["ladder"][phase].items()}
        phases[phase] = {"advice": model["advice"][phase], "deployed": ladder[key(0.75)],
                         "ladder": ladder}
    price = {
        "schema": "skipsoftmax-price/1",
        "synthetic": True,
        "note": "FIXTURE for the tests of skipsoftmax report: synthetic numbers <made up> & "
                "shaped like skip-softmax on Hopper, not measured. "
                "Written by scripts/make_price_fixtures.py.",
        "model": model["model"],
        "provenance": {
            "gpu": "NVIDIA H200 (synthetic fixture: no GPU ran)",
            "git_revision": "fixture",
            "command": "python3 scripts/make_price_fixtures.py (synthetic, not a measurement)",
        },
        "setup": model["setup"],
        "phases": phases,
        "lengths": LENGTHS,
        "accuracy_lengths": ACCURACY_LENGTHS,
        "tasks": TASKS,
        "arms": arms,
    }
    derive(price)
    return price


def advice(on, s, m, requests=40):
    a = {"verdict": "ON" if on else "OFF", "sparsity": s, "mass_share": m,
         "mass_ratio": round(m / s, 6), "mass_ratio_limit": 0.3, "requests": requests,
         "calibrated_max_seqlen": 131072}
    if not on:  # the calibration's wording
        a["reason"] = ("skipped tiles hold too much softmax mass for their share of the work: "
                       "attention is too flat for skipping to pay off without accuracy loss")
    return a


LLAMA = {
    "model": {"name": "fixture-llama-8b (synthetic)",
              "architecture": "llama: 32 global-attention layers, GQA 32/8, head dim 128"},
    "setup": {"dtype": "bf16", "batch": 1, "heads": "32 query / 8 KV", "head_dim": 128},
    "prefill": {"linear": 0.028, "fixed": 4.0, "attn": lambda l: 4.54e-7 * l * l,
                "skipped_cost": 0.68, "overhead": 0.015},
    "decode": {"linear": 0.0, "fixed": 4.0, "attn": lambda l: 2.9e-5 * l,
               "skipped_cost": 0.55, "overhead": 0.02},
    "arms": [("both", 0.5), ("both", 0.6), ("both", 0.75), ("both", 0.8), ("prefill", 0.75)],
    "ladder": {"prefill": {0.5: 2.1, 0.6: 3.4, 0.75: 7.9, 0.8: 11.6},
               "decode": {0.5: 2.9, 0.6: 4.8, 0.75: 11.1, 0.8: 16.2}},
    "missing_bins": {},
    "advice": {"prefill": advice(True, 0.742, 0.0061), "decode": advice(True, 0.716, 0.0093)},
    "ppl": [6.12, 5.87, 5.71],
    "ppl_ratio": {"dense": 1.0, "both 50%": 1.0005, "both 60%": 1.0011, "both 75%": 1.0024,
                  "both 80%": 1.0041, "prefill 75%": 1.0013},
    "scores": {
        "dense": [[1.00, 0.98, 0.97], [0.99, 0.95, 0.93], [0.97, 0.89, 0.86]],
        "both 50%": [[1.00, 0.98, 0.97], [0.99, 0.95, 0.93], [0.97, 0.90, 0.85]],
        "both 60%": [[1.00, 0.98, 0.97], [0.99, 0.95, 0.92], [0.97, 0.88, 0.86]],
        "both 75%": [[1.00, 0.97, 0.97], [0.99, 0.94, 0.92], [0.97, 0.88, 0.85]],
        # Below 0.99 of dense at 64k only: the 0.99 bound stops at 75%, 0.97 reaches 80%.
        "both 80%": [[1.00, 0.97, 0.96], [0.99, 0.94, 0.92], [0.96, 0.87, 0.84]],
        "prefill 75%": [[1.00, 0.98, 0.97], [0.99, 0.95, 0.92], [0.97, 0.89, 0.85]],
    },
}

HYBRID = {
    "model": {"name": "fixture-hybrid-9b (synthetic)",
              "architecture": "hybrid: Mamba-2 with 4 global-attention layers in 48"},
    "setup": {"dtype": "bf16", "batch": 1, "attention_layers": "4 of 48", "head_dim": 128},
    "prefill": {"linear": 0.034, "fixed": 6.0, "attn": lambda l: 7.3e-8 * l * l,
                "skipped_cost": 0.68, "overhead": 0.015},
    "decode": {"linear": 0.0, "fixed": 4.4, "attn": lambda l: 3.6e-6 * l,
               "skipped_cost": 0.55, "overhead": 0.02},
    "arms": [("both", 0.5), ("both", 0.6), ("both", 0.75), ("both", 0.8)],
    "ladder": {"prefill": {0.5: 9.5, 0.6: 16.0, 0.75: 38.0, 0.8: 55.0},
               "decode": {0.5: 13.0, 0.6: 22.0, 0.75: 52.0, 0.8: 76.0}},
    # Flat attention: even lambda -> 1 cannot skip 80% of the tiles of a 4k decode.
    "missing_bins": {("decode", 0.8): (4096,)},
    "advice": {"prefill": advice(False, 0.738, 0.309), "decode": advice(False, 0.705, 0.268)},
    "ppl": [7.41, 7.02, 6.88],
    "ppl_ratio": {"dense": 1.0, "both 50%": 1.006, "both 60%": 1.011, "both 75%": 1.027,
                  "both 80%": 1.041},
    "scores": {
        "dense": [[0.99, 0.96, 0.94], [0.97, 0.91, 0.88], [0.93, 0.82, 0.77]],
        "both 50%": [[0.99, 0.95, 0.93], [0.96, 0.90, 0.86], [0.92, 0.80, 0.75]],
        # Within 0.97 of dense at 4k and 16k, not at 64k.
        "both 60%": [[0.98, 0.94, 0.92], [0.95, 0.88, 0.85], [0.90, 0.78, 0.73]],
        "both 75%": [[0.97, 0.91, 0.89], [0.92, 0.84, 0.80], [0.85, 0.71, 0.66]],
        "both 80%": [[0.96, 0.89, 0.86], [0.90, 0.80, 0.76], [0.81, 0.66, 0.60]],
    },
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data")
    for name, model in (("llama", LLAMA), ("hybrid", HYBRID)):
        path = os.path.join(out_dir, f"price_fixture_{name}.json")
        with open(path, "w") as f:
            json.dump(price_list(model), f, indent=1)
            f.write("\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
