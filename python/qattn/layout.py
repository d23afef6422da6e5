"""Pure-Python checks of tensor shapes and strides against a spec (no torch: testable anywhere).

The C API receives only data pointers, strides and the 5 sizes of qattn_shape: it never sees the head
dimension nor the element type of a tensor. Both come from the spec (d=, out=), so they are checked here,
before a wrong tensor can make a kernel read or write out of bounds.
"""
from .errors import BadInput

LAYOUTS = ("bshd", "bhsd")


def spec_field(spec, key):
    """The value of `key=` in a spec text, or None (the C side reports a missing or malformed field)."""
    for token in spec.split():
        if token.startswith(key + "="):
            return token[len(key) + 1:]
    return None


def spec_head_dim(spec):
    value = spec_field(spec, "d")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None   # let the C side name the bad token


def decompose(name, sizes, strides, layout):
    """(batch, seq, heads, d) and the (sb, sh, ss) element strides of a 4-d tensor in `layout`."""
    if layout not in LAYOUTS:
        raise BadInput(f"layout '{layout}' is not supported; accepted: {', '.join(LAYOUTS)}")
    if len(sizes) != 4:
        raise BadInput(f"{name} has {len(sizes)} dimensions; expected 4 ([b, s, h, d] for bshd, "
                       f"[b, h, s, d] for bhsd)")
    if strides[3] != 1 and sizes[3] != 1:
        raise BadInput(f"{name} has head-dim stride {strides[3]}; the last dimension must be contiguous "
                       f"(stride 1): call .contiguous() or pick another layout")
    if layout == "bshd":
        b, s, h, d = sizes
        sb, ss, sh = strides[0], strides[1], strides[2]
    else:
        b, h, s, d = sizes
        sb, sh, ss = strides[0], strides[1], strides[2]
    return (b, s, h, d), (sb, sh, ss)


def check_problem(spec, q, k, v):
    """From the (batch, seq, heads, d) of q, k, v: the qattn_shape fields, or BadInput.

    GQA is not checked here: heads_q / heads_kv against the spec's gqa= is the C side's to report."""
    (bq, sq, hq, dq), (bk, sk, hk, dk), (bv, sv, hv, dv) = q, k, v
    if (bk, sk, hk, dk) != (bv, sv, hv, dv):
        raise BadInput(f"k has [b={bk}, s={sk}, h={hk}, d={dk}] but v has [b={bv}, s={sv}, h={hv}, d={dv}]; "
                       f"they must match")
    if bq != bk:
        raise BadInput(f"q has batch {bq} but k and v have batch {bk}")
    if dq != dk:
        raise BadInput(f"q has head dim {dq} but k and v have {dk}")
    d = spec_head_dim(spec)
    if d is not None and d != dq:
        raise BadInput(f"tensors have head dim {dq} but the spec says d={d}")
    return dict(batch=bq, heads_q=hq, heads_kv=hk, q_len=sq, kv_len=sk)


def check_output(name, expected, got):
    """`got` (batch, seq, heads, d) of an output tensor must equal q's `expected`."""
    if tuple(got) != tuple(expected):
        raise BadInput(f"{name} has [b, s, h, d] = {list(got)} but q has {list(expected)}; they must match")


# torch dtype names accepted for each out= value of a spec.
DTYPE_OF_OUT = {"fp16": "float16", "bf16": "bfloat16"}


def check_dtype(spec, dtype_name):
    """Inputs and outputs have the spec's out= element type (the C side cannot see dtypes)."""
    out = spec_field(spec, "out")
    if out is None or out not in DTYPE_OF_OUT:
        return   # missing or unknown out=: the C side names what is accepted
    if dtype_name != DTYPE_OF_OUT[out]:
        raise BadInput(f"tensors are {dtype_name} but the spec says out={out} "
                       f"(inputs and output must be torch.{DTYPE_OF_OUT[out]})")
