"""A LoRA run's PEFT adapter folder, loaded by transformers + PEFT on its base,
gives the logits of cohort's merged export (issue 36; on the GPU machine, where
transformers and peft are installed).

  python3 tests/train/peft_parity.py --cohort build/bin/cohort --run-dir /tmp/lora-run

Exports the run's latest checkpoint twice with `cohort export`: as the PEFT
adapter folder and merged (W + scale B A). The base is the merged model less
each adapter's delta, computed here from the adapter's own tensors and
adapter_config.json (r, lora_alpha, use_rslora), so the check holds for any
base (a preset's seeded weights too). PeftModel.from_pretrained(base, adapter)
must then give the merged model's logits (fp32, CPU, max relative error
< 1e-4), which holds only if the tensor names, shapes and the scale read from
the config are PEFT's.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import peft
import torch
import transformers
from safetensors.torch import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cohort", required=True)
    ap.add_argument("--run-dir", required=True, help="a LoRA run's output_dir (or one of its checkpoints)")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="cohort_peft_")
    adapter, merged = os.path.join(out, "adapter"), os.path.join(out, "merged")
    subprocess.run([args.cohort, "export", args.run_dir, "--to", adapter], check=True)
    subprocess.run([args.cohort, "export", args.run_dir, "--to", merged, "--merge"], check=True)
    config = json.load(open(os.path.join(adapter, "adapter_config.json")))
    r, alpha = config["r"], config["lora_alpha"]
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    tensors = load_file(os.path.join(adapter, "adapter_model.safetensors"))

    reference = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    base = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    prefix = "base_model.model."
    with torch.no_grad():
        for name, a in tensors.items():
            if not name.endswith("lora_A.weight"):
                continue
            b = tensors[name.replace("lora_A", "lora_B")]
            weight = base.get_parameter(name[len(prefix):].replace(".lora_A.weight", ".weight"))
            weight -= scale * (b.float() @ a.float())
    model = peft.PeftModel.from_pretrained(base, adapter).eval()
    vocab = reference.config.vocab_size
    ids = torch.randint(0, vocab, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = reference(ids).logits[0]
        got = model(ids).logits[0]
        with model.disable_adapter():
            plain = model(ids).logits[0]
    rel = float((got - want).abs().max() / want.abs().max())
    moved = float((plain - want).abs().max() / want.abs().max())  # what the adapters change: not nothing
    ok = rel < 1e-4 and moved > 10 * rel
    print(f"PEFT adapter of {args.run_dir}: {len(tensors)} tensors, r {r}, lora_alpha {alpha}, scale {scale:g}, "
          f"{len(config['target_modules'])} target modules; logits vs merged max rel err {rel:.2e} (tol 1e-4), "
          f"the adapters move them by {moved:.2e}  "
          f"{'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
