#!/usr/bin/env python3
"""L2 oracle for MLX affine-quantized checkpoints (developer tool; GPU machine or any box with
numpy + torch + transformers + safetensors).

For each quantized checkpoint directory under QUANT_ROOT (written by `mlx-bun quantize`):
  1. unpacks every quantized layer with numpy, written from the format's definition and not from
     our C++: a row of b-bit values is one little-endian bit stream over the row's uint32 words
     (value k = stream bits [k*b, (k+1)*b), stream bit i = bit i%32 of word i//32), and
     w = float32(scale) * q + float32(bias), one float32 multiply then one float32 add;
  2. records the SHA-256 of each dequantized float32 weight (our dequantizer must match it bit for bit);
  3. writes the dequantized weights as an ordinary float32 Hugging Face checkpoint, loads it with
     transformers (CPU, float32, eager attention) and runs the fixture's prompt: teacher-forced
     logits and a greedy continuation with per-step top-2 margins.
Outputs OUT_DIR/<name>/{logits.f32, greedy_logits.f32, oracle.json}.

Usage: python3 dequant_oracle.py QUANT_ROOT OUT_DIR [name ...]
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import load_oracle_model, run_oracle, top2_margin  # noqa: E402


def unpack(packed, bits):
    """[N, W] uint32 -> [N, W*32/bits] values, by the bit-stream definition."""
    n, words = packed.shape
    le = packed.astype("<u4")
    stream = np.unpackbits(le.view(np.uint8).reshape(n, words * 4), axis=1, bitorder="little")  # [N, W*32]
    k = words * 32 // bits
    fields = stream.reshape(n, k, bits).astype(np.uint32)
    weights = (np.uint32(1) << np.arange(bits, dtype=np.uint32))
    return (fields * weights).sum(axis=2, dtype=np.uint32)


def dequantize(packed, scales, biases, bits, group_size):
    q = unpack(packed, bits).astype(np.float32)
    n, k = q.shape
    if scales.shape != (n, k // group_size) or biases.shape != scales.shape:
        raise ValueError(f"scales {scales.shape} / biases {biases.shape} do not match {n}x{k} at group {group_size}")
    s = np.repeat(scales.astype(np.float32), group_size, axis=1)
    b = np.repeat(biases.astype(np.float32), group_size, axis=1)
    prod = (s * q).astype(np.float32)
    return (prod + b).astype(np.float32)


def spec_for(quant, module):
    o = quant.get(module)
    if isinstance(o, dict):
        return o.get("bits", quant["bits"]), o.get("group_size", quant["group_size"])
    return quant["bits"], quant["group_size"]


def load_bf16_aware(d):
    """safetensors.numpy cannot read BF16: read through torch and convert to numpy float32 / uint32."""
    from safetensors.torch import load_file as tload
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for f in files:
        for name, t in tload(os.path.join(d, f)).items():
            if t.dtype == torch.uint32:
                out[name] = t.view(torch.int32).numpy().view(np.uint32)
            elif t.dtype.is_floating_point:
                out[name] = t.float().numpy()
            else:
                out[name] = t.numpy()
    return out


def process(name, src, out_root):
    cfg = json.load(open(os.path.join(src, "config.json")))
    quant = cfg["quantization"]
    tensors = load_bf16_aware(src)
    state, hashes = {}, {}
    modules = sorted(n[: -len(".scales")] for n in tensors if n.endswith(".scales"))
    for m in modules:
        bits, gs = spec_for(quant, m)
        w = dequantize(tensors[m + ".weight"], tensors[m + ".scales"], tensors[m + ".biases"], bits, gs)
        hashes[m] = hashlib.sha256(w.astype("<f4").tobytes()).hexdigest()
        state[m + ".weight"] = w
    for n, t in tensors.items():
        mod = n.rsplit(".", 1)[0]
        if mod in modules:
            continue
        state[n] = t.astype(np.float32)
    hf = {k: v for k, v in cfg.items() if k not in ("quantization", "quantization_config")}
    hf["torch_dtype"] = "float32"
    if "dtype" in hf:
        hf["dtype"] = "float32"
    tmp = tempfile.mkdtemp()
    try:
        json.dump(hf, open(os.path.join(tmp, "config.json"), "w"))
        save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        model = load_oracle_model(tmp)
        # Every dequantized tensor must have been used (no silently ignored weight).
        loaded = dict(model.state_dict())
        for k, v in state.items():
            if k in loaded and not np.array_equal(loaded[k].numpy(), v):
                raise ValueError(f"{k}: transformers holds different values than the dequantized weight")
        missing = [k for k in state if k not in loaded]
        if missing:
            raise ValueError(f"weights transformers did not take: {missing}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    prompt = json.load(open(os.path.join(src, "prompt.json")))["prompt_ids"]
    logits, greedy_logits, toks, margins, _, notes = run_oracle(model, prompt)
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    logits.numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
    greedy_logits.numpy().astype("<f4").tofile(os.path.join(d, "greedy_logits.f32"))
    oracle = {
        "name": name, "model_type": cfg["model_type"], "quantization": quant, "prompt_ids": prompt,
        "vocab_size": int(logits.shape[1]),
        "prompt_top2_margins": [top2_margin(logits[i]) for i in range(len(prompt))],
        "greedy_tokens": toks, "greedy_top2_margins": margins,
        "dequant_sha256": hashes, "notes": notes,
        "loaded_layer_types": getattr(model.config, "layer_types", None),
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
                   "device": "cpu", "dtype": "float32", "attn_implementation": "eager"},
    }
    json.dump(oracle, open(os.path.join(d, "oracle.json"), "w"), indent=1)
    print(f"{name}: ok, {len(modules)} quantized layers, min greedy margin {min(margins):.4g}", flush=True)


def main():
    root, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or sorted(n for n in os.listdir(root) if os.path.exists(os.path.join(root, n, "config.json")))
    torch.manual_seed(0)
    failed = 0
    for n in names:
        try:
            process(n, os.path.join(root, n), out)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"{n}: FAILED {e!r}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
