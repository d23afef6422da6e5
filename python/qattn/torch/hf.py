"""qattn as a Hugging Face transformers attention implementation.

    import qattn.torch.hf as qhf
    qhf.register()                                   # attn_implementation "qattn"
    model.set_attn_implementation("qattn")           # or from_config(..., attn_implementation="qattn")
    logits = model(ids).logits                       # prefill through qattn's quantized kernel

Without a session the function is plain prefill attention over the keys the model passes (causal at
each row's end; no padding masks: every sequence fills its batch row). A Session adds qattn's quantized
KV cache: prefill writes the prompt's K/V into it once, and decode steps (model calls with
use_cache=False and explicit position_ids) append the new token and read the cache with qattn's decode
kernel, so the step has static shapes and can be captured in a CUDA graph (examples/python/hf_llama.py).
"""
import torch

from .attention import attention
from .kv_cache import KvCache

NAME = "qattn"


class Session:
    """qattn KV caches for every attention layer of `model`, and the decode position on the device.

    fmt: the prefill format (qattn.formats); cache_fmt: the KV cache's (int8, fp8, int4, int4_group,
    bf16). start: int32 [batch] tokens already cached before the current call."""

    def __init__(self, model, batch, capacity, fmt="auto", cache_fmt="int8", page_size=0):
        config = model.config
        self.fmt, self.cache_fmt = fmt, cache_fmt
        self.batch, self.capacity, self.page_size = batch, capacity, page_size
        self.heads_q = config.num_attention_heads
        self.heads_kv = getattr(config, "num_key_value_heads", None) or self.heads_q
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads_q
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.caches = {}
        self.start = torch.zeros(batch, dtype=torch.int32, device=self.device)
        self.kv_lens = torch.zeros(batch, dtype=torch.int32, device=self.device)
        self.decoding = False
        self._modules = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "head_dim")]
        for m in self._modules:
            m._qattn_session = self

    def close(self):
        for m in self._modules:
            if getattr(m, "_qattn_session", None) is self:
                del m._qattn_session
        self.caches.clear()

    def cache(self, layer):
        c = self.caches.get(layer)
        if c is None:
            c = KvCache(self.cache_fmt, self.batch, self.heads_kv, self.head_dim, self.capacity, heads_q=self.heads_q,
                        dtype=self.dtype, page_size=self.page_size, device=self.device)
            self.caches[layer] = c
        return c

    def set_position(self, position):
        """Before a decode step: `position` tokens are cached (int, or int32 [batch] tensor); written in
        place, so a captured step replays at the new position."""
        self.start.copy_(torch.as_tensor(position, dtype=torch.int32).expand(self.batch))
        self.kv_lens.copy_(self.start + 1)
        self.decoding = True


def attention_forward(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
    """The AttentionInterface function: query [b, hq, s, d], key/value [b, hkv, s_kv, d]; returns
    ([b, s, hq, d], None)."""
    session = getattr(module, "_qattn_session", None)
    causal = getattr(module, "is_causal", True)
    if session is None:
        out = attention(query, key, value, is_causal=causal, scale=scaling, layout="bhsd")
    elif session.decoding:
        cache = session.cache(module.layer_idx)
        cache.append(key, value, session.start)
        out = cache.decode(query, session.kv_lens, max_kv_len=session.capacity, scale=scaling)
    else:
        cache = session.cache(module.layer_idx)
        cache.append(key, value, 0)
        out = attention(query, key, value, is_causal=causal, scale=scaling, layout="bhsd", fmt=session.fmt)
    return out.transpose(1, 2), None


def register(name=NAME):
    """Registers attention_forward as transformers' attention implementation `name`, with no mask
    function (qattn applies causal itself)."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, lambda *args, **kwargs: None)
    except ImportError:
        pass
    return name
