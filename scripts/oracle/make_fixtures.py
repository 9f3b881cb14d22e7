#!/usr/bin/env python3
"""Tiny random-weight checkpoints per decoder family + Hugging Face transformers oracle outputs.

Developer tool only (run on the GPU machine, which has torch + transformers; the oracle itself runs
on the CPU in float32 with eager attention so the numbers do not depend on TF32 or GPU kernels).

For each fixture it writes, under OUT/<name>/:
  config.json            the dialect named in the fixture (transformers 5 `rope_parameters` /
                         `layer_types`, or the older `rope_theta` / `rope_scaling` /
                         `rope_local_base_freq` / `sliding_window_pattern` form)
  config.alt.json        the same model in the other dialect (verified to load to the same logits)
  model.safetensors      float32 or bfloat16 weights (save_pretrained)
  logits.f32             teacher-forced float32 logits of the prompt, [T, vocab] row-major, LE
  greedy_logits.f32      logits that picked each greedy token, [N, vocab] (step 0 = last prompt row),
                         computed incrementally (prefill, then one token at a time with the cache)
  oracle.json            prompt ids, greedy tokens, per-step top-2 margins, rope inv_freq dumps, notes
and OUT/manifest.json with the SHA-256 of every file.

Usage: python3 make_fixtures.py OUT_DIR [name ...]
"""
import copy
import hashlib
import json
import math
import os
import shutil
import sys
import traceback

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, CONFIG_MAPPING

PROMPT_LEN = 32
GREEDY_STEPS = 32

# Families whose RMSNorm scales by (1 + w): random norm weights are drawn around 0 for them.
ONE_PLUS_NORM = {"gemma2", "gemma3_text"}


def base(vocab=256, hidden=64, inter=128, layers=2, heads=4, kv=2, **extra):
    cfg = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
               num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
               max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
               pad_token_id=0, initializer_range=0.02, use_cache=True)
    cfg.update(extra)
    return cfg


def rope(theta, rope_type="default", **params):
    d = {"rope_type": rope_type, "rope_theta": float(theta)}
    d.update(params)
    return d


# name -> (model_type, config kwargs, weight dtype, dialect of the committed config.json, seed)
FIXTURES = {
    "llama": ("llama", base(vocab=256, tie_word_embeddings=False, rope_parameters=rope(
        10000.0, "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=32)), "float32", "v5", 11),
    "llama_linear": ("llama", base(vocab=300, tie_word_embeddings=True, rope_parameters=rope(
        10000.0, "linear", factor=2.0)), "float32", "legacy_type", 12),
    "llama_dynamic": ("llama", base(vocab=256, tie_word_embeddings=False, max_position_embeddings=16,
                                    rope_parameters=rope(10000.0, "dynamic", factor=2.0)),
                      "float32", "legacy", 13),
    "llama_yarn": ("llama", base(vocab=256, tie_word_embeddings=False, max_position_embeddings=256,
                                 rope_parameters=rope(10000.0, "yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0,
                                                      original_max_position_embeddings=64)),
                   "bfloat16", "v5", 14),
    "mistral": ("mistral", base(vocab=320, sliding_window=8, tie_word_embeddings=False,
                                rope_parameters=rope(10000.0)), "float32", "legacy", 15),
    "qwen2": ("qwen2", base(vocab=288, layers=3, tie_word_embeddings=True, use_sliding_window=False,
                            sliding_window=None, rope_parameters=rope(1000000.0)),
              "bfloat16", "legacy", 16),
    "qwen3": ("qwen3", base(vocab=256, head_dim=32, tie_word_embeddings=False, use_sliding_window=False,
                            sliding_window=None, rope_parameters=rope(1000000.0)), "float32", "v5", 17),
    "gemma2": ("gemma2", base(vocab=256, layers=4, head_dim=16, tie_word_embeddings=True,
                              hidden_activation="gelu_pytorch_tanh", sliding_window=6,
                              query_pre_attn_scalar=24, attn_logit_softcapping=5.0,
                              final_logit_softcapping=10.0, rms_norm_eps=1e-6,
                              layer_types=["sliding_attention", "full_attention"] * 2,
                              rope_parameters=rope(10000.0)), "float32", "v5", 18),
    "gemma3_text": ("gemma3_text", base(vocab=320, layers=4, head_dim=32, tie_word_embeddings=True,
                                        hidden_activation="gelu_pytorch_tanh", sliding_window=6,
                                        query_pre_attn_scalar=32, rms_norm_eps=1e-6,
                                        layer_types=["sliding_attention", "sliding_attention",
                                                     "full_attention", "sliding_attention"],
                                        rope_parameters={
                                            "full_attention": rope(1000000.0, "linear", factor=2.0),
                                            "sliding_attention": rope(10000.0)}),
                    "bfloat16", "legacy", 19),
    "phi3": ("phi3", base(vocab=256, hidden=64, inter=128, heads=4, kv=2, tie_word_embeddings=False,
                          sliding_window=None, original_max_position_embeddings=256,
                          partial_rotary_factor=0.5, rope_parameters=rope(10000.0)), "float32", "v5", 20),
}


def log(*a):
    print(*a, flush=True)


def make_config(model_type, kwargs):
    kwargs = copy.deepcopy(kwargs)
    cls = CONFIG_MAPPING[model_type]
    try:
        return cls(**kwargs)
    except TypeError:
        # Fallback: older transformers without rope_parameters.
        rp = kwargs.pop("rope_parameters")
        kwargs.update(legacy_rope_fields(model_type, rp, kwargs))
        return cls(**kwargs)


def legacy_rope_fields(model_type, rp, cfg, type_key="rope_type"):
    """rope_parameters (v5) -> rope_theta / rope_scaling (/ rope_local_base_freq) of older configs."""
    out = {}
    if model_type == "gemma3_text":
        full, local = rp["full_attention"], rp["sliding_attention"]
        out["rope_theta"] = full["rope_theta"]
        out["rope_local_base_freq"] = local["rope_theta"]
        scaling = {k: v for k, v in full.items() if k not in ("rope_theta", "rope_type")}
        out["rope_scaling"] = ({type_key: full["rope_type"], **scaling}
                               if full.get("rope_type", "default") != "default" else None)
        return out
    out["rope_theta"] = rp["rope_theta"]
    prf = rp.get("partial_rotary_factor")
    if prf is not None:
        out["partial_rotary_factor"] = prf
    scaling = {k: v for k, v in rp.items() if k not in ("rope_theta", "rope_type", "partial_rotary_factor")}
    if rp.get("rope_type", "default") != "default":
        out["rope_scaling"] = {type_key: rp["rope_type"], **scaling}
    else:
        out["rope_scaling"] = None
    return out


def to_legacy(model_type, v5, type_key="rope_type"):
    d = dict(v5)
    rp = d.pop("rope_parameters", None)
    if rp is not None:
        d.update(legacy_rope_fields(model_type, rp, d, type_key))
    if "dtype" in d:
        d["torch_dtype"] = d.pop("dtype")
    if model_type == "gemma3_text" and "layer_types" in d:
        d.pop("_sliding_window_pattern", None)  # transformers 5 bookkeeping, not in older files
        lt = d.pop("layer_types")
        # Find the pattern p with layer i sliding iff (i + 1) % p != 0.
        for p in range(1, len(lt) + 2):
            if all((lt[i] == "sliding_attention") == bool((i + 1) % p) for i in range(len(lt))):
                d["sliding_window_pattern"] = p
                break
        else:
            raise RuntimeError("layer_types of gemma3 fixture is not a sliding_window_pattern")
    # Older configs carry no layer_types (gemma2 alternates implicitly, even layers sliding).
    d.pop("layer_types", None)
    d["transformers_version"] = "4.46.0"
    return d


def init_weights(model, model_type, seed):
    """Seeded weights with unit-gain linears, so every layer moves the residual stream.

    Logits are made peaked (std about 3) but not degenerate: with tied heads a large input embedding
    makes every position predict its own token, so tied models get small embeddings (input rms 0.4
    after Gemma's sqrt(hidden) scale) and a final-norm gain that brings the logit std back to ~3.
    """
    g = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    emb_scale = math.sqrt(hidden) if model_type in ONE_PLUS_NORM else 1.0
    emb_std = 0.4 / emb_scale if tied else 1.0
    final_gain = 3.2 / (math.sqrt(hidden) * emb_std) if tied else 1.0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            shape = tuple(p.shape)
            r = torch.randn(shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight"):
                gain = final_gain if name == "model.norm.weight" else 1.0
                val = gain + 0.1 * r
                if model_type in ONE_PLUS_NORM:
                    val = val - 1.0
            elif name.endswith(".bias"):
                val = 0.2 * r
            elif "embed_tokens" in name:
                val = r * emb_std
            elif name.startswith("lm_head"):
                val = r * (3.0 / math.sqrt(hidden))
            elif len(shape) == 2:
                val = r / math.sqrt(shape[1])
            else:
                val = 0.1 * r
            p.copy_(val.to(p.dtype))


def load_oracle_model(path):
    kw = dict(attn_implementation="eager")
    try:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kw)
    m.eval()
    return m


def rope_dump(model):
    out = {}
    for name, buf in model.named_buffers():
        if "inv_freq" in name and "original" not in name:
            out[name] = [float(x) for x in buf.detach().float().cpu().reshape(-1)]
    for name, mod in model.named_modules():
        if "rotary" not in name:
            continue
        for attr in dir(mod):
            if attr.endswith("attention_scaling"):
                try:
                    v = getattr(mod, attr, None)
                except Exception:  # noqa: BLE001
                    continue
                if isinstance(v, (int, float)):
                    out[f"{name}.{attr}"] = float(v)
    return out


def top2_margin(row):
    v, _ = torch.topk(row, 2)
    return float(v[0] - v[1])


@torch.no_grad()
def run_oracle(model, prompt):
    ids = torch.tensor([prompt], dtype=torch.long)
    out = model(input_ids=ids, use_cache=False)
    logits = out.logits[0].float().clone()
    rope_after_prompt = rope_dump(model)
    # Incremental greedy: prefill, then one token at a time with the model's own cache.
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    row = out.logits[0, -1].float()
    toks, margins, step_rows = [], [], []
    for step in range(GREEDY_STEPS):
        step_rows.append(row.clone())
        margins.append(top2_margin(row))
        nxt = int(torch.argmax(row))
        toks.append(nxt)
        if step + 1 == GREEDY_STEPS:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        row = out.logits[0, -1].float()
    greedy_logits = torch.stack(step_rows)
    # Cross-check: the model's own generate() and a full teacher-forced pass over prompt+continuation.
    notes = {}
    try:
        model.generation_config.eos_token_id = None
        gen = model.generate(input_ids=ids, max_new_tokens=GREEDY_STEPS, do_sample=False, pad_token_id=0)
        notes["generate_matches_loop"] = gen[0, len(prompt):].tolist() == toks
    except Exception as e:  # noqa: BLE001
        notes["generate_error"] = repr(e)
    full_ids = torch.tensor([prompt + toks[:-1]], dtype=torch.long)
    full = model(input_ids=full_ids, use_cache=False).logits[0].float()
    full_rows = full[len(prompt) - 1:]
    notes["full_vs_incremental_max_abs"] = float((full_rows - greedy_logits).abs().max())
    notes["full_argmax_matches_greedy"] = torch.argmax(full_rows, dim=-1).tolist() == toks
    return logits, greedy_logits, toks, margins, rope_after_prompt, notes


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def write_raw(path, t):
    arr = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4"))
    arr.tofile(path)


def make_fixture(name, spec, out_root):
    model_type, kwargs, wdtype, dialect, seed = spec
    d = os.path.join(out_root, name)
    shutil.rmtree(d, ignore_errors=True)
    tmp = os.path.join(out_root, "_tmp_" + name)
    shutil.rmtree(tmp, ignore_errors=True)

    torch.manual_seed(seed)
    cfg = make_config(model_type, kwargs)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.float()
    init_weights(model, model_type, seed)
    if wdtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(d, safe_serialization=True)
    del model

    with open(os.path.join(d, "config.json")) as f:
        v5 = json.load(f)
    legacy = to_legacy(model_type, v5, "type" if dialect == "legacy_type" else "rope_type")

    g = torch.Generator().manual_seed(1000 + seed)
    vocab = kwargs["vocab_size"]
    prompt = torch.randint(3, vocab, (PROMPT_LEN,), generator=g).tolist()

    # The oracle runs on the config transformers itself wrote.
    model = load_oracle_model(d)
    rope_init = rope_dump(model)
    logits, greedy_logits, toks, margins, rope_after, notes = run_oracle(model, prompt)
    loaded_cfg = model.config.to_dict()
    del model

    # The older dialect must load to the same model: same logits.
    os.makedirs(tmp, exist_ok=True)
    for fn in os.listdir(d):
        if fn != "config.json":
            shutil.copy(os.path.join(d, fn), os.path.join(tmp, fn))
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(legacy, f, indent=2, sort_keys=True)
    alt_model = load_oracle_model(tmp)
    with torch.no_grad():
        alt_logits = alt_model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0].float()
    notes["legacy_config_max_abs_diff"] = float((alt_logits - logits).abs().max())
    notes["legacy_loaded_rope_parameters"] = getattr(alt_model.config, "rope_parameters", None)
    notes["legacy_loaded_layer_types"] = getattr(alt_model.config, "layer_types", None)
    del alt_model
    shutil.rmtree(tmp, ignore_errors=True)

    main_cfg, alt_cfg = (v5, legacy) if dialect == "v5" else (legacy, v5)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(main_cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(d, "config.alt.json"), "w") as f:
        json.dump(alt_cfg, f, indent=2, sort_keys=True)

    write_raw(os.path.join(d, "logits.f32"), logits)
    write_raw(os.path.join(d, "greedy_logits.f32"), greedy_logits)
    oracle = {
        "name": name,
        "model_type": model_type,
        "weight_dtype": wdtype,
        "config_dialect": dialect,
        "seed": seed,
        "vocab_size": vocab,
        "prompt_ids": prompt,
        "logits": {"file": "logits.f32", "shape": [len(prompt), vocab], "dtype": "float32",
                   "row_max_abs": [float(x) for x in logits.abs().max(dim=-1).values]},
        "prompt_top2_margins": [top2_margin(logits[i]) for i in range(len(prompt))],
        "greedy_tokens": toks,
        "greedy_top2_margins": margins,
        "greedy_logits": {"file": "greedy_logits.f32", "shape": [len(toks), vocab], "dtype": "float32"},
        "rope_inv_freq_at_load": rope_init,
        "rope_inv_freq_after_prompt": rope_after,
        "loaded_rope_parameters": loaded_cfg.get("rope_parameters"),
        "loaded_layer_types": loaded_cfg.get("layer_types"),
        "notes": notes,
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__,
                   "device": "cpu", "dtype": "float32", "attn_implementation": "eager"},
    }
    with open(os.path.join(d, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1)
    log(f"{name}: ok  min greedy margin {min(margins):.4g}  notes {json.dumps(notes, default=str)[:400]}")


def main():
    out_root = sys.argv[1]
    names = sys.argv[2:] or list(FIXTURES)
    os.makedirs(out_root, exist_ok=True)
    torch.set_grad_enabled(False)
    log("transformers", transformers.__version__, "torch", torch.__version__)
    failed = []
    for name in names:
        try:
            make_fixture(name, FIXTURES[name], out_root)
        except Exception:  # noqa: BLE001
            failed.append(name)
            log(f"{name}: FAILED")
            traceback.print_exc()
            shutil.rmtree(os.path.join(out_root, name), ignore_errors=True)
    manifest = {"generator": "scripts/oracle/make_fixtures.py",
                "transformers": transformers.__version__, "torch": torch.__version__, "fixtures": {}}
    for name in sorted(os.listdir(out_root)):
        d = os.path.join(out_root, name)
        if not os.path.isdir(d) or name.startswith("_"):
            continue
        manifest["fixtures"][name] = {fn: sha256(os.path.join(d, fn)) for fn in sorted(os.listdir(d))}
    with open(os.path.join(out_root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    log("failed:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
