"""python -m skipsoftmax capture: post-RoPE Q/K/V of a Hugging Face model for calibration."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skipsoftmax")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser(
        "capture", help="record post-RoPE Q, K, V of a transformers model, in the layout that "
                        "`skipsoftmax calibrate --captures-dir` reads")
    cap.add_argument("--model", required=True, help="a transformers checkpoint (path or hub id)")
    src = cap.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="UTF-8 text file: capture its first --tokens tokens")
    src.add_argument("--prompts", help="directory of prompt_*.npy token files "
                                       "(`skipsoftmax calibrate --write-samples DIR`)")
    cap.add_argument("--tokens", type=int, nargs="+",
                     help="prompt lengths of --text windows, special tokens included")
    cap.add_argument("--samples", type=int, default=1,
                     help="windows of each --tokens length (disjoint, through the text)")
    cap.add_argument("--out-dir", required=True, help="new or empty directory")
    cap.add_argument("--layers", help="layers to capture, e.g. 0,5,10 (default: all)")
    cap.add_argument("--dtype", choices=["f32", "f16"], default="f32",
                     help="dtype of the .npy files (f32 holds bf16 values exactly)")
    cap.add_argument("--model-dtype", choices=["bf16", "f16", "f32"], default="bf16")
    cap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    args = parser.parse_args(argv)
    if args.text and (args.tokens is None or min(args.tokens) < 1):
        parser.error("--text needs --tokens N [N ...] (N >= 1)")
    if args.prompts and (args.tokens is not None or args.samples != 1):
        parser.error("--tokens and --samples apply to --text only")
    if args.samples < 1:
        parser.error("--samples must be >= 1")
    if args.device is None:
        import torch
        args.device = "cuda" if torch.cuda.is_available() else "cpu"

    from . import capture
    try:
        capture.run(args)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"python -m skipsoftmax capture: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
