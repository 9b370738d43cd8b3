#!/usr/bin/env python3
"""Writes a Hugging Face model folder with random bf16 weights for benchmarks
and parity checks on the GPU machine (which has no internet to fetch one).

  python3 bench/make_hf_folder.py OUT [--shape qwen3-0.6b|qwen3-1.7b|qwen3-8b|qwen3-small]
                                      [--tokenizer full|trained] [--corpus FILE]

--tokenizer full (default): a byte-level BPE whose vocabulary covers every id
of the model (151,936 for the Qwen3 shapes: 256 bytes, synthesized merges,
then the ChatML specials and reserved special tokens), so that any id a random
model emits decodes to text and servers stream real characters. "hello" and
" hello" are single tokens (bench/serve_load.py's prompts).

--tokenizer trained: a byte-level BPE trained with `tokenizers` on --corpus
(or a built-in mixed-script text) to 8,192 tokens; the model's vocabulary is
the tokenizer's size. For fine-tuning checks where the text should tokenize
the way a real tokenizer does.

Both carry a ChatML chat template, EOS <|im_end|>, and generation_config.json.
"""
import argparse
import itertools
import json
import os

SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128),
    "qwen3-small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=64),
    # The 8B serving shape (Qwen3-8B's: 36 layers, an untied head).
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    # A small Qwen3-MoE (qwen3_moe): 16 experts of 256, top 4, with the
    # load-balancing loss (output_router_logits), for loss-curve parity.
    "qwen3-moe-small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                            num_attention_heads=8, num_key_value_heads=4, head_dim=64, num_experts=16,
                            num_experts_per_tok=4, moe_intermediate_size=256, norm_topk_prob=True,
                            decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=True,
                            router_aux_loss_coef=0.001),
}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def full_vocab_bpe(vocab_size):
    """vocab (str -> id) and merges covering ids 0 .. vocab_size - 1: bytes,
    merges, then special tokens (the last len(SPECIALS) + reserved ids)."""
    alphabet = bytes_to_unicode()
    vocab, merges = {}, []
    for b in range(256):
        vocab[alphabet[b]] = len(vocab)

    def merge(a, b):
        if a + b not in vocab:
            merges.append((a, b))
            vocab[a + b] = len(vocab)

    for word in ["hello", "Ġhello"]:  # single tokens for the load generator's prompts
        parts = list(word)
        while len(parts) > 1:
            merge(parts[0], parts[1])
            parts = [parts[0] + parts[1]] + parts[2:]
    reserved = 256  # special tokens at the top, like Qwen's <|endoftext|> .. padding ids
    regular = vocab_size - reserved
    symbols = [alphabet[b] for b in range(256)]
    pairs = itertools.chain(itertools.product(symbols, symbols),
                            ((a + b, c) for a, b in itertools.product(symbols, symbols) for c in symbols))
    for a, b in pairs:
        if len(vocab) >= regular:
            break
        merge(a, b)
    specials = SPECIALS + [f"<|reserved_{i}|>" for i in range(reserved - len(SPECIALS))]
    return vocab, merges, specials


def make_tokenizer(kind, corpus):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    import transformers
    if kind == "full":
        vocab, merges, specials = full_vocab_bpe(151936)
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    else:
        tok = Tokenizer(models.BPE())
        specials = SPECIALS
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if kind == "trained":
        text = open(corpus, encoding="utf-8").read().splitlines() if corpus else builtin_corpus()
        tok.train_from_iterator(text, trainers.BpeTrainer(
            vocab_size=8192, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    else:
        tok.add_special_tokens(specials)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def builtin_corpus():
    words = ["the", "cluster", "trains", "a", "model", "on", "tokens", "server", "GPU", "batch", "stream",
             "数据", "模型", "训练", "مرحبا", "بالعالم", "नमस्ते", "दुनिया", "café", "naïve", "🙂", "🚀",
             "def", "return", "for", "i", "in", "range(10):", "12345", "3.14159", "\t", "  "]
    rows = []
    for i in range(4000):
        k = 12 + (i * 7) % 40
        rows.append(" ".join(words[(i * 31 + j * 17 + (i * j) % 13) % len(words)] for j in range(k)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--tokenizer", choices=["full", "trained"], default="full")
    ap.add_argument("--corpus", help="text to train the tokenizer on (--tokenizer trained)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    import transformers
    os.makedirs(args.out, exist_ok=True)
    fast = make_tokenizer(args.tokenizer, args.corpus)
    fast.save_pretrained(args.out)
    vocab = 151936 if args.tokenizer == "full" else len(fast)
    eos = fast.convert_tokens_to_ids("<|im_end|>")
    shape = dict(tie_word_embeddings=True, **SHAPES[args.shape]) if "tie_word_embeddings" not in SHAPES[args.shape] \
        else dict(SHAPES[args.shape])
    config_class = transformers.Qwen3MoeConfig if "num_experts" in shape else transformers.Qwen3Config
    cfg = config_class(vocab_size=vocab, max_position_embeddings=4096, rope_theta=1e6,
                       rms_norm_eps=1e-6, eos_token_id=eos, bos_token_id=None, **shape)
    torch.manual_seed(args.seed)
    # Initialised on the GPU where there is one: an 8B model takes minutes on the host.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(args.out)
    print(json.dumps({"folder": args.out, "shape": args.shape, "vocab": vocab, "tokenizer": len(fast),
                      "eos": eos}))


if __name__ == "__main__":
    main()
