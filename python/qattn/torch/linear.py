"""Quantized linear layers for PyTorch: torch.ops.qattn.linear behind a function and an nn.Module.

    import qattn.torch as qt
    layer = qt.QuantLinear.from_linear(model.mlp.down_proj, "int4")   # or "int8", "fp16", "bf16"
    y = layer(x)                                                      # x [..., k] -> [..., n]
    y = qt.linear(x2d, layer.spec, layer.w, layer.w_scale, layer.w_zero, layer.bias)

The dataflow (GEMV, flat GEMM, GEMM) and split-K follow the token count m of each call: the layer's tuned
table when the cache holds one (Runtime.tune_linear, `qattn pretune`), else the default rule.
"""
import torch

from ..errors import BadInput
from ..linear import pack_weight
from . import ops

_FORMATS = {"fp16": "fp16", "bf16": "bf16", "int8": "int8:per_channel", "int4": "int4:per_group"}


def linear(a, spec, w, w_scale=None, w_zero=None, bias=None):
    """C = a . W^T (+ bias) for a linear spec; a: a 2-d CUDA tensor [m, k] with contiguous rows."""
    return ops.linear(a, w, w_scale, w_zero, bias, spec)


class QuantLinear(torch.nn.Module):
    """y = x . W^T + b with W stored in a qattn weight format (packed once, at construction)."""

    def __init__(self, weight, bias=None, fmt="int4", dtype=torch.float16):
        super().__init__()
        if fmt not in _FORMATS:
            raise BadInput(f"unknown weight format {fmt!r}; accepted: {', '.join(_FORMATS)}")
        if dtype not in (torch.float16, torch.bfloat16):
            raise BadInput(f"dtype must be torch.float16 or torch.bfloat16, not {dtype}")
        t = "fp16" if dtype == torch.float16 else "bf16"
        w_fmt = _FORMATS[fmt] if fmt not in ("fp16", "bf16") else t
        n, k = weight.shape
        self.spec = f"linear a={t} w={w_fmt} out={t} n={n} k={k}" + (" bias" if bias is not None else "")
        w, scale, zero = pack_weight(weight.detach(), w_fmt)
        self.register_buffer("w", w)
        self.register_buffer("w_scale", scale)
        self.register_buffer("w_zero", zero)
        self.register_buffer("bias", None if bias is None else bias.detach().to(dtype).contiguous())
        self.in_features, self.out_features = k, n

    @classmethod
    def from_linear(cls, layer, fmt="int4", dtype=None):
        """A QuantLinear with the weights (and bias) of a torch.nn.Linear."""
        return cls(layer.weight, layer.bias, fmt, dtype or (layer.weight.dtype if layer.weight.dtype in
                                                            (torch.float16, torch.bfloat16) else torch.float16))

    def forward(self, x):
        lead = x.shape[:-1]
        y = ops.linear(x.reshape(-1, self.in_features), self.w, self.w_scale, self.w_zero, self.bias, self.spec)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self):
        return self.spec
