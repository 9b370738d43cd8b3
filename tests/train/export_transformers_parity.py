"""An exported cohort checkpoint, loaded by Hugging Face transformers, gives
the logits cohort gives (issue 8, on the GPU machine where transformers is).

  python3 tests/train/export_transformers_parity.py --cohort build/bin/cohort \
      --dump build/tests/models_hf_dump --run-dir jobs/examples/runs/quickstart

Exports the run's latest checkpoint with `cohort export`, loads the folder with
transformers (fp32, CPU) and with cohort's own loader (models_hf_dump, CPU
fp32), and compares the logits over a prompt (max relative error < 1e-4) and
the greedy continuations (identical).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cohort", required=True)
    ap.add_argument("--dump", required=True, help="models_hf_dump")
    ap.add_argument("--run-dir", required=True, help="a training run's output_dir (or a checkpoint)")
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="cohort_export_")
    subprocess.run([args.cohort, "export", args.run_dir, "--to", out], check=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    prompt = [int(t) for t in torch.randint(0, vocab, (24,), generator=torch.Generator().manual_seed(3))]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        hf_logits = model(ids).logits[0].numpy()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        hf_greedy = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False,
                                   attention_mask=torch.ones_like(ids))[0, len(prompt):].tolist()
    dump = subprocess.run([args.dump, out, ",".join(map(str, prompt)), str(args.new_tokens),
                           out + "/logits.f32", "cpu"], check=True, capture_output=True, text=True)
    ours = np.fromfile(out + "/logits.f32", dtype=np.float32).reshape(hf_logits.shape)
    greedy = json.loads(dump.stdout)["greedy"]
    rel = float(np.abs(ours - hf_logits).max() / np.abs(hf_logits).max())
    ok = rel < 1e-4 and greedy == hf_greedy
    print(f"export {args.run_dir} -> {out}: {model.config.model_type}, {sum(p.numel() for p in model.parameters())} "
          f"parameters; logits max rel err {rel:.2e} (tol 1e-4); greedy {'identical' if greedy == hf_greedy else 'DIFFERENT'}"
          f"  {'OK' if ok else 'FAIL'}")
    if greedy != hf_greedy:
        print("  transformers:", hf_greedy, "\n  cohort:      ", greedy)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
