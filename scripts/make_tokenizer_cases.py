#!/usr/bin/env python3
"""Generates tests/data/gemma3_tokenizer_cases.json: reference token ids of Gemma 3's tokenizer.

The reference is transformers' tokenizer built from the GGUF file's own metadata
(AutoTokenizer.from_pretrained(dir, gguf_file=...)), on text alone: no BOS, and control tokens
written in the text ("<eos>") are text, not tokens (split_special_tokens=True), which is what
SpmTokenizer::encode does. Every case is also encoded by the sentencepiece library itself, with a
model rebuilt from the same metadata (BPE, byte fallback, no dummy prefix, identity normalizer).

They disagree on one kind of text, runs of more than 31 spaces, and there the fixture holds
sentencepiece's ids (with transformers' as "transformers_ids"), which llama.cpp produces too. Gemma
was trained with sentencepiece, which matches its user-defined tokens for runs of 2..31 spaces
leftmost-longest (40 spaces: 31 + 9). transformers' GGUF conversion does not add those tokens as
added tokens (it respells them "▁▁..." and then finds them missing from the vocabulary), so BPE
merges build the run instead (40 spaces: 16 + 24). Any other disagreement stops the script.
"round_trips" says whether sentencepiece decodes the ids back to the text (not when the text holds
a literal U+2581, which encodes as a space).

Pinned versions (run on the CPU; transformers' GGUF reader imports torch):
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install transformers==5.24.0 \
        tokenizers==0.23.3 sentencepiece==0.2.3 gguf==0.19.0 protobuf==7.36.2 numpy==2.4.6 \
        torch==2.15.0

Run from the repository root (building transformers' tokenizer takes about a minute):
    /tmp/tokvenv/bin/python scripts/make_tokenizer_cases.py
"""

import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Short cases, one property each.
CASES = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "multiple  spaces   between    words",
    " ",
    "  ",
    " " * 40,  # longer than the longest run-of-spaces token (31)
    "line one\nline two\n\nline four\r\nline five\n",
    "\n" * 40,
    "\tindented\n\t\ttwice\t\t\tthrice",
    "mixed \n \t  \n\n  whitespace  \t",
    "3.14159 + 2,718 = 5.85959; 1234567890 and 007",
    "In 1811, 42 people paid $1,000.50 (about 10%) on 2024-03-05 at 12:30.",
    "Hello, world! (Yes?) \"quoted\" 'single' — em-dash… ellipsis; a:b/c\\d @#$%^&*_+=[]{}|<>~`",
    "I'm sure you'll see they've we'd I've 'q",
    "héllo café naïve résumé Ångström Straße œuvre façade",
    "Ελληνικά, русский язык, العربية, עברית, हिन्दी, ไทย",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "I love 🍕 and 🤖! 👨‍👩‍👧 🏳️‍🌈 🫠",
    # characters outside the vocabulary: byte fallback
    "rare: 𠀀𪚥 \u3000ideographic space, controls \x01\x02\x7f, private use \ue000\U000f0000",
    "<table><tr><td>cell</td></tr></table> <b>bold</b> <h1>title</h1>",
    "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n",
    "<eos> <bos> <pad> <unk> <mask> <0x41> <unused0> [multimodal]",
    "def f(x):\n    return x ** 2  # square\n",
    "▁ already escaped ▁▁",
    "",
]

# A few paragraphs from each book: (file, first line, number of lines).
CORPUS = [
    ("austen_0_emma.txt", 200, 40),
    ("austen_1_mansfield_park.txt", 300, 30),
    ("austen_2_northanger_abbey.txt", 250, 30),
    ("austen_3_persuasion.txt", 200, 30),
    ("austen_4_pride_and_prejudice.txt", 200, 40),
    ("austen_5_sense_and_sensibility.txt", 200, 30),
    ("kjv.txt", 100, 40),
    ("kjv.txt", 60000, 30),
]


def sentencepiece_from_gguf(reader):
    """A sentencepiece BPE model with the GGUF file's pieces, scores and types."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    def field(key):
        return reader.fields[key].contents()

    piece_type = pb.ModelProto.SentencePiece
    types = {1: piece_type.NORMAL, 2: piece_type.UNKNOWN, 3: piece_type.CONTROL,
             4: piece_type.USER_DEFINED, 5: piece_type.UNUSED, 6: piece_type.BYTE}
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.vocab_size = len(field("tokenizer.ggml.tokens"))
    m.trainer_spec.unk_id = field("tokenizer.ggml.unknown_token_id")
    m.trainer_spec.bos_id = field("tokenizer.ggml.bos_token_id")
    m.trainer_spec.eos_id = field("tokenizer.ggml.eos_token_id")
    m.trainer_spec.pad_id = field("tokenizer.ggml.padding_token_id")
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = field("tokenizer.ggml.add_space_prefix")
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    unk = m.trainer_spec.unk_id
    for i, (text, score, kind) in enumerate(zip(field("tokenizer.ggml.tokens"),
                                                field("tokenizer.ggml.scores"),
                                                field("tokenizer.ggml.token_type"))):
        p = m.pieces.add()
        # llama.cpp's converter writes user-defined runs of spaces with real spaces; sentencepiece
        # matches them in the escaped text.
        p.piece = text.replace(" ", "\u2581") if kind == 4 else text
        p.score = score
        p.type = piece_type.UNKNOWN if i == unk else types[kind]
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=ROOT / "models" / "gemma-3-270m-q4_k_m.gguf", type=pathlib.Path)
    ap.add_argument("--corpora", default=ROOT.parent / "shared" / "corpora", type=pathlib.Path)
    ap.add_argument("--out", default=ROOT / "tests" / "data" / "gemma3_tokenizer_cases.json",
                    type=pathlib.Path)
    args = ap.parse_args()

    from gguf import GGUFReader
    from transformers import AutoTokenizer

    gguf_path = args.gguf.resolve()
    hf = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    sp = sentencepiece_from_gguf(GGUFReader(str(gguf_path)))

    texts = list(CASES)
    for name, first, count in CORPUS:
        lines = (args.corpora / name).read_text(encoding="utf-8").splitlines(keepends=True)
        texts.append("".join(lines[first:first + count]))

    cases = []
    for text in texts:
        ids = sp.encode(text)
        case = {"text": text, "ids": ids, "round_trips": sp.decode(ids) == text}
        hf_ids = hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if hf_ids != ids:
            if not re.search("[ \u2581]{32}", text):
                sys.exit(f"transformers and sentencepiece disagree on {text!r}")
            case["transformers_ids"] = hf_ids
        cases.append(case)

    source = (f"sentencepiece {__import__('sentencepiece').__version__} on a BPE model rebuilt "
              f"from the metadata of {gguf_path.name}, equal to transformers "
              f"{__import__('transformers').__version__} AutoTokenizer from the file "
              "(split_special_tokens=True, no BOS) except on runs of more than 31 spaces "
              "(transformers_ids); made by scripts/make_tokenizer_cases.py")
    args.out.write_text(json.dumps({"source": source, "cases": cases}, ensure_ascii=False) + "\n",
                        encoding="utf-8")
    print(f"{args.out}: {len(cases)} cases, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
