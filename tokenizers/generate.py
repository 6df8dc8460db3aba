#!/usr/bin/env python3
"""Writes the engine's shipped Hugging Face tokenizer directories (tokenizers/servesim-char-N/).

    pip install tokenizers && python3 tokenizers/generate.py          # rewrite them
    python3 tokenizers/generate.py --check                            # fail if they differ

Each is a character-level tokenizer for a model vocabulary of N ids (256: `tiny`; 32000:
`small`, `100m`): a BPE model with no merges whose vocabulary is `<unk>` (id 0) and N-3 single
Unicode characters (ids 1..N-3), then `<s>` (N-2) and `</s>` (N-1) as added special tokens.
Why this shape: benchmark clients make a prompt of k tokens by decoding k random ids below
`tokenizer.vocab_size` (N-2 here: Hugging Face leaves added tokens out) and count outputs by
re-encoding the text, so decode -> encode must give back any id sequence exactly. One character
per id, no normalizer, no pre-tokenizer, a Fuse decoder (tokens join with nothing between) and
no BOS/EOS post-processor make that true; `<unk>` is also an added token, so its text
re-encodes to id 0. The characters are letters, digits, punctuation, symbols and the space
(plus tab and newline): no control, format, combining or private-use character, and not U+FFFD,
which streaming detokenizers treat as "incomplete, wait".
"""
import json
import sys
import unicodedata
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models

HERE = Path(__file__).resolve().parent
VOCAB_SIZES = (256, 32000)
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# A plain chat template, so clients that format chat prompts (vLLM's sonnet dataset) work.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '</s>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
# Character ranges, in id order: ASCII first, then Latin, Greek, Cyrillic, CJK, Hangul.
RANGES = [
    (0x09, 0x0A),  # tab, newline
    (0x20, 0x7E),  # printable ASCII and the space
    (0xA1, 0xFF),  # Latin-1 (U+00AD, the soft hyphen, is a format character: dropped below)
    (0x100, 0x24F),  # Latin Extended-A and -B
    (0x391, 0x3C9),  # Greek capitals and small letters (U+03A2 is unassigned: dropped below)
    (0x400, 0x45F),  # Cyrillic
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7A3),  # Hangul syllables
]
ALLOWED_CATEGORIES = ("L", "N", "P", "S")


def characters(count):
    out = []
    for lo, hi in RANGES:
        for code in range(lo, hi + 1):
            c = chr(code)
            if c in "\t\n " or unicodedata.category(c)[0] in ALLOWED_CATEGORIES:
                out.append(c)
            if len(out) == count:
                return out
    raise SystemExit(f"only {len(out)} characters in RANGES, {count} needed")


def build(vocab_size):
    chars = characters(vocab_size - len(SPECIAL_TOKENS))
    vocab = {"<unk>": 0}
    for i, c in enumerate(chars):
        vocab[c] = i + 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", fuse_unk=False))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    assert tok.get_vocab_size(with_added_tokens=False) == vocab_size - 2
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, vocab_size - 2, vocab_size - 1]
    files = {"tokenizer.json": json.dumps(json.loads(tok.to_str()), indent=2, ensure_ascii=False) + "\n"}
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": False,
        "add_eos_token": False,
        # Cleanup would merge " ." into "." and break the exact decode -> encode round trip.
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    files["tokenizer_config.json"] = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    special = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    files["special_tokens_map.json"] = json.dumps(special, indent=2) + "\n"
    return files


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for n in VOCAB_SIZES:
        out = HERE / f"servesim-char-{n}"
        for name, text in build(n).items():
            path = out / name
            if check:
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    stale.append(str(path))
            else:
                out.mkdir(exist_ok=True)
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path}")
    if stale:
        raise SystemExit("out of date (run python3 tokenizers/generate.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
