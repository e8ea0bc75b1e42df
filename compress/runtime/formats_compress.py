"""Runtime classes for the project's own formats (`quant_method: "compress"`) and the int4 kernel layout.

| key                 | checkpoint tensors (per layer P)                       | kernel                        |
| ------------------- | ------------------------------------------------------ | ----------------------------- |
| compress.int4       | P.qweight int32 (N, Kp/8), P.scales (G, N),            | kernels.w4a16.w4a16_linear    |
| (compress.w4a16.*)  | [P.zeros uint8 (G, N)]  (layout: compress/packing/int4) |                               |
| compress.sparse24   | P.values (N, K/2), P.meta int32 (N, ceil(K/32))        | kernels.sparse24 (when there) |
|                     | (layout: compress/packing/sparse24)                    |                               |
| compress.vptq       | P.vptq_* (layout: notes/VPTQ_FORMAT.md)                | kernels.vptq (when there)     |

compressed-tensors int4 layers with group 64/128 are repacked into compress.int4 at load, so the
same class serves both.
"""

from __future__ import annotations

from functools import partial

import torch

from compress.errors import CompressError
from compress.packing import int4 as int4_fmt
from compress.packing import sparse24 as sp24_fmt
from compress.runtime import kernel_bridge as kb
from compress.runtime.formats_ct import acc_dtype, quantize_per_token_int8
from compress.runtime.qlinear import QuantLinear
from compress.runtime.registry import register_format
from compress.runtime.spec import LayerSpec


@kb.gpu_compiled
def _dequant_int4(qweight, scales, zeros, group_size: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    return int4_fmt.dequantize_int4(int4_fmt.unpack_int4(qweight, k), scales, zeros, group_size).to(dtype)


@kb.gpu_compiled
def _unpack_24(values, meta, shape) -> torch.Tensor:
    return sp24_fmt.unpack_sparse24(values, meta, shape)


@register_format("compress.int4")
class Int4Linear(QuantLinear):
    """Group-wise int4 weights in the compress.int4 kernel layout; fp16/bf16 activations."""

    GROUP_SIZES = int4_fmt.GROUP_SIZES
    CAT_DIMS = {"qweight": 0, "scales": 1, "zeros": 1}
    _DROPPED_ON_MOVE = (*QuantLinear._DROPPED_ON_MOVE, "_ws_prepared")  # ws_gemv's prepared launches

    def fuse_key(self):
        return (self.group_size, self.zeros is None)

    def __init__(self, spec: LayerSpec, dtype: torch.dtype, qweight: torch.Tensor, scales: torch.Tensor,
                 zeros: torch.Tensor | None, group_size: int):
        super().__init__(spec, dtype)
        n, k = spec.out_features, spec.in_features
        g = int4_fmt.num_groups(k, group_size)
        if tuple(qweight.shape) != (n, int4_fmt.padded_k(k) // 8) or qweight.dtype != torch.int32:
            raise CompressError(
                f"{spec.name}: qweight {tuple(qweight.shape)} {qweight.dtype} does not match ({n}, {k}); expected "
                f"int32 ({n}, {int4_fmt.padded_k(k) // 8}) in the compress.int4 layout"
            )
        if tuple(scales.shape) != (g, n) or (zeros is not None and tuple(zeros.shape) != (g, n)):
            raise CompressError(
                f"{spec.name}: scales {tuple(scales.shape)} / zeros {None if zeros is None else tuple(zeros.shape)} "
                f"do not match group_size={group_size}; expected ({g}, {n})"
            )
        self.group_size = group_size
        self.register_buffer("qweight", qweight)
        # The kernel reads scales in the activation dtype (fp16/bf16); fp32 on the CPU reference.
        self.register_buffer("scales", scales.to(dtype))
        self.register_buffer("zeros", None if zeros is None else zeros.to(torch.uint8))

    @classmethod
    def from_checkpoint(cls, spec, tensors, *, device, dtype):
        gs = int(spec.args.get("group_size", 128))
        if gs not in cls.GROUP_SIZES:
            raise CompressError(f"{spec.name}: compress.int4 group_size={gs} is not supported; use one of {cls.GROUP_SIZES}")
        qweight = cls._take(spec, tensors, "qweight").to(device)
        scales = cls._take(spec, tensors, "scales").to(device)
        zeros = tensors.get("zeros")
        mod = cls(spec, dtype, qweight, scales, None if zeros is None else zeros.to(device), gs)
        mod._set_bias(tensors, device)
        return mod

    @classmethod
    def from_compressed_tensors(cls, spec, tensors, *, device, dtype):
        """Repack a compressed-tensors pack-quantized int4 layer (group 64/128) into this layout."""
        gs = int(spec.args["group_size"])
        zp = tensors.get("weight_zero_point") if not spec.args.get("symmetric", True) else None
        if not spec.args.get("symmetric", True) and zp is None:
            raise CompressError(f"{spec.name}: asymmetric int4 layer without weight_zero_point in the checkpoint")
        packed = int4_fmt.from_compressed_tensors(
            cls._take(spec, tensors, "weight_packed").to(device),
            cls._take(spec, tensors, "weight_scale").to(device),
            (spec.out_features, spec.in_features),
            None if zp is None else zp.to(device),
            group_size=gs,
        )
        mod = cls(spec, dtype, packed["qweight"], packed["scales"], packed.get("zeros"), gs)
        mod._set_bias(tensors, device)
        return mod

    @classmethod
    def kernel_unavailable(cls, device, spec):
        return kb.unavailable(device, "w4a16", "w4a16_linear")

    def dequantize(self):
        u = int4_fmt.unpack_int4(self.qweight, self.in_features)
        return int4_fmt.dequantize_int4(u, self.scales, self.zeros, self.group_size)

    def reference(self, x2d):
        # Same math as kernels.w4a16.w4a16_linear_ref: dequantize and multiply in fp32.
        dt = acc_dtype(x2d)
        return (x2d.to(dt) @ self.dequantize().to(dt).t()).to(x2d.dtype)

    def kernel(self, x2d):
        return kb.kernel_module("w4a16").w4a16_linear(x2d, self.qweight, self.scales, self.zeros, self.group_size)

    def dequant_cublas(self, x2d):
        # The dequantization reads the packed weight once and writes N*K*2 bytes; many tokens amortise it.
        w = _dequant_int4(self.qweight, self.scales, self.zeros, self.group_size, self.in_features, x2d.dtype)
        return torch.nn.functional.linear(x2d, w)

    # The CUDA C++ GEMVs offered beside the Triton kernel: (path name, kernels module, launcher, one token only). The
    # tensor-core GEMV (kernels/w4a16_cuda.py) covers M <= its MAX_M (64 since session 8); the CUDA-core (w4a16_cc.py,
    # session 29) and warp-specialized (w4a16_ws.py, session 30) ones one token, the warp-specialized GEMM
    # (w4a16_ws_gemm.py, session 31) 2-16 tokens where their x fits an SM. Each joins where its `supports` says (a
    # successful build included); PathTable times the paths per (shape, M) and keeps the fastest, or the warp-specialized
    # GEMV where it is within 10% of it on an H200 (the fastest family inside a decode step's CUDA graph there:
    # paths.PREFER_BY_GPU).
    CUDA_PATHS = (("cuda_gemv", "w4a16_cuda", "w4a16_gemv", False), ("cuda_cc_gemv", "w4a16_cc", "w4a16_cc_gemv", True),
                  ("cuda_ws_gemv", "w4a16_ws", "w4a16_ws_gemv", True),
                  ("cuda_ws_gemm", "w4a16_ws_gemm", "w4a16_ws_gemm", False))

    def cuda_path(self, x2d, module: str, launcher: str, **kw):
        return getattr(kb.kernel_module(module), launcher)(x2d, self.qweight, self.scales, self.zeros, self.group_size,
                                                            **kw)

    def kernel_paths(self, x2d):
        paths = [("kernel", partial(self.kernel, x2d)), ("dequant+cublas", partial(self.dequant_cublas, x2d))]
        for name, module, launcher, one_token in self.CUDA_PATHS:
            if (not one_token or x2d.shape[0] == 1) and kb.unavailable(x2d.device, module, "supports") is None and \
                    kb.kernel_module(module).supports(x2d, self.qweight, self.scales, self.zeros, self.group_size):
                if module == "w4a16_ws":
                    paths += self._ws_config_paths(x2d, name, launcher)
                else:
                    paths.append((name, partial(self.cuda_path, x2d, module, launcher)))
        return paths

    def _ws_config_paths(self, x2d, name: str, launcher: str):
        """The WS GEMV under its measured config, or where (N, K) has none on this GPU, under each of its search configs:
        `name` (the default config), then `name#c` for config c (paths.family: a preference or a forced path names
        them all)."""
        ws, gpu = kb.kernel_module("w4a16_ws"), kb.kernel_module("w4a16_cuda").gpu_name(x2d.device)
        configs = ws.candidate_configs(self.out_features, self.in_features, gpu)
        if len(configs) == 1:
            return [(name, partial(self.ws_gemv, x2d))]
        return [(name if i == 0 else f"{name}#{c}", partial(self.ws_gemv, x2d, config=c)) for i, c in enumerate(configs)]

    def ws_gemv(self, x2d, config: int | None = None):
        """The warp-specialized GEMV through this layer's prepared launch for `config` (kernels.w4a16_ws.PreparedGemv:
        the weights checked once, not on every token of an eager decode), the same bytes as kernels.w4a16_ws.
        w4a16_ws_gemv. Kept per config in __dict__ (dropped when the layer's tensors move: QuantLinear._apply)."""
        prepared = self.__dict__.get("_ws_prepared")
        if prepared is None:
            prepared = self.__dict__["_ws_prepared"] = {}
        p = prepared.get(config)
        if p is None or p.qweight is not self.qweight or p.scales is not self.scales:
            p = prepared[config] = kb.kernel_module("w4a16_ws").PreparedGemv(self.qweight, self.scales, self.zeros,
                                                                            self.group_size, self.in_features, config)
        return p(x2d)



@register_format("compress.sparse24")
class Sparse24Linear(QuantLinear):
    """2:4 sparse weights as compress.sparse24 values + 2-bit positions.

    Three variants: fp16/bf16 values (activations in the same dtype); int8 values with per-channel
    `weight_scale` and dynamic per-token int8 activations (the W8A8 math, `int8`); int8 values with
    per-channel `weight_scale` on activations as they are (weight-only int8, `w8a16`: the pack's
    base_format is compressed-tensors.w8a16).
    """

    CAT_DIMS = {"values": 0, "meta": 0, "w_scale": 0}

    def fuse_key(self):
        return (self.int8, self.w8a16)

    def __init__(self, spec: LayerSpec, dtype: torch.dtype, values: torch.Tensor, meta: torch.Tensor,
                 w_scale: torch.Tensor | None, meta_frag: torch.Tensor | None = None,
                 meta_frag_w16: torch.Tensor | None = None):
        """meta_frag / meta_frag_w16: the metadata registers of the CUDA GEMVs on the sparse tensor cores for this meta
        (kernels.i8_gemv.pack_meta_fragments for W8A8, kernels.sp24_w16_gemv.pack_meta_fragments for W8A16), when
        the caller built them already (the kernel benchmark, whose layers are made inside a CUDA graph capture);
        otherwise they are built on the first GPU call that can use them."""
        super().__init__(spec, dtype)
        n, k = spec.out_features, spec.in_features
        if k % 4 or tuple(values.shape) != (n, k // 2) or tuple(meta.shape) != (n, sp24_fmt.meta_words(k)):
            raise CompressError(
                f"{spec.name}: sparse24 values {tuple(values.shape)} / meta {tuple(meta.shape)} do not match weight "
                f"({n}, {k}); expected ({n}, {k // 2}) and ({n}, {sp24_fmt.meta_words(k)})"
            )
        int_values = values.dtype == torch.int8
        self.w8a16 = int_values and spec.args.get("base_format") == "compressed-tensors.w8a16"
        self.int8 = int_values and not self.w8a16  # W8A8: the activations are quantized too
        if int_values and (w_scale is None or w_scale.numel() != n):
            raise CompressError(f"{spec.name}: int8 sparse24 values need a per-channel weight_scale of {n} values")
        self.register_buffer("values", values if int_values else values.to(dtype))
        self.register_buffer("meta", meta)
        self.register_buffer("w_scale", None if w_scale is None else w_scale.reshape(-1).float())
        self._frag = None if meta_frag is None else (self._frag_key(), meta_frag)
        self._frag16 = None if meta_frag_w16 is None else (self._frag_key(), meta_frag_w16)

    @classmethod
    def from_checkpoint(cls, spec, tensors, *, device, dtype):
        values = cls._take(spec, tensors, "values").to(device)
        meta = cls._take(spec, tensors, "meta").to(device)
        scale = tensors.get("weight_scale")
        if values.dtype == torch.int8 and "weight_zero_point" in tensors:
            raise CompressError(f"{spec.name}: asymmetric int8 sparse24 layers are not supported; use symmetric weights")
        mod = cls(spec, dtype, values, meta, None if scale is None else scale.to(device))
        mod._set_bias(tensors, device)
        return mod

    @classmethod
    def kernel_unavailable(cls, device, spec):
        return kb.unavailable(device, "sparse24", "sparse24_linear", "sparse24_w8a8_linear", "sparse24_w8a16_linear")

    def dequantize(self):
        w = sp24_fmt.unpack_sparse24(self.values, self.meta, (self.out_features, self.in_features)).float()
        return w * self.w_scale[:, None] if self.w_scale is not None else w

    def reference(self, x2d):
        dt = acc_dtype(x2d)
        if not self.int8:  # fp16/bf16 values, or W8A16: the dequantized weight in fp32 (float64 when validating)
            return (x2d.to(dt) @ self.dequantize().to(dt).t()).to(x2d.dtype)
        w = sp24_fmt.unpack_sparse24(self.values, self.meta, (self.out_features, self.in_features))
        xq, xs = quantize_per_token_int8(x2d)
        acc = xq.to(dt) @ w.to(dt).t()
        return (acc * xs * self.w_scale[None, :].to(dt)).to(x2d.dtype)

    def kernel(self, x2d):
        k = kb.kernel_module("sparse24")
        if self.int8:
            return k.sparse24_w8a8_linear(x2d, self.values, self.meta, self.w_scale)
        if self.w8a16:
            return k.sparse24_w8a16_linear(x2d, self.values, self.meta, self.w_scale)
        return k.sparse24_linear(x2d, self.values, self.meta)

    def _dense(self):
        """The dense weight for the "dequantize, then the dense GEMM" paths, built per call (keeping it would undo the
        compression): one Triton launch where the kernels run, torch's scatter (unpack_sparse24) elsewhere."""
        if kb.unavailable(self.values.device, "sparse24", "densify_sparse24") is None:
            return kb.kernel_module("sparse24").densify_sparse24(self.values, self.meta, self.in_features)
        return _unpack_24(self.values, self.meta, (self.out_features, self.in_features))

    def _frag_key(self):
        return (self.meta.data_ptr(), tuple(self.meta.shape), self.meta.device)

    def _fragments(self, attr: str, module: str) -> torch.Tensor | None:
        """The metadata in the register order of the CUDA GEMV `kernels.<module>`, built once per meta tensor (a fused
        or moved layer has a new one) and kept in `attr`; never inside a CUDA graph capture (None then: the path is
        not offered)."""
        held = getattr(self, attr)
        if held is not None and held[0] == self._frag_key():
            return held[1]
        if self.meta.device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            return None
        frag = kb.kernel_module(module).pack_meta_fragments(self.meta, self.out_features, self.in_features)
        setattr(self, attr, (self._frag_key(), frag))
        return frag

    def _meta_fragments(self) -> torch.Tensor | None:
        return self._fragments("_frag", "i8_gemv")

    def _meta_fragments_w16(self) -> torch.Tensor | None:
        return self._fragments("_frag16", "sp24_w16_gemv")

    def kernel_paths(self, x2d):
        # Dense temporary, then the same math: cuBLAS for fp16 values; for int8 values the dense W8A8
        # kernel or torch._int_mm (same quantized activations, exact int32 products).
        paths = [("kernel", partial(self.kernel, x2d))]
        if self.w8a16:  # dequantized dense temporary (int8 values times the channel scale, in x's dtype), then cuBLAS
            k = kb.kernel_module("sparse24")
            paths.append(("dequant+cublas", lambda: torch.nn.functional.linear(
                x2d, k.dequantize_w8a16_sparse24(self.values, self.meta, self.in_features, self.w_scale, x2d.dtype))))
            if self.in_features % 128 == 0 and kb.unavailable(x2d.device, "sp24_w16_gemv", "runtime_offers") is None:
                # 1..8 tokens (session 24): the sparse tensor cores (mma.sp) through kernels/sp24_w16_gemv.py. The token
                # count is checked first: packing the metadata is for calls that can use it.
                spw = kb.kernel_module("sp24_w16_gemv")
                frag = self._meta_fragments_w16() if spw.enabled() and x2d.shape[0] <= spw.MAX_M else None
                for var in spw.runtime_offers(x2d, self.values, self.w_scale, frag) if frag is not None else ():
                    # a path a build: which one is fastest follows the layer's shape
                    paths.append((f"cuda_sp24_w16_{var}", partial(spw.sparse24_w8a16_gemv, x2d, self.values, frag,
                                                                   self.w_scale, variant=var)))
            return paths
        if not self.int8:
            k = kb.kernel_module("sparse24")
            # other tilings whose speed depends on the layer's shape (kernels.sparse24.alternative_configs)
            paths += [(f"kernel_{name}", partial(k.sparse24_linear_tiled, x2d, self.values, self.meta, cfg))
                      for name, cfg in k.alternative_configs(x2d.shape[0]).items()]
            return paths + [("dequant+cublas", lambda: torch.nn.functional.linear(x2d, self._dense()))]
        paths.append(("dequant+w8a8", lambda: kb.kernel_module("w8a8").w8a8_linear(x2d, self._dense(), self.w_scale)))
        if kb.int_mm_fits(*x2d.shape, self.out_features):
            paths.append(("dequant+int_mm", lambda: kb.int_mm_w8a8(x2d, self._dense(), self.w_scale)))
        if self.in_features % 128 == 0 and kb.unavailable(x2d.device, "i8_gemv", "supports") is None:
            # 1..MAX_M tokens (64; 16 before session 11): the sparse tensor cores (mma.sp) through the CUDA int8 GEMV
            # (kernels/i8_gemv.py). The token count is checked first: packing the metadata is for calls that can use it.
            i8 = kb.kernel_module("i8_gemv")
            frag = self._meta_fragments() if i8.enabled() and x2d.shape[0] <= i8.MAX_M else None
            if frag is not None and i8.supports(x2d, self.values, self.w_scale, frag):
                paths.append(("cuda_sp24", lambda: i8.sparse24_w8a8_gemv(x2d, self.values, frag, self.w_scale)))
        return paths


@register_format("compress.vptq")
class VPTQLinear(QuantLinear):
    """VPTQ vector-quantized weights (compress.vptq v1); the reference is compress.vptq.format.dequantize."""

    # tensor suffix (after "<layer>.vptq_") -> VQWeight field
    _TENSORS = {"indices": "indices", "res_indices": "res_indices", "scale": "scale", "bias": "bias",
                "outlier_cols": "outlier_cols", "outlier_indices": "outlier_indices",
                "outlier_codebook": "outlier_codebook"}

    def __init__(self, spec: LayerSpec, dtype: torch.dtype, vq):
        super().__init__(spec, dtype)
        self.vq_meta = {k: getattr(vq, k) for k in ("shape", "vector_len", "index_bits", "res_index_bits",
                                                      "outlier_index_bits", "codebook_key", "res_codebook_key")}
        for name in ("codebook", "indices", "res_codebook", "res_indices", "scale", "bias",
                     "outlier_cols", "outlier_codebook", "outlier_indices"):
            self.register_buffer(f"vq_{name}", getattr(vq, name))

    @classmethod
    def from_checkpoint(cls, spec, tensors, *, device, dtype):
        from compress.vptq.format import VQWeight, index_bits

        a = spec.args
        n, k = spec.out_features, spec.in_features
        shape = tuple(a.get("shape") or (n, k))
        if tuple(shape) != (n, k):
            raise CompressError(f"{spec.name}: VPTQ metadata shape {list(shape)} differs from the architecture's ({n}, {k})")
        found = {field: tensors[f"vptq_{suffix}"].to(device) for suffix, field in cls._TENSORS.items()
                 if f"vptq_{suffix}" in tensors}
        for which, key_name in (("codebook", "codebook_key"), ("res_codebook", "res_codebook_key")):
            key = a.get(key_name)
            name = f"vptq_{which}" if key is None else f"vptq_shared.{key}.{which}"
            t = tensors.get(name) if key is None else tensors.shared(name)
            if t is None and which == "codebook":
                raise CompressError(f"{spec.name}: VPTQ codebook tensor {name!r} is missing from the checkpoint")
            if t is not None:
                found[which] = t.to(device)
        if "indices" not in found:
            raise CompressError(f"{spec.name}: tensor {spec.name}.vptq_indices is missing from the checkpoint")
        bits = a.get("index_bits") or index_bits(found["codebook"].shape[0])
        rbits = a.get("res_index_bits") or (index_bits(found["res_codebook"].shape[0]) if "res_codebook" in found else None)
        obits = a.get("outlier_index_bits") or (
            index_bits(found["outlier_codebook"].shape[0]) if "outlier_codebook" in found else None)
        vq = VQWeight(shape=(n, k), vector_len=int(a.get("vector_len", found["codebook"].shape[1])), index_bits=int(bits),
                      res_index_bits=rbits, outlier_index_bits=obits, codebook_key=a.get("codebook_key"),
                      res_codebook_key=a.get("res_codebook_key"), **found)
        mod = cls(spec, dtype, vq)
        mod._set_bias(tensors, device)
        return mod

    def vqweight(self):
        from compress.vptq.format import VQWeight

        return VQWeight(**self.vq_meta, **{n: getattr(self, f"vq_{n}") for n in (
            "codebook", "indices", "res_codebook", "res_indices", "scale", "bias",
            "outlier_cols", "outlier_codebook", "outlier_indices")})

    @classmethod
    def kernel_unavailable(cls, device, spec):
        return kb.unavailable(device, "vptq", "vptq_linear")

    def dequantize(self):
        from compress.vptq.format import dequantize

        return dequantize(self.vqweight(), dtype=torch.float32)

    def reference(self, x2d):
        dt = acc_dtype(x2d)
        return (x2d.to(dt) @ self.dequantize().to(dt).t()).to(x2d.dtype)

    def kernel_paths(self, x2d):
        """`vptq_linear` (the GEMV up to 4 tokens, dequantize + cuBLAS above), and up to 64 tokens the few-token
        kernel that decodes each weight tile once for all tokens (`vptq_gemm`; no outlier columns). Without it VPTQ
        decode at 8-64 tokens took 24-25 ms a Llama-3-8B step, dequantizing every layer every step (session 20). It is
        offered at one token too: its CUDA version is timed against the batch-1 GEMV there."""
        paths = [("kernel", partial(self.kernel, x2d))]
        vptq = kb.kernel_module("vptq")
        if vptq.gemm_supported(x2d, self.vq_codebook, self.vq_outlier_cols) is None:
            for split in self._gemm_splits(x2d):  # the CUDA kernel's slices of K, timed per shape (0: Triton)
                paths.append((f"fused_gemm_k{split}" if split else "fused_gemm", partial(self.fused_gemm, x2d, split)))
        return paths

    def _gemm_splits(self, x2d) -> list[int]:
        from kernels import vptq_gemm_cuda

        m = self.vq_meta
        rc, rb = self.vq_res_codebook, m["res_index_bits"]
        if x2d.device.type != "cuda" or not vptq_gemm_cuda.supports(x2d, self.out_features, self.vq_codebook,
                                                                     m["index_bits"], rc, rb, self.vq_scale, self.vq_bias):
            return [0]
        sms = torch.cuda.get_device_properties(x2d.device).multi_processor_count
        return vptq_gemm_cuda.split_candidates(x2d.shape[0], self.out_features, self.in_features, sms, m["index_bits"],
                                               rb if rc is not None else 0)

    def fused_gemm(self, x2d, split: int = 0):
        m = self.vq_meta
        return kb.kernel_module("vptq").vptq_gemm(
            x2d, self.out_features, self.vq_indices, self.vq_codebook, m["index_bits"], self.vq_res_indices,
            self.vq_res_codebook, m["res_index_bits"], self.vq_scale, self.vq_bias, split)

    def kernel(self, x2d):
        m = self.vq_meta
        return kb.kernel_module("vptq").vptq_linear(
            x2d, self.out_features, self.vq_indices, self.vq_codebook, m["index_bits"], self.vq_res_indices,
            self.vq_res_codebook, m["res_index_bits"], self.vq_scale, self.vq_bias, self.vq_outlier_cols,
            self.vq_outlier_indices, self.vq_outlier_codebook, m["outlier_index_bits"])
