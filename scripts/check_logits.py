#!/usr/bin/env python3
"""Our engine's logits against Hugging Face transformers on the same GGUF file and token ids.

Run on the GPU machine after building (CUDA, every kernel family):

    python3 scripts/check_logits.py --tool build/skipsoftmax --model-dir CHECKPOINT_DIR \\
        --text tests/data/engine_text.txt --tokens 2000 --out check_logits.json

It runs `skipsoftmax capture --logits` (the engine, dense attention, fp16 weights) on the first
--tokens tokens of the text, loads the GGUF with transformers (dequantized to float32 on the GPU)
and feeds it the same token ids, then prints and writes: top-1 agreement, max and mean absolute
logit difference, and the positions where the top-1 choices differ with both models' margins.

Needs torch, numpy, transformers and the `gguf` package (transformers' GGUF loader). The device
image lacks `gguf`: carry its wheel (pure Python), e.g. `pip download --no-deps gguf==0.19.0 -d
.whl` here and `pip install --no-index --no-deps --target /tmp/site .whl/*.whl` there.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def fail(message):
    print(f"check_logits: error: {message}", file=sys.stderr)
    sys.exit(1)


def find_gguf(model_dir, weights):
    if weights:
        path = Path(model_dir) / weights
        if not path.is_file():
            fail(f"{path}: no such file")
        return path
    found = sorted(Path(model_dir).glob("*.gguf"))
    if len(found) != 1:
        fail(f"{model_dir}: expected one *.gguf file, found {len(found)}; give --weights")
    return found[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", default="build/skipsoftmax", help="the skipsoftmax executable")
    parser.add_argument("--model-dir", required=True, help="checkpoint directory (a GGUF inside)")
    parser.add_argument("--weights", help="the GGUF file when the directory has several")
    parser.add_argument("--text", default="tests/data/engine_text.txt", help="UTF-8 text file")
    parser.add_argument("--tokens", type=int, default=2000, help="tokens to compare")
    parser.add_argument("--out", default="check_logits.json", help="results JSON")
    parser.add_argument("--work-dir", help="keep the capture here (default: a temporary folder)")
    parser.add_argument("--min-top1", type=float, default=0.99,
                        help="exit 1 when the top-1 agreement is lower")
    args = parser.parse_args()

    try:
        import numpy as np
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        fail(f"{e}: needs numpy, torch and transformers")
    try:
        import gguf  # noqa: F401  (transformers' GGUF loader imports it)
    except ImportError:
        fail("the gguf package is missing (transformers reads GGUF files with it); see --help")
    if not torch.cuda.is_available():
        fail("no CUDA device for transformers")

    gguf_path = find_gguf(args.model_dir, args.weights)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="check_logits_"))
    capture = work / "capture"
    command = [args.tool, "capture", "--model-dir", args.model_dir, "--text", args.text,
               "--tokens", str(args.tokens), "--logits", "--out-dir", str(capture)]
    if args.weights:
        command += ["--weights", args.weights]
    print("running:", " ".join(command))
    if subprocess.run(command).returncode != 0:
        fail("skipsoftmax capture failed")
    tokens = np.load(capture / "tokens.npy").astype(np.int64)
    ours = np.load(capture / "logits.npy", mmap_mode="r")

    # transformers reads config.json from the model folder when there is one; the checkpoint's
    # holds skip keys, not a transformers config, so the GGUF is loaded from a folder of its own.
    alone = work / "gguf_only"
    alone.mkdir(exist_ok=True)
    link = alone / gguf_path.name
    if not link.exists():
        os.symlink(gguf_path.resolve(), link)
    model = AutoModelForCausalLM.from_pretrained(str(alone), gguf_file=gguf_path.name,
                                                 torch_dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(tokens)[None].cuda()).logits[0].float()

    n, vocab = ours.shape
    if theirs.shape[0] != n or theirs.shape[1] < vocab:
        fail(f"shapes differ: ours {ours.shape}, transformers {tuple(theirs.shape)}")
    theirs = theirs[:, :vocab]  # some checkpoints pad the LM head
    agree, max_diff, sum_diff = 0, 0.0, 0.0
    differing = []
    for first in range(0, n, 256):
        a = torch.from_numpy(np.ascontiguousarray(ours[first:first + 256])).cuda()
        b = theirs[first:first + 256]
        diff = (a - b).abs()
        max_diff = max(max_diff, diff.max().item())
        sum_diff += diff.sum().item()
        top_a, top_b = a.argmax(-1), b.argmax(-1)
        agree += (top_a == top_b).sum().item()
        for i in torch.nonzero(top_a != top_b).flatten().tolist():
            two_a, two_b = a[i].topk(2).values, b[i].topk(2).values
            differing.append({"position": first + i, "ours": top_a[i].item(),
                              "transformers": top_b[i].item(),
                              "our_margin": (two_a[0] - two_a[1]).item(),
                              "their_margin": (two_b[0] - two_b[1]).item()})
    result = {
        "model": str(gguf_path), "text": args.text, "tokens": n, "vocab": vocab,
        "top1_agreement": agree / n, "max_abs_diff": max_diff,
        "mean_abs_diff": sum_diff / (n * vocab),
        "max_abs_logit": float(theirs.abs().max().item()),
        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
        "differing_positions": differing,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{gguf_path.name}: {n} tokens, top-1 agreement {result['top1_agreement']:.4f}, "
          f"max |diff| {max_diff:.4f}, mean |diff| {result['mean_abs_diff']:.5f} "
          f"(max |logit| {result['max_abs_logit']:.2f}); wrote {args.out}")
    sys.exit(0 if result["top1_agreement"] >= args.min_top1 else 1)


if __name__ == "__main__":
    main()
