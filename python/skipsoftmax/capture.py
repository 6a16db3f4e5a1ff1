"""Post-RoPE Q, K and V of a Hugging Face model, in the layout `skipsoftmax calibrate
--captures-dir` reads (calibration/capture_source.h): per prompt a manifest.json,

    {"tokens": "tokens.npy", "layers": [{"layer": 0, "q": "layer00_q.npy", ...}, ...], ...}

with q [n, heads_q, head_dim] and k, v [n, heads_kv, head_dim] as the attention function receives
them (after the rotary embedding and any q/k norms, q not scaled). The prompts are windows of a
text (--tokens N: its first N tokens, files directly in --out-dir; --tokens N1 N2 ... --samples K:
K disjoint windows of each length, one subdirectory each, the tokenizer's leading special tokens
first, which is what `skipsoftmax calibrate --captures-dir` calibrates a checkpoint without a GGUF
on), or the prompt_*.npy files that `skipsoftmax calibrate --write-samples DIR` writes.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
from typing import Iterable, Optional

import numpy as np
import torch

CAPTURE_NAME = "skipsoftmax_capture"


class _Recorder:
    """The attention function that writes its inputs, for the layers asked for, into `directory`
    as they come (a long prompt's float32 Q/K/V of every layer would not fit in host memory),
    then runs SDPA."""

    def __init__(self):
        self.layers: Optional[set[int]] = None
        self.directory: Optional[pathlib.Path] = None
        self.dtype = np.float32
        self.entries: list[dict] = []
        self.heads = (0, 0, 0)  # heads_q, heads_kv, head_dim

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise RuntimeError(f"{type(module).__name__} has no layer_idx: cannot name its capture")
        if self.layers is None or layer in self.layers:
            entry = {"layer": layer}
            for name, t in zip("qkv", (query, key, value)):
                values = t[0].transpose(0, 1).float().cpu().numpy()  # [1, H, n, D] -> [n, H, D]
                if not np.isfinite(values).all():
                    raise ValueError(f"layer {layer}: {name} holds values that are not finite")
                if self.dtype == np.float16 and np.abs(values).max() > np.finfo(np.float16).max:
                    raise ValueError(f"layer {layer}: {name} overflows float16; use --dtype f32")
                entry[name] = f"layer{layer:02d}_{name}.npy"
                np.save(self.directory / entry[name], values.astype(self.dtype))
            self.entries.append(entry)
            self.heads = (query.shape[1], key.shape[1], query.shape[3])
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


_recorder = _Recorder()


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(CAPTURE_NAME, _recorder)
    AttentionMaskInterface.register(CAPTURE_NAME, sdpa_mask)


def capture_prompt(model, ids: list[int], layers: Optional[Iterable[int]],
                   directory: pathlib.Path, dtype: str, meta: dict) -> int:
    """One prompt's captures and manifest into `directory` (created); returns the layers
    written."""
    _register()
    directory.mkdir()
    np.save(directory / "tokens.npy", np.asarray(ids, dtype=np.int32))
    previous = model.config._attn_implementation
    model.set_attn_implementation(CAPTURE_NAME)
    _recorder.layers = None if layers is None else set(layers)
    _recorder.directory = directory
    _recorder.dtype = np.float16 if dtype == "f16" else np.float32
    _recorder.entries = []
    try:
        with torch.no_grad():
            model(torch.tensor([ids], device=model.device), use_cache=False)
        entries = sorted(_recorder.entries, key=lambda e: e["layer"])
        heads_q, heads_kv, head_dim = _recorder.heads
    finally:
        _recorder.entries = []
        _recorder.directory = None
        model.set_attn_implementation(previous)
    manifest = {**meta, "tokens": "tokens.npy", "heads_q": heads_q, "heads_kv": heads_kv,
                "head_dim": head_dim, "dtype": "float16" if dtype == "f16" else "float32",
                "layout": "q: [tokens, heads_q, head_dim]; k, v: [tokens, heads_kv, head_dim]; "
                          "q and k after the rotary embedding, q not scaled",
                "layers": entries}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return len(entries)


def _prompts_from_samples(directory: pathlib.Path) -> list[tuple[str, list[int]]]:
    files = sorted(directory.glob("prompt_*.npy"))
    if not files:
        raise FileNotFoundError(f"{directory}: no prompt_*.npy files (write them with "
                                "`skipsoftmax calibrate --write-samples DIR`)")
    prompts = []
    for f in files:
        ids = np.load(f, allow_pickle=False)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
            raise ValueError(f"{f}: expected a non-empty 1-D integer array of token ids, got "
                             f"{ids.dtype} {ids.shape}")
        prompts.append((f.stem, ids.astype(np.int64).tolist()))
    return prompts


def _text_windows(tokenizer, text: str, lengths: list[int], samples: int,
                  name: str) -> list[tuple[str, list[int]]]:
    """`samples` disjoint windows of the text per length, each led by the tokenizer's special
    tokens (BOS), one after another through the text. One window of one length: ("", ids)."""
    lead = tokenizer("", add_special_tokens=True)["input_ids"]
    body = tokenizer(text, add_special_tokens=False)["input_ids"]
    need = sum(n - len(lead) for n in lengths) * samples
    if len(body) < need:
        raise ValueError(f"--text {name}: {len(body)} tokens, fewer than the {need} that "
                         f"{samples} window(s) of {' + '.join(map(str, lengths))} tokens need")
    if any(n <= len(lead) for n in lengths):
        raise ValueError(f"--tokens must exceed the {len(lead)} leading special token(s)")
    if len(lengths) == 1 and samples == 1:
        return [("", lead + body[:lengths[0] - len(lead)])]
    prompts, at = [], 0
    for n in lengths:
        for i in range(samples):
            prompts.append((f"prompt_{n}_{i}", lead + body[at:at + n - len(lead)]))
            at += n - len(lead)
    return prompts


def run(args) -> None:
    import transformers

    out = pathlib.Path(args.out_dir).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out-dir {out}: exists and is not an empty directory")
    layers = None
    if args.layers:
        layers = [int(x) for x in args.layers.split(",")]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.model_dtype]
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    model = model.to(args.device).eval()
    text_config = model.config.get_text_config()  # multimodal configs keep it apart
    n_layers = text_config.num_hidden_layers
    for layer in layers or []:
        if not 0 <= layer < n_layers:
            raise ValueError(f"--layers: {layer} is outside the model's {n_layers} layers")

    if args.prompts:
        prompts = _prompts_from_samples(pathlib.Path(args.prompts))
    else:
        tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
        text = pathlib.Path(args.text).read_text(encoding="utf-8")
        prompts = _text_windows(tokenizer, text, args.tokens, args.samples, args.text)
    limit = getattr(text_config, "max_position_embeddings", None)
    for name, ids in prompts:
        if limit and len(ids) > limit:
            raise ValueError(f"prompt {name or '--text'}: {len(ids)} tokens exceed the model's "
                             f"context of {limit}")

    meta = {"model": {"path": str(pathlib.Path(args.model).absolute()),
                      "architecture": model.config.model_type, "layers": n_layers}}
    if not out.parent.is_dir():
        raise FileNotFoundError(f"--out-dir {out}: its parent directory does not exist")
    # Everything goes to a hidden sibling first, renamed into place at the end.
    tmp = out.parent / f".{out.name}.tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for i, (name, ids) in enumerate(prompts):
            written = capture_prompt(model, ids, layers, tmp / (name or "capture"), args.dtype,
                                     meta)
            print(f"capture: prompt {i + 1}/{len(prompts)} ({len(ids)} tokens, "
                  f"{written} layers)", file=sys.stderr, flush=True)
        if len(prompts) == 1 and not prompts[0][0]:  # one window: its files in --out-dir
            for f in (tmp / "capture").iterdir():
                f.rename(tmp / f.name)
            (tmp / "capture").rmdir()
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"captured {len(prompts)} prompt(s) in {out}")
