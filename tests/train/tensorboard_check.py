#!/usr/bin/env python3
"""TensorBoard reads cohort's event files: the scalars its own reader loads
from OUTPUT_DIR/tensorboard equal metrics.jsonl's (float32 rounding).

    python3 tests/train/tensorboard_check.py OUTPUT_DIR

Run on a machine with the `tensorboard` package (the GPU machine), after a
training job with train.tensorboard = true. Prints PASS or FAIL and exits 0/1.
"""
import json
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator

TAGS = ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "eval_loss")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    acc = event_accumulator.EventAccumulator(os.path.join(out, "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    expected = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            for tag in TAGS:
                if tag in row:
                    expected.setdefault(tag, {})[row["step"]] = row[tag]
    problems = []
    for tag, by_step in expected.items():
        if tag not in tags:
            problems.append(f"tag {tag} missing (TensorBoard has {sorted(tags)})")
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        for step, value in by_step.items():
            if step not in got:
                problems.append(f"{tag} step {step}: missing")
            elif not math.isclose(got[step], value, rel_tol=1e-6, abs_tol=1e-12):
                problems.append(f"{tag} step {step}: TensorBoard {got[step]} vs metrics.jsonl {value}")
    rows = sum(len(v) for v in expected.values())
    if problems or rows == 0:
        print("FAIL:", "no scalars in metrics.jsonl" if rows == 0 else "")
        for p in problems[:20]:
            print("  " + p)
        return 1
    print(f"PASS: {rows} scalars over {len(expected)} tags match metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
