"""qattn for PyTorch: custom ops (torch.ops.qattn.*, traced by torch.compile), drop-in attention calls
and a quantized KV cache. Importing this module needs torch; `import qattn` alone does not.

    import qattn.torch as qt
    out = qt.attention(q, k, v, is_causal=True)               # [b, s, h, d], fmt="auto"
    out = qt.sdpa(q, k, v, is_causal=True)                    # F.scaled_dot_product_attention's [b, h, s, d]
    cache = qt.KvCache("int8", batch=1, heads_kv=8, head_dim=128, capacity=4096, heads_q=32)
    cache.append(k_new, v_new, start=pos); out = cache.decode(q_new, kv_lens=pos + 1)
    fq = qt.FlashQCache(batch=1, heads_kv=8, head_dim=128, capacity=4096, heads_q=32)   # INT4/INT2 blocks
    fq.prefill(k, v); fq.append(k_new, v_new); out = fq.decode(q_new)
    mlp_down = qt.QuantLinear.from_linear(model.mlp.down_proj, "int4"); y = mlp_down(x)   # W4A16 linear
"""
from . import ops   # registers torch.ops.qattn.* (first, so the calls below find them)
from ._device import runtime, set_runtime
from .attention import attention, attention_varlen, sdpa, tune
from .flashq import FlashQCache
from .kv_cache import KvCache
from .linear import QuantLinear, linear

__all__ = ["attention", "sdpa", "attention_varlen", "tune", "KvCache", "FlashQCache", "linear", "QuantLinear", "runtime",
           "set_runtime", "ops"]
