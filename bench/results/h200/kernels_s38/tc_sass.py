"""Session 38: compile the W4A16 Triton tensor-core tile (kernels/w4a16.py `_w4a16_tc_kernel`) for sm_90a on a machine
without a GPU (Triton's bundled ptxas), fp16 group 128 symmetric, programmatic dependent launch on, with the launcher's
16-divisibility of sizes and strides, and write its cubin and TTGIR to OUT_DIR. Then `cuobjdump -sass` (pip wheel
nvidia-cuda-cuobjdump) shows the main loop. Usage: python3 tc_sass.py BM BN NB WARPS STAGES [OUT_DIR]"""
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import kernels.w4a16 as w
bm, bn, nb, warps, stages = (int(v) for v in sys.argv[1:6])
out = sys.argv[6] if len(sys.argv) > 6 else "."
fn = w._w4a16_tc_kernel
names = fn.arg_names
ptrs = {"x_ptr": "*fp16", "q_ptr": "*i32", "s_ptr": "*fp16", "z_ptr": "*u8", "out_ptr": "*fp16", "ws_ptr": "*fp32", "lock_ptr": "*i32"}
consts = dict(GROUP=128, ASYM=False, IS_BF16=False, DOT_F32=False, USE_ASM=True, BN=bn, BM=bm, NB=nb, PREFETCH=False,
              ROUND=4, PDL=1, PDL_LINES=0, CHAIN=0)
div16 = {"N", "K", "KW", "stride_xm", "stride_om", "TOTAL_BLOCKS"} | set(ptrs)
sig = {n: ptrs.get(n, "constexpr" if n in consts else "i32") for n in names}
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
src = ASTSource(fn, sig, constexprs={(names.index(k),): v for k, v in consts.items()}, attrs=attrs)
k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
tag = f"tc_{bm}x{bn}_nb{nb}_w{warps}_s{stages}"
open(f"{out}/{tag}.cubin", "wb").write(k.asm["cubin"])
open(f"{out}/{tag}.ttgir", "w").write(k.asm["ttgir"])
print(tag, "shared", k.metadata.shared)
