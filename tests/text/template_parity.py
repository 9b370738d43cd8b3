#!/usr/bin/env python3
"""Chat-template parity: every template of the suite (tests/data/templates)
rendered over random conversations (system prompts, multi-turn, tools, tool
calls, reasoning) by cohort's engine and by Jinja2 set up as transformers'
apply_chat_template sets it up (transformers' own compiler where transformers
is installed, as on the GPU machine; Debian's python3-jinja2 with the same
settings elsewhere). A template that raises must raise on both sides.

  template_parity.py BUILD_DIR [--count N] [--seed S]
Exit 0 when every rendering is identical, 1 otherwise, 77 without Jinja2.
"""
import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "data"))
from tokenizer_parity import conversations, run_dump  # noqa: E402

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    print("SKIP: Jinja2 is not installed (Debian: python3-jinja2, installed by scripts/setup.sh)")
    sys.exit(77)


def compiler():
    """transformers' own template compiler when it is there, else Jinja2
    with the settings transformers uses (trim_blocks, lstrip_blocks, loop
    controls, a sandbox, tojson without ASCII escapes, raise_exception)."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
        return _compile_jinja_template, "transformers"
    except Exception:
        pass

    def compile_template(source):
        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                           extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        return env.from_string(source)
    return compile_template, "jinja2 " + jinja2.__version__


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    compile_template, peer = compiler()
    folder = os.path.join(HERE, "..", "data", "templates")
    ok = True
    for name in sorted(f[:-6] for f in os.listdir(folder) if f.endswith(".jinja")):
        path = os.path.join(folder, name + ".jinja")
        source = open(path, encoding="utf-8").read()
        compiled = compile_template(source)
        convs = conversations(random.Random(f"{args.seed}-{name}"), args.count)
        specials = {"bos_token": "<s>", "eos_token": "</s>"}
        ours = run_dump(args.build, ["chat", path],
                        [dict(c, **specials, tools=c.get("tools")) for c in convs])
        bad = []
        for c, got in zip(convs, ours):
            try:
                want = compiled.render(**c, **specials)
            except jinja2.exceptions.TemplateError as e:
                want = None
                if "error" not in got:
                    bad.append((c, f"raises: {e}", got))
                continue
            if got.get("text") != want:
                bad.append((c, want, got))
        print(f"{'PASS' if not bad else 'FAIL'} {name}: {len(convs) - len(bad)}/{len(convs)} conversations "
              f"render identically ({peer})")
        for c, want, got in bad[:3]:
            print(f"    {json.dumps(c, ensure_ascii=False)[:300]}\n      {peer} {want!r}\n      cohort {got!r}")
        ok = ok and not bad
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
