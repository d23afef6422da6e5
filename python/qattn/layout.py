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


# -- variable-length batches (Runtime.attention_varlen) ---------------------------------------------

def with_varlen(spec):
    """The spec text with its `varlen` token (appended when missing; the C side would add it too)."""
    return spec if "varlen" in spec.split() else spec.rstrip() + " varlen"


def decompose_packed(name, sizes, strides):
    """(tokens, heads, d) and the (sb, sh, ss) element strides of a packed [tokens, heads, d] tensor;
    sb is 0: a variable-length call finds each sequence's rows through the cu_seqlens offsets."""
    if len(sizes) != 3:
        raise BadInput(f"{name} has {len(sizes)} dimensions; attention_varlen takes packed 3-d tensors "
                       f"[total_tokens, heads, d] (the sequences one after another along dim 0)")
    if strides[2] != 1 and sizes[2] != 1:
        raise BadInput(f"{name} has head-dim stride {strides[2]}; the last dimension must be contiguous "
                       f"(stride 1): call .contiguous()")
    return tuple(sizes), (0, strides[1], strides[0])


def check_packed_problem(spec, q, k, v):
    """From the (tokens, heads, d) of packed q, k, v: (heads_q, heads_kv), or BadInput.

    GQA (heads_q / heads_kv against the spec's gqa=) is the C side's to report, as for attention()."""
    (tq, hq, dq), (tk, hk, dk), (tv, hv, dv) = q, k, v
    if (tk, hk, dk) != (tv, hv, dv):
        raise BadInput(f"k has [tokens={tk}, h={hk}, d={dk}] but v has [tokens={tv}, h={hv}, d={dv}]; "
                       f"they must match")
    if dq != dk:
        raise BadInput(f"q has head dim {dq} but k and v have {dk}")
    d = spec_head_dim(spec)
    if d is not None and d != dq:
        raise BadInput(f"tensors have head dim {dq} but the spec says d={d}")
    return hq, hk


def check_cu_seqlens(name, sizes, dtype_name, contiguous):
    """The batch size (entries - 1) of a cu_seqlens tensor: int32, 1-d, contiguous, at least 2 entries."""
    if dtype_name != "int32":
        raise BadInput(f"{name} is {dtype_name}; accepted: int32 (torch.int32 offsets, batch + 1 of them)")
    if len(sizes) != 1 or sizes[0] < 2:
        raise BadInput(f"{name} has shape {list(sizes)}; expected 1-d [batch + 1] offsets (at least 2: "
                       f"[0, tokens of sequence 0, ...])")
    if not contiguous:
        raise BadInput(f"{name} is not contiguous; the kernels read it as a dense int32 array: call .contiguous()")
    return sizes[0] - 1


def check_same_batch(batch_q, batch_kv):
    if batch_q != batch_kv:
        raise BadInput(f"cu_seqlens_q has {batch_q + 1} entries but cu_seqlens_kv has {batch_kv + 1}; both "
                       f"hold batch + 1 offsets of the same sequences")


def check_max_seqlen(name, value):
    """max_seqlen_* as an int >= 1 (the longest sequence's length; a longer one is cut to it)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise BadInput(f"{name} must be an int (the longest sequence's length), not {type(value).__name__}")
    value = value.__index__()
    if value < 1:
        raise BadInput(f"{name} is {value}; it must be >= 1 (the longest sequence's length)")
    return value


def check_packed_lse(sizes, dtype_name, contiguous, total_q, heads_q):
    """lse of a variable-length call: a contiguous float32 [total_q, heads_q] tensor."""
    if dtype_name != "float32" or tuple(sizes) != (total_q, heads_q) or not contiguous:
        raise BadInput(f"lse is {dtype_name} {list(sizes)} (contiguous: {contiguous}); attention_varlen writes "
                       f"a contiguous float32 [total_q, hq] = {[total_q, heads_q]}")
