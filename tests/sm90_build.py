"""The one-token 2:4 GEMVs' sm_90 builds for the tests that check their PTX without a GPU (tests/test_s16_sparse24_iw.py,
tests/test_s17_sparse24_w8a16.py): imported by the scripts those tests run in a child with Triton's interpreter off."""

from __future__ import annotations

import inspect

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

# Pointer arguments of the GEMVs by name; every other non-constexpr argument is an int32.
PTRS = dict(x_ptr="*i32", sx_ptr="*fp32", v_ptr="*i32", meta_ptr="*i32", sw_ptr="*fp32", out_ptr="*fp16",
            ws_ptr="*fp32", lock_ptr="*i32")
# Arguments the launchers pass without the divisibility-by-16 specialization (run-time sizes and the unspecialized 1).
NOT_DIVISIBLE = ("M", "S", "WORDS_PER_SPLIT", "QUADS_PER_SPLIT", "ONE")


def build(fn, consts: dict, num_warps: int):
    """`fn` compiled for sm_90 with the launcher's divisibility; constexprs left out of `consts` take their defaults."""
    consts = dict(consts)
    for q in inspect.signature(fn.fn).parameters.values():
        if "constexpr" in str(q.annotation) and q.default is not inspect.Parameter.empty:
            consts.setdefault(q.name, q.default)
    sig = {a: "constexpr" if a in consts else PTRS.get(a, "i32") for a in fn.arg_names}
    div = [i for i, a in enumerate(fn.arg_names) if a not in consts and a not in NOT_DIVISIBLE]
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()},
                    attrs={(i,): [["tt.divisibility", 16]] for i in div})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
