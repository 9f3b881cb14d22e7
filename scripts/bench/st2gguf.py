# Writes a GGUF (llama architecture, bf16 weights, no tokenizer: llama-bench feeds random token
# ids) from one of our random-weight bf16 Llama checkpoints (make-checkpoint.mjs), so llama.cpp
# can be timed on the same bytes. Uses the gguf-py package of a llama.cpp source tree:
#   python3 scripts/bench/st2gguf.py LLAMA_CPP_DIR CHECKPOINT_DIR OUT.gguf
# q/k rows are not permuted to llama.cpp's rope layout: the weights are random, the timing is the
# same. Needs numpy only. Single-file bf16 checkpoints (model.safetensors); the GGUF is written
# next to OUT and renamed into place, so a failure leaves no partial file.
import json, os, struct, sys, numpy as np
if len(sys.argv) != 4:
    sys.exit('usage: st2gguf.py LLAMA_CPP_DIR CHECKPOINT_DIR OUT.gguf')
sys.path.insert(0, sys.argv[1] + '/gguf-py')
import gguf
src, out = sys.argv[2], sys.argv[3]
cfg = json.load(open(src + '/config.json'))
f = open(src + '/model.safetensors', 'rb'); n = struct.unpack('<Q', f.read(8))[0]; hdr = json.loads(f.read(n)); base = 8 + n
mm = np.memmap(src + '/model.safetensors', dtype=np.uint8, mode='r')
def raw(name):
    e = hdr[name]
    if e['dtype'] != 'BF16':
        sys.exit(f'st2gguf.py: {name} is {e["dtype"]}; only bf16 checkpoints are supported (make-checkpoint.mjs --dtype bf16)')
    a, b = e['data_offsets']; return mm[base + a: base + b].view(np.uint16).reshape(e['shape'])
head_dim = cfg.get('head_dim') or cfg['hidden_size'] // cfg['num_attention_heads']
tmp = out + '.partial'
w = gguf.GGUFWriter(tmp, 'llama')
w.add_context_length(8192); w.add_embedding_length(cfg['hidden_size']); w.add_block_count(cfg['num_hidden_layers'])
w.add_feed_forward_length(cfg['intermediate_size']); w.add_head_count(cfg['num_attention_heads'])
w.add_head_count_kv(cfg['num_key_value_heads']); w.add_rope_freq_base(cfg['rope_theta'])
w.add_layer_norm_rms_eps(cfg['rms_norm_eps']); w.add_rope_dimension_count(head_dim); w.add_vocab_size(cfg['vocab_size'])
w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
w.add_tokenizer_model('none')
def bf16(gname, name):
    a = np.ascontiguousarray(raw(name)); w.add_tensor(gname, a, raw_shape=a.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
def f32(gname, name):
    a = (raw(name).astype(np.uint32) << 16).view(np.float32); w.add_tensor(gname, a)
m = {'input_layernorm': ('attn_norm', f32), 'self_attn.q_proj': ('attn_q', bf16), 'self_attn.k_proj': ('attn_k', bf16),
     'self_attn.v_proj': ('attn_v', bf16), 'self_attn.o_proj': ('attn_output', bf16), 'post_attention_layernorm': ('ffn_norm', f32),
     'mlp.gate_proj': ('ffn_gate', bf16), 'mlp.up_proj': ('ffn_up', bf16), 'mlp.down_proj': ('ffn_down', bf16)}
try:
    bf16('token_embd.weight', 'model.embed_tokens.weight'); f32('output_norm.weight', 'model.norm.weight')
    if 'lm_head.weight' in hdr: bf16('output.weight', 'lm_head.weight')
    for i in range(cfg['num_hidden_layers']):
        for k, (g, fn) in m.items(): fn(f'blk.{i}.{g}.weight', f'model.layers.{i}.{k}.weight')
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(progress=False); w.close()
    os.replace(tmp, out)
except BaseException:
    w.close()
    if os.path.exists(tmp): os.unlink(tmp)
    raise
print('wrote', out)
