#!/usr/bin/env python3
"""Tokenizer and chat-template parity: cohort against Hugging Face.

Trains one tokenizer per family with HF `tokenizers` on a generated
multilingual corpus (CJK, Japanese, Korean, Arabic, Devanagari, Thai, emoji
with ZWJ sequences, combining marks in NFC and NFD, digit runs, whitespace
runs, code, contractions, special tokens inside text), saves each as
tokenizer.json, and has cohort's `data_tokenize_dump` encode and decode the
same strings. Every string must give the same ids (with and without the
post-processor's special tokens) and the same decoded text. Then renders
Qwen3- and Llama-3-style chat templates through transformers'
apply_chat_template and through cohort, and compares the text.

Families: gpt2 (ByteLevel regex), qwen3 (NFC + Split regex + ByteLevel),
llama3 (Split regex with \\p{N}{1,3} + ByteLevel + BOS post-processor),
mistral (Metaspace pre-tokenizer, byte fallback), llama2 (Prepend/Replace
normalizer, byte fallback, ByteFallback/Fuse/Strip decoder).

Run on a machine with `tokenizers` (and `transformers` for the chat part):
  python3 tests/data/tokenizer_parity.py --build build [--strings 12000]
Prints one PASS/FAIL line per check and exits non-zero on any FAIL.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<think>", "</think>"]


def corpus_pieces(rng):
    """Fragments of many scripts and shapes; joined at random into lines."""
    def run(lo, hi, n):
        return "".join(chr(rng.randint(lo, hi)) for _ in range(n))
    english = ["the", "quick", "brown", "fox", "I'LL", "don't", "we've", "It's", "HELLO", "naïve", "café", "über"]
    makers = [
        lambda: rng.choice(english),
        lambda: run(0x4E00, 0x9FFF, rng.randint(1, 6)),            # CJK
        lambda: run(0x3041, 0x30FF, rng.randint(1, 6)),            # kana
        lambda: run(0xAC00, 0xD7A3, rng.randint(1, 4)),            # Hangul
        lambda: run(0x0621, 0x064A, rng.randint(2, 7)),            # Arabic
        lambda: "".join(chr(rng.randint(0x0915, 0x0939)) + chr(rng.choice([0x093E, 0x093F, 0x0940, 0x094D, 0x0902]))
                        for _ in range(rng.randint(1, 4))),        # Devanagari with vowel signs
        lambda: run(0x0E01, 0x0E30, rng.randint(2, 6)),            # Thai
        lambda: rng.choice(["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🧑🏿‍🚀", "✨"]),  # emoji
        lambda: unicodedata.normalize(rng.choice(["NFC", "NFD"]), rng.choice(["é", "ñ", "Å", "ệ", "ǘ"]) * rng.randint(1, 3)),
        lambda: "e\u0301" + "a\u0308\u0323",                        # combining marks
        lambda: str(rng.randint(0, 10 ** rng.randint(1, 12))),      # digit runs
        lambda: rng.choice(["٣٤٥", "१२३", "１２３", "²³", "½"]),      # other numbers
        lambda: rng.choice([" ", "  ", "    ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "   \t\n"]),
        lambda: rng.choice(["def f(x):\n    return x ** 2\n", "int main() { return 0; }", "for (i = 0; i < n; ++i) {",
                            "    if x != None:  # comment", "<div class=\"a\">&amp;</div>", "a->b::c", "x+=1;y-=2"]),
        lambda: rng.choice(["...", "!!", "?!", "—", "«»", "“quoted”", "(parens)", "[1, 2]", "{'k': v}", "@#$%^&*"]),
    ]
    return makers


def make_corpus(rng, lines):
    makers = corpus_pieces(rng)
    out = []
    for _ in range(lines):
        parts = [rng.choice(makers)() for _ in range(rng.randint(3, 20))]
        out.append("".join(p + rng.choice(["", " ", " ", "\n"]) for p in parts))
    return out


def test_strings(rng, corpus, count):
    makers = corpus_pieces(rng)
    strings = ["", " ", "\n", "a", "  leading", "trailing  ", "<|im_start|>user\nhi<|im_end|>\n",
               "x<|endoftext|>y", "<think>\nplan\n</think>\n\nanswer", "I'LL DON'T 've", "1234567890123"]
    while len(strings) < count:
        kind = rng.random()
        if kind < 0.6:
            line = rng.choice(corpus)
            a = rng.randint(0, len(line))
            strings.append(line[a:a + rng.randint(1, 120)])
        elif kind < 0.85:
            strings.append("".join(rng.choice(makers)() for _ in range(rng.randint(1, 12))))
        else:
            strings.append(rng.choice(makers)() + rng.choice(SPECIALS) + rng.choice(makers)())
    return strings


def add_byte_fallback_tokens(path):
    """Byte fallback needs <0x00>..<0xFF> in the model vocabulary (as Llama 2's has)."""
    j = json.load(open(path, encoding="utf-8"))
    vocab = j["model"]["vocab"]
    top = max(max(vocab.values()), max((a["id"] for a in j.get("added_tokens", [])), default=0)) + 1
    for b in range(256):
        name = "<0x%02X>" % b
        if name not in vocab:
            vocab[name] = top
            top += 1
    json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)


def train_family(family, corpus, out_dir):
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, normalizers, processors, trainers
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"]
    if family in ("gpt2", "qwen3", "llama3"):
        tok = Tokenizer(models.BPE())
        if family == "gpt2":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            pattern = QWEN_PATTERN if family == "qwen3" else LLAMA3_PATTERN
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        if family == "qwen3":
            tok.normalizer = normalizers.NFC()
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if family == "mistral":
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
            tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        else:  # llama2: the transformers conversion of a SentencePiece model
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(content=" ", left=1)])
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"] + specials[1:3],
                                      limit_alphabet=300, show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    if family == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    elif family in ("qwen3", "gpt2"):
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    elif family == "llama2":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    if family in ("mistral", "llama2"):
        add_byte_fallback_tokens(path)
    return Tokenizer.from_file(path)


def run_dump(build, args, lines):
    exe = os.path.join(build, "tests", "data_tokenize_dump")
    proc = subprocess.run([exe] + args, input="".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines),
                          capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} {' '.join(args)} failed: {proc.stderr}")
    return [json.loads(l) for l in proc.stdout.splitlines()]


def check_family(build, family, corpus, strings, work):
    hf = train_family(family, corpus, os.path.join(work, family))
    ours = run_dump(build, ["encode", os.path.join(work, family)], [{"text": s} for s in strings])
    bad = []
    for s, got in zip(strings, ours):
        ids = hf.encode(s, add_special_tokens=False).ids
        ids_special = hf.encode(s).ids
        decoded = hf.decode(ids, skip_special_tokens=False)
        if got["ids"] != ids or got["ids_special"] != ids_special or got["decoded"] != decoded:
            bad.append((s, ids, got["ids"], decoded, got["decoded"]))
    same = len(strings) - len(bad)
    status = "PASS" if not bad and len(ours) == len(strings) else "FAIL"
    print(f"{status} tokenizer {family}: {same}/{len(strings)} strings identical (ids, ids with special tokens, decode)")
    for s, want, have, dwant, dhave in bad[:5]:
        print(f"    {s!r}\n      hf     {want} {dwant!r}\n      cohort {have} {dhave!r}")
    return status == "PASS"


def conversations(rng, n):
    words = ["hello", "world", "quick", "数学", "مرحبا", "नमस्ते", "😀", "x = 1", "  spaced  ", "line\nbreak"]
    def text():
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    out = []
    for i in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": text()})
        for turn in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": text()})
            content = text()
            if rng.random() < 0.3:
                content = "<think>\n" + text() + "\n</think>\n\n" + content
            msg = {"role": "assistant", "content": content}
            if rng.random() < 0.2:
                msg["tool_calls"] = [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": text()}}}]
                msgs.append(msg)
                msgs.append({"role": "tool", "content": text()})
                continue
            msgs.append(msg)
        ctx = {"messages": msgs, "add_generation_prompt": i % 2 == 1, "date_string": "01 Dec 2026"}
        if rng.random() < 0.2:
            ctx["tools"] = [tool]
        if msgs[-1]["role"] == "assistant" and ctx["add_generation_prompt"]:
            ctx["add_generation_prompt"] = False
        out.append(ctx)
    return out


def check_templates(build, work, rng, count):
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from transformers import PreTrainedTokenizerFast
        from tokenizers import Tokenizer
        render_with = "transformers apply_chat_template"
    except ImportError:
        PreTrainedTokenizerFast = None
        render_with = "jinja2 (transformers not installed)"
    ok = True
    for name, bos in (("qwen3", ""), ("llama3", "<|begin_of_text|>")):
        template = open(os.path.join(here, "templates", name + ".jinja"), encoding="utf-8").read()
        convs = conversations(rng, count)
        if PreTrainedTokenizerFast:
            tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(os.path.join(work, "qwen3", "tokenizer.json")),
                                          bos_token=bos or None, eos_token="<|im_end|>")
            def hf_render(c):
                kwargs = {k: v for k, v in c.items() if k not in ("messages", "add_generation_prompt", "tools")}
                return tok.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False,
                                               add_generation_prompt=c["add_generation_prompt"], chat_template=template,
                                               **kwargs)
        else:
            import jinja2, jinja2.ext
            env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
            env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
            def raise_exception(m):
                raise ValueError(m)
            env.globals["raise_exception"] = raise_exception
            compiled = env.from_string(template)
            def hf_render(c):
                return compiled.render(bos_token=bos, eos_token="<|im_end|>", **c)
        ours_in = [dict(c, bos_token=bos, eos_token="<|im_end|>") for c in convs]
        for c in ours_in:
            c.setdefault("tools", None)
        path = os.path.join(work, name + ".jinja")
        open(path, "w", encoding="utf-8").write(template)
        ours = run_dump(build, ["chat", path], ours_in)
        bad = []
        for c, got in zip(convs, ours):
            want = hf_render(c)
            if got.get("text") != want:
                bad.append((c, want, got))
        status = "PASS" if not bad else "FAIL"
        ok = ok and not bad
        print(f"{status} chat template {name}: {len(convs) - len(bad)}/{len(convs)} conversations render identically "
              f"({render_with})")
        for c, want, got in bad[:3]:
            print(f"    {json.dumps(c, ensure_ascii=False)[:300]}\n      hf     {want!r}\n      cohort {got!r}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--strings", type=int, default=12000)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--families", default="gpt2,qwen3,llama3,mistral,llama2")
    args = parser.parse_args()
    rng = random.Random(20261201)
    corpus = make_corpus(rng, 4000)
    strings = test_strings(rng, corpus, args.strings)
    ok = True
    with tempfile.TemporaryDirectory(prefix="cohort_parity_") as work:
        for family in args.families.split(","):
            ok = check_family(args.build, family, corpus, strings, work) and ok
        ok = check_templates(args.build, work, rng, args.conversations) and ok
    print("PASS all" if ok else "FAIL some checks")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
