#include "real_backend/microbench.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "real_backend/check.h"
#include "real_backend/cudnn_attention.h"
#include "real_backend/gemm.h"
#include "real_backend/kernels.h"

namespace clustersim::real {
namespace {

// Operands rotate through several copies (`slots`), so that what one run reads is not
// still in the 50 MB L2 from the run before: inside a plan, other kernels run between
// two uses of the same weights, and L2 does not keep them.
size_t slots_for(size_t bytes_per_run, size_t capacity) {
  if (bytes_per_run == 0) return 1;
  const size_t want = std::max<size_t>(1, (256u << 20) / bytes_per_run + 1);
  return std::max<size_t>(1, std::min(want, capacity / bytes_per_run));
}

// Median over `reps` samples of one run of f(run index). Each run is bracketed by its
// own events, and runs go back to back (about 0.5 ms per sample, at most 64 runs; one
// synchronization at the end), so kernels run as inside a plan, the GPU busy and at working clocks. With
// `between`, every run is followed by that (untimed) kernel: a GPU running GEMMs back to
// back sits at its power limit and lowers its clocks, while in a training step GEMMs
// alternate with memory-bound kernels and attention.
//
// Each sample's runs are queued behind a spin kernel that lasts longer than the host
// takes to issue them: the GPU then takes them from a full queue, as it takes a plan's
// ops. Issued to an idle GPU, a kernel shorter than its own launch call (a few µs of
// host time per kernel and event) would be timed with the host's issue time in it.
template <typename F, typename G>
double time_median(int warmup, int reps, F&& f, G&& between) {
  int run = 0;
  for (int i = 0; i < warmup; ++i) f(run++), between();
  cudaEvent_t a, b;
  CS_CUDA(cudaEventCreate(&a));
  CS_CUDA(cudaEventCreate(&b));
  CS_CUDA(cudaEventRecord(a));
  f(run++);
  CS_CUDA(cudaEventRecord(b));
  CS_CUDA(cudaEventSynchronize(b));
  float first_ms = 0;
  CS_CUDA(cudaEventElapsedTime(&first_ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  // At most 64 runs a sample: their launches and events stay well inside the queue the
  // host can fill ahead of the GPU without blocking.
  const int batch = std::clamp(static_cast<int>(0.5 / std::max(first_ms, 1e-3f)), 1, 64);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * reps * batch));
  for (auto& e : ev) CS_CUDA(cudaEventCreate(&e));
  // Back to speed after the synchronization; the host's time to issue a sample, events
  // included (the first sample's own events stand in for them here).
  const auto h0 = std::chrono::steady_clock::now();
  for (int i = 0; i < batch; ++i) {
    CS_CUDA(cudaEventRecord(ev[0]));
    f(run++);
    CS_CUDA(cudaEventRecord(ev[1]));
    between();
  }
  const double issue_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
  for (int r = 0; r < reps; ++r) {
    spin(3 * issue_s + 20e-6, nullptr);
    for (int j = 0; j < batch; ++j) {
      const size_t k = static_cast<size_t>(2 * (r * batch + j));
      CS_CUDA(cudaEventRecord(ev[k]));
      f(run++);
      CS_CUDA(cudaEventRecord(ev[k + 1]));
      between();
    }
  }
  CS_CUDA(cudaEventSynchronize(ev.back()));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double sum = 0;
    for (int j = 0; j < batch; ++j) {
      const size_t k = static_cast<size_t>(2 * (r * batch + j));
      float ms = 0;
      CS_CUDA(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
      sum += ms * 1e-3;
    }
    t.push_back(sum / batch);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename F>
double time_median(int warmup, int reps, F&& f) {
  return time_median(warmup, reps, std::forward<F>(f), [] {});
}

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) {
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
      throw RealBackendError("calibration: cannot allocate " + std::to_string(bytes >> 20) +
                             " MiB: " + cudaGetErrorString(e));
  }
  ~Buf() { cudaFree(p); }
};

}  // namespace

MicrobenchResult describe_device() {
  MicrobenchResult r;
  CS_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CS_CUDA(cudaGetDeviceProperties(&prop, 0));
  r.gpu = prop.name;
  int drv = 0, rt = 0, nccl = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  ncclGetVersion(&nccl);
  r.driver = std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10);
  r.cuda = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
  r.nccl = std::to_string(nccl / 10000) + "." + std::to_string((nccl % 10000) / 100) + "." + std::to_string(nccl % 100);
  return r;
}

namespace {

// One pass over the suites: `pass` numbers the keys its measurements are recorded under.
double median_of(std::vector<double> v);

MicrobenchResult run_pass(const MicrobenchOptions& opt, int pass) {
  MicrobenchResult r = describe_device();
  cudaDeviceProp prop{};
  CS_CUDA(cudaGetDeviceProperties(&prop, 0));

  std::vector<std::tuple<DType, int64_t, int64_t, int64_t>> gemms;
  // Powers of two and about halfway between in log scale (1.4·2^i, a multiple of 64) —
  // deliberately not 1.5·2^i: model widths (6144, 3072, …) stay off the grid, so the
  // validation scenarios test the interpolation.
  std::vector<int64_t> axis_mn = {64, 128}, axis_k;
  for (int64_t v = 256; v <= 131072; v *= 2) {
    axis_mn.push_back(v);
    const int64_t mid = (v * 14 / 10 + 63) / 64 * 64;
    if (mid < 131072) axis_mn.push_back(mid);
  }
  for (int64_t v : axis_mn)
    if (v <= 32768) axis_k.push_back(v);
  auto pow2 = [](int64_t v) { return (v & (v - 1)) == 0; };
  if (opt.gemm)
    for (DType d : {DType::BF16, DType::FP16, DType::FP8}) {
      if (!Gemm::supported(d, prop.major)) continue;
      for (int64_t m : axis_mn)
        for (int64_t n : axis_k)
          for (int64_t k : axis_k) {
            if (d != DType::BF16 && !(pow2(m) && pow2(n) && pow2(k) && m >= 256)) continue;
            if (static_cast<double>(m) * n * k <= static_cast<double>(int64_t{1} << 41)) gemms.emplace_back(d, m, n, k);
          }
    }
  // (head_dim, seq, batch × heads, GQA group): the kernel's blocks are batch × heads ×
  // query tiles, so how they fill the SMs depends on batch × heads as well as length.
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> attn;
  if (opt.attention)
    for (int64_t d : {64, 128})
      for (int64_t g : kAttentionGroups)
        for (int64_t bh = std::max<int64_t>(8, g); bh <= 128; bh *= 2)
          for (int64_t s = 256; s <= 8192; s *= 2) attn.emplace_back(d, s, bh, g);
  // (bytes read + written, reads' share of them): HBM moves reads and writes at
  // different rates, and a plan's memory-bound ops read from 1/3 to 3/4 of their bytes.
  std::vector<std::pair<int64_t, double>> mem;
  if (opt.memory)
    for (int64_t b = 4096; b <= (int64_t{1} << 32); b *= 2)
      for (double share : kMemoryReadShares) mem.emplace_back(b, share);
  const int total = static_cast<int>(gemms.size() + 2 * attn.size() + mem.size()) + (opt.launch ? 2 : 0);
  const int passes = std::max(1, opt.passes);
  int done = pass * total;
  auto tick = [&](const std::string& what) {
    if (opt.progress)
      opt.progress(++done, total * passes, passes > 1 ? what + " (pass " + std::to_string(pass + 1) + ")" : what);
  };
  // Measures `key` with `measure` unless a cached value exists; records new ones at once.
  // Keys name the method ("queued": samples issued ahead of the GPU), so that a store
  // holding measurements taken another way is not resumed from, and the pass after the
  // first.
  auto take = [&](const std::string& what, auto&& measure) {
    const std::string key = what + " queued" + (pass > 0 ? " pass " + std::to_string(pass + 1) : "");
    double t = 0;
    if (opt.cached && opt.cached(key, t)) return t;
    t = measure();
    if (opt.record) opt.record(key, t);
    return t;
  };

  if (!gemms.empty()) {
    size_t a = 0, b = 0, c = 0;
    for (auto [d, m, n, k] : gemms) {
      a = std::max(a, static_cast<size_t>(m * k * 2) + 256);
      b = std::max(b, static_cast<size_t>(k * n * 2) + 256);
      c = std::max(c, static_cast<size_t>(m * n * 2));
    }
    Buf A(a), B(b), C(c), Mix(size_t{2} << 30);
    fill_random(Elem::BF16, A.p, static_cast<int64_t>(a / 2), 1, 1.f, nullptr);
    fill_random(Elem::BF16, B.p, static_cast<int64_t>(b / 2), 2, 1.f, nullptr);
    Gemm g;
    // Bring the GPU to its working clocks before the first measurement (~0.3 s of work).
    for (int i = 0; i < 400; ++i) g.run(DType::BF16, 4096, 2048, 2048, 1, A.p, B.p, C.p, nullptr);
    CS_CUDA(cudaDeviceSynchronize());
    for (auto [d, m, n, k] : gemms) {
      const std::string dt(to_string(d));
      set_context("calibration gemm " + dt + " " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                  std::to_string(k));
      const size_t e = Gemm::element_bytes(d);
      const size_t sa = static_cast<size_t>(m * k) * e / 256 * 256 + 256,
                   sb = static_cast<size_t>(k * n) * e / 256 * 256 + 256;
      const size_t slots = std::max<size_t>(1, std::min(slots_for(sa + sb, a), std::min(a / sa, b / sb)));
      // Memory-bound work of about the GEMM's length between runs (estimated at the
      // roofline: FLOPs at 700 TFLOP/s, then bytes at 3 TB/s), as in a training step:
      // one kernel up to 1 GiB, as many as it takes past that, so that a GEMM of
      // milliseconds meets the same duty (and clocks) as a short one.
      const int64_t mix = std::max<int64_t>(static_cast<int64_t>(2.0 * m * n * k / 700e12 * 3e12), 4096) / 16 * 16;
      const double t =
          take("gemm " + dt + " " + std::to_string(m) + " " + std::to_string(n) + " " + std::to_string(k), [&] {
            return time_median(
                opt.warmup, opt.reps,
                [&](int i) {
                  const size_t slot = static_cast<size_t>(i) % slots;
                  g.run(d, m, n, k, 1, static_cast<char*>(A.p) + slot * sa, static_cast<char*>(B.p) + slot * sb, C.p,
                        nullptr);
                },
                [&] {
                  for (int64_t left = mix; left > 0; left -= int64_t{1} << 30) {
                    const int64_t b = std::min<int64_t>(left, int64_t{1} << 30);
                    memory_op(Mix.p, static_cast<char*>(Mix.p) + (int64_t{1} << 30), b / 2, b / 2, nullptr);
                  }
                });
          });
      r.gemm.push_back({dt, m, n, k, t});
      tick("gemm " + dt + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
    }
  }
  if (!attn.empty()) {
    const int64_t bhmax = 128, smax = 8192, dmax = 128;
    const size_t qn = static_cast<size_t>(bhmax * smax * dmax), rows = static_cast<size_t>(bhmax * smax);
    Buf q(qn * 2), k(qn * 2), v(qn * 2), o(qn * 2), dout(qn * 2), lse(rows * 4), delta(rows * 4);
    Buf dq(qn * 4), dk(qn * 4), dv(qn * 4), dq16(qn * 2), dk16(qn * 2), dv16(qn * 2), flush(size_t{192} << 20);
    for (void* p : {q.p, k.p, v.p, o.p, dout.p}) fill_random(Elem::BF16, p, static_cast<int64_t>(qn), 3, 1.f, nullptr);
    CS_CUDA(cudaMemset(lse.p, 0, rows * 4));
    for (auto [d, s, bh, g] : attn) {
      AttentionShape sh{1,
                        static_cast<int>(bh),
                        static_cast<int>(bh / g),
                        static_cast<int>(s),
                        static_cast<int>(s),
                        static_cast<int>(d),
                        true};
      const std::string what = "d" + std::to_string(d) + " s" + std::to_string(s) + " bh" + std::to_string(bh) +
                               (g > 1 ? " g" + std::to_string(g) : "");
      set_context("calibration attention " + what);
      // cuDNN's fused attention where it runs the shape (its plans are built here, before
      // any timing), else the own kernel; the raw store keys cuDNN's points apart.
      const AttentionBackend backend = attention_backend_for(Elem::BF16, sh);
      const std::string key = " bf16 " + what + " causal" +
                              (backend == AttentionBackend::Cudnn ? " cudnn-" + cudnn_library().version_text : "");
      // Operands rotate through copies, as GEMMs' do: inside a step, K and V come from
      // HBM, not from an L2 that the previous run left them in (GQA's small K/V would).
      const size_t qe = static_cast<size_t>(bh * s * d), kve = qe / static_cast<size_t>(g),
                   re = static_cast<size_t>(bh * s);
      const size_t slots =
          std::max<size_t>(1, std::min({slots_for((3 * qe + 2 * kve) * 2, qn * 2), qn / qe, rows / re}));
      auto at = [&](const Buf& b, size_t elems, size_t bytes, int i) {
        return static_cast<char*>(b.p) + static_cast<size_t>(i) % slots * elems * bytes;
      };
      // Between runs a memory-bound kernel streams 2 × 96 MiB through L2, as a step's
      // GEMMs and other kernels do between two attention ops: GQA's K and V are small
      // enough to stay in L2 across the few copies they rotate through, and would be
      // read from there at each run.
      auto flush_l2 = [&] {
        memory_op(flush.p, static_cast<char*>(flush.p) + (96 << 20), 96 << 20, 96 << 20, nullptr);
      };
      const double f = take("attention forward" + key, [&] {
        return time_median(
            opt.warmup, opt.reps,
            [&](int i) {
              run_attention_forward(Elem::BF16, sh, at(q, qe, 2, i), at(k, kve, 2, i), at(v, kve, 2, i),
                                    at(o, qe, 2, i), reinterpret_cast<float*>(at(lse, re, 4, i)), nullptr);
            },
            flush_l2);
      });
      r.attention.push_back({false, d, s, bh, true, f, g, attention_backend_name(backend)});
      tick("attention forward " + what);
      const double bw = take("attention backward" + key, [&] {
        return time_median(
            opt.warmup, opt.reps,
            [&](int i) {
              run_attention_backward(
                  Elem::BF16, sh, at(q, qe, 2, i), at(k, kve, 2, i), at(v, kve, 2, i), at(o, qe, 2, i),
                  at(dout, qe, 2, i), reinterpret_cast<float*>(at(lse, re, 4, i)),
                  reinterpret_cast<float*>(at(delta, re, 4, i)), reinterpret_cast<float*>(at(dq, qe, 4, i)),
                  reinterpret_cast<float*>(at(dk, kve, 4, i)), reinterpret_cast<float*>(at(dv, kve, 4, i)),
                  at(dq16, qe, 2, i), at(dk16, kve, 2, i), at(dv16, kve, 2, i), nullptr);
            },
            flush_l2);
      });
      r.attention.push_back({true, d, s, bh, true, bw, g, attention_backend_name(backend)});
      tick("attention backward " + what);
    }
  }
  if (!mem.empty() || opt.launch) {
    const int64_t maxb = mem.empty() ? 4096 : mem.back().first;
    // Either side may take all the bytes (a pure read or a pure write). Each run writes
    // at its own offset from where it reads (a multiple of 256 B up to 64 MiB, as the
    // real backend places an op's output): a model's tensors sit at unrelated
    // addresses, and a copy whose source and destination keep the same alignment meets
    // DRAM bank conflicts that a training step's kernels do not.
    constexpr size_t kSkew = size_t{64} << 20;
    Buf in(static_cast<size_t>(maxb)), out(static_cast<size_t>(maxb) + kSkew);
    for (auto [b, share] : mem) {
      const int64_t rd = static_cast<int64_t>(std::llround(share * static_cast<double>(b) / 16)) * 16, wr = b - rd;
      const size_t span = static_cast<size_t>(std::max(rd, wr) + 255) / 256 * 256;
      const size_t slots =
          std::min(slots_for(static_cast<size_t>(b), static_cast<size_t>(maxb)), static_cast<size_t>(maxb) / span);
      char share_text[16];
      std::snprintf(share_text, sizeof share_text, "%.4f", share);
      const double t = take("memory " + std::to_string(b) + " read " + share_text, [&] {
        return time_median(opt.warmup, opt.reps, [&](int i) {
          const size_t slot = static_cast<size_t>(i) % std::max<size_t>(1, slots);
          memory_op(static_cast<char*>(in.p) + slot * span,
                    static_cast<char*>(out.p) + slot * span + scattered_offset(static_cast<uint64_t>(i), kSkew), rd, wr,
                    nullptr);
        });
      });
      r.memory.push_back({b, t, share});  // the nominal share: rd is rounded to 16 bytes
      tick("memory " + std::to_string(b) + " B, read " + share_text);
    }
    if (opt.launch) {
      // Kernels each between their own two events (as the real backend times a plan's
      // ops, and as every table here was measured), back to back from a full queue: the
      // gap from one's end event to the next one's start event.
      const int n = 64;
      // One sample: n small copies, each between its own two of `ev`, queued behind a spin.
      auto bracketed_sample = [&](std::vector<cudaEvent_t>& ev) {
        spin(1e-3, nullptr);
        for (int i = 0; i < n; ++i) {
          CS_CUDA(cudaEventRecord(ev[2 * i]));
          memory_op(in.p, out.p, 2048, 2048, nullptr);
          CS_CUDA(cudaEventRecord(ev[2 * i + 1]));
        }
        CS_CUDA(cudaEventSynchronize(ev.back()));
      };
      r.launch_gap_s = take("launch gap", [&] {
        std::vector<double> gaps;
        std::vector<cudaEvent_t> ev(2 * n);
        for (auto& e : ev) CS_CUDA(cudaEventCreate(&e));
        for (int rep = 0; rep < 5; ++rep) {
          bracketed_sample(ev);
          for (int i = 1; i < n; ++i) {
            float ms = 0;
            CS_CUDA(cudaEventElapsedTime(&ms, ev[2 * i - 1], ev[2 * i]));
            gaps.push_back(ms * 1e-3);
          }
        }
        for (auto& e : ev) cudaEventDestroy(e);
        std::sort(gaps.begin(), gaps.end());
        return gaps[gaps.size() / 2];
      });
      tick("launch gap");
      // The same kernels from a full queue with one event pair around them all, against each
      // between its own two events (its time and the gap after it): medians of 5 samples.
      const double queued = take("queue interval", [&] {
        cudaEvent_t a, b;
        CS_CUDA(cudaEventCreate(&a));
        CS_CUDA(cudaEventCreate(&b));
        std::vector<double> per;
        for (int rep = 0; rep < 5; ++rep) {
          spin(1e-3, nullptr);
          CS_CUDA(cudaEventRecord(a));
          for (int i = 0; i < n; ++i) memory_op(in.p, out.p, 2048, 2048, nullptr);
          CS_CUDA(cudaEventRecord(b));
          CS_CUDA(cudaEventSynchronize(b));
          float ms = 0;
          CS_CUDA(cudaEventElapsedTime(&ms, a, b));
          per.push_back(ms * 1e-3 / n);
        }
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        return median_of(std::move(per));
      });
      const double bracketed = take("queue saving", [&] {
        std::vector<cudaEvent_t> ev(2 * n);
        for (auto& e : ev) CS_CUDA(cudaEventCreate(&e));
        std::vector<double> per;
        for (int rep = 0; rep < 5; ++rep) {
          bracketed_sample(ev);
          float ms = 0;  // first start to last end: n kernels and n - 1 gaps
          CS_CUDA(cudaEventElapsedTime(&ms, ev[0], ev.back()));
          per.push_back((ms * 1e-3 + r.launch_gap_s) / n);
        }
        for (auto& e : ev) cudaEventDestroy(e);
        return median_of(std::move(per));
      });
      r.queue_interval_s = queued;
      r.queue_saving_s = std::max(0.0, bracketed - queued);
      tick("queue");
    }
  }
  set_context("");
  return r;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

MicrobenchResult run_microbenchmarks(const MicrobenchOptions& opt) {
  // Passes one after the other, so that a point's measurements are minutes apart: what
  // moves a point between calibrations is the GPU's state (clocks, temperature) drifting
  // over minutes more than the spread of one sample's runs.
  std::vector<MicrobenchResult> runs;
  for (int p = 0; p < std::max(1, opt.passes); ++p) runs.push_back(run_pass(opt, p));
  MicrobenchResult r = runs.front();
  auto combine = [&](auto member, auto& into) {
    for (size_t i = 0; i < into.size(); ++i) {
      std::vector<double> v;
      for (const MicrobenchResult& run : runs) v.push_back((run.*member)[i].seconds);
      into[i].seconds = median_of(std::move(v));
    }
  };
  combine(&MicrobenchResult::gemm, r.gemm);
  combine(&MicrobenchResult::attention, r.attention);
  // The attention table's backend: one name, or each with its share of the points.
  std::map<std::string, int> count;
  for (const AttentionSample& a : r.attention) ++count[a.backend];
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [name, n] : count) by_count.emplace_back(-n, name);
  std::sort(by_count.begin(), by_count.end());  // the most points first
  for (const auto& [n, name] : by_count) {
    if (!r.attention_backend.empty()) r.attention_backend += "; ";
    r.attention_backend += name;
    if (by_count.size() > 1)
      r.attention_backend += " (" + std::to_string(-n) + " of " + std::to_string(r.attention.size()) + " points)";
  }
  combine(&MicrobenchResult::memory, r.memory);
  std::vector<double> gaps;
  for (const MicrobenchResult& run : runs) gaps.push_back(run.launch_gap_s);
  r.launch_gap_s = median_of(std::move(gaps));
  std::vector<double> interval, saving;
  for (const MicrobenchResult& run : runs) interval.push_back(run.queue_interval_s), saving.push_back(run.queue_saving_s);
  r.queue_interval_s = median_of(std::move(interval));
  r.queue_saving_s = median_of(std::move(saving));
  return r;
}

}  // namespace clustersim::real
