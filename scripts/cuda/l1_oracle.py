"""L1 oracle (DESIGN.md): every model fixture under test/fixtures/models run by transformers in
bfloat16 on the GPU over its teacher-forced sequence (prompt ids + the fixture's greedy tokens
minus the last), twice: in one forward (<name>.f32) and as a prompt prefill followed by one
token per step on the KV cache (<name>.step.f32, the reference for our decode path: dynamic
rope scaling, for one, legitimately depends on how many tokens were seen). Float32 logits
[T, vocab]; <name>.json holds ids and shape.

Each run gets a freshly loaded model: transformers' dynamic-NTK rotary embedding keeps the
longest sequence it has seen (max_seq_len_cached) and only grows, so a stepped run after the
one-shot forward would rotate every step with the full sequence's frequencies.

    python3 scripts/cuda/l1_oracle.py test/fixtures/models OUT
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        path = os.path.join(d, "oracle.json")
        if not os.path.isfile(path):
            continue
        o = json.load(open(path))
        ids = list(o["prompt_ids"]) + list(o["greedy_tokens"][:-1])
        def load():
            return AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()

        with torch.no_grad():
            logits = load()(input_ids=torch.tensor([ids], device="cuda"), use_cache=False).logits[0].float().cpu()
            model = load()
            n = len(o["prompt_ids"])
            step = model(input_ids=torch.tensor([ids[:n]], device="cuda"), use_cache=True)
            rows, past = [step.logits[0].float().cpu()], step.past_key_values
            for tok in ids[n:]:
                step = model(input_ids=torch.tensor([[tok]], device="cuda"), past_key_values=past, use_cache=True)
                rows.append(step.logits[0].float().cpu())
                past = step.past_key_values
        logits.numpy().tofile(os.path.join(out, name + ".f32"))
        torch.cat(rows).numpy().tofile(os.path.join(out, name + ".step.f32"))
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump({"ids": ids, "prompt_len": len(o["prompt_ids"]), "shape": list(logits.shape)}, f)
        print(f"oracle {name}: {list(logits.shape)}", flush=True)


if __name__ == "__main__":
    main()
