// Checks the CUDA kernels' logic on the CPU: every problem runs on the CPU
// kernels (csrc/kernels/cpu) and on the CUDA kernels (csrc/kernels/*.cu)
// under the warp emulation of emulation.h, and the scores, gradients and
// Hessian-vector products must agree (check(): float64 to 1e-9 of the largest
// entry; other types against the CPU kernels in float64, no worse than the
// CPU kernels in the same type; each backend consumes the state its own
// forward kept). Buffers start as garbage (0xff bytes: NaN), as
// torch's uninitialised outputs and workspaces would.
//
//   dev/emulate/run.sh [--quick] [--seed N]
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emulation.h"
#include "kernels/problem.h"

using namespace softsw;

namespace {

size_t elem_bytes(Dtype d) { return d == Dtype::Float64 ? 8 : d == Dtype::Float32 ? 4 : 2; }
size_t acc_bytes(Dtype d) { return d == Dtype::Float64 ? 8 : 4; }
const char* dtype_name(Dtype d) {
  return d == Dtype::Float64 ? "float64" : d == Dtype::Float32 ? "float32"
       : d == Dtype::BFloat16 ? "bfloat16" : "float16";
}

// A buffer of `n` elements of `d`, with conversions from and to double.
struct Buffer {
  Dtype d;
  std::vector<unsigned char> bytes;
  Buffer(Dtype dt, size_t n) : d(dt), bytes(n * elem_bytes(dt), 0xff) {}
  size_t size() const { return bytes.size() / elem_bytes(d); }
  void* data() { return bytes.data(); }
  void set(size_t i, double v) {
    unsigned char* p = bytes.data() + i * elem_bytes(d);
    if (d == Dtype::Float64) std::memcpy(p, &v, 8);
    else if (d == Dtype::Float32) { const float f = float(v); std::memcpy(p, &f, 4); }
    else if (d == Dtype::BFloat16) { const __nv_bfloat16 h = __float2bfloat16_rn(float(v)); std::memcpy(p, &h, 2); }
    else { const __half h = __float2half_rn(float(v)); std::memcpy(p, &h, 2); }
  }
  double get(size_t i) const {
    const unsigned char* p = bytes.data() + i * elem_bytes(d);
    if (d == Dtype::Float64) { double v; std::memcpy(&v, p, 8); return v; }
    if (d == Dtype::Float32) { float v; std::memcpy(&v, p, 4); return v; }
    if (d == Dtype::BFloat16) { __nv_bfloat16 h; std::memcpy(&h, p, 2); return __bfloat162float(h); }
    __half h; std::memcpy(&h, p, 2); return __half2float(h);
  }
};

struct Case {
  Dtype dtype;
  int64_t B, M, N;
  bool affine;
  double T;
  Reduction reduction;
  bool lengths, gap_tensor;
  double score_scale;
  double dir_scale = 1.0;  // of the double backward's direction on the scores
  bool far_gaps = false;   // two gap-tensor entries far outside the probability domain's range
  int gap_layout = 0;      // gap tensor strides: 0 dense, 1 one row for all (B, 1, N), 2 (B, M, 1)
};

std::string describe(const Case& c) {
  char s[256];
  std::snprintf(s, sizeof s, "%s %" PRId64 "x%" PRId64 "x%" PRId64 " %s T=%g %s%s%s scale=%g%s",
                dtype_name(c.dtype), c.B, c.M, c.N, c.affine ? "affine" : "linear", c.T,
                c.reduction == Reduction::Soft ? "soft" : "max", c.lengths ? " lengths" : "",
                c.gap_tensor ? (c.far_gaps ? " gap-tensor(far)" : c.gap_layout == 1 ? " gap-tensor(B,1,N)"
                                : c.gap_layout == 2 ? " gap-tensor(B,M,1)" : " gap-tensor") : "", c.score_scale,
                c.dir_scale != 1.0 ? " huge-direction" : "");
  return s;
}

// Inputs of one case, and what one backend computed from them.
struct Inputs {
  Buffer scores, open, extend, dir_scores, dir_open, dir_extend, grad_score;
  std::vector<int64_t> lengths;
  Inputs(Dtype d, int64_t B, int64_t MN)
      : scores(d, B * MN), open(d, B * MN), extend(d, B * MN), dir_scores(d, B * MN),
        dir_open(d, B * MN), dir_extend(d, B * MN), grad_score(d, B) {}
};

struct Results {
  Buffer score, score_inference, grad_scores, grad_open, grad_extend, grad_grad_score, hvp_scores,
      hvp_open, hvp_extend;
  Results(Dtype d, int64_t B, int64_t MN)
      : score(d, B), score_inference(d, B), grad_scores(d, B * MN), grad_open(d, B * MN),
        grad_extend(d, B * MN), grad_grad_score(d, B), hvp_scores(d, B * MN), hvp_open(d, B * MN),
        hvp_extend(d, B * MN) {}
};

Problem problem_of(const Case& c, Inputs& in) {
  Problem p;
  p.batch = c.B;
  p.rows = c.M;
  p.cols = c.N;
  p.dtype = c.dtype;
  p.scores = in.scores.data();
  p.lengths = c.lengths ? in.lengths.data() : nullptr;
  p.affine = c.affine;
  p.temperature = c.T;
  p.reduction = c.reduction;
  p.cpu_threads = 1;
  p.gap_open.value = -1.0;
  p.gap_extend.value = -0.5;
  if (c.gap_tensor) {
    p.gap_open.data = in.open.data();
    p.gap_open.stride[0] = c.M * c.N;
    p.gap_open.stride[1] = c.gap_layout == 1 ? 0 : c.gap_layout == 2 ? 1 : c.N;
    p.gap_open.stride[2] = c.gap_layout == 2 ? 0 : 1;
    if (c.affine) {
      p.gap_extend.data = in.extend.data();
      p.gap_extend.stride[0] = c.M * c.N;
      p.gap_extend.stride[1] = c.N;
      p.gap_extend.stride[2] = 1;
    }
  }
  if (!c.affine) p.gap_extend = p.gap_open;
  return p;
}

void run_backend(bool cuda, const Case& c, Inputs& in, Results& out) {
  Problem p = problem_of(c, in);
  std::vector<unsigned char> hidden(hidden_elements(c.B, c.M, c.N, c.affine) * acc_bytes(c.dtype), 0xff);
  std::vector<int64_t> argmax(c.B, -7);
  std::vector<unsigned char> total(2 * c.B * acc_bytes(c.dtype), 0xff);
  auto workspace = [&](int64_t bytes) { return std::vector<unsigned char>(bytes + 16, 0xab); };
  auto aligned = [](std::vector<unsigned char>& w) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(w.data()) + 15) & ~uintptr_t(15));
  };
  // Inference (no state), then the training forward.
  {
    Problem q = p;
    q.keeps_state = false;
    std::vector<unsigned char> h0, t0(2 * c.B * acc_bytes(c.dtype), 0xff);
    std::vector<int64_t> a0(c.B, -7);
    ForwardOutputs o;
    o.score = out.score_inference.data();
    o.argmax = a0.data();
    o.total = t0.data();
    if (cuda) {
      auto ws = workspace(cuda_workspace_bytes(q));
      forward_cuda(q, o, aligned(ws), nullptr);
    } else {
      forward_cpu(q, o);
    }
  }
  ForwardOutputs o;
  o.score = out.score.data();
  o.hidden = hidden.data();
  o.argmax = argmax.data();
  o.total = total.data();
  std::vector<unsigned char> ws;
  if (cuda) {
    ws = workspace(cuda_double_backward_workspace_bytes(p));
    forward_cuda(p, o, aligned(ws), nullptr);
  } else {
    forward_cpu(p, o);
  }
  ForwardState st{hidden.data(), argmax.data(), total.data()};
  BackwardArgs b;
  b.grad_score = in.grad_score.data();
  b.grad_score_stride = 1;
  b.state = st;
  b.grad_scores = out.grad_scores.data();
  b.grad_gap_open = c.gap_tensor ? out.grad_open.data() : nullptr;
  b.grad_gap_extend = c.gap_tensor && c.affine ? out.grad_extend.data() : nullptr;
  if (cuda) {
    std::memset(ws.data(), 0xab, ws.size());
    backward_cuda(p, b, aligned(ws), nullptr);
  } else {
    backward_cpu(p, b);
  }
  DoubleBackwardArgs d;
  d.grad_score = in.grad_score.data();
  d.grad_score_stride = 1;
  d.dir_scores = in.dir_scores.data();
  d.dir_gap_open = c.gap_tensor ? in.dir_open.data() : nullptr;
  d.dir_gap_extend = c.gap_tensor && c.affine ? in.dir_extend.data() : nullptr;
  d.state = st;
  d.grad_grad_score = out.grad_grad_score.data();
  d.hvp_scores = out.hvp_scores.data();
  d.hvp_gap_open = c.gap_tensor ? out.hvp_open.data() : nullptr;
  d.hvp_gap_extend = c.gap_tensor && c.affine ? out.hvp_extend.data() : nullptr;
  if (cuda) {
    std::memset(ws.data(), 0xab, ws.size());
    double_backward_cuda(p, d, aligned(ws), nullptr);
  } else {
    double_backward_cpu(p, d);
  }
}

// Largest |a - b| over the largest |b| (NaN where exactly one side is NaN, or
// where they differ in infinities).
double relative_error(const Buffer& a, const Buffer& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return NAN;
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return NAN;
      continue;
    }
    err = std::max(err, std::fabs(x - y));
    scale = std::max(scale, std::fabs(y));
  }
  return err / std::max(scale, 1e-30);
}

// The inputs as float64 (the same values: the half and float inputs widen
// exactly).
Inputs widened(const Inputs& in, int64_t B, int64_t MN) {
  Inputs w(Dtype::Float64, B, MN);
  const Buffer* from[] = {&in.scores, &in.open, &in.extend, &in.dir_scores, &in.dir_open,
                          &in.dir_extend, &in.grad_score};
  Buffer* to[] = {&w.scores, &w.open, &w.extend, &w.dir_scores, &w.dir_open, &w.dir_extend,
                  &w.grad_score};
  for (int k = 0; k < 7; ++k)
    for (size_t i = 0; i < from[k]->size(); ++i) to[k]->set(i, from[k]->get(i));
  w.lengths = in.lengths;
  return w;
}

bool check(const Case& c, std::mt19937_64& rng) {
  const int64_t MN = c.M * c.N;
  Inputs in(c.dtype, c.B, MN);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit;
  for (int64_t i = 0; i < c.B * MN; ++i) {
    in.scores.set(i, c.score_scale * normal(rng));
    in.open.set(i, -1.0 - unit(rng));
    in.extend.set(i, -0.2 - 0.5 * unit(rng));
    in.dir_scores.set(i, c.dir_scale * normal(rng));
    in.dir_open.set(i, normal(rng));
    in.dir_extend.set(i, normal(rng));
  }
  if (c.far_gaps) {  // pair 0 in a middle band, pair 1 in its first group of steps
    in.open.set(std::min<int64_t>(40, c.M - 1) * c.N + c.N / 2, -40.0);
    in.open.set((c.B - 1) * MN + 3 * c.N + 2, 25.0);
  }
  for (int64_t b = 0; b < c.B; ++b) in.grad_score.set(b, 0.5 + unit(rng));
  if (c.lengths) {
    std::uniform_int_distribution<int64_t> m(0, c.M), n(0, c.N);
    for (int64_t b = 0; b < c.B; ++b) {
      // Mostly long pairs, some short or empty.
      const bool full = unit(rng) < 0.5;
      in.lengths.push_back(full ? c.M : m(rng));
      in.lengths.push_back(full ? c.N : n(rng));
    }
  }
  // The case first (flushed), so that a run the emulation stops (a hang, a
  // sanitizer report) names it.
  std::printf("%s:", describe(c).c_str());
  std::fflush(stdout);
  Results cpu(c.dtype, c.B, MN), gpu(c.dtype, c.B, MN);
  run_backend(false, c, in, cpu);
  run_backend(true, c, in, gpu);
  // Float64: the CPU kernels are the reference. Other types: the CPU kernels
  // in float64 on the same values are, and the emulated CUDA kernels may miss
  // it by 1e-4 of the largest entry in float32 (the log-domain passes in
  // float32, against the CPU's probability domain: ~1e-5) or 2 units in the
  // last place of a half type's outputs, or by up to 4x what the CPU kernels
  // in the same type miss it by. A logic error misses by far more.
  const bool wide = c.dtype == Dtype::Float64;
  Case c64 = c;
  c64.dtype = Dtype::Float64;
  Inputs in64 = wide ? Inputs(Dtype::Float64, 0, 0) : widened(in, c.B, MN);
  Results ref64(Dtype::Float64, wide ? 0 : c.B, wide ? 0 : MN);
  if (!wide) run_backend(false, c64, in64, ref64);
  const Results& ref = wide ? cpu : ref64;
  const double tol = wide ? 1e-9
                   : c.dtype == Dtype::Float32 ? 1e-4
                   : c.dtype == Dtype::Float16 ? 1e-3 : 8e-3;
  struct Item { const char* name; const Buffer& g; const Buffer& c; const Buffer& r; bool used; };
  const Item items[] = {
      {"score", gpu.score, cpu.score, ref.score, true},
      {"score (inference)", gpu.score_inference, cpu.score_inference, ref.score, true},
      {"d/dS", gpu.grad_scores, cpu.grad_scores, ref.grad_scores, true},
      {"d/dgap_open", gpu.grad_open, cpu.grad_open, ref.grad_open, c.gap_tensor},
      {"d/dgap_extend", gpu.grad_extend, cpu.grad_extend, ref.grad_extend, c.gap_tensor && c.affine},
      {"<W, A>", gpu.grad_grad_score, cpu.grad_grad_score, ref.grad_grad_score, true},
      {"hvp S", gpu.hvp_scores, cpu.hvp_scores, ref.hvp_scores, true},
      {"hvp gap_open", gpu.hvp_open, cpu.hvp_open, ref.hvp_open, c.gap_tensor},
      {"hvp gap_extend", gpu.hvp_extend, cpu.hvp_extend, ref.hvp_extend, c.gap_tensor && c.affine},
  };
  bool ok = true;
  std::string line;
  for (const Item& it : items) {
    if (!it.used) continue;
    const double e = relative_error(it.g, it.r);
    const double e_cpu = wide ? 0.0 : relative_error(it.c, it.r);
    const bool good = e <= std::max(tol, 4 * e_cpu);  // false for NaN
    ok &= good;
    char s[128];
    if (wide) std::snprintf(s, sizeof s, " %s %.1e%s", it.name, e, good ? "" : " BAD");
    else std::snprintf(s, sizeof s, " %s %.1e (cpu %.1e)%s", it.name, e, e_cpu, good ? "" : " BAD");
    line += s;
  }
  std::printf("%s -> %s\n", line.c_str(), ok ? "ok" : "BAD");
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    else if (std::string(argv[i]) == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
  }
  std::mt19937_64 rng(seed);
  std::vector<Case> cases;
  const Dtype dtypes[] = {Dtype::Float32, Dtype::Float64, Dtype::BFloat16};
  // Shapes: one band; several bands (rounds of tickets); tall bands (four rows
  // a lane from 256 columns with state); a pair taller than wide.
  struct Shape { int64_t B, M, N; };
  const Shape shapes[] = {{3, 20, 27}, {2, 70, 45}, {1, 100, 37}, {2, 40, 260}};
  for (const Shape& s : shapes)
    for (Dtype d : dtypes)
      for (bool affine : {false, true})
        for (double T : {1.0, 0.0})
          for (Reduction r : {Reduction::Soft, Reduction::Max}) {
            if (quick && (d == Dtype::BFloat16 || r == Reduction::Max) && s.M != 70) continue;
            cases.push_back({d, s.B, s.M, s.N, affine, T, r, (s.B + s.M) % 2 == 0, false, 1.0});
            if (!quick || s.M == 70)
              cases.push_back({d, s.B, s.M, s.N, affine, T, r, true, true, 1.0});
          }
  // The backward's reverse pass at two rows a lane (reverse_staged, bands of
  // 64 rows over the forward's state bands of 32): a band whose second state
  // band has one row or an odd count (33, 50 rows), exactly one band (64),
  // bands with unchecked chunks (8-byte ring copies) where pair 1's state
  // starts at an odd offset (129 x 201: 4-byte copies there), and fewer
  // columns than the ring's 8 anti-diagonals, run at two rows where
  // SOFTSW_REVERSE_ROWS=2 (and the forward's with SOFTSW_STATE_ROWS=2).
  const Shape two_row_shapes[] = {{1, 33, 29}, {2, 50, 40}, {2, 64, 50}, {2, 129, 201}, {3, 70, 5}};
  for (const Shape& s : two_row_shapes)
    for (Dtype d : {Dtype::Float32, Dtype::Float16, Dtype::BFloat16})
      for (double T : {1.0, 0.0})
        for (Reduction r : {Reduction::Soft, Reduction::Max}) {
          if (quick && d != Dtype::Float32 && (T == 0.0 || r == Reduction::Max)) continue;
          for (bool lengths : {false, true})
            if (!quick || lengths == (s.M % 2 == 0))
              cases.push_back({d, s.B, s.M, s.N, false, T, r, lengths, false, 1.0});
        }
  // The range rule's other side: a small temperature on large scores (log domain).
  cases.push_back({Dtype::Float32, 2, 70, 45, false, 0.05, Reduction::Soft, false, false, 30.0});
  cases.push_back({Dtype::Float32, 2, 70, 45, true, 0.05, Reduction::Soft, true, false, 30.0});
  // Scores too large for the probability domain at T = 1 (the gap in range):
  // the probability-domain passes switch to the log domain at once (scale
  // 30), or part of the way along (9; float64: 60); linear, and the affine
  // inference forward.
  for (bool affine : {false, true}) {
    for (double scale : {30.0, 9.0})
      cases.push_back({Dtype::Float32, 2, 70, 45, affine, 1.0, Reduction::Soft, true, false, scale});
    cases.push_back({Dtype::Float64, 2, 70, 45, affine, 1.0, Reduction::Max, false, false, 60.0});
  }
  cases.push_back({Dtype::Float32, 2, 70, 45, true, 1.0, Reduction::Max, false, false, 9.0});
  // Gap-tensor entries out of the range (a linear forward in the probability
  // domain holds each cell's gap to it): the bands that hold them switch to
  // the log domain where they meet them.
  for (Reduction r : {Reduction::Soft, Reduction::Max})
    for (Dtype d : {Dtype::Float32, Dtype::Float64})
      cases.push_back({d, 2, 70, 45, false, 1.0, r, false, true, 1.0, 1.0, true});
  // Gap tensors broadcast along columns (one row for every row: staged like
  // a dense one) and along rows (column stride 0: read cell by cell).
  for (int layout : {1, 2})
    for (Dtype d : {Dtype::Float32, Dtype::BFloat16, Dtype::Float64}) {
      Case c{d, 2, 70, 45, false, 1.0, Reduction::Soft, true, true, 1.0};
      c.gap_layout = layout;
      cases.push_back(c);
    }
  // A direction so large that Y = Z Hdot overflows where Z does not (Z grows
  // up to ~2^64 in a group of steps here): the tangent pass alone continues
  // in the log domain.
  cases.push_back({Dtype::Float32, 2, 70, 45, false, 1.0, Reduction::Soft, true, false, 4.0, 1e25});
  // The tangent pass where some groups of steps overflow and others not
  // (scores ~6 N(0, 1) at T = 1), and a huge direction, at the CUDA tests' shape.
  for (int k = 0; k < (quick ? 1 : 3); ++k) {
    cases.push_back({Dtype::Float32, 2, 70, 90, false, 1.0, Reduction::Soft, false, false, 6.0});
    cases.push_back({Dtype::Float32, 2, 70, 90, false, 1.0, Reduction::Soft, false, false, 4.0, 1e25});
  }
  // |H| ~ 1e3 (scores 6 N(0, 1) over 140 x 180): the seeds' and the weights'
  // tangents must each sum to 0 though float32 rounds the stored H by ~1e-4.
  if (!quick)
    for (int k = 0; k < 3; ++k)
      cases.push_back({Dtype::Float32, 2, 140, 180, false, 1.0, Reduction::Soft, false, false, 6.0});
  int bad = 0, ran = 0;
  // EMULATE_ONLY=text: only the cases whose description contains it (their
  // inputs then differ from a full run's: the generator is shared).
  const char* only = std::getenv("EMULATE_ONLY");
  for (const Case& c : cases) {
    if (only && describe(c).find(only) == std::string::npos) continue;
    bad += !check(c, rng);
    ++ran;
  }
  std::printf("%d cases, %d bad\n", ran, bad);
  return bad ? 1 : 0;
}
