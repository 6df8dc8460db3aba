#include "kernels_emu.h"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
typedef unsigned short u16t;
static std::mt19937_64 rng(42);
static float uni() { return std::uniform_real_distribution<float>(-1, 1)(rng); }
static bool F16MODE = false;
static u16t enc(float f) { return F16MODE ? f32_to_f16_bits(f) : f32_to_bf16_bits(f); }
static double dec(u16t h) { return F16MODE ? f16_bits_to_f32(h) : bf16_bits_to_f32(h); }
static void randvec(size_t n, float amp, std::vector<u16t>& d, std::vector<double>& h) {
  d.resize(n); h.resize(n); for (size_t i = 0; i < n; ++i) { d[i] = enc(uni() * amp); h[i] = dec(d[i]); } }
static int failures = 0;
static void check(const char* what, const std::vector<u16t>& got, const std::vector<double>& want) {
  double scale = 0, err = 0; size_t at = 0;
  for (auto w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) { double e = std::fabs(dec(got[i]) - want[i]); if (!(e <= err)) { err = e; at = i; } }
  double tol = (F16MODE ? 1.0 / 1024 : 1.0 / 128) * std::max(scale, 1.0);
  bool ok = err <= tol; if (!ok) failures++;
  printf("%s %s [%s]: err %.2e tol %.1e (at %zu got %f want %f)\n", ok ? "ok  " : "FAIL", what, F16MODE ? "f16" : "bf16", err, tol, at, dec(got[at]), want[at]);
}
const int BS = 16;
struct Case { int h, kv, d; std::vector<int> cached, nw; };
struct Data { std::vector<std::vector<double>> keys, vals; std::vector<u16t> q, kn, vn, kc, vc; std::vector<double> qh; std::vector<int> bt, slots, cu; int maxb; };
static Data build(const Case& c) {
  Data D; int row = c.kv * c.d; int S = c.cached.size();
  std::vector<int> tot(S), nb(S); int nblocks = 3, maxb = 1;
  for (int s = 0; s < S; ++s) { tot[s] = c.cached[s] + c.nw[s]; nb[s] = (tot[s] + BS - 1) / BS; nblocks += nb[s]; maxb = std::max(maxb, nb[s]); }
  std::vector<int> perm(nblocks); for (int i = 0; i < nblocks; ++i) perm[i] = i; std::shuffle(perm.begin(), perm.end(), rng);
  D.bt.assign(S * maxb, -1); int next = 0;
  for (int s = 0; s < S; ++s) for (int j = 0; j < nb[s]; ++j) D.bt[s * maxb + j] = perm[next++];
  std::vector<double> tmp; randvec((size_t)nblocks * BS * row, 3, D.kc, tmp); randvec((size_t)nblocks * BS * row, 3, D.vc, tmp);
  D.cu.push_back(0); D.maxb = maxb;
  for (int s = 0; s < S; ++s) {
    std::vector<u16t> kd, vd; std::vector<double> kh, vh; randvec((size_t)tot[s] * row, 1, kd, kh); randvec((size_t)tot[s] * row, 1, vd, vh);
    for (int p = 0; p < tot[s]; ++p) { int slot = D.bt[s * maxb + p / BS] * BS + p % BS;
      if (p < c.cached[s]) { std::copy(kd.begin() + p * row, kd.begin() + (p + 1) * row, D.kc.begin() + (size_t)slot * row); std::copy(vd.begin() + p * row, vd.begin() + (p + 1) * row, D.vc.begin() + (size_t)slot * row); }
      else { D.kn.insert(D.kn.end(), kd.begin() + p * row, kd.begin() + (p + 1) * row); D.vn.insert(D.vn.end(), vd.begin() + p * row, vd.begin() + (p + 1) * row); D.slots.push_back(slot); } }
    std::vector<u16t> qd; std::vector<double> qh; randvec((size_t)c.nw[s] * c.h * c.d, 1, qd, qh);
    D.q.insert(D.q.end(), qd.begin(), qd.end()); D.qh.insert(D.qh.end(), qh.begin(), qh.end());
    D.keys.push_back(kh); D.vals.push_back(vh); D.cu.push_back(D.cu.back() + c.nw[s]); }
  return D; }
static std::vector<double> ref(const Case& c, const Data& D) {
  int h = c.h, kv = c.kv, d = c.d, g = h / kv; double scale = 1.0 / std::sqrt((double)d); std::vector<double> out; int t0 = 0;
  for (size_t s = 0; s < c.cached.size(); ++s) { for (int i = 0; i < c.nw[s]; ++i) { int vis = c.cached[s] + i + 1;
      for (int hd = 0; hd < h; ++hd) { int kvh = hd / g; const double* q = &D.qh[((size_t)(t0 + i) * h + hd) * d];
        std::vector<double> sc(vis); double m = -1e300;
        for (int p = 0; p < vis; ++p) { double a = 0; for (int x = 0; x < d; ++x) a += q[x] * D.keys[s][((size_t)p * kv + kvh) * d + x]; sc[p] = a * scale; m = std::max(m, sc[p]); }
        double tot = 0; for (auto& x : sc) { x = std::exp(x - m); tot += x; }
        for (int x = 0; x < d; ++x) { double o = 0; for (int p = 0; p < vis; ++p) o += sc[p] * D.vals[s][((size_t)p * kv + kvh) * d + x]; out.push_back(o / tot); } } }
    t0 += c.nw[s]; }
  return out; }
static void decode_case(const Case& c, int ws_context = 0) {
  Data D = build(c); auto want = ref(c, D); int S = c.cached.size();
  auto kc = D.kc, vc = D.vc;
  // reshape_and_cache
  emu_launch({(unsigned)S}, {128}, 0, [&] { reshape_and_cache_u16(D.kn.data(), D.vn.data(), kc.data(), vc.data(), D.slots.data(), c.kv * c.d, c.kv, c.d); });
  std::vector<int> cl(S); int maxc = 0; for (int s = 0; s < S; ++s) { cl[s] = c.cached[s] + 1; maxc = std::max(maxc, cl[s]); }
  int parts = (maxc + 511) / 512; int stride = std::max(parts, (ws_context + 511) / 512); int groups = (c.h / c.kv + 7) / 8;
  std::vector<float> to((size_t)S * c.h * stride * c.d), tm((size_t)S * c.h * stride), ts((size_t)S * c.h * stride);
  std::vector<u16t> out((size_t)S * c.h * c.d, 0xffff);
  auto fn = F16MODE ? attention_decode_f16 : attention_decode_bf16;
  emu_launch({(unsigned)(c.kv * groups), (unsigned)S, (unsigned)parts}, {256}, 0, [&] {
    fn(out.data(), D.q.data(), kc.data(), vc.data(), D.bt.data(), cl.data(), to.data(), tm.data(), ts.data(), 1.0f / sqrtf(c.d), c.h, c.kv, c.d, c.h * c.d, BS, D.maxb, stride); });
  if (stride > 1) { auto rf = F16MODE ? attention_decode_reduce_f16 : attention_decode_reduce_bf16;
    emu_launch({(unsigned)c.h, (unsigned)S}, {128}, 0, [&] { rf(out.data(), to.data(), tm.data(), ts.data(), cl.data(), c.h, c.d, stride); }); }
  char buf[200]; snprintf(buf, sizeof buf, "decode h%d kv%d d%d S%d maxctx %d stride %d", c.h, c.kv, c.d, S, maxc, stride); check(buf, out, want); }
static void prefill_case(const Case& c) {
  Data D = build(c); auto want = ref(c, D); int S = c.cached.size(); int T = D.cu.back(); int maxq = *std::max_element(c.nw.begin(), c.nw.end());
  std::vector<int> cl(c.cached.begin(), c.cached.end());
  std::vector<u16t> out((size_t)T * c.h * c.d, 0xffff);
  int bucket = c.d <= 64 ? 64 : c.d <= 128 ? 128 : 256;
  auto fn = F16MODE ? (bucket == 64 ? attention_prefill_f16_d64 : bucket == 128 ? attention_prefill_f16_d128 : attention_prefill_f16_d256)
                    : (bucket == 64 ? attention_prefill_bf16_d64 : bucket == 128 ? attention_prefill_bf16_d128 : attention_prefill_bf16_d256);
  size_t smem = 32 * (c.d + 1) * 4 + 2 * 32 * (c.d + 2) * 2 + 32 * 33 * 4;
  emu_launch({(unsigned)((maxq + 31) / 32), (unsigned)c.h, (unsigned)S}, {128}, smem, [&] {
    fn(out.data(), D.q.data(), D.kn.data(), D.vn.data(), D.kc.data(), D.vc.data(), D.bt.data(), cl.data(), D.cu.data(), 1.0f / sqrtf(c.d), c.h, c.kv, c.d, c.h * c.d, c.kv * c.d, BS, D.maxb); });
  char buf[200]; snprintf(buf, sizeof buf, "prefill h%d kv%d d%d S%d", c.h, c.kv, c.d, S); check(buf, out, want); }
// Split-KV decode (attention_decode_split.cu) with a given partition size: the generic entry
// point (G = 8 heads per block) and the specialised one for the case's head-dim bucket and group.
typedef void (*DsFn)(u16*, const u16*, const u16*, const u16*, const int*, const int*, float*, float*, float*, float, int, int, int, int, int, int, int, int);
static DsFn ds_spec(int d, int g) {
  int bi = d <= 64 ? 0 : d <= 128 ? 1 : 2, gi = g <= 1 ? 0 : g <= 2 ? 1 : g <= 4 ? 2 : 3;
  static const DsFn bf[3][4] = {
    {attention_decode_split_bf16_d64_g1, attention_decode_split_bf16_d64_g2, attention_decode_split_bf16_d64_g4, attention_decode_split_bf16_d64_g8},
    {attention_decode_split_bf16_d128_g1, attention_decode_split_bf16_d128_g2, attention_decode_split_bf16_d128_g4, attention_decode_split_bf16_d128_g8},
    {attention_decode_split_bf16_d256_g1, attention_decode_split_bf16_d256_g2, attention_decode_split_bf16_d256_g4, attention_decode_split_bf16_d256_g8}};
  static const DsFn f16[3][4] = {
    {attention_decode_split_f16_d64_g1, attention_decode_split_f16_d64_g2, attention_decode_split_f16_d64_g4, attention_decode_split_f16_d64_g8},
    {attention_decode_split_f16_d128_g1, attention_decode_split_f16_d128_g2, attention_decode_split_f16_d128_g4, attention_decode_split_f16_d128_g8},
    {attention_decode_split_f16_d256_g1, attention_decode_split_f16_d256_g2, attention_decode_split_f16_d256_g4, attention_decode_split_f16_d256_g8}};
  return F16MODE ? f16[bi][gi] : bf[bi][gi]; }
static void decode_split_case(const Case& c, int ps, int ws_context = 0, bool generic = false) {
  Data D = build(c); auto want = ref(c, D); int S = c.cached.size();
  auto kc = D.kc, vc = D.vc;
  emu_launch({(unsigned)S}, {128}, 0, [&] { reshape_and_cache_u16(D.kn.data(), D.vn.data(), kc.data(), vc.data(), D.slots.data(), c.kv * c.d, c.kv, c.d); });
  std::vector<int> cl(S); int maxc = 0; for (int s = 0; s < S; ++s) { cl[s] = c.cached[s] + 1; maxc = std::max(maxc, cl[s]); }
  int parts = (maxc + ps - 1) / ps; int stride = std::max(parts, (ws_context + ps - 1) / ps);
  int group = c.h / c.kv, gspec = group >= 8 ? 8 : group > 2 ? 4 : group;  // smallest of 1, 2, 4, 8 >= group
  for (int spec = generic ? 0 : 1; spec < 2; ++spec) {  // the generic entry only where asked (emulation is slow)
    int G = spec ? gspec : 8; int groups = (group + G - 1) / G;
    std::vector<float> to((size_t)S * c.h * stride * c.d), tm((size_t)S * c.h * stride), ts((size_t)S * c.h * stride);
    std::vector<u16t> out((size_t)S * c.h * c.d, 0xffff);
    DsFn fn = spec ? ds_spec(c.d, G) : (F16MODE ? attention_decode_split_f16 : attention_decode_split_bf16);
    emu_launch({(unsigned)(c.kv * groups), (unsigned)S, (unsigned)parts}, {128}, 0, [&] {
      fn(out.data(), D.q.data(), kc.data(), vc.data(), D.bt.data(), cl.data(), to.data(), tm.data(), ts.data(), 1.0f / sqrtf(c.d), c.h, c.kv, c.d, c.h * c.d, BS, D.maxb, stride, ps); });
    if (stride > 1) { auto rf = F16MODE ? attention_decode_split_reduce_f16 : attention_decode_split_reduce_bf16;
      emu_launch({(unsigned)c.h, (unsigned)S}, {256}, 0, [&] { rf(out.data(), to.data(), tm.data(), ts.data(), cl.data(), c.h, c.d, stride, ps); }); }
    char buf[200]; snprintf(buf, sizeof buf, "decode_split%s h%d kv%d d%d S%d maxctx %d part %d stride %d", spec ? "_spec" : "", c.h, c.kv, c.d, S, maxc, ps, stride); check(buf, out, want); } }
// The bench's split-KV decode variants (bf16, D 128, G 4, their own warp counts), on one case.
static void decode_split_variants() {
  if (F16MODE) return;
  struct V { const char* name; int w; DsFn fn; };
  static const V vars[] = {
#define X(VD, VG, VW, VU, VS, VMINB, VNAME) {#VNAME, VW, VNAME},
    SERVESIM_DS_VARIANT_LIST(X)
#undef X
#define X(VD, VG, VW, VS, VMINB, VNAME) {#VNAME, VW, VNAME},
    SERVESIM_DT_VARIANT_LIST(X)
#undef X
  };
  Case c{8, 2, 120, {70, 300}, {1, 1}}; const int ps = 128;
  Data D = build(c); auto want = ref(c, D); int S = c.cached.size();
  auto kc = D.kc, vc = D.vc;
  emu_launch({(unsigned)S}, {128}, 0, [&] { reshape_and_cache_u16(D.kn.data(), D.vn.data(), kc.data(), vc.data(), D.slots.data(), c.kv * c.d, c.kv, c.d); });
  std::vector<int> cl(S); int maxc = 0; for (int s = 0; s < S; ++s) { cl[s] = c.cached[s] + 1; maxc = std::max(maxc, cl[s]); }
  int parts = (maxc + ps - 1) / ps;
  for (const auto& v : vars) {
    std::vector<float> to((size_t)S * c.h * parts * c.d), tm((size_t)S * c.h * parts), ts((size_t)S * c.h * parts);
    std::vector<u16t> out((size_t)S * c.h * c.d, 0xffff);
    emu_launch({(unsigned)c.kv, (unsigned)S, (unsigned)parts}, {(unsigned)(v.w * 32)}, 0, [&] {
      v.fn(out.data(), D.q.data(), kc.data(), vc.data(), D.bt.data(), cl.data(), to.data(), tm.data(), ts.data(), 1.0f / sqrtf(c.d), c.h, c.kv, c.d, c.h * c.d, BS, D.maxb, parts, ps); });
    emu_launch({(unsigned)c.h, (unsigned)S}, {256}, 0, [&] { attention_decode_split_reduce_bf16(out.data(), to.data(), tm.data(), ts.data(), cl.data(), c.h, c.d, parts, ps); });
    char buf[200]; snprintf(buf, sizeof buf, "decode_split %s h%d kv%d d%d part %d", v.name, c.h, c.kv, c.d, ps); check(buf, out, want); } }
// Tensor-core prefill (attention_prefill_tc.cu): head_dim a multiple of 8, at most 128. `variant`
// null: the default entry point of the case's head-dim bucket (geometry TC_BM / TC_THREADS /
// TC_SMEM_BYTES); otherwise one of the bench's variants (bf16 only) with its own geometry.
typedef void (*TcFn)(u16*, const u16*, const u16*, const u16*, const u16*, const u16*, const int*, const int*, const int*, float, int, int, int, int, int, int, int);
struct TcVariant { const char* name; int d, w, mt, bn, s, qreg; TcFn fn; };
static const TcVariant tc_variants[] = {
#define X(D, W, MT, BN, S, QREG, MINB, NAME) {#NAME, D, W, MT, BN, S, QREG, NAME},
  SERVESIM_TC_VARIANT_LIST(X)
#undef X
};
static void prefill_tc_case(const Case& c, const TcVariant* variant = nullptr) {
  Data D = build(c); auto want = ref(c, D); int S = c.cached.size(); int T = D.cu.back(); int maxq = *std::max_element(c.nw.begin(), c.nw.end());
  std::vector<int> cl(c.cached.begin(), c.cached.end());
  std::vector<u16t> out((size_t)T * c.h * c.d, 0xffff);
  int bucket = c.d <= 64 ? 64 : 128;
  TcFn fn = F16MODE ? (bucket == 64 ? attention_prefill_tc_f16_d64 : attention_prefill_tc_f16_d128)
                    : (bucket == 64 ? attention_prefill_tc_bf16_d64 : attention_prefill_tc_bf16_d128);
  int bm = TC_BM, threads = TC_THREADS; size_t smem = TC_SMEM_BYTES(bucket);
  if (variant) { fn = variant->fn; bm = variant->w * variant->mt * 16; threads = variant->w * 32;
    smem = TC_SMEM_BYTES_CFG(variant->d, variant->w, variant->mt, variant->bn, variant->s, variant->qreg); }
  emu_launch({(unsigned)((maxq + bm - 1) / bm), (unsigned)c.h, (unsigned)S}, {(unsigned)threads}, smem, [&] {
    fn(out.data(), D.q.data(), D.kn.data(), D.vn.data(), D.kc.data(), D.vc.data(), D.bt.data(), cl.data(), D.cu.data(), 1.0f / sqrtf(c.d), c.h, c.kv, c.d, c.h * c.d, c.kv * c.d, BS, D.maxb); });
  char buf[200]; snprintf(buf, sizeof buf, "prefill_tc%s%s h%d kv%d d%d S%d", variant ? " " : "", variant ? variant->name : "", c.h, c.kv, c.d, S); check(buf, out, want); }
static void elementwise() {
  int T = 3, H = 1000; std::vector<u16t> x, w, out(T * H); std::vector<double> xh, wh; randvec(T * H, 2, x, xh); randvec(H, 1.5, w, wh);
  std::vector<double> want(T * H);
  for (int t = 0; t < T; ++t) { double ss = 0; for (int i = 0; i < H; ++i) ss += xh[t * H + i] * xh[t * H + i]; double inv = 1 / std::sqrt(ss / H + 1e-6); for (int i = 0; i < H; ++i) want[t * H + i] = xh[t * H + i] * inv * wh[i]; }
  emu_launch({(unsigned)T}, {256}, 0, [&] { (F16MODE ? rmsnorm_f16 : rmsnorm_bf16)(out.data(), x.data(), w.data(), 1e-6f, H); });
  check("rmsnorm", out, want);
  int d = 1377; std::vector<u16t> xs, os(T * d); std::vector<double> xsh; randvec(T * 2 * d, 4, xs, xsh); std::vector<double> ws(T * d);
  for (int t = 0; t < T; ++t) for (int i = 0; i < d; ++i) { double g = xsh[t * 2 * d + i], u = xsh[t * 2 * d + d + i]; ws[t * d + i] = g / (1 + std::exp(-g)) * u; }
  emu_launch({(unsigned)((d + 255) / 256), (unsigned)T}, {256}, 0, [&] { (F16MODE ? silu_mul_f16 : silu_mul_bf16)(os.data(), xs.data(), d); });
  check("silu_mul", os, ws);
  // rotary neox, partial
  for (int neox = 0; neox < 2; ++neox) {
    int nh = 4, nkv = 2, hd = 80, rot = neox ? 64 : 80, row = (nh + 2 * nkv) * hd, maxp = 100;
    std::vector<u16t> qkv; std::vector<double> qh; randvec(T * row, 1, qkv, qh);
    std::vector<int> pos = {5, 99, 0}; std::vector<float> table(maxp * rot);
    for (int p = 0; p < maxp; ++p) for (int i = 0; i < rot / 2; ++i) { double a = p * std::pow(10000.0, -2.0 * i / rot); table[p * rot + i] = cos(a); table[p * rot + rot / 2 + i] = sin(a); }
    auto wq = qh; for (int t = 0; t < T; ++t) for (int h = 0; h < nh + nkv; ++h) for (int i = 0; i < rot / 2; ++i) {
      int ia = neox ? i : 2 * i, ib = neox ? i + rot / 2 : 2 * i + 1; size_t b = (size_t)t * row + h * hd; double c = table[pos[t] * rot + i], s = table[pos[t] * rot + rot / 2 + i];
      double A = qh[b + ia], B = qh[b + ib]; wq[b + ia] = A * c - B * s; wq[b + ib] = B * c + A * s; }
    auto dev = qkv;
    emu_launch({(unsigned)T}, {128}, 0, [&] { (F16MODE ? rotary_f16 : rotary_bf16)(dev.data(), dev.data() + nh * hd, pos.data(), table.data(), row, row, nh, nkv, hd, rot, neox); });
    check(neox ? "rotary neox partial" : "rotary gptj", dev, wq); }
}
int main(int argc, char** argv) {
  const std::string arg = argc > 1 ? argv[1] : "";
  const bool only_new = arg == "new" || arg == "prefill_tc" || arg == "decode_split";
  const bool do_prefill_tc = arg != "decode_split", do_decode_split = arg != "prefill_tc";
  for (int mode = 0; mode < 2; ++mode) { F16MODE = mode == 1;
    if (do_prefill_tc) {
    prefill_tc_case({4, 4, 64, {0, 0, 0}, {1, 33, 70}});
    prefill_tc_case({8, 2, 128, {5, 40, 0, 100}, {17, 1, 64, 45}});
    prefill_tc_case({14, 2, 80, {16, 3}, {31, 9}});
    prefill_tc_case({6, 3, 96, {300, 47, 0}, {1, 1, 130}});
    prefill_tc_case({2, 1, 64, {70}, {150}});
    if (!F16MODE)  // the bench's variants: one odd case each (cached context, ragged tiles)
      for (const auto& v : tc_variants)
        prefill_tc_case(v.d == 64 ? Case{4, 2, 56, {70, 0}, {150, 9}} : Case{4, 1, 120, {100, 3}, {140, 33}}, &v);
    }
    if (do_decode_split) {
    decode_split_case({4, 4, 64, {0, 15, 16, 31}, {1, 1, 1, 1}}, 16);
    decode_split_case({8, 2, 128, {100, 511, 512, 1300}, {1, 1, 1, 1}}, 256, 0, true);
    decode_split_case({28, 4, 80, {37, 700}, {1, 1}}, 64, 0, true);
    decode_split_case({12, 1, 256, {3, 1100}, {1, 1}}, 512);
    decode_split_case({6, 2, 96, {5, 62, 119, 176}, {1, 1, 1, 1}}, 512);
    decode_split_case({2, 1, 64, {1, 40}, {1, 1}}, 32, 0, true);
    decode_split_case({8, 2, 64, {3, 200}, {1, 1}}, 64, 3000);
    decode_split_case({32, 8, 128, {2000}, {1}}, 128);
    decode_split_variants();
    }
    if (only_new) continue;
    elementwise();
    decode_case({4, 4, 64, {0, 15, 16, 31}, {1, 1, 1, 1}});
    decode_case({8, 2, 128, {100, 511, 512, 1300}, {1, 1, 1, 1}});
    decode_case({28, 4, 80, {37, 700}, {1, 1}});
    decode_case({12, 1, 256, {3, 1100}, {1, 1}});
    decode_case({6, 2, 96, {5, 62, 119, 176}, {1, 1, 1, 1}});
    decode_case({8, 2, 64, {3, 200}, {1, 1}}, 3000);
    decode_case({8, 2, 64, {700, 20}, {1, 1}}, 3000);
    prefill_case({4, 4, 64, {0, 0, 0}, {1, 33, 70}});
    prefill_case({8, 2, 128, {5, 40, 0, 100}, {17, 1, 64, 45}});
    prefill_case({14, 2, 80, {16, 3}, {31, 9}});
    prefill_case({6, 1, 256, {20, 0}, {40, 7}});
    prefill_case({6, 3, 96, {300, 47, 0}, {1, 1, 130}});
  }
  printf("failures: %d\n", failures); return failures != 0; }
