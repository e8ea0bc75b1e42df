// W4A16 GEMM for 2-16 tokens, warp-specialized (compress.int4 layout, read as it is): y = x @ W^T, x (M, K).
//
// Why: the tensor-core GEMV of w4a16_gemv.cu serves these token counts from per-warp cp.async rings that its math warps
// refill between their math, and at 16 tokens it runs 1.6x its one-token time (H200, 8B gate/up: 18.0 against 11.4 us,
// bench/results/h200/kernels_s30): the mma work doubles and every warp reloads the activations for its own 16 rows.
// Here, as in the one-token w4a16_ws_gemv.cu, one producer warp keeps a ring of TMA bulk copies of the weights in flight
// (w4a16_ws_ring.cuh) and C consumer warps only compute; each consumer warp loads a 128-k block's B fragments (all M
// tokens) once and feeds them to the RT 16-row tiles of its row group, so the activations read from shared memory per
// weight byte fall by RT.
//
// Work: a persistent grid takes row groups of RB = 16 RT rows (c, c + groups, ...), each with ks CTAs, one per chunk of
// K. A chunk is the whole K where M tokens of x fit the config's budget (XKB), else the longest multiple of 128 that
// does. A ring stage holds U x 512 bytes of the chunk of each of the RB rows (+ their scales / zeros); consumer warp w
// takes blocks w, w + C, ... of each stage and, per block, the token tiles' B fragments (MT = 1 for M <= 8, 2 for 9-16;
// tokens >= M are zero columns), then for each 16-row tile dequantizes lane (g, tq)'s 16 bytes of rows g and g + 8 into A
// fragments (the one-token kernel's LOP3 pairs) and runs mma.sync m16n8k16 per token tile: fp32 sums of exact products
// (u - z) x, scaled per block (group 128) or per half block (group 64: B split into its k < 64 and k >= 64 halves, two
// sums). A warp ends a row group with its partial sums of the RB rows x M tokens over its blocks; the C warps' partials
// meet in shared memory and are added in warp order. With ks > 1 the ks partials are added in chunk order (the same
// bytes every call, and the same bytes both ways):
// - cluster reduction (flags bit 2, ks <= 8): the ks CTAs of a row group run as one thread-block cluster. Each sends
//   slice d of its sums to CTA d's shared memory (distributed shared memory stores, then one remote mbarrier arrival
//   a CTA), and CTA d adds and stores slice d. The consumers send a row group's sums and go on to the next row group's
//   math; they add the previous row group's slices only after it, so the wait for the other CTAs is hidden. Two
//   receive buffers alternate by row group; a sender waits until every receiver has freed the buffer it reuses.
// - otherwise every chunk's CTA writes its sums to a workspace and the last to arrive (a counter per row group, left
//   at zero) adds them. Session 31 measured this slow at 16 tokens (the consumers wait for a fence and an atomic once a
//   row group): 8B gate/up 31.8 us in 2 chunks against 25.7 without a split.
//
// Activations: the consumers wait for the previous kernel (griddepcontrol.wait), one thread bulk-copies the M rows of x
// into shared memory as they are, then every consumer permutes them in place into B-fragment order, per 128-k block
// (x[k], x[k + 64]) pairs as in w4a16_cc_common.cuh's stage_x, so lane (g, tq) reads its 4 pieces of a block with 16-byte
// loads. Tokens sit 32 bytes (mod 128) apart, so the two tokens of an 8-lane phase read disjoint banks. fp16 x goes in as
// it is (the mma sums in fp32); bf16 x is converted to fp16 scaled per block by the power of two 2^-e_b that keeps it
// finite, 2^e_b applied to the block's sums.
//
// Shared memory: x of the chunk (M tokens x (kcl / 8 + 2) pieces of 16 bytes) | 2^e_b per token and block | the warps'
// partials (C x 8 MT x (RB + 4) floats) | the cluster reduction's receive buffers (2 x ks x sl floats, sl = a slice of
// the M x RB sums) | the ring, as many stages as fit, at most the config's NS.
//
// Needs N % 8 == 0 and 16-byte aligned x (rows K % 8 == 0), q, s, z. Programmatic dependent launch (flags bit 0):
// consumers wait before reading x; with bit 1 the producer's weight and scale copies start before that wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "w4a16_cc_common.cuh"
#include "w4a16_ws_ring.cuh"

namespace {

using namespace w4cc;
using namespace w4ws;

struct Args {
  const uint16_t* x;   // (M, K) fp16 or bf16
  const uint8_t* q;    // (N, Kp / 2) bytes
  const uint16_t* s;   // (G, N), x's dtype
  const uint8_t* z;    // (G, N) or null (symmetric: 8)
  uint16_t* out;       // (M, N)
  float* ws;           // split K: (ks, n_rg, M x RB) fp32 partials
  int* cnt;            // split K: n_rg arrival counters, zero between calls
  int M, N, K, Kp, G;
  int early;  // the producer's copies start before griddepcontrol.wait
  int n_rg;   // row groups
  int ns;     // ring stages
  int ks;     // K chunks (CTAs per row group)
  int kcl;    // K values of a chunk (a multiple of 128; the last chunk may be shorter)
  int cl;     // 1: the ks CTAs of a row group form a cluster and add their sums through shared memory
  int sl;     // cluster reduction: sums a CTA adds and stores (a multiple of 4; CTA d takes sums d sl .. d sl + sl - 1)
};

constexpr int XPAD = 2;  // pieces of 16 bytes after each token's x: tokens 32 bytes (mod 128) apart
constexpr int NS_MAX = 8;

__host__ __device__ constexpr int x_pieces(int Kp) { return Kp / 8 + XPAD; }  // per token

// ---- the cluster reduction: distributed shared memory stores and mbarriers, cluster barriers
// p's address in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t cluster_addr(const void* p, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_cluster(uint32_t addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
// One arrival on another CTA's mbarrier, releasing this thread's writes (and, through the CTA barrier before it, the
// other consumers').
__device__ __forceinline__ void mbar_arrive_remote(uint32_t addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(addr) : "memory");
}
__device__ __forceinline__ void mbar_wait_acquire_cluster(uint64_t* b, uint32_t parity) {
  uint32_t ok = 0;
  while (!ok) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok) : "r"(smem_u32(b)), "r"(parity) : "memory");
  }
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

// Sums a CTA of the cluster reduction adds: the M x RB sums of a row group in ks slices, rounded up to 4 floats.
__host__ __device__ constexpr int slice_len(int M, int RB, int ks) { return ((M * RB + ks - 1) / ks + 3) / 4 * 4; }

__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

// x's M rows as they are (token m at xs + m * x_pieces(Kp)) -> B-fragment order in place: the 8 threads of a (token,
// 128-k block) read its 256 bytes (x[k .. k + 7] and x[k + 64 .. k + 71], k = 128 b + 8 o), agree on 2^e_b (bf16; fp16:
// e_b = 0), then write the pairs (x[k], x[k + 64]) of piece p of chunk c to slot 4c + (p ^ ((c >> 1) & 3)). Past K: 0.
template <typename T>
__device__ __forceinline__ void permute_x(uint4* xs, float* s_up, int M, int K, int Kp, int XS, int UPF, int tid,
                                          int nthreads) {
  const int per_token = Kp / 16;
  for (int i0 = 0; i0 < M * per_token; i0 += nthreads) {  // whole warps run every iteration (shuffles, __syncwarp)
    const int i = i0 + tid;
    const bool in = i < M * per_token;
    const int m = in ? i / per_token : 0, j = i - m * per_token;
    const int b = j >> 3, o = (j & 7) * 8, k0 = b * 128 + o;
    uint4* xm = xs + m * XS;
    uint32_t v[2][4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int k = k0 + 64 * hh;
      uint4 q = make_uint4(0, 0, 0, 0);
      if (in && k < K) q = xm[k / 8];
      v[hh][0] = q.x; v[hh][1] = q.y; v[hh][2] = q.z; v[hh][3] = q.w;
    }
    // fp16 goes in as it is (the mma sums in fp32); bf16 is scaled into fp16's range per block.
    const int e = std::is_same<T, __half>::value ? 0 : block_exponent<T>(v);
    __syncwarp();  // every lane has read its block before any lane writes it
    if (in) {
      store_pairs<T>(v, e, std::is_same<T, __half>::value, xm, b, o);
      if ((i & 7) == 0) s_up[m * UPF + b] = ldexpf(1.f, e);
    }
    __syncwarp();
  }
}

template <typename T, bool ASYM, bool G64, int C, int RT, int U, int MT, bool CL>
__global__ void __launch_bounds__((C + 1) * 32) w4wsm_kernel(const Args a) {
  using S = RingStage<ASYM, G64 ? 64 : 128, 16 * RT, U, 64>;
  constexpr int RB = S::RB, RBP = RB + 4, COLS = 8 * MT;  // RBP: lanes (g, tq) store their partials conflict-free
  static_assert(U * 512 % 128 == 0, "a stage holds whole 128-k blocks");
  constexpr int OPT = (16 * RB + C * 32 - 1) / (C * 32);  // outputs a consumer thread adds, at most
  extern __shared__ uint4 xs[];
  __shared__ uint64_t full[NS_MAX], empty[NS_MAX], xbar;
  __shared__ uint64_t rbar[2], rfree[2];  // cluster reduction: a buffer's slices all in / every receiver done with it
  __shared__ int last_flag;
  // This CTA's K chunk: [k0, k0 + kpc) of the padded row (kr of them real), for row groups p, p + P, ...
  const int kc = blockIdx.x % a.ks, p = blockIdx.x / a.ks, P = gridDim.x / a.ks;
  const int k0 = kc * a.kcl, kpc = min(a.kcl, a.Kp - k0), kr = min(kpc, a.K - k0);
  const int gbase = k0 / (G64 ? 64 : 128), Gc = a.G - gbase;  // the chunk's first scale group, its groups
  const int XS = x_pieces(a.kcl), UPF = up_floats(a.kcl);
  float* s_up = reinterpret_cast<float*>(xs + a.M * XS);
  float* red = s_up + a.M * UPF;
  float* recv = red + C * COLS * RBP;  // cluster reduction: [2][ks][sl]
  uint8_t* ring = reinterpret_cast<uint8_t*>(recv + (CL ? 2 * a.ks * a.sl : 0));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int CW = kpc / 32;                       // 16-byte chunks of a row in the chunk
  const int nst = (CW + 32 * U - 1) / (32 * U);  // stages of a row group

  if (threadIdx.x == 0) {
    ring_init(full, empty, a.ns, C);
    mbar_init(&xbar, 1);
    if constexpr (CL) {
      for (int b = 0; b < 2; ++b) {
        mbar_init(&rbar[b], a.ks);   // one arrival per sending CTA
        mbar_init(&rfree[b], a.ks);  // one per receiving CTA
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // Cluster reduction: no CTA touches another's shared memory before every CTA's mbarriers are set up (phase 0 of the
  // cluster barrier; the consumers wait for it before their first send) or after it has left (phase 1, at the end).
  if constexpr (CL) cluster_arrive();

  if (warp == C) {
    produce<S, ASYM>(a, ring, full, empty, lane, nst, a.ns, p, P, k0 / 2, kpc / 2, gbase);
    if constexpr (CL) {  // arrive once per phase: phase 0 has completed before this thread arrives for phase 1
      cluster_wait();
      cluster_arrive();
    }
    return;
  }

  // ---- consumers: x, then the row groups
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (threadIdx.x == 0) {
    mbar_arrive_tx(&xbar, (uint32_t)(a.M * kr * 2));
    for (int m = 0; m < a.M; ++m) bulk_load(xs + m * XS, a.x + (size_t)m * a.K + k0, (uint32_t)(kr * 2), &xbar);
  }
  mbar_wait(&xbar, 0);
  permute_x<T>(xs, s_up, a.M, kr, kpc, XS, UPF, threadIdx.x, C * 32);
  asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");  // the consumers only

  const int g = lane >> 2, tq = lane & 3;  // mma lane coordinates
  int slot = 0, phase = 0;
  // Cluster reduction: CTA kc (its rank) adds slice kc of row group n's sums (row0 r0) once every CTA's slice is in
  // buffer n & 1; `release` frees the buffer for the senders (the last row group's need not be freed).
  auto receive = [&](int n, int r0, bool release) {
    const int b = n & 1;
    mbar_wait_acquire_cluster(&rbar[b], (n >> 1) & 1);
    for (int j = threadIdx.x; j < a.sl; j += C * 32) {
      const int o = kc * a.sl + j, m = o / RB, r = o - m * RB;
      if (o < a.M * RB && r0 + r < a.N) {
        float y = 0.f;
        for (int c = 0; c < a.ks; ++c) y += recv[(b * a.ks + c) * a.sl + j];  // chunk order, as the workspace path
        a.out[(size_t)m * a.N + r0 + r] = from_f<T>(y);
      }
    }
    if (release) {
      asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");  // every consumer has read the buffer
      if (threadIdx.x < a.ks) mbar_arrive_remote(cluster_addr(&rfree[b], threadIdx.x));
    }
  };
  if constexpr (CL) cluster_wait();  // every CTA of the cluster has set up its mbarriers
  int nrg = 0, prev_row0 = 0;
  for (int rg = p; rg < a.n_rg; rg += P, ++nrg) {
    const int row0 = rg * RB;
    float acc[RT][MT][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int nt = 0; nt < MT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rt][nt][i] = 0.f;
    for (int st = 0; st < nst; ++st) {
      mbar_wait(&full[slot], phase);
      const uint8_t* base = ring + slot * S::BYTES;
      const uint16_t* sc = reinterpret_cast<const uint16_t*>(base + S::WBYTES);
      const uint8_t* zc = base + S::WBYTES + S::SCB;
      const int g0 = st * S::GS;
#pragma unroll
      for (int it = 0; it < (U * 8 + C - 1) / C; ++it) {
        const int bl = warp + it * C;    // block of the stage
        const int B = st * U * 8 + bl;  // block of the row
        if (bl < U * 8 && B * 4 < CW) {
          const int c = B * 4 + tq, sw = (c >> 1) & 3;
          // B fragments of the block: token nt * 8 + g's pieces (zero past M); lane's columns 2 tq, 2 tq + 1 scale by
          // their tokens' 2^e_b.
          uint4 xb[MT][4];
          float up[MT][2];
          // Tokens past M read token M - 1 (no predicates): their columns are computed and never stored.
#pragma unroll
          for (int nt = 0; nt < MT; ++nt) {
            const int m = min(nt * 8 + g, a.M - 1);
#pragma unroll
            for (int q = 0; q < 4; ++q) xb[nt][q] = xs[m * XS + c * 4 + (q ^ sw)];
            if constexpr (!std::is_same<T, __half>::value) {  // fp16 x is staged as it is: 2^e_b = 1
#pragma unroll
              for (int h = 0; h < 2; ++h) up[nt][h] = s_up[min(nt * 8 + 2 * tq + h, a.M - 1) * UPF + B];
            }
          }
          const int gl0 = (G64 ? 2 * B : B) - g0;
          const int gl1 = G64 ? min(2 * B + 1, Gc - 1) - g0 : gl0;  // a last half block has no second group
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            const int ra = rt * 16 + g, rb = ra + 8;
            const uint8_t* rp = base + ra * S::PITCH + bl * 64 + 16 * tq;
            const uint4 wa = *reinterpret_cast<const uint4*>(rp);
            const uint4 wb = *reinterpret_cast<const uint4*>(rp + 8 * S::PITCH);
            uint32_t nla = 0xE408E408u, nha = 0xD480D480u, nlb = nla, nhb = nha;  // z = 8
            if constexpr (ASYM) {
              const uint32_t za = (uint32_t)zc[gl0 * RB + ra] | ((uint32_t)zc[gl1 * RB + ra] << 16);
              const uint32_t zb = (uint32_t)zc[gl0 * RB + rb] | ((uint32_t)zc[gl1 * RB + rb] << 16);
              nla = neg_lo(za); nha = neg_hi(za); nlb = neg_lo(zb); nhb = neg_hi(zb);
            }
            float d[MT][G64 ? 2 : 1][4] = {};
            const uint32_t* wav = reinterpret_cast<const uint32_t*>(&wa);
            const uint32_t* wbv = reinterpret_cast<const uint32_t*>(&wb);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              uint32_t pa[4], pb[4];
              dequant_pairs(wav[q], nla, nha, pa);
              dequant_pairs(wbv[q], nlb, nhb, pb);
#pragma unroll
              for (int nt = 0; nt < MT; ++nt) {
                const uint4 xp = xb[nt][q];
                if constexpr (G64) {
                  mma16816(d[nt][0], pa[0], pb[0], pa[1], pb[1], xp.x & 0xFFFFu, xp.y & 0xFFFFu);
                  mma16816(d[nt][1], pa[0], pb[0], pa[1], pb[1], xp.x & 0xFFFF0000u, xp.y & 0xFFFF0000u);
                  mma16816(d[nt][0], pa[2], pb[2], pa[3], pb[3], xp.z & 0xFFFFu, xp.w & 0xFFFFu);
                  mma16816(d[nt][1], pa[2], pb[2], pa[3], pb[3], xp.z & 0xFFFF0000u, xp.w & 0xFFFF0000u);
                } else {
                  mma16816(d[nt][0], pa[0], pb[0], pa[1], pb[1], xp.x, xp.y);
                  mma16816(d[nt][0], pa[2], pb[2], pa[3], pb[3], xp.z, xp.w);
                }
              }
            }
            // Lane (g, tq)'s accumulators: rows g (0, 1) and g + 8 (2, 3), token columns 2 tq (0, 2) and 2 tq + 1.
            const float sa0 = to_f<T>(sc[gl0 * RB + ra]), sb0 = to_f<T>(sc[gl0 * RB + rb]);
            const float sa1 = G64 ? to_f<T>(sc[gl1 * RB + ra]) : 0.f, sb1 = G64 ? to_f<T>(sc[gl1 * RB + rb]) : 0.f;
#pragma unroll
            for (int nt = 0; nt < MT; ++nt) {
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                if constexpr (std::is_same<T, __half>::value) {
                  acc[rt][nt][i] = fmaf(d[nt][0][i], i < 2 ? sa0 : sb0, acc[rt][nt][i]);
                  if constexpr (G64) acc[rt][nt][i] = fmaf(d[nt][1][i], i < 2 ? sa1 : sb1, acc[rt][nt][i]);
                } else {
                  float v = d[nt][0][i] * (i < 2 ? sa0 : sb0);
                  if constexpr (G64) v = fmaf(d[nt][1][i], i < 2 ? sa1 : sb1, v);
                  acc[rt][nt][i] = fmaf(v, up[nt][i & 1], acc[rt][nt][i]);
                }
              }
            }
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
      if (++slot == a.ns) {
        slot = 0;
        phase ^= 1;
      }
    }
    if (rg + P >= a.n_rg) {
#if __CUDA_ARCH__ >= 900
      asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    }
    // The C warps' partials of the RB rows x M tokens meet in shared memory; every consumer thread then adds some
    // outputs' partials in warp order and stores them. Two barriers: all partials written before any sum, all sums
    // read before the next row group writes.
    float* rd = red + warp * COLS * RBP;
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int nt = 0; nt < MT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) rd[(nt * 8 + 2 * tq + (i & 1)) * RBP + rt * 16 + g + (i >> 1) * 8] = acc[rt][nt][i];
    asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");
    float yo[OPT];
#pragma unroll
    for (int i = 0; i < OPT; ++i) {
      const int o = threadIdx.x + i * C * 32, m = o / RB, r = o - m * RB;
      yo[i] = 0.f;
      if (o < a.M * RB) {
#pragma unroll
        for (int w = 0; w < C; ++w) yo[i] += red[(w * COLS + m) * RBP + r];
      }
    }
    if (a.ks == 1) {
#pragma unroll
      for (int i = 0; i < OPT; ++i) {
        const int o = threadIdx.x + i * C * 32, m = o / RB, r = o - m * RB;
        if (o < a.M * RB && row0 + r < a.N) a.out[(size_t)m * a.N + row0 + r] = from_f<T>(yo[i]);
      }
      asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");  // red is read before the next row group writes it
    } else if constexpr (CL) {
      // Send slice d of the sums to CTA d's buffer nrg & 1 (once every receiver has freed its previous use), then add
      // the previous row group's slices here: by now the other CTAs have usually sent them.
      const int b = nrg & 1;
      if (nrg >= 2) mbar_wait_acquire_cluster(&rfree[b], ((nrg >> 1) - 1) & 1);
#pragma unroll
      for (int i = 0; i < OPT; ++i) {
        const int o = threadIdx.x + i * C * 32;
        if (o < a.M * RB) {
          const int d = o / a.sl;
          st_cluster(cluster_addr(recv + (b * a.ks + kc) * a.sl + (o - d * a.sl), d), yo[i]);
        }
      }
      asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");  // every slice written (and red read)
      if (threadIdx.x < a.ks) mbar_arrive_remote(cluster_addr(&rbar[b], threadIdx.x));
      if (nrg >= 1) receive(nrg - 1, prev_row0, true);
      prev_row0 = row0;
    } else {
      // Split K: every chunk's CTA leaves its sums of the row group in the workspace; the last to arrive (counter)
      // adds the ks partials in chunk order (the same bytes every call), stores y and zeroes the counter.
      float* wsr = a.ws + (size_t)rg * a.M * RB;
      const size_t kstride = (size_t)a.n_rg * a.M * RB;
#pragma unroll
      for (int i = 0; i < OPT; ++i) {
        const int o = threadIdx.x + i * C * 32;
        if (o < a.M * RB) wsr[kc * kstride + o] = yo[i];
      }
      __threadfence();
      asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");
      if (threadIdx.x == 0) {
        const int last = atomicAdd(&a.cnt[rg], 1) == a.ks - 1;
        if (last) a.cnt[rg] = 0;
        last_flag = last;
      }
      asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");
      if (last_flag) {
        __threadfence();
#pragma unroll
        for (int i = 0; i < OPT; ++i) {
          const int o = threadIdx.x + i * C * 32, m = o / RB, r = o - m * RB;
          if (o < a.M * RB) {
            float y = 0.f;
            for (int j = 0; j < a.ks; ++j) y += j == kc ? yo[i] : __ldcg(wsr + j * kstride + o);
            if (row0 + r < a.N) a.out[(size_t)m * a.N + row0 + r] = from_f<T>(y);
          }
        }
      }
    }
  }
  if constexpr (CL) {
    if (nrg >= 1) receive(nrg - 1, prev_row0, false);
    cluster_arrive();  // no CTA leaves while another may still write to its shared memory
    cluster_wait();
  }
}

// Shared memory of a launch with K chunks of kcl values, `recv` floats of the cluster reduction's buffers and `ns` ring
// stages.
template <typename S, int C, int MT>
size_t smem_bytes(int M, int kcl, int recv, int ns) {
  return (size_t)M * x_pieces(kcl) * 16 + (size_t)M * up_floats(kcl) * 4 + (size_t)C * 8 * MT * (S::RB + 4) * 4 +
         (size_t)recv * 4 + (size_t)ns * S::BYTES;
}

constexpr int MAX_CLUSTER = 8;  // portable thread-block cluster size

// K chunk length for a config's x budget: the padded K if M tokens of it fit xkb KB, else the longest multiple of 128
// that does (x of a chunk: M x kcl x 2 bytes).
__host__ __device__ inline int chunk_len(int M, int Kp, int xkb) {
  if (M * Kp * 2 <= xkb * 1024) return Kp;
  return max(128, xkb * 1024 / (M * 2) / 128 * 128);
}

template <typename T, bool ASYM, bool G64, int C, int RT, int U, int MT>
int launch(Args a, int ns_max, int xkb, bool pdl, bool cluster, int max_grid, cudaStream_t stream) {
  using S = RingStage<ASYM, G64 ? 64 : 128, 16 * RT, U, 64>;
  int dev = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return (int)e;
  // As many ring stages as fit beside x and the partials (static shared memory: 2 x NS_MAX + 1 mbarriers), at most
  // ns_max; fewer than 2 leave no copy in flight while the consumers compute.
  a.kcl = chunk_len(a.M, a.Kp, xkb);
  a.ks = (a.Kp + a.kcl - 1) / a.kcl;
  a.cl = cluster && a.ks > 1 && a.ks <= MAX_CLUSTER;
  // Two builds: the cluster reduction's code would cost the other launches registers.
  auto kernel = a.cl ? w4wsm_kernel<T, ASYM, G64, C, RT, U, MT, true> : w4wsm_kernel<T, ASYM, G64, C, RT, U, MT, false>;
  a.sl = slice_len(a.M, S::RB, a.ks);
  const int recv = a.cl ? 2 * a.ks * a.sl : 0;
  const int fixed = (int)smem_bytes<S, C, MT>(a.M, a.kcl, recv, 0) + (2 * NS_MAX + 5) * 8 + 16;
  a.ns = min(ns_max, (optin - fixed) / S::BYTES);
  if (a.ns < 2) return -5;
  const size_t smem = smem_bytes<S, C, MT>(a.M, a.kcl, recv, a.ns);
  a.n_rg = (a.N + S::RB - 1) / S::RB;
  int all = 0;  // CTAs resident on the GPU (also raises the kernel's shared-memory limit to smem)
  if (const int rc = resident_ctas(kernel, (C + 1) * 32, smem, &all)) return rc;
  if (all < 1) return -5;
  // ks CTAs per row group (one per K chunk): the grid is a multiple of ks. A cluster's CTAs share a GPC, so fewer
  // clusters than SMs / ks may fit at once: the persistent grid takes as many as do.
  if (a.ks > 1 && !a.cl && (a.ws == nullptr || a.cnt == nullptr)) return -8;
  int resident = all / a.ks;
  if (a.cl) {
    const LaunchConfig lc(dim3(a.ks * resident), (C + 1) * 32, smem, false, stream, dim3(a.ks, 1, 1));
    e = cudaOccupancyMaxActiveClusters(&resident, kernel, &lc.cfg);
    if (e != cudaSuccess) return (int)e;
    if (resident < 1) return -5;
  }
  int groups = min(a.n_rg, resident);
  if (max_grid > 0) groups = min(groups, max(1, max_grid / a.ks));
  if (groups < 1) return -5;
  const int grid = groups * a.ks;
  return launch_ex(kernel, a, grid, (C + 1) * 32, smem, pdl, stream, dim3(a.cl ? a.ks : 1, 1, 1));
}

template <int C, int RT, int U, int NS, int XKB>
int by_format(const Args& a, int bf16, int asym, int g64, bool pdl, bool cl, int mg, cudaStream_t st) {
  static_assert(NS <= NS_MAX, "more stages than mbarriers");
#define W4WSM_MT(T, AS, G)                                                                                 \
  return a.M > 8 ? launch<T, AS, G, C, RT, U, 2>(a, NS, XKB, pdl, cl, mg, st)                              \
                 : launch<T, AS, G, C, RT, U, 1>(a, NS, XKB, pdl, cl, mg, st);
#define W4WSM_T(T)                   \
  if (asym) {                        \
    if (g64) { W4WSM_MT(T, true, true) } \
    W4WSM_MT(T, true, false)          \
  }                                  \
  if (g64) { W4WSM_MT(T, false, true) } \
  W4WSM_MT(T, false, false)
  if (bf16) { W4WSM_T(__nv_bfloat16) }
  W4WSM_T(__half)
#undef W4WSM_T
#undef W4WSM_MT
}

// Launch configs (consumer warps, 16-row tiles of a row group, 512-byte spans of a row a ring stage holds, at most this
// many ring stages, KB of x a CTA stages: more tokens x K than that split K over CTAs), by index. Session 31's first
// sweep (bench/results/h200/kernels_s31) kept the 1 KB spans; the caps of 3-4 stages let two CTAs share an SM where x
// is small.
constexpr int CONFIGS[][5] = {{8, 2, 2, 4, 64}, {16, 1, 2, 8, 64}, {8, 1, 2, 8, 64}, {8, 1, 2, 4, 64},
                              {16, 1, 2, 4, 64}, {8, 2, 2, 3, 64}, {16, 2, 2, 4, 64}, {8, 2, 1, 8, 64},
                              {8, 2, 2, 4, 32}, {16, 2, 2, 4, 32}, {8, 2, 2, 4, 160}, {16, 1, 2, 4, 32}};
constexpr int NUM_CONFIGS = sizeof(CONFIGS) / sizeof(CONFIGS[0]);

template <int I = 0>
int by_config(int i, const Args& a, int bf16, int asym, int g64, bool pdl, bool cl, int mg, cudaStream_t st) {
  if constexpr (I + 1 < NUM_CONFIGS) {
    if (i != I) return by_config<I + 1>(i, a, bf16, asym, g64, pdl, cl, mg, st);
  }
  return by_format<CONFIGS[I][0], CONFIGS[I][1], CONFIGS[I][2], CONFIGS[I][3], CONFIGS[I][4]>(a, bf16, asym, g64, pdl,
                                                                                               cl, mg, st);
}

}  // namespace

extern "C" {

int w4wsm_num_configs() { return NUM_CONFIGS; }
int w4wsm_config(int i, int field) { return CONFIGS[i][field]; }

// The split of K a launch makes: out[0] = K chunks (CTAs per row group), out[1] = rows of a row group; the workspace
// then holds chunks x ceil(N / rows) x M x rows floats and ceil(N / rows) counters (only where chunks > 1).
int w4wsm_split(int M, int K, int config, int* out) {
  if (config < 0 || config >= NUM_CONFIGS) return -1;
  const int Kp = (K + 127) / 128 * 128, kcl = chunk_len(M, Kp, CONFIGS[config][4]);
  out[0] = (Kp + kcl - 1) / kcl;
  out[1] = 16 * CONFIGS[config][1];
  return 0;
}

// Returns 0, a cudaError_t, or -1 (bad config index), -2 (group not 64/128), -3 (K not a positive multiple of 8),
// -4 (x, q, s or z not 16-byte aligned), -5 (a K chunk of x and two ring stages over the shared memory of an SM), -6
// (N not a multiple of 8), -7 (M not in 1..16), -8 (K split without a workspace). ws / cnt: see w4wsm_split (cnt zeroed
// once; the kernel leaves it zeroed; unused by the cluster reduction). flags: bit 0 = programmatic dependent launch,
// bit 1 (with bit 0) = weights read before the wait, bit 2 = the cluster reduction where K splits in 2..8 chunks.
// max_grid > 0 caps the persistent grid (sweeps).
int w4wsm_gemm(const void* x, int x_is_bf16, const void* q, const void* s, const void* z, void* out, void* ws,
               void* cnt, int M, int N, int K, int group, int config, int flags, int max_grid, void* stream_) {
  if (config < 0 || config >= NUM_CONFIGS) return -1;
  if (const int rc = check_call(x, q, s, z, N, K, group)) return rc;
  if (M < 1 || M > 16) return -7;
  Args a;
  a.x = static_cast<const uint16_t*>(x);
  a.q = static_cast<const uint8_t*>(q);
  a.s = static_cast<const uint16_t*>(s);
  a.z = static_cast<const uint8_t*>(z);
  a.out = static_cast<uint16_t*>(out);
  a.ws = static_cast<float*>(ws);
  a.cnt = static_cast<int*>(cnt);
  a.M = M;
  a.N = N;
  a.K = K;
  a.Kp = (K + 127) / 128 * 128;
  a.G = (K + group - 1) / group;
  const bool pdl = (flags & 1) != 0;
  a.early = !pdl || (flags & 2) != 0;
  const int asym = z != nullptr, g64 = group == 64, bf = x_is_bf16 != 0;
  return by_config(config, a, bf, asym, g64, pdl, (flags & 4) != 0, max_grid, static_cast<cudaStream_t>(stream_));
}

}  // extern "C"
