"""Session 21: one launch of the CUDA few-token VPTQ kernel (kernels/vptq_gemm_cuda.py) per token count, on 8B gate/up
(14336 x 4096, 4096 + 256 centroids), for Nsight Compute: why 32-64 tokens cost 2-3x what 8-16 do.

Usage (repository root, GPU machine): ncu --kernel-name regex:vptq_gemm_kernel --launch-skip 1 --launch-count 3 \\
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \\
    --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \\
    python3 bench/results/h100/kernels_s21/ncu_vptq_gemm.py
(launch 0 is the M = 8 warm-up; the three profiled are M = 8, 16, 64.)
"""

import torch

from compress.bench.e2e_synthetic import random_vptq
from kernels import vptq_gemm_cuda as vc

n, k = 14336, 4096
_, meta, t = random_vptq(torch.randn(n, k, device="cuda", dtype=torch.float16))
args = (t["vptq_indices"], t["vptq_codebook"], meta["index_bits"], t["vptq_res_indices"], t["vptq_res_codebook"],
        meta["res_index_bits"], t["vptq_scale"], t["vptq_bias"])
for m in (8, 8, 16, 64):
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    vc.gemm(x, n, *args, out)
    torch.cuda.synchronize()
    print(m, "split", vc.plan(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count, meta["index_bits"],
                              meta["res_index_bits"]), flush=True)
