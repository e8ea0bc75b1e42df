"""Session 16: the SASS of the one-token 2:4 int8 GEMVs' K loops, without a GPU (as kernels_s15/sass_loop.py does for
the tensor-core kernel): compiles a kernel for sm_90 with the launcher's divisibility specialization, assembles it with
Triton's bundled ptxas, disassembles it with its cuobjdump, and counts the instructions of the backward branch that
spans the dp4a (IDP) instructions, per value word of the tile (the loop covers BN x BW x 4 value words a program).

Usage (repository root, any machine with this project's Triton):
  python3 bench/results/h100/kernels_s16/sass_gemv.py KERNEL BN BW WARPS [fused (i)] [odd (iw: K not a multiple of 32 or MW of BW)]
KERNEL: i (`_sparse24_gemv_i_kernel`, one value word per asm), iw (`_sparse24_gemv_iw_kernel`, one meta word), f
(`_sparse24_gemv_f_kernel`, fp16 values: a value word is one group's 2 values) or fw
(`_sparse24_gemv_fw_kernel`, a quad of 4 groups per asm; BW is then quads a step) or w16 (session 17's
`_sparse24_gemv_w16_kernel`, int8 values on fp16 x, a value word per asm; flag bf16 for bf16 x).
"""

from __future__ import annotations

import collections
import inspect
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.sparse24 as sp

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def main():
    kind, bn, bw, warps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    flags = sys.argv[5:]
    fused = "fused" in flags
    fn = {"iw": sp._sparse24_gemv_iw_kernel, "i": sp._sparse24_gemv_i_kernel, "f": sp._sparse24_gemv_f_kernel,
          "fw": getattr(sp, "_sparse24_gemv_fw_kernel", None), "w16": getattr(sp, "_sparse24_gemv_w16_kernel", None)}[kind]
    if kind in ("f", "fw"):
        consts = dict(USE_ASM=True, BN=bn, BW=bw, IS_BF16=False)
        if kind == "fw":  # BW = quads (4 groups) a step
            consts = dict(USE_ASM=True, BN=bn, BQ=bw, IS_BF16=False, EVEN="odd" not in flags, EVICT="evict_first")
    elif kind == "w16":  # session 17: int8 values on fp16 (or, with flag bf16, bf16) x
        consts = dict(USE_ASM=True, BN=bn, BW=bw, IS_BF16="bf16" in flags, EVEN="odd" not in flags, EVICT="evict_first")
    elif kind == "iw":
        consts = dict(USE_ASM=True, BN=bn, BW=bw, PDL=True, EVEN="odd" not in flags)
    else:
        consts = dict(USE_ASM=True, BN=bn, BW=bw, X_FLOAT=fused, K=4096 if fused else 0, PRO_BK=4096, PDL_PREFETCH=0)
    ptrs = dict(x_ptr="*fp16" if fused and kind == "i" else "*i32", xf_ptr="*fp16", sx_ptr="*fp32", v_ptr="*i32", meta_ptr="*i32", sw_ptr="*fp32",
                out_ptr="*fp16", ws_ptr="*fp32", lock_ptr="*i32")
    for q in inspect.signature(fn.fn).parameters.values():  # constexprs left out take their defaults
        if "constexpr" in str(q.annotation) and q.default is not inspect.Parameter.empty:
            consts.setdefault(q.name, q.default)
    sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
    div = [i for i, a in enumerate(fn.arg_names) if a not in consts and a not in ("M", "S", "WORDS_PER_SPLIT", "QUADS_PER_SPLIT", "ONE")]
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()},
                    attrs={(i,): [["tt.divisibility", 16]] for i in div})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    with tempfile.TemporaryDirectory() as d:
        ptx, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        open(ptx, "w").write(k.asm["ptx"])
        info = subprocess.run([os.path.join(BIN, "ptxas"), "-arch=sm_90a", "-v", ptx, "-o", cubin],
                              capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout
    ins = []
    for line in sass.splitlines():
        g = re.match(r"\s*/\*([0-9a-f]+)\*/\s*(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", line)
        if g:
            ins.append((int(g.group(1), 16), g.group(3).split(".")[0], g.group(3)[len(g.group(3).split(".")[0]):] + g.group(4)))
    loop = None
    for a, op, rest in ins:
        if op == "BRA":
            t = int(re.search(r"0x([0-9a-f]+)", rest).group(1), 16)
            if t < a and any(o in ("IDP", "FFMA") and t <= x <= a for x, o, _ in ins):
                loop = (t, a)
    body = [op for x, op, _ in ins if loop[0] <= x <= loop[1]]
    if os.environ.get("SASS_DUMP"):
        print("\n".join(f"{op}{rest.split(';')[0]}" for x, op, rest in ins if loop[0] <= x <= loop[1]))
    words = bn * bw * (8 if kind == "f" else 4) / (32 * warps)  # value words a thread per step
    regs = re.search(r"Used (\d+) registers", info).group(1)
    spill = re.search(r"(\d+) bytes spill stores", info)
    print(f"{kind} BN={bn} BW={bw} warps={warps}{' ' + ' '.join(flags) if flags else ''}: {regs} registers, "
          f"{spill.group(1) if spill else 0} bytes spilled, shared {k.metadata.shared} B; K loop {len(body)} "
          f"instructions a thread = {len(body) / words:.2f} per value word; "
          f"{collections.Counter(body).most_common(16)}")


if __name__ == "__main__":
    main()
