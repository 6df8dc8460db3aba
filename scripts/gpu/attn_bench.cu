// Standalone GPU check + benchmark of servesim's attention kernels: the tensor-core prefill
// (kernels/attention_prefill_tc.cu) and split-KV decode (kernels/attention_decode_split.cu)
// against the CUDA-core kernels they replace (attention_prefill.cu, attention_decode.cu, known
// correct on GPU). Built by scripts/gpu/run.sh, which concatenates common.cuh and the kernel files
// into kernels_all.cuh (the same text NVRTC compiles, one TU); plain CUDA runtime API, no Rust.
//
//   attn_bench OUT_DIR      writes OUT_DIR/results.json and OUT_DIR/results.md
//
// Besides the default entry points it times the variants the kernel files compile under
// SERVESIM_TC_VARIANTS / SERVESIM_DS_VARIANTS (each checked against the old kernel like the
// default), so that one GPU run shows which configuration is fastest.
//
// Exit status: 0 when every new kernel matches the old one, 1 on a mismatch, 2 on a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The extra prefill / decode configurations (kernels/attention_prefill_tc.cu and
// attention_decode_split.cu compile them only when asked), timed against the default entries.
#define SERVESIM_TC_VARIANTS 1
#define SERVESIM_DS_VARIANTS 1
#include "kernels_all.cuh"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "CUDA error: %s at %s:%d: %s\n", #x, __FILE__, __LINE__,           \
                    cudaGetErrorString(e_));                                                   \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

// ---------------------------------------------------------------------------------------------
// device helpers

__device__ __forceinline__ unsigned bench_hash(unsigned long long i, unsigned seed) {
    unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (unsigned)(x >> 32);
}

// Uniform in [-amp, amp), stored as T's 16-bit bits.
template <typename T>
__global__ void bench_fill(u16* p, size_t n, unsigned seed, float amp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = (bench_hash(i, seed) >> 8) * (1.0f / 16777216.0f);  // [0, 1)
        p[i] = T::store((2.0f * u - 1.0f) * amp);
    }
}

// Reads n16 16-byte words; writes only if an impossible value shows up (keeps the loads alive).
__global__ void bench_read(const uint4* p, size_t n16, unsigned* sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) {
        *sink = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// host helpers

static int g_sms = 0;
static double g_hbm_gbs = 0;  // theoretical, GB/s
static double g_read_gbs = 0; // measured with bench_read, GB/s
static const double kBf16PeakTflops = 989.0;  // H100/H200 SXM dense BF16

template <typename T>
static void fill(u16* p, size_t n, unsigned seed, float amp) {
    bench_fill<T><<<4 * g_sms, 256>>>(p, n, seed, amp);
    CK(cudaGetLastError());
}

template <typename F>
static double median_ms(F launch, int warm = 3, int iters = 15) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; ++i) launch();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < iters; ++i) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static float bits_to_f(u16 h, bool f16) {
    if (!f16) {
        unsigned u = (unsigned)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const unsigned s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}

struct Cmp {
    double max_err = 0, max_ref = 0, mean_err = 0;
    bool finite = true;
    double rel() const { return max_err / std::max(max_ref, 1e-6); }
    bool ok() const { return finite && rel() < 2e-2; }
};

static Cmp compare(const u16* d_new, const u16* d_old, size_t n, bool f16) {
    std::vector<u16> a(n), b(n);
    CK(cudaMemcpy(a.data(), d_new, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), d_old, n * 2, cudaMemcpyDeviceToHost));
    Cmp c;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
        const double x = bits_to_f(a[i], f16), y = bits_to_f(b[i], f16);
        if (!std::isfinite(x) || !std::isfinite(y)) {
            c.finite = false;
            continue;
        }
        const double e = std::fabs(x - y);
        c.max_err = std::max(c.max_err, e);
        c.max_ref = std::max(c.max_ref, std::fabs(y));
        sum += e;
    }
    c.mean_err = sum / std::max<size_t>(n, 1);
    return c;
}

static std::vector<int> shuffled_blocks(int n, unsigned seed) {
    std::vector<int> p(n);
    for (int i = 0; i < n; ++i) p[i] = i;
    std::mt19937 rng(seed);
    std::shuffle(p.begin(), p.end(), rng);
    return p;
}

static std::string json_rows;   // accumulated JSON objects
static std::string md_prefill;  // markdown table rows
static std::string md_decode;
static std::string md_prefill_var;  // variant tables
static std::string md_decode_var;
static int g_failures = 0;

static void add_json(const std::string& obj) {
    if (!json_rows.empty()) json_rows += ",\n";
    json_rows += "    " + obj;
}

// ---------------------------------------------------------------------------------------------
// prefill

struct PrefillCfg {
    const char* name;
    int new_tokens, cached, heads, kv_heads, d;
    bool f16;
    bool variants;  // also time the SERVESIM_TC_VARIANTS entries
};

static void bench_prefill(const PrefillCfg& c) {
    const int BS = 16, N = c.new_tokens, C = c.cached, H = c.heads, KV = c.kv_heads, D = c.d;
    const size_t q_n = (size_t)N * H * D, kv_n = (size_t)N * KV * D;
    const int nblk = std::max(1, (C + BS - 1) / BS);
    const size_t cache_n = (size_t)nblk * BS * KV * D;
    u16 *q, *k, *v, *kc, *vc, *o_old, *o_new;
    int *bt, *cl, *cu;
    CK(cudaMalloc(&q, q_n * 2));
    CK(cudaMalloc(&k, kv_n * 2));
    CK(cudaMalloc(&v, kv_n * 2));
    CK(cudaMalloc(&kc, cache_n * 2));
    CK(cudaMalloc(&vc, cache_n * 2));
    CK(cudaMalloc(&o_old, q_n * 2));
    CK(cudaMalloc(&o_new, q_n * 2));
    CK(cudaMalloc(&bt, nblk * sizeof(int)));
    CK(cudaMalloc(&cl, sizeof(int)));
    CK(cudaMalloc(&cu, 2 * sizeof(int)));
    if (c.f16) {
        fill<F16>(q, q_n, 1, 2.0f); fill<F16>(k, kv_n, 2, 2.0f); fill<F16>(v, kv_n, 3, 1.0f);
        fill<F16>(kc, cache_n, 4, 2.0f); fill<F16>(vc, cache_n, 5, 1.0f);
    } else {
        fill<Bf16>(q, q_n, 1, 2.0f); fill<Bf16>(k, kv_n, 2, 2.0f); fill<Bf16>(v, kv_n, 3, 1.0f);
        fill<Bf16>(kc, cache_n, 4, 2.0f); fill<Bf16>(vc, cache_n, 5, 1.0f);
    }
    const std::vector<int> table = shuffled_blocks(nblk, 7);
    const int cu_h[2] = {0, N};
    CK(cudaMemcpy(bt, table.data(), nblk * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(cl, &C, sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(cu, cu_h, 2 * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemset(o_old, 0xff, q_n * 2));
    CK(cudaMemset(o_new, 0xff, q_n * 2));
    const float scale = 1.0f / std::sqrt((float)D);

    typedef void (*PF)(u16*, const u16*, const u16*, const u16*, const u16*, const u16*,
                       const int*, const int*, const int*, float, int, int, int, int, int, int,
                       int);
    PF old_fn, new_fn;
    int old_d, new_d;
    if (D <= 64) {
        old_fn = c.f16 ? attention_prefill_f16_d64 : attention_prefill_bf16_d64;
        new_fn = c.f16 ? attention_prefill_tc_f16_d64 : attention_prefill_tc_bf16_d64;
        old_d = new_d = 64;
    } else {
        old_fn = c.f16 ? attention_prefill_f16_d128 : attention_prefill_bf16_d128;
        new_fn = c.f16 ? attention_prefill_tc_f16_d128 : attention_prefill_tc_bf16_d128;
        old_d = new_d = 128;
    }
    const size_t old_smem = 32 * (old_d + 1) * 4 + 2 * 32 * (old_d + 2) * 2 + 32 * 33 * 4;
    const size_t new_smem = TC_SMEM_BYTES(new_d);
    // Over 48 KiB of dynamic shared memory: the entry must opt in first (see the kernel header).
    CK(cudaFuncSetAttribute((const void*)new_fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)new_smem));
    const dim3 old_grid((N + PF_BM - 1) / PF_BM, H, 1), new_grid((N + TC_BM - 1) / TC_BM, H, 1);
    auto run_old = [&] {
        old_fn<<<old_grid, PF_THREADS, old_smem>>>(o_old, q, k, v, kc, vc, bt, cl, cu, scale, H,
                                                  KV, D, H * D, KV * D, BS, nblk);
    };
    auto run_new = [&] {
        new_fn<<<new_grid, TC_THREADS, new_smem>>>(o_new, q, k, v, kc, vc, bt, cl, cu, scale, H,
                                                  KV, D, H * D, KV * D, BS, nblk);
    };
    run_old();
    run_new();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    const Cmp cmp = compare(o_new, o_old, q_n, c.f16);
    if (!cmp.ok()) ++g_failures;
    const double t_old = median_ms(run_old), t_new = median_ms(run_new);
    const double pairs = (double)N * C + (double)N * (N + 1) / 2.0;
    const double flops = 4.0 * D * H * pairs;
    const double tf_old = flops / (t_old * 1e-3) / 1e12, tf_new = flops / (t_new * 1e-3) / 1e12;
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"kind\": \"prefill\", \"name\": \"%s\", \"dtype\": \"%s\", \"new_tokens\": %d, "
             "\"cached\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"flops\": %.6e, "
             "\"old_ms\": %.5f, \"new_ms\": %.5f, \"old_tflops\": %.2f, \"new_tflops\": %.2f, "
             "\"new_pct_bf16_peak\": %.2f, \"speedup\": %.2f, \"max_abs_err\": %.3e, "
             "\"max_abs_ref\": %.3e, \"mean_abs_err\": %.3e, \"match\": %s}",
             c.name, c.f16 ? "f16" : "bf16", N, C, H, KV, D, flops, t_old, t_new, tf_old, tf_new,
             100.0 * tf_new / kBf16PeakTflops, t_old / t_new, cmp.max_err, cmp.max_ref,
             cmp.mean_err, cmp.ok() ? "true" : "false");
    add_json(buf);
    snprintf(buf, sizeof buf,
             "| %s | %s | %d | %d | %d/%d/%d | %.3f | %.3f | %.1f | %.1f (%.1f%%) | %.1fx | %.2e / %.2e %s |\n",
             c.name, c.f16 ? "f16" : "bf16", N, C, H, KV, D, t_old, t_new, tf_old, tf_new,
             100.0 * tf_new / kBf16PeakTflops, t_old / t_new, cmp.max_err, cmp.max_ref,
             cmp.ok() ? "ok" : "**MISMATCH**");
    md_prefill += buf;
    printf("%s", buf);
    fflush(stdout);

    // The variants of this head-dim bucket (bf16 cases only), each checked like the default.
    if (c.variants && !c.f16) {
        struct Var { const char* name; int d, w, mt, bn, st, qreg; PF fn; };
        static const Var vars[] = {
#define X(VD, VW, VMT, VBN, VS, VQ, VMINB, VNAME) {#VNAME, VD, VW, VMT, VBN, VS, VQ, VNAME},
            SERVESIM_TC_VARIANT_LIST(X)
#undef X
        };
        for (const Var& var : vars) {
            if (var.d != new_d) continue;
            const int bm = var.w * var.mt * 16;
            const size_t smem = TC_SMEM_BYTES_CFG(var.d, var.w, var.mt, var.bn, var.st, var.qreg);
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, (const void*)var.fn));
            if (cudaFuncSetAttribute((const void*)var.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem) != cudaSuccess) {
                cudaGetLastError();
                snprintf(buf, sizeof buf, "| %s | %s | %zu B smem: not launchable here | | | |\n", c.name, var.name, smem);
                md_prefill_var += buf;
                printf("%s", buf);
                continue;
            }
            int occ = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void*)var.fn, var.w * 32, smem));
            const dim3 grid((N + bm - 1) / bm, H, 1);
            auto run_var = [&] {
                var.fn<<<grid, var.w * 32, smem>>>(o_new, q, k, v, kc, vc, bt, cl, cu, scale, H, KV,
                                                   D, H * D, KV * D, BS, nblk);
            };
            CK(cudaMemset(o_new, 0xff, q_n * 2));
            run_var();
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            const Cmp vc_ = compare(o_new, o_old, q_n, c.f16);
            if (!vc_.ok()) ++g_failures;
            const double t = median_ms(run_var);
            const double tf = flops / (t * 1e-3) / 1e12;
            snprintf(buf, sizeof buf,
                     "{\"kind\": \"prefill_variant\", \"name\": \"%s\", \"variant\": \"%s\", "
                     "\"regs\": %d, \"smem\": %zu, \"blocks_per_sm\": %d, \"ms\": %.5f, "
                     "\"tflops\": %.2f, \"pct_bf16_peak\": %.2f, \"default_ms\": %.5f, \"match\": %s}",
                     c.name, var.name, fa.numRegs, smem, occ, t, tf, 100.0 * tf / kBf16PeakTflops,
                     t_new, vc_.ok() ? "true" : "false");
            add_json(buf);
            snprintf(buf, sizeof buf, "| %s | %s | %d / %zu / %d | %.3f | %.1f (%.1f%%) | %.2fx | %.2e %s |\n",
                     c.name, var.name, fa.numRegs, smem, occ, t, tf, 100.0 * tf / kBf16PeakTflops,
                     t_new / t, vc_.max_err, vc_.ok() ? "ok" : "**MISMATCH**");
            md_prefill_var += buf;
            printf("%s", buf);
            fflush(stdout);
        }
        // The default entry's own line, for comparison.
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, (const void*)new_fn));
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void*)new_fn, TC_THREADS, new_smem));
        snprintf(buf, sizeof buf, "| %s | default (w%dm%dn%ds%d) | %d / %zu / %d | %.3f | %.1f (%.1f%%) | 1.00x | %.2e %s |\n",
                 c.name, TC_WARPS, TC_MT, TC_BN, TC_STAGES, fa.numRegs, new_smem, occ, t_new, tf_new,
                 100.0 * tf_new / kBf16PeakTflops, cmp.max_err, cmp.ok() ? "ok" : "**MISMATCH**");
        md_prefill_var += buf;
        printf("%s", buf);
    }
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)kc, (void*)vc, (void*)o_old,
                    (void*)o_new, (void*)bt, (void*)cl, (void*)cu})
        CK(cudaFree(p));
}

// ---------------------------------------------------------------------------------------------
// decode

struct DecodeCfg {
    int batch, ctx, heads, kv_heads, d;
    bool variants;  // also time the SERVESIM_DS_VARIANTS entries (G 4, D 128 only)
};

// Partition size: the largest power of two in [64, DS_MAX_PART] whose grid still fills 80% of
// one wave (blocks_per_sm resident blocks on every SM); 64 when none does. Fewer, longer
// partitions cost less per token (block start-up, partial writes, the reduce), but a grid short
// of a wave leaves SMs (bandwidth) idle; beyond a wave the split buys nothing.
static int auto_partition(int batch, int ctx, int kv_blocks, int blocks_per_sm) {
    const long long wave = (long long)blocks_per_sm * g_sms;
    for (int ps = DS_MAX_PART; ps >= 64; ps /= 2) {
        if ((long long)batch * kv_blocks * ((ctx + ps - 1) / ps) * 10 >= wave * 8) return ps;
    }
    return 64;
}

static void bench_decode(const DecodeCfg& c) {
    const int BS = 16, B = c.batch, L = c.ctx, H = c.heads, KV = c.kv_heads, D = c.d;
    const int G = H / KV;
    const int bps = (L + BS - 1) / BS;  // blocks per sequence
    const size_t nblk = (size_t)B * bps;
    const size_t cache_n = nblk * BS * KV * D;
    const size_t q_n = (size_t)B * H * D;
    u16 *q, *kc, *vc, *o_old, *o_new;
    int *bt, *cl;
    CK(cudaMalloc(&q, q_n * 2));
    CK(cudaMalloc(&kc, cache_n * 2));
    CK(cudaMalloc(&vc, cache_n * 2));
    CK(cudaMalloc(&o_old, q_n * 2));
    CK(cudaMalloc(&o_new, q_n * 2));
    CK(cudaMalloc(&bt, nblk * sizeof(int)));
    CK(cudaMalloc(&cl, B * sizeof(int)));
    fill<Bf16>(q, q_n, 11, 2.0f);
    fill<Bf16>(kc, cache_n, 12, 2.0f);
    fill<Bf16>(vc, cache_n, 13, 1.0f);
    const std::vector<int> table = shuffled_blocks((int)nblk, 17);
    const std::vector<int> lens(B, L);
    CK(cudaMemcpy(bt, table.data(), nblk * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(cl, lens.data(), B * sizeof(int), cudaMemcpyHostToDevice));
    const float scale = 1.0f / std::sqrt((float)D);

    // Old kernel: fixed 512-token partitions.
    const int old_parts = (L + DEC_PARTITION - 1) / DEC_PARTITION;
    // Workspace big enough for the smallest new partition (64 tokens).
    const int max_parts = std::max(old_parts, (L + 63) / 64);
    float *to, *tm, *ts;
    CK(cudaMalloc(&to, (size_t)B * H * max_parts * D * sizeof(float)));
    CK(cudaMalloc(&tm, (size_t)B * H * max_parts * sizeof(float)));
    CK(cudaMalloc(&ts, (size_t)B * H * max_parts * sizeof(float)));
    const int old_groups = (G + DEC_MAX_G - 1) / DEC_MAX_G;
    auto run_old = [&] {
        attention_decode_bf16<<<dim3(KV * old_groups, B, old_parts), DEC_THREADS>>>(
            o_old, q, kc, vc, bt, cl, to, tm, ts, scale, H, KV, D, H * D, BS, bps, old_parts);
        if (old_parts > 1)
            attention_decode_reduce_bf16<<<dim3(H, B), 128>>>(o_old, to, tm, ts, cl, H, D,
                                                              old_parts);
    };
    // New kernel: the specialised entry point for (D bucket, G = smallest of 1/2/4/8 >= group),
    // `which` = 0; the generic entry point (G = 8 slots per block), `which` = 1; for groups above
    // 4, the g4 kernel with two blocks per KV head, `which` = 2; a variant, `which` = 3 (var_fn,
    // var_threads, G 4).
    typedef void (*DF)(u16*, const u16*, const u16*, const u16*, const int*, const int*, float*,
                       float*, float*, float, int, int, int, int, int, int, int, int);
    static const DF spec_fns[3][4] = {
        {attention_decode_split_bf16_d64_g1, attention_decode_split_bf16_d64_g2,
         attention_decode_split_bf16_d64_g4, attention_decode_split_bf16_d64_g8},
        {attention_decode_split_bf16_d128_g1, attention_decode_split_bf16_d128_g2,
         attention_decode_split_bf16_d128_g4, attention_decode_split_bf16_d128_g8},
        {attention_decode_split_bf16_d256_g1, attention_decode_split_bf16_d256_g2,
         attention_decode_split_bf16_d256_g4, attention_decode_split_bf16_d256_g8}};
    const int di = D <= 64 ? 0 : D <= 128 ? 1 : 2;
    const int g_spec = G >= 8 ? 8 : G > 2 ? 4 : G;
    const int gi_spec = g_spec == 1 ? 0 : g_spec == 2 ? 1 : g_spec == 4 ? 2 : 3;
    int which = 0;
    int ps = 0;
    DF var_fn = nullptr;
    int var_threads = DS_THREADS, var_g = 4;
    auto run_new = [&] {
        const int parts = (L + ps - 1) / ps;
        DF fn = which == 1 ? attention_decode_split_bf16
                : which == 3 ? var_fn
                : spec_fns[di][which == 2 ? 2 : gi_spec];
        const int gsz = which == 1 ? DS_MAX_G : which == 3 ? var_g : which == 2 ? 4 : g_spec;
        fn<<<dim3(KV * ((G + gsz - 1) / gsz), B, parts), which == 3 ? var_threads : DS_THREADS>>>(
            o_new, q, kc, vc, bt, cl, to, tm, ts, scale, H, KV, D, H * D, BS, bps, parts, ps);
        if (parts > 1)
            attention_decode_split_reduce_bf16<<<dim3(H, B), DS_RED_THREADS>>>(o_new, to, tm, ts,
                                                                               cl, H, D, parts, ps);
    };
    const int new_groups = (G + g_spec - 1) / g_spec;
    const double bytes = 2.0 * B * (double)L * KV * D * 2.0;  // K and V rows read once
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void*)spec_fns[di][gi_spec],
                                                     DS_THREADS, 0));
    const int ps_auto = auto_partition(B, L, KV * new_groups, std::max(occ, 1));
    run_old();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    const double t_old = median_ms(run_old);
    double t_auto = 0, t_best = 1e30;
    int ps_best = 0;
    bool all_ok = true;
    Cmp cmp_auto;
    std::string sweep;
    // One launch of the new kernel as set up now, its output checked against the old kernel's.
    auto run_checked = [&]() {
        CK(cudaMemset(o_new, 0xff, q_n * 2));
        run_new();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        return compare(o_new, o_old, q_n, false);
    };
    for (int p = 64; p <= DS_MAX_PART; p *= 2) {
        ps = p;
        const Cmp cmp = run_checked();
        all_ok = all_ok && cmp.ok();
        const double t = median_ms(run_new);
        if (p == ps_auto) { t_auto = t; cmp_auto = cmp; }
        if (t < t_best) { t_best = t; ps_best = p; }
        char s[128];
        snprintf(s, sizeof s, "%s\"%d\": %.5f", sweep.empty() ? "" : ", ", p, t);
        sweep += s;
    }
    // The generic entry point and (groups > 4) the g4 alternative, at the auto partition size.
    double t_generic = 0, t_g4 = 0;
    for (int w = 1; w <= 2; ++w) {
        if (w == 2 && G <= 4) break;
        which = w;
        ps = ps_auto;
        const Cmp cmp = run_checked();
        all_ok = all_ok && cmp.ok();
        (w == 1 ? t_generic : t_g4) = median_ms(run_new);
    }
    // The pipeline variants (G 4, D 128 cases only) at partitions 128 / 256 / 512.
    if (c.variants && g_spec == 4 && di == 1) {
        struct Var { const char* name; int w, g; DF fn; };
        static const Var vars[] = {
#define X(VD, VG, VW, VU, VS, VMINB, VNAME) {#VNAME, VW, VG, VNAME},
            SERVESIM_DS_VARIANT_LIST(X)
#undef X
#define X(VD, VG, VW, VS, VMINB, VNAME) {#VNAME, VW, VG, VNAME},
            SERVESIM_DT_VARIANT_LIST(X)
#undef X
        };
        which = 3;
        for (const Var& var : vars) {
            var_fn = var.fn;
            var_threads = var.w * 32;
            var_g = var.g;
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, (const void*)var.fn));
            int vocc = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&vocc, (const void*)var.fn, var_threads, 0));
            const int vps_auto = auto_partition(B, L, KV * ((G + var.g - 1) / var.g), std::max(vocc, 1));
            std::string line;
            char cell[160];
            snprintf(cell, sizeof cell, "| %d | %d | %s | %d / %zu / %d | %d |", B, L, var.name,
                     fa.numRegs, fa.sharedSizeBytes, vocc, vps_auto);
            line = cell;
            std::string js;
            double vbest = 1e30;
            for (int p = 128; p <= DS_MAX_PART; p *= 2) {
                ps = p;
                const Cmp cmp = run_checked();
                all_ok = all_ok && cmp.ok();
                const double t = median_ms(run_new);
                vbest = std::min(vbest, t);
                const double pct = 100 * bytes / (t * 1e-3) / 1e9 / g_hbm_gbs;
                snprintf(cell, sizeof cell, " %.4f (%.1f%%)%s |", t, pct, cmp.ok() ? "" : " **MISMATCH**");
                line += cell;
                snprintf(cell, sizeof cell, "%s\"%d\": %.5f", js.empty() ? "" : ", ", p, t);
                js += cell;
            }
            line += "\n";
            md_decode_var += line;
            printf("%s", line.c_str());
            char jb[768];
            snprintf(jb, sizeof jb,
                     "{\"kind\": \"decode_variant\", \"batch\": %d, \"context\": %d, \"variant\": \"%s\", "
                     "\"regs\": %d, \"static_smem\": %zu, \"blocks_per_sm\": %d, \"partition_auto\": %d, "
                     "\"sweep_ms\": {%s}, \"best_pct_hbm\": %.1f}",
                     B, L, var.name, fa.numRegs, fa.sharedSizeBytes, vocc, vps_auto, js.c_str(),
                     100 * bytes / (vbest * 1e-3) / 1e9 / g_hbm_gbs);
            add_json(jb);
        }
        // The default entry's line, same columns.
        {
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, (const void*)spec_fns[di][gi_spec]));
            char cell[160];
            snprintf(cell, sizeof cell, "| %d | %d | default (w%du%ds%d) | %d / %zu / %d | %d |", B, L,
                     DS_WARPS, DS_U_FOR(4), DS_STAGES, fa.numRegs, fa.sharedSizeBytes, occ, ps_auto);
            std::string line = cell;
            const char* sw = sweep.c_str();
            for (int p = 128; p <= DS_MAX_PART; p *= 2) {
                char key[16];
                snprintf(key, sizeof key, "\"%d\": ", p);
                const char* at = strstr(sw, key);
                const double t = at ? atof(at + strlen(key)) : 0;
                snprintf(cell, sizeof cell, " %.4f (%.1f%%) |", t, t > 0 ? 100 * bytes / (t * 1e-3) / 1e9 / g_hbm_gbs : 0.0);
                line += cell;
            }
            line += "\n";
            md_decode_var += line;
            printf("%s", line.c_str());
        }
    }
    which = 0;
    if (!all_ok) ++g_failures;
    const double gbs_generic = bytes / (t_generic * 1e-3) / 1e9,
                 gbs_g4 = t_g4 > 0 ? bytes / (t_g4 * 1e-3) / 1e9 : 0;
    const double gbs_old = bytes / (t_old * 1e-3) / 1e9, gbs_auto = bytes / (t_auto * 1e-3) / 1e9,
                 gbs_best = bytes / (t_best * 1e-3) / 1e9;
    char g4_txt[64] = "-";
    if (t_g4 > 0) snprintf(g4_txt, sizeof g4_txt, "%.4f (%.1f%%)", t_g4, 100 * gbs_g4 / g_hbm_gbs);
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"kind\": \"decode\", \"dtype\": \"bf16\", \"batch\": %d, \"context\": %d, "
             "\"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"bytes\": %.6e, "
             "\"old_ms\": %.5f, \"old_gbs\": %.1f, \"old_pct_hbm\": %.1f, \"partition_auto\": %d, "
             "\"new_ms\": %.5f, \"new_gbs\": %.1f, \"new_pct_hbm\": %.1f, \"partition_best\": %d, "
             "\"best_ms\": %.5f, \"best_pct_hbm\": %.1f, \"sweep_ms\": {%s}, \"entry_g\": %d, "
             "\"blocks_per_sm\": %d, "
             "\"generic_ms\": %.5f, \"generic_pct_hbm\": %.1f, \"g4_ms\": %.5f, \"g4_pct_hbm\": %.1f, "
             "\"max_abs_err\": "
             "%.3e, \"max_abs_ref\": %.3e, \"mean_abs_err\": %.3e, \"match\": %s}",
             B, L, H, KV, D, bytes, t_old, gbs_old, 100 * gbs_old / g_hbm_gbs, ps_auto, t_auto,
             gbs_auto, 100 * gbs_auto / g_hbm_gbs, ps_best, t_best, 100 * gbs_best / g_hbm_gbs,
             sweep.c_str(), g_spec, occ, t_generic, 100 * gbs_generic / g_hbm_gbs, t_g4,
             100 * gbs_g4 / g_hbm_gbs, cmp_auto.max_err, cmp_auto.max_ref, cmp_auto.mean_err,
             all_ok ? "true" : "false");
    add_json(buf);
    snprintf(buf, sizeof buf,
             "| %d | %d | %d/%d/%d | %.4f (%.1f%%) | g%d | %d | %.4f (%.1f%%) | %d | %.4f (%.1f%%) | %.4f (%.1f%%) | %s | %.1fx | %.2e / %.2e %s |\n",
             B, L, H, KV, D, t_old, 100 * gbs_old / g_hbm_gbs, g_spec, ps_auto, t_auto,
             100 * gbs_auto / g_hbm_gbs, ps_best, t_best, 100 * gbs_best / g_hbm_gbs,
             t_generic, 100 * gbs_generic / g_hbm_gbs, g4_txt, t_old / t_auto, cmp_auto.max_err, cmp_auto.max_ref, all_ok ? "ok" : "**MISMATCH**");
    md_decode += buf;
    printf("%s", buf);
    fflush(stdout);
    for (void* p : {(void*)q, (void*)kc, (void*)vc, (void*)o_old, (void*)o_new, (void*)bt,
                    (void*)cl, (void*)to, (void*)tm, (void*)ts})
        CK(cudaFree(p));
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const std::string out_dir = argv[1];
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    g_sms = prop.multiProcessorCount;
    // Theoretical HBM bandwidth: 2 * memory clock * bus width (attributes 36 and 37, by number so
    // that this builds with toolkits that dropped the enum names); a table by name as fallback.
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, (cudaDeviceAttr)36, dev) != cudaSuccess) mem_khz = 0;
    if (cudaDeviceGetAttribute(&bus_bits, (cudaDeviceAttr)37, dev) != cudaSuccess) bus_bits = 0;
    cudaGetLastError();
    g_hbm_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    const std::string name = prop.name;
    if (!(g_hbm_gbs > 500 && g_hbm_gbs < 20000)) {
        g_hbm_gbs = name.find("H200") != std::string::npos ? 4800
                    : name.find("PCIe") != std::string::npos ? 2000
                    : name.find("H100") != std::string::npos ? 3350
                    : name.find("A100") != std::string::npos ? 2039 : 3350;
    }
    if (const char* e = getenv("HBM_GBS")) g_hbm_gbs = atof(e);
    {  // measured read bandwidth over 4 GiB
        const size_t n = (size_t)4 << 30;
        void* p;
        unsigned* sink;
        CK(cudaMalloc(&p, n));
        CK(cudaMalloc(&sink, 4));
        fill<Bf16>((u16*)p, n / 2, 99, 1.0f);
        const double t = median_ms([&] { bench_read<<<8 * g_sms, 512>>>((const uint4*)p, n / 16, sink); }, 2, 7);
        g_read_gbs = n / (t * 1e-3) / 1e9;
        CK(cudaFree(p));
        CK(cudaFree(sink));
    }
    printf("device %s, %d SMs, cc %d.%d, HBM %.0f GB/s theoretical, %.0f GB/s measured read\n",
           prop.name, g_sms, prop.major, prop.minor, g_hbm_gbs, g_read_gbs);

    printf("\n## prefill\n| case | dtype | new | cached | H/KV/D | old ms | new ms | old TFLOP/s | new TFLOP/s (%% of 989) | speedup | max err / max ref |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    const PrefillCfg pcs[] = {
        {"prompt 4k", 4096, 0, 32, 8, 128, false, true},
        {"chunk 1k over 8k", 1024, 8192, 32, 8, 128, false, true},
        {"prompt 4k d64", 4096, 0, 32, 8, 64, false, true},
        {"prompt 4k f16", 4096, 0, 32, 8, 128, true, false},
        {"odd 1000+77", 1000, 77, 28, 4, 128, false, true},
        {"prompt 16k", 16384, 0, 32, 8, 128, false, false},
    };
    for (const auto& c : pcs) bench_prefill(c);

    printf("\n## decode (bf16; %% of %.0f GB/s)\n| batch | context | H/KV/D | old ms (%%HBM) | entry | auto part | new ms (%%HBM) | best part | best ms (%%HBM) | generic entry ms (%%HBM) | g4 x2 ms (%%HBM) | speedup (auto) | max err / max ref |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", g_hbm_gbs);
    const DecodeCfg dcs[] = {
        {1, 4096, 32, 8, 128, true},   {8, 4096, 32, 8, 128, false},
        {64, 4096, 32, 8, 128, false}, {1, 32768, 32, 8, 128, true},
        {8, 32768, 32, 8, 128, true},  {64, 32768, 32, 8, 128, true},
        {3, 5001, 28, 4, 128, false},  {8, 32768, 64, 8, 128, false},
        {8, 32768, 32, 32, 128, false}, {8, 32768, 32, 8, 64, false},
    };
    for (const auto& c : dcs) bench_decode(c);

    char head[512];
    snprintf(head, sizeof head,
             "{\n  \"device\": \"%s\", \"sms\": %d, \"cc\": \"%d.%d\", \"hbm_gbs\": %.1f, "
             "\"measured_read_gbs\": %.1f, \"bf16_peak_tflops\": %.0f, \"failures\": %d,\n  \"results\": [\n",
             prop.name, g_sms, prop.major, prop.minor, g_hbm_gbs, g_read_gbs, kBf16PeakTflops,
             g_failures);
    FILE* f = fopen((out_dir + "/results.json").c_str(), "w");
    if (!f) { perror("results.json"); return 2; }
    fprintf(f, "%s%s\n  ]\n}\n", head, json_rows.c_str());
    fclose(f);
    f = fopen((out_dir + "/results.md").c_str(), "w");
    if (!f) { perror("results.md"); return 2; }
    fprintf(f, "# attention kernels on %s (%d SMs; HBM %.0f GB/s theoretical, %.0f GB/s measured read)\n\n",
            prop.name, g_sms, g_hbm_gbs, g_read_gbs);
    fprintf(f, "## prefill (causal FLOPs = 4 d heads pairs)\n\n| case | dtype | new | cached | H/KV/D | old ms | new ms | old TFLOP/s | new TFLOP/s (%% of 989) | speedup | max err / max ref |\n|---|---|---|---|---|---|---|---|---|---|---|\n%s\n", md_prefill.c_str());
    fprintf(f, "## decode (bf16; bytes = K + V rows read; %% of %.0f GB/s)\n\n| batch | context | H/KV/D | old ms (%%HBM) | entry | auto part | new ms (%%HBM) | best part | best ms (%%HBM) | generic entry ms (%%HBM) | g4 x2 ms (%%HBM) | speedup (auto) | max err / max ref |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n%s\n", g_hbm_gbs, md_decode.c_str());
    fprintf(f, "## prefill variants (bf16; same check against the old kernel; regs / dynamic smem B / blocks per SM)\n\n| case | variant | regs / smem / blocks | ms | TFLOP/s (%% of 989) | speedup vs default | max err |\n|---|---|---|---|---|---|---|\n%s\n", md_prefill_var.c_str());
    fprintf(f, "## decode variants (bf16, 32/8/128, G 4; regs / static smem B / blocks per SM; ms (%%HBM) at partition 128 / 256 / 512)\n\n| batch | context | variant | regs / smem / blocks | auto part | p128 | p256 | p512 |\n|---|---|---|---|---|---|---|---|\n%s\n", md_decode_var.c_str());
    fprintf(f, "failures: %d\n", g_failures);
    fclose(f);
    printf("\nfailures: %d\nwrote %s/results.json and %s/results.md\n", g_failures, out_dir.c_str(), out_dir.c_str());
    return g_failures ? 1 : 0;
}
