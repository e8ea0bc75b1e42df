"""Session 15: the SASS of a Triton kernel's main loop, without a GPU. Compiles kernels.sparse24._sparse24_tc_kernel
for sm_90 (the launcher's divisibility specialization on every size and stride but M and S), assembles it with Triton's
bundled ptxas and disassembles it with its cuobjdump, then counts the instructions of the backward branch that spans
the tensor-core instructions: one K step of one warp.

Usage (repository root, any machine with this project's Triton): python3 bench/results/h100/kernels_s15/sass_loop.py
[fp16|int8] [M] [select]   (select: session 14's compare-and-select widening instead of the PRMT one)
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.sparse24 as sp

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def main():
    dt = sys.argv[1] if len(sys.argv) > 1 else "fp16"
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    asm = not (len(sys.argv) > 3 and sys.argv[3] == "select")
    int8 = dt == "int8"
    fn = sp._sparse24_tc_kernel
    cfg = sp._config(m, int8)
    consts = dict(INT8=int8, VDT=tl.int8 if int8 else tl.float16, DOT_F32=False, BN=cfg["BN"], BM=cfg["BM"], BW=cfg["BW"],
                  M_FAST=False, USE_ASM=asm, W8A16=False)
    if not int8:
        consts.update(sx_ptr=None, sw_ptr=None)
    ptrs = dict(x_ptr="*i8" if int8 else "*fp16", sx_ptr="*fp32", v_ptr="*i32", meta_ptr="*i32", sw_ptr="*fp32",
                out_ptr="*fp16", ws_ptr="*fp32", lock_ptr="*i32")
    sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
    div = [i for i, a in enumerate(fn.arg_names) if a not in consts and a not in ("M", "S")]
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()},
                    attrs={(i,): [["tt.divisibility", 16]] for i in div})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
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
            ins.append((int(g.group(1), 16), g.group(3).split(".")[0], g.group(4)))
    loop = None
    for a, op, rest in ins:
        if op == "BRA":
            t = int(re.search(r"0x([0-9a-f]+)", rest).group(1), 16)
            if t < a and any(o in ("HGMMA", "IGMMA") and t <= x <= a for x, o, _ in ins):
                loop = (t, a)
    body = [op for x, op, _ in ins if loop[0] <= x <= loop[1]]
    regs = re.search(r"Used (\d+) registers", info).group(1)
    spill = re.search(r"(\d+) bytes spill stores", info)
    print(f"{dt} M={m} {'PRMT' if asm else 'select'} widening, config {cfg}: {regs} registers, "
          f"{spill.group(1) if spill else 0} bytes spilled, shared {k.metadata.shared} B; K loop {len(body)} "
          f"instructions a warp: {collections.Counter(body).most_common(8)}")


if __name__ == "__main__":
    main()
