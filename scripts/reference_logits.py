#!/usr/bin/env python3
"""Reference logits of a GGUF checkpoint from transformers, the fixture of tests/test_model_ref.cpp.

transformers loads the GGUF file itself (dequantized to float32, llama Q/K rows un-permuted,
Gemma norms shifted back by -1) and runs its own modeling code with eager attention, so the
fixture is independent of model/model_ref.cpp. Writes JSON with the prompt's token ids, the
full-vocabulary argmax, top-2 gap and L2 norm of the logits at every position, the top-10 ids and
logits at a few positions, and the post-RoPE Q and K that the attention of one layer sees at a
few positions.

Versions the committed fixtures were made with (CPU only):
  python 3.11, torch 2.15.0, transformers 5.24.0, gguf 0.19.0, tokenizers 0.23.3,
  sentencepiece 0.2.3, numpy 2.4.6
  python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.15.0 \
      transformers==5.24.0 gguf==0.19.0 tokenizers==0.23.3 sentencepiece==0.2.3 protobuf accelerate

Usage (the fixtures in tests/data):
  scripts/reference_logits.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
      tests/data/smollm2_reference_logits.json --tokens 256
  scripts/reference_logits.py models/gemma-3-270m-q4_k_m.gguf \
      tests/data/gemma3_reference_logits.json --tokens 540 --bos
Gemma 3's 540 tokens pass its 512-token sliding window, so the last positions check the window.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

# shared/ lies beside the repository.
CORPUS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "corpora",
    "austen_3_persuasion.txt",
)


def capture_rope(model_type):
    """Wraps the modeling module's apply_rotary_pos_emb; returns the list it appends (q, k) to,
    one entry per layer in call order: [heads, tokens, head_dim] each."""
    module = sys.modules[type_module(model_type)]
    original = module.apply_rotary_pos_emb
    calls = []

    def wrapped(q, k, *args, **kwargs):
        q_out, k_out = original(q, k, *args, **kwargs)
        calls.append((q_out[0].detach().clone(), k_out[0].detach().clone()))
        return q_out, k_out

    module.apply_rotary_pos_emb = wrapped
    return calls


def type_module(model_type):
    name = {"llama": "llama", "gemma3_text": "gemma3"}[model_type]
    return f"transformers.models.{name}.modeling_{name}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--bos", action="store_true", help="prepend the BOS token")
    ap.add_argument("--text", default=CORPUS)
    ap.add_argument("--offset", type=int, default=20000, help="first character of the text")
    ap.add_argument("--capture-layer", type=int, default=1)
    ap.add_argument("--top-positions", type=int, default=16)
    args = ap.parse_args()

    torch.manual_seed(0)
    directory, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()[args.offset : args.offset + 8 * args.tokens]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if args.bos:
        ids = [tok.bos_token_id] + ids
    ids = ids[: args.tokens]
    if len(ids) < args.tokens:
        raise SystemExit(f"only {len(ids)} tokens in the text")

    model = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    calls = capture_rope(model.config.model_type)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()  # [tokens, vocab]
    if len(calls) != model.config.num_hidden_layers:
        raise SystemExit(f"captured {len(calls)} RoPE calls for {model.config.num_hidden_layers}")

    t = len(ids)
    top2 = logits.topk(2, dim=-1)
    step = max(1, t // args.top_positions)
    positions = sorted(set(list(range(0, t, step))[: args.top_positions - 1] + [t - 1]))
    top = []
    for p in positions:
        v, i = logits[p].topk(10)
        top.append({"position": p, "ids": i.tolist(), "logits": [round(x, 5) for x in v.tolist()]})
    q, k = calls[args.capture_layer]  # [heads, tokens, head_dim]
    cap_positions = [0, t // 2, t - 1]
    fixture = {
        "gguf": name,
        "made_by": "scripts/reference_logits.py",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "text": {"file": os.path.basename(args.text), "offset": args.offset},
        "tokens": ids,
        "argmax": logits.argmax(-1).tolist(),
        "top2_gap": [round(x, 5) for x in (top2.values[:, 0] - top2.values[:, 1]).tolist()],
        "l2_norm": [round(x, 4) for x in logits.norm(dim=-1).tolist()],
        "top10": top,
        "capture": {
            "layer": args.capture_layer,
            "positions": cap_positions,
            # [position][head][head_dim], the layout of cpu_forward's captures
            "q": [[[round(x, 5) for x in q[h, p].tolist()] for h in range(q.shape[0])]
                  for p in cap_positions],
            "k": [[[round(x, 5) for x in k[h, p].tolist()] for h in range(k.shape[0])]
                  for p in cap_positions],
        },
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"{args.out}: {t} tokens, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
