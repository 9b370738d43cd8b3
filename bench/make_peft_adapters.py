#!/usr/bin/env python3
"""Random PEFT LoRA adapters for a Hugging Face model folder, for serving benchmarks.

  python3 bench/make_peft_adapters.py MODEL_DIR OUT_DIR --count 8 [--rank 16] [--alpha 32] [--seed 0]

Writes OUT_DIR/a0 ... OUT_DIR/a{count-1}, each a PEFT folder
(adapter_config.json, adapter_model.safetensors, bf16) with lora_A and lora_B
on every projection of every layer (q, k, v, o, gate, up, down), each value
of magnitude in [2^-7, 2^-6) with a random sign, so each adapter moves the
model's outputs: the server does its whole work for every row. Plain Python
(no torch or numpy). Prints one JSON line: the folders.
"""
import argparse
import json
import os
import struct

MODULES = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def projection_shapes(config):
    """(out, in) of each projection, from config.json."""
    h = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or h // heads
    kv = config.get("num_key_value_heads", heads) * head_dim
    q, i = heads * head_dim, config["intermediate_size"]
    return {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
            "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}


def random_bf16(count):
    """count bf16 values, little-endian: random sign and 7-bit mantissa, exponent 2^-7."""
    low = os.urandom(count).translate(bytes(b & 0x7F for b in range(256)))
    high = os.urandom(count).translate(bytes((b & 0x80) | 0x3C for b in range(256)))
    out = bytearray(2 * count)
    out[0::2], out[1::2] = low, high
    return bytes(out)


def write_safetensors(path, tensors):
    """tensors: name -> (shape, bf16 bytes), in the safetensors layout."""
    header, offset = {}, 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, data in tensors.values():
            f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    args = ap.parse_args()

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    shapes = projection_shapes(config)
    folders = []
    for n in range(args.count):
        folder = os.path.join(args.out_dir, f"a{n}")
        os.makedirs(folder, exist_ok=True)
        tensors = {}
        for layer in range(config["num_hidden_layers"]):
            for module, parent in MODULES.items():
                out_features, in_features = shapes[module]
                prefix = f"base_model.model.model.layers.{layer}.{parent}.{module}"
                tensors[f"{prefix}.lora_A.weight"] = ((args.rank, in_features), random_bf16(args.rank * in_features))
                tensors[f"{prefix}.lora_B.weight"] = ((out_features, args.rank), random_bf16(out_features * args.rank))
        write_safetensors(os.path.join(folder, "adapter_model.safetensors"), tensors)
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": args.rank, "lora_alpha": args.alpha,
                       "lora_dropout": 0.0, "target_modules": list(MODULES), "bias": "none",
                       "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
                       "base_model_name_or_path": os.path.abspath(args.model_dir)}, f, indent=2)
        folders.append(folder)
    print(json.dumps({"adapters": folders, "rank": args.rank}))


if __name__ == "__main__":
    main()
