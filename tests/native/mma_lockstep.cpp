// The HIP target's MMA helper for one AMD arch, as rendered (helper.inc), run on the host by one
// thread per lane of a wave in lockstep, the wave-level instructions emulated at barriers (each
// lane deposits its operands, then reads what the instruction gives it):
//   gfx942 (WAVE 64, two 32-lane warps a wave): v_mfma_f32_4x4x4_16b, block b in lanes 4 b ..
//     4 b + 3, lane 4 b + q holding row q of A, column q of B and column q of D (rows in its 4
//     result registers; AMD's matrix instruction calculator, cdna3);
//   gfx11 (WAVE 32): v_wmma_f32_16x16x16 (lane l supplies row l % 16 of A and column l % 16 of
//     B, and holds column l % 16, rows 2 v + l / 16 of D) and ds_bpermute (lane l reads the
//     value of lane addr / 4).
// Every warp of the wave multiplies its own tiles; every accumulator is checked against the exact
// sum. Built by tests/test_hip_mma.py: -DWAVE, -DMT -DNT (warp tile), -DHELD (wino_warp_mma32,
// else wino_warp_mma), -DBF16, -DK (A and B columns), -DROWS -DCOLS -DC0 (the held step's bounds).
#include <barrier>
#include <type_traits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

template <class In, class Acc> Acc emu_mfma(In a, In b, Acc c);
template <class In, class Acc> Acc emu_wmma(In a, In b, Acc c);
static int emu_bpermute(int addr, int value);
#define __builtin_amdgcn_mfma_f32_4x4x4f16(a, b, c, x, y, z) emu_mfma(a, b, c)
#define __builtin_amdgcn_mfma_f32_4x4x4bf16_1k(a, b, c, x, y, z) emu_mfma(a, b, c)
#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c) emu_wmma(a, b, c)
#define __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c) emu_wmma(a, b, c)
#define __builtin_amdgcn_ds_bpermute(addr, value) emu_bpermute(addr, value)

#include "helper.inc"

static thread_local int hw_lane;
static std::barrier<> wave(WAVE);
static float op_a[WAVE][16], op_b[WAVE][16], op_c[WAVE][8];
static int op_v[WAVE];

template <class E> static float widen(E v) {
  if constexpr (sizeof(E) == 2 && !std::is_same_v<E, _Float16>) {
    unsigned bits = (unsigned)(unsigned short)v << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  } else {
    return (float)v;
  }
}

template <class In, class Acc> Acc emu_mfma(In a, In b, Acc c) {
  const int l = hw_lane;
  for (int k = 0; k < 4; ++k) {
    op_a[l][k] = widen(a[k]);
    op_b[l][k] = widen(b[k]);
    op_c[l][k] = c[k];
  }
  wave.arrive_and_wait();
  const int block = l / 4, n = l % 4;
  Acc d;
  for (int m = 0; m < 4; ++m) {  // lane 4 b + n: column n of its block's D, row m in register m
    float s = op_c[l][m];
    for (int k = 0; k < 4; ++k) s += op_a[4 * block + m][k] * op_b[4 * block + n][k];
    d[m] = s;
  }
  wave.arrive_and_wait();
  return d;
}

template <class In, class Acc> Acc emu_wmma(In a, In b, Acc c) {
  const int l = hw_lane;
  for (int k = 0; k < 16; ++k) {
    op_a[l][k] = widen(a[k]);
    op_b[l][k] = widen(b[k]);
  }
  for (int v = 0; v < 8; ++v) op_c[l][v] = c[v];
  wave.arrive_and_wait();
  Acc d;
  for (int v = 0; v < 8; ++v) {  // lane l: column l % 16, row 2 v + l / 16
    const int row = 2 * v + l / 16, col = l % 16;
    float s = op_c[l][v];
    for (int k = 0; k < 16; ++k) s += op_a[row][k] * op_b[col][k];
    d[v] = s;
  }
  wave.arrive_and_wait();
  return d;
}

static int emu_bpermute(int addr, int value) {
  op_v[hw_lane] = value;
  wave.arrive_and_wait();
  const int got = op_v[(addr >> 2) & (WAVE - 1)];
  wave.arrive_and_wait();
  return got;
}

static unsigned short bits_of(float v) {
  if (BF16) {
    unsigned u;
    std::memcpy(&u, &v, 4);
    return (unsigned short)(u >> 16);
  }
  _Float16 h = (_Float16)v;
  unsigned short s;
  std::memcpy(&s, &h, 2);
  return s;
}

static float val(int w, int which, int r, int k) {  // small integers: exact in fp16, bf16, fp32
  return (float)(((w * 31 + which * 17 + r * 7 + k * 3 + (r * k) % 5) % 15) - 7);
}

int main() {
  const int rows16 = 16 * MT, cols8 = 8 * NT;
  const int lda = K + 8, ldb = K + 8;  // padded rows
  std::vector<unsigned short> A[2], B[2];
  std::vector<float> D[2], D0[2];
  for (int w = 0; w < 2; ++w) {
    A[w].resize(rows16 * lda);
    B[w].resize(cols8 * ldb);
    for (int r = 0; r < rows16; ++r)
      for (int k = 0; k < lda; ++k) A[w][r * lda + k] = bits_of(val(w, 0, r, k));
    for (int n = 0; n < cols8; ++n)
      for (int k = 0; k < ldb; ++k) B[w][n * ldb + k] = bits_of(val(w, 1, n, k));
    D[w].resize(32 * 4 * MT * NT);
    for (size_t i = 0; i < D[w].size(); ++i) D[w][i] = (float)((int)(i * 13 % 11) - 5);
    D0[w] = D[w];
  }
  std::vector<std::thread> lanes;
  for (int hw = 0; hw < WAVE; ++hw)
    lanes.emplace_back([&, hw] {
      hw_lane = hw;
      const int w = hw >> 5;
      const unsigned lane = hw & 31;
      float* d = D[w].data() + lane * 4 * MT * NT;
#if HELD
      wino_warp_mma32(d, A[w].data(), lda, C0, B[w].data() + C0, ldb, ROWS, COLS, lane);
#else
      wino_warp_mma(d, A[w].data(), lda, B[w].data(), ldb, lane);
#endif
    });
  for (auto& t : lanes) t.join();
  int bad = 0;
  for (int w = 0; w < WAVE / 32; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < MT; ++i)
        for (int j = 0; j < NT; ++j)
          for (int e = 0; e < 4; ++e) {
            const int g = lane >> 2, t = lane & 3;
            const int r = 16 * i + g + 8 * (e >> 1), n = 8 * j + 2 * t + (e & 1);
            const int slot = lane * 4 * MT * NT + 4 * (i * NT + j) + e;
            double want = D0[w][slot];
#if HELD
            for (int q = 0; q < 32; ++q) {
              const int c = wino_kchan(q);
              if (n < ROWS && c < COLS) want += (double)val(w, 0, r, C0 + q) * val(w, 1, n, C0 + c);
            }
#else
            for (int k = 0; k < 16; ++k) want += (double)val(w, 0, r, k) * val(w, 1, n, k);
#endif
            if (D[w][slot] != want && bad++ < 5)
              std::printf("mismatch w%d lane %d i%d j%d e%d: %g != %g\n", w, lane, i, j, e, D[w][slot], want);
          }
  std::printf(bad ? "FAIL %d\n" : "ok\n", bad);
  return bad != 0;
}
