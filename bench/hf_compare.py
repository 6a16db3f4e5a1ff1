#!/usr/bin/env python3
"""The kernels inside Hugging Face transformers, side by side with SDPA in one process.

`model`: a checkpoint loaded by transformers from its GGUF file (the gguf package dequantizes it)
runs real text (windows of a held-out book, tokenized by the GGUF's tokenizer) through
attn_implementation "sdpa" and "skipsoftmax" (skipsoftmax.transformers):
  * exactness: with a table no length reaches ([[2^30, 1]], the dense kernels), the greedy tokens
    of generate() against SDPA's, and the prompt's logits (max |difference| over its last 64
    positions, against the logits' own spread);
  * sparsity: with the 75% tier of a price list (bench/baselines/ttft_*.json: the tables
    `skipsoftmax calibrate` fitted for this checkpoint), the tiles skipped in prefill and decode
    per length, and, with --engine, what the C++ engine (`skipsoftmax export` + `run`) reports for
    the same token ids and tables (the figures agree within --tolerance, 2 points);
  * perplexity: every next-token prediction of the windows, SDPA against the 75% tier, beside
    the price list's perplexity ratio of the C++ engine at that length;
  * time to first token at the longest length: one forward over the prompt and the first token,
    median of --repeats after warm-up, the arms interleaved.
`overhead` (synthetic inputs, no model): a prefill op call (skipsoftmax.prefill) against the bare
C API call on the same tensors at 32k, and a decode step of the op captured in a CUDA graph against
the bare C API call at batch 1 and 64 (32k each); every timed call behind a spin of the GPU, so
that the host's launch is off the clock, CUDA events, median over interleaved rounds.

Prints a summary and writes JSON (command, git revision, GPU).
  python3 bench/hf_compare.py model --library B/libskipsoftmax_capi.so --gguf ck/model.gguf \\
      --price bench/baselines/ttft_smollm2.json --text corpora/austen_4_pride_and_prejudice.txt \\
      --lengths 4096 8160 --dtype float16 --engine B/skipsoftmax --json out.json
  python3 bench/hf_compare.py overhead --library B/libskipsoftmax_capi.so --json out.json
"""
import argparse
import ctypes
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
import skipsoftmax  # noqa: E402
import skipsoftmax.transformers as sst  # noqa: E402
from skipsoftmax import _capi  # noqa: E402

UNREACHABLE = [[2 ** 30, 1.0]]  # a valid table whose first bin no model reaches: dense kernels
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def provenance(args) -> dict:
    rev = os.environ.get("SKIPSOFTMAX_GIT_REVISION")
    if not rev:
        try:
            rev = subprocess.run(["git", "-C", str(HERE), "describe", "--always", "--dirty"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            rev = "unknown"
    return {"command": " ".join([sys.argv[0]] + sys.argv[1:]), "git_revision": rev,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU)",
            "torch": torch.__version__,
            "library": _capi.version()}


def set_tables(model, prefill, decode) -> None:
    model.config.skip_softmax_prefill_scale_table = prefill
    model.config.skip_softmax_decode_scale_table = decode


def use(model, implementation: str) -> None:
    model.set_attn_implementation(implementation)


def sparsity(counts) -> float:
    return counts[1] / counts[0] if counts[0] else 0.0


def summed_stats(model) -> dict:
    total = {phase: [0, 0] for phase in sst.PHASES}
    for per_phase in sst.tile_stats(model).values():
        for phase, (visited, skipped) in per_phase.items():
            total[phase][0] += visited
            total[phase][1] += skipped
    return total


def windows(ids: torch.Tensor, length: int, count: int, offset: int) -> list:
    """`count` windows of `length` tokens, from `offset` on, apart from one another."""
    step = max(length, (ids.numel() - offset - length) // max(count, 1))
    out = []
    for i in range(count):
        start = offset + i * step
        if start + length > ids.numel():
            raise SystemExit(f"the text holds {ids.numel()} tokens: too few for {count} windows "
                             f"of {length}")
        out.append(ids[start:start + length])
    return out


def price_tier(price: dict, tier: str) -> tuple[list, list, dict]:
    """The tier's tables and the engine's perplexity ratio per length."""
    p = price["price_list"]
    tables = [p["phases"][ph]["ladder"][tier] for ph in ("prefill", "decode")]
    ratios = {}
    for arm in p["arms"]:
        if arm["skip"] == "both" and arm["tier"] == tier:
            for point in arm["points"]:
                if "accuracy" in point:
                    ratios[point["length"]] = point["accuracy"]["perplexity_ratio"]
    return tables[0], tables[1], ratios


@torch.inference_mode()
def greedy(model, ids: torch.Tensor, new_tokens: int) -> list:
    eos = model.generation_config.eos_token_id
    out = model.generate(ids[None], max_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=eos[0] if isinstance(eos, (list, tuple)) else eos)
    return out[0, ids.numel():].tolist()


@torch.inference_mode()
def nll(model, ids: torch.Tensor) -> tuple[float, int]:
    """Summed negative log-likelihood of every next token of the window, and their count (the
    float32 log-softmax in chunks of positions: a 262k vocabulary would not fit at once)."""
    logits = model(ids[None]).logits[0, :-1]
    total = 0.0
    for at in range(0, logits.shape[0], 1024):
        part = logits[at:at + 1024].float()
        total += torch.nn.functional.cross_entropy(part, ids[1 + at:1 + at + part.shape[0]],
                                                   reduction="sum").item()
    return total, ids.numel() - 1


@torch.inference_mode()
def ttft_ms(model, ids: torch.Tensor) -> float:
    if ids.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    logits = model(ids[None], logits_to_keep=1).logits
    logits[0, -1].argmax().item()  # the first token reaches the host
    return (time.perf_counter() - start) * 1e3


def engine_tiles(engine: str, gguf: pathlib.Path, prefill, decode, prompts, new_tokens: int,
                 dtype: str) -> list:
    """attention_tiles of the C++ engine for each prompt (token ids), with the same tables."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        ck = tmp / "checkpoint"
        ck.mkdir()
        (ck / gguf.name).symlink_to(gguf.resolve())
        (ck / "config.json").write_text(json.dumps({
            "skip_softmax_prefill_scale_table": prefill,
            "skip_softmax_decode_scale_table": decode}))
        subprocess.run([engine, "export", str(ck), str(tmp / "engine")], check=True,
                       stdout=subprocess.DEVNULL)
        (tmp / "in.json").write_text(json.dumps([{"token_ids": p.tolist()} for p in prompts]))
        subprocess.run([engine, "run", "--engine-dir", str(tmp / "engine"), "--input-file",
                        str(tmp / "in.json"), "--output-file", str(tmp / "out.json"),
                        "--max-new-tokens", str(new_tokens), "--dtype",
                        "bf16" if dtype == "bfloat16" else "fp16"],
                       check=True, stdout=subprocess.DEVNULL)
        return [r["attention_tiles"] for r in json.loads((tmp / "out.json").read_text())["requests"]]


def run_model(args) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    sst.register()
    gguf = pathlib.Path(args.gguf)
    dtype = DTYPES[args.dtype]
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype,
                                                 attn_implementation="sdpa").to(args.device)
    model.eval()
    text = pathlib.Path(args.text).read_text(encoding="utf-8")
    need = (args.windows + 1) * max(args.lengths) + args.offset
    ids = tokenizer(text[:need * 8], return_tensors="pt").input_ids[0].to(args.device)
    prefill75, decode75, engine_ratios = price_tier(json.loads(pathlib.Path(args.price).read_text()),
                                                    args.tier)
    result = {"model": type(model).__name__, "gguf": gguf.name, "dtype": args.dtype,
              "tier": args.tier, "tables": {"prefill": prefill75, "decode": decode75},
              "text": pathlib.Path(args.text).name, "lengths": {}}
    for length in args.lengths:
        prompts = windows(ids, length, args.windows, args.offset)
        row = {}
        # Exactness: the dense kernels under transformers against SDPA.
        use(model, "sdpa")
        with torch.inference_mode():
            ref_logits = model(prompts[0][None]).logits[0, -64:].float()
        ref_tokens = greedy(model, prompts[0], args.new_tokens)
        use(model, "skipsoftmax")
        set_tables(model, UNREACHABLE, UNREACHABLE)
        with torch.inference_mode():
            logits = model(prompts[0][None]).logits[0, -64:].float()
        tokens = greedy(model, prompts[0], args.new_tokens)
        same = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), None)
        row["exact"] = {"greedy_tokens": len(ref_tokens), "greedy_equal": tokens == ref_tokens,
                        "first_difference": same,
                        "logits_max_abs_diff": (logits - ref_logits).abs().max().item(),
                        "logits_std": ref_logits.std().item()}
        # Sparsity with the tier's tables, per phase, over the windows.
        set_tables(model, prefill75, decode75)
        sst.reset_tile_stats(model)
        for p in prompts:
            greedy(model, p, args.new_tokens)
        ours = summed_stats(model)
        row["sparsity"] = {ph: {"visited": c[0], "skipped": c[1], "sparsity": sparsity(c)}
                           for ph, c in ours.items()}
        if args.engine:
            torch.cuda.empty_cache()  # the engine runs in another process on the same GPU
            tiles = engine_tiles(args.engine, gguf, prefill75, decode75, prompts, args.new_tokens,
                                 args.dtype)
            for ph in sst.PHASES:
                c = [sum(t[ph]["visited"] for t in tiles), sum(t[ph]["skipped"] for t in tiles)]
                entry = row["sparsity"][ph]
                entry["engine"] = {"visited": c[0], "skipped": c[1], "sparsity": sparsity(c)}
                entry["difference"] = entry["sparsity"] - sparsity(c)
                entry["within_tolerance"] = abs(entry["difference"]) <= args.tolerance
        # Perplexity: SDPA against the tier.
        ppl = {}
        for arm in ("sdpa", "skipsoftmax"):
            use(model, arm)
            total, count = 0.0, 0
            for p in prompts:
                s, n = nll(model, p)
                total, count = total + s, count + n
            ppl[arm] = math.exp(total / count)
        row["perplexity"] = {"sdpa": ppl["sdpa"], "tier": ppl["skipsoftmax"],
                             "ratio": ppl["skipsoftmax"] / ppl["sdpa"],
                             "engine_ratio": engine_ratios.get(length)}
        result["lengths"][str(length)] = row
        print(f"{length}: greedy equal {row['exact']['greedy_equal']} (first difference "
              f"{same}), logits max |diff| {row['exact']['logits_max_abs_diff']:.4f} "
              f"(std {row['exact']['logits_std']:.2f}); sparsity "
              + ", ".join(f"{ph} {e['sparsity']:.3f}"
                          + (f" vs engine {e['engine']['sparsity']:.3f}" if 'engine' in e else "")
                          for ph, e in row["sparsity"].items())
              + f"; perplexity {ppl['sdpa']:.3f} -> {ppl['skipsoftmax']:.3f} "
              f"(x{row['perplexity']['ratio']:.4f}, engine x{engine_ratios.get(length)})",
              flush=True)

    # Time to first token at the longest length, arms interleaved.
    prompt = windows(ids, max(args.lengths), 1, args.offset)[0]
    arms = {"sdpa": ("sdpa", None), "skipsoftmax_dense": ("skipsoftmax", UNREACHABLE),
            "skipsoftmax_tier": ("skipsoftmax", prefill75)}
    times = {name: [] for name in arms}
    for round_ in range(args.warmup + args.repeats):
        for name, (impl, table) in arms.items():
            use(model, impl)
            if table is not None:
                set_tables(model, table, decode75)
            t = ttft_ms(model, prompt)
            if round_ >= args.warmup:
                times[name].append(t)
    ttft = {name: statistics.median(t) for name, t in times.items()}
    result["ttft"] = {"length": prompt.numel(), "median_ms": ttft, "repeats": args.repeats,
                      "speedup_tier_vs_sdpa": ttft["sdpa"] / ttft["skipsoftmax_tier"],
                      "speedup_tier_vs_dense": ttft["skipsoftmax_dense"] / ttft["skipsoftmax_tier"]}
    print(f"TTFT at {prompt.numel()}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in ttft.items())
          + f"; tier vs sdpa {result['ttft']['speedup_tier_vs_sdpa']:.3f}x", flush=True)
    return result


def timed_ms(fn, spin_cycles: int = 2_000_000) -> float:
    """GPU time of fn's work on the current stream: queued behind a spin, so that the host's
    launch of it is not timed."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(spin_cycles)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def interleaved(arms: dict, rounds: int, warmup: int = 5) -> dict:
    times = {name: [] for name in arms}
    for r in range(warmup + rounds):
        for name, fn in (arms.items() if r % 2 == 0 else reversed(arms.items())):
            t = timed_ms(fn)
            if r >= warmup:
                times[name].append(t)
    return {name: statistics.median(t) for name, t in times.items()}


def prefill_overhead(args, g) -> dict:
    """One 32k sequence, 32 / 8 heads, d128, dense: the op against the C API, same tensors."""
    dev, dtype = torch.device("cuda"), torch.bfloat16
    n, hq, hkv, d = args.prefill_length, 32, 8, 128
    q = torch.randn(n, hq, d, device=dev, dtype=dtype, generator=g)
    k = torch.randn(n, hkv, d, device=dev, dtype=dtype, generator=g)
    v = torch.randn(n, hkv, d, device=dev, dtype=dtype, generator=g)
    cu = torch.tensor([0, n], dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    a = _capi.prefill_args()
    a.dtype, a.head_dim = _capi.BF16, d
    a.q, a.k, a.v, a.out = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    a.cu_seqlens_q = a.cu_seqlens_k = cu.data_ptr()
    a.batch, a.total_q, a.total_k = 1, n, n
    a.max_seqlen_q = a.max_seqlen_k = n
    a.num_heads_q, a.num_heads_kv = hq, hkv
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    capi = lambda: _capi.call("skipsoftmax_prefill", ctypes.byref(a), stream)
    op = lambda: skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=n,
                                     max_seqlen_k=n)
    t = interleaved({"c_api": capi, "op": op}, args.rounds)
    print(f"prefill {n}: C API {t['c_api']:.3f} ms, op {t['op']:.3f} ms "
          f"({t['op'] / t['c_api']:.4f}x)", flush=True)
    return {"length": n, "heads": f"{hq}/{hkv}", "head_dim": d, "median_ms": t,
            "op_over_c_api": t["op"] / t["c_api"]}


def decode_overhead(args, g, batch: int) -> dict:
    """One new token per sequence over `batch` x 32k paged tokens (pages of 64, shuffled), 32 / 8
    heads, d128, dense: the op captured in a CUDA graph against the bare C API call, with the
    split count the C API chooses."""
    dev, dtype = torch.device("cuda"), torch.bfloat16
    hq, hkv, d, page, length = 32, 8, 128, 64, args.decode_length
    pages = length // page
    kp = torch.randn(batch * pages, page, hkv, d, device=dev, dtype=dtype, generator=g)
    vp = torch.randn_like(kp)
    table = torch.randperm(batch * pages, device=dev, generator=g)
    table = table.to(torch.int32).view(batch, pages)
    lens = torch.full((batch,), length, dtype=torch.int32, device=dev)
    q = torch.randn(batch, hq, d, device=dev, dtype=dtype, generator=g)
    out = torch.empty_like(q)
    b = _capi.decode_args()
    b.dtype, b.head_dim = _capi.BF16, d
    b.q, b.out = q.data_ptr(), out.data_ptr()
    b.k_pages, b.v_pages = kp.data_ptr(), vp.data_ptr()
    b.num_pages, b.page_size = batch * pages, page
    b.page_table, b.max_pages_per_seq = table.data_ptr(), pages
    b.seq_lens, b.batch, b.max_seq_len = lens.data_ptr(), batch, length
    b.num_heads_q, b.num_heads_kv = hq, hkv
    splits = ctypes.c_int(0)
    size = _capi.call("skipsoftmax_decode_workspace_size", ctypes.byref(b), ctypes.byref(splits))
    workspace = torch.empty(max(size, 16), dtype=torch.uint8, device=dev)
    b.workspace, b.workspace_bytes = workspace.data_ptr(), size
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    capi = lambda: _capi.call("skipsoftmax_decode", ctypes.byref(b), stream)
    call = lambda: skipsoftmax.decode(q, kp, vp, table, lens, max_seq_len=length,
                                      num_splits=splits.value)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = call()
    graph.replay()
    capi()
    torch.cuda.synchronize()
    same = torch.equal(graph_out, out)
    t = interleaved({"c_api": capi, "op_graph": graph.replay}, args.rounds)
    ratio = t["op_graph"] / t["c_api"]
    print(f"decode {batch} x {length} ({splits.value} splits): C API {t['c_api'] * 1e3:.1f} us, "
          f"op in a graph {t['op_graph'] * 1e3:.1f} us ({ratio:.4f}x), outputs equal {same}",
          flush=True)
    return {"batch": batch, "length": length, "splits": splits.value, "median_ms": t,
            "graph_over_c_api": ratio, "outputs_equal": same}


def run_overhead(args) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    return {"prefill": prefill_overhead(args, g),
            "decode": [decode_overhead(args, g, batch) for batch in args.decode_batches]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("model", help="a GGUF checkpoint through transformers: SDPA against ours")
    m.add_argument("--gguf", required=True, help="the checkpoint's GGUF file")
    m.add_argument("--price", required=True, help="price list JSON holding the tier's tables")
    m.add_argument("--tier", default="75%")
    m.add_argument("--text", required=True, help="held-out text (UTF-8)")
    m.add_argument("--lengths", type=int, nargs="+", required=True)
    m.add_argument("--windows", type=int, default=2, help="prompts per length")
    m.add_argument("--offset", type=int, default=2000, help="tokens skipped at the text's start")
    m.add_argument("--new-tokens", type=int, default=32)
    m.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    m.add_argument("--device", default="cuda",
                   help="cpu runs the float64 reference (a smoke test of short lengths)")
    m.add_argument("--engine", help="the skipsoftmax tool, to compare its sparsity")
    m.add_argument("--tolerance", type=float, default=0.02)
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--repeats", type=int, default=10)
    o = sub.add_parser("overhead", help="the ops against the bare C API")
    o.add_argument("--prefill-length", type=int, default=32768)
    o.add_argument("--decode-length", type=int, default=32768)
    o.add_argument("--decode-batches", type=int, nargs="+", default=[1, 64])
    o.add_argument("--rounds", type=int, default=50)
    for p in (m, o):
        p.add_argument("--json", required=True, help="write the results here")
        p.add_argument("--library", help="libskipsoftmax_capi.so to use (default: "
                                          "$SKIPSOFTMAX_LIBRARY, else the installed package's)")
    args = ap.parse_args()
    if args.library:
        os.environ["SKIPSOFTMAX_LIBRARY"] = args.library
    print(f"library {_capi.version()}", flush=True)  # found and of this binding's version
    if getattr(args, "device", "cuda") == "cuda" and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (model --device cpu runs the reference)")
    result = run_model(args) if args.what == "model" else run_overhead(args)
    result["provenance"] = provenance(args)
    tmp = pathlib.Path(args.json + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
