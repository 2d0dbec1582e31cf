#include "real_backend/real_executor.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "real_backend/check.h"
#include "real_backend/cudnn_attention.h"
#include "real_backend/gemm.h"
#include "real_backend/gpu_monitor.h"
#include "real_backend/kernels.h"

namespace clustersim::real {
namespace {

Elem elem_of(DType d) { return d == DType::FP16 ? Elem::FP16 : Elem::BF16; }

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::FP32:
      return ncclFloat32;
    case DType::FP16:
      return ncclFloat16;
    case DType::FP8:
    case DType::INT8:
    case DType::INT4:
      return ncclInt8;
    default:
      return ncclBfloat16;
  }
}
size_t nccl_bytes(ncclDataType_t t) { return t == ncclFloat32 ? 4 : t == ncclInt8 ? 1 : 2; }

// Device buffers big enough for the largest op of a program.
struct Buffers {
  void* a = nullptr;   // GEMM A / attention Q / memory-op input / send buffer
  void* b = nullptr;   // GEMM B / attention K, V / receive buffer
  void* c = nullptr;   // GEMM C / attention O and gradients / memory-op output
  float* f = nullptr;  // attention fp32 accumulators and statistics; its last kAmaxBytes: FP8 casts' amax
  size_t a_bytes = 0, b_bytes = 0, c_bytes = 0, f_bytes = 0;
  float* amax() const { return f + (f_bytes - kAmaxBytes) / sizeof(float); }
  static constexpr size_t kAmaxBytes = 256;
};

struct AttnLayout {  // offsets of an attention op's tensors inside the buffers
  size_t q, kv, o, lse, delta, dq, dk, dv;
};

AttnLayout attn_layout(const Op& op, size_t e) {
  const size_t qn = static_cast<size_t>(op.batch * op.heads * op.q_len * op.head_dim);
  const size_t kn = static_cast<size_t>(op.batch * op.kv_heads * op.kv_len * op.head_dim);
  const size_t rows = static_cast<size_t>(op.batch * op.heads * op.q_len);
  AttnLayout l{};
  l.q = 0;
  l.kv = kn * e;  // K at 0, V at kv in buffer b
  l.o = 0;        // in c: O, dO, dQ16, dK16, dV16
  l.lse = 0;      // in f: lse, delta, dq, dk, dv
  l.delta = rows;
  l.dq = 2 * rows;
  l.dk = 2 * rows + qn;
  l.dv = 2 * rows + qn + kn;
  (void)qn;
  return l;
}

// Every op reads and writes its own region of a pool larger than the GPU's L2, as a
// model's ops touch different weights and activations: without it, consecutive ops
// would find each other's operands in L2 and run faster than they do in training.
constexpr size_t kPool = size_t{1} << 30;

void size_buffers(const Program& prog, Buffers& buf) {
  for (const Op& op : prog.ops) {
    const size_t e = Gemm::element_bytes(op.dtype);
    switch (op.kind) {
      case OpKind::Gemm:
        buf.a_bytes = std::max(buf.a_bytes, static_cast<size_t>(op.m * op.k * op.batch) * e);
        buf.b_bytes = std::max(buf.b_bytes, static_cast<size_t>(op.k * op.n * op.batch) * e);
        buf.c_bytes =
            std::max(buf.c_bytes, static_cast<size_t>(op.m * op.n * op.batch) * 2 * (op.dtype == DType::FP32 ? 2 : 1));
        break;
      case OpKind::Attention: {
        const size_t qn = static_cast<size_t>(op.batch * op.heads * op.q_len * op.head_dim);
        const size_t kn = static_cast<size_t>(op.batch * op.kv_heads * op.kv_len * op.head_dim);
        const size_t rows = static_cast<size_t>(op.batch * op.heads * op.q_len);
        buf.a_bytes = std::max(buf.a_bytes, qn * 2);
        buf.b_bytes = std::max(buf.b_bytes, 2 * kn * 2);
        buf.c_bytes = std::max(buf.c_bytes, (3 * qn + 2 * kn) * 2);
        buf.f_bytes = std::max(buf.f_bytes, (2 * rows + qn + 2 * kn) * 4);
        break;
      }
      case OpKind::Memory:
        buf.a_bytes = std::max(buf.a_bytes, static_cast<size_t>(op.bytes_read));
        buf.c_bytes = std::max(buf.c_bytes, static_cast<size_t>(op.bytes_written));
        break;
      default:
        buf.a_bytes = std::max(buf.a_bytes, static_cast<size_t>(op.bytes));
        buf.b_bytes = std::max(buf.b_bytes, static_cast<size_t>(op.bytes));
        break;
    }
  }
  buf.f_bytes += Buffers::kAmaxBytes;
}

void* allocate(size_t bytes, const char* what, int rank) {
  void* p = nullptr;
  if (bytes == 0) bytes = 256;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess)
    throw RealBackendError("rank " + std::to_string(rank) + ": cannot allocate " + std::to_string(bytes >> 20) +
                           " MiB for " + what + ": " + cudaGetErrorString(e));
  return p;
}

constexpr uint8_t kWaitedEnd = 1, kTimedEnd = 2;  // RankRun::ends

struct RankRun {
  int rank = 0, device = 0;
  const Program* prog = nullptr;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> begin, end;  // per op
  // Without op events: which ops record their end (another stream waits on it: untimed;
  // the stream's last op: timed), 0 / 1 / 2.
  std::vector<uint8_t> ends;
  cudaEvent_t t0 = nullptr;
  Buffers buf;
  std::array<ncclComm_t, kGroupKinds> comms{};
  std::vector<std::vector<std::pair<float, float>>> times;  // per timed iteration, per op: (start, end) ms
  std::vector<int8_t> attention_backend;                    // per op: the AttentionBackend that ran it, -1 none
};

}  // namespace

class Runner {
 public:
  Runner(const Plan& plan, const RealOptions& opt, Launch launch)
      : plan_(plan),
        opt_(opt),
        launch_(std::move(launch)),
        barrier_(static_cast<std::ptrdiff_t>(launch_.ranks.size())),
        monitor_(launch_.devices) {}

  RealResult run() {
    const size_t n = launch_.ranks.size();
    runs_.resize(n);
    world_.resize(n);
    launch_.init_world(world_);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) threads.emplace_back([this, i] { thread_main(i); });
    for (auto& t : threads) t.join();
    if (error_) std::rethrow_exception(error_);
    return collect();
  }

 private:
  // All local threads meet, then (under MPI) the processes.
  void sync(size_t local) {
    barrier_.arrive_and_wait();
    if (local == 0 && launch_.global_barrier) launch_.global_barrier();
    barrier_.arrive_and_wait();
  }

  void thread_main(size_t local) {
    try {
      rank_main(local);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
      for (auto& c : world_)
        if (c) ncclCommAbort(c), c = nullptr;
      barrier_.arrive_and_drop();
    }
  }

  void rank_main(size_t local) {
    const int r = launch_.ranks[local];
    RankRun& rr = runs_[local];
    rr.rank = r;
    rr.device = launch_.devices[local];
    rr.prog = &plan_.programs[plan_.rank_program[static_cast<size_t>(r)]];
    CS_CUDA(cudaSetDevice(rr.device));
    set_context("rank " + std::to_string(r) + " set-up");
    // One communicator per group, split from the world communicator. Every rank calls
    // the split for every kind, in the same order (NOCOLOR where it has no group).
    for (int k = 0; k < kGroupKinds; ++k) {
      const int32_t g = plan_.group_of(r, static_cast<GroupKind>(k));
      int key = 0;
      if (g >= 0) {
        const auto& m = plan_.groups[static_cast<size_t>(g)].ranks;
        key = static_cast<int>(std::find(m.begin(), m.end(), r) - m.begin());
      }
      CS_NCCL(ncclCommSplit(world_[local], g >= 0 ? g : NCCL_SPLIT_NOCOLOR, key, &rr.comms[static_cast<size_t>(k)],
                            nullptr));
    }
    for (size_t s = 0; s < rr.prog->streams.size(); ++s) {
      cudaStream_t st;
      CS_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      rr.streams.push_back(st);
    }
    size_buffers(*rr.prog, rr.buf);
    for (size_t* bytes : {&rr.buf.a_bytes, &rr.buf.b_bytes, &rr.buf.c_bytes}) *bytes += kPool;
    rr.buf.a = allocate(rr.buf.a_bytes, "operands A / inputs", r);
    rr.buf.b = allocate(rr.buf.b_bytes, "operands B / K,V / receive buffers", r);
    rr.buf.c = allocate(rr.buf.c_bytes, "outputs", r);
    rr.buf.f = static_cast<float*>(allocate(rr.buf.f_bytes, "attention accumulators", r));
    for (void* p : {rr.buf.a, rr.buf.b, rr.buf.c}) CS_CUDA(cudaMemset(p, 0, 256));
    fill_random(Elem::BF16, rr.buf.a, static_cast<int64_t>(rr.buf.a_bytes / 2), 1, 0.5f, rr.streams[0]);
    fill_random(Elem::BF16, rr.buf.b, static_cast<int64_t>(rr.buf.b_bytes / 2), 2, 0.5f, rr.streams[0]);
    fill_random(Elem::BF16, rr.buf.c, static_cast<int64_t>(rr.buf.c_bytes / 2), 3, 0.5f, rr.streams[0]);
    const size_t nops = rr.prog->ops.size();
    rr.begin.resize(nops);
    rr.end.resize(nops);
    rr.attention_backend.assign(nops, -1);
    rr.ends.assign(nops, opt_.op_events ? kTimedEnd : 0);
    if (!opt_.op_events) {
      for (size_t i = 0; i < nops; ++i) {
        const Op& op = rr.prog->ops[i];
        for (uint32_t d = 0; d < op.dep_count; ++d) {
          const uint32_t dep = rr.prog->deps[op.dep_begin + d];
          if (rr.prog->ops[dep].stream != op.stream) rr.ends[dep] = std::max<uint8_t>(rr.ends[dep], kWaitedEnd);
        }
      }
      std::vector<int64_t> last(rr.prog->streams.size(), -1);
      for (size_t i = 0; i < nops; ++i) last[rr.prog->ops[i].stream] = static_cast<int64_t>(i);
      for (int64_t i : last)
        if (i >= 0) rr.ends[static_cast<size_t>(i)] = kTimedEnd;
    }
    for (size_t i = 0; i < nops; ++i) {
      if (opt_.op_events) CS_CUDA(cudaEventCreate(&rr.begin[i]));
      if (rr.ends[i] == kTimedEnd) CS_CUDA(cudaEventCreate(&rr.end[i]));
      if (rr.ends[i] == kWaitedEnd) CS_CUDA(cudaEventCreateWithFlags(&rr.end[i], cudaEventDisableTiming));
    }
    CS_CUDA(cudaEventCreate(&rr.t0));
    Gemm gemm;
    CS_CUDA(cudaDeviceSynchronize());
    for (int it = 0; it < opt_.warmup + opt_.iterations; ++it) {
      sync(local);
      if (failed_) return;
      if (it == opt_.warmup) monitor_.mark_begin();
      CS_CUDA(cudaEventRecord(rr.t0, rr.streams[0]));
      for (size_t s = 1; s < rr.streams.size(); ++s) CS_CUDA(cudaStreamWaitEvent(rr.streams[s], rr.t0, 0));
      for (size_t i = 0; i < nops; ++i) issue(rr, gemm, static_cast<uint32_t>(i));
      wait_done(rr);
      if (it >= opt_.warmup) {
        std::vector<std::pair<float, float>> t(nops, {-1.f, -1.f});
        for (size_t i = 0; i < nops; ++i) {
          if (opt_.op_events) CS_CUDA(cudaEventElapsedTime(&t[i].first, rr.t0, rr.begin[i]));
          if (rr.ends[i] == kTimedEnd) CS_CUDA(cudaEventElapsedTime(&t[i].second, rr.t0, rr.end[i]));
        }
        rr.times.push_back(std::move(t));
      }
    }
    monitor_.mark_end();
    sync(local);
    for (auto c : rr.comms)
      if (c) ncclCommDestroy(c);
    for (auto s : rr.streams) cudaStreamDestroy(s);
    for (size_t i = 0; i < nops; ++i) {
      if (rr.begin[i]) cudaEventDestroy(rr.begin[i]);
      if (rr.end[i]) cudaEventDestroy(rr.end[i]);
    }
    cudaEventDestroy(rr.t0);
    for (void* p : {rr.buf.a, rr.buf.b, rr.buf.c, static_cast<void*>(rr.buf.f)}) cudaFree(p);
  }

  // Polls the streams until done, watching for NCCL errors and the timeout.
  void wait_done(RankRun& rr) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.timeout_s);
    for (;;) {
      bool done = true;
      for (auto s : rr.streams) {
        const cudaError_t q = cudaStreamQuery(s);
        if (q == cudaErrorNotReady)
          done = false;
        else if (q != cudaSuccess)
          CS_CUDA(q);
      }
      if (done) return;
      for (auto c : rr.comms) {
        if (!c) continue;
        ncclResult_t async = ncclSuccess;
        CS_NCCL(ncclCommGetAsyncError(c, &async));
        if (async != ncclSuccess && async != ncclInProgress)
          throw RealBackendError("rank " + std::to_string(rr.rank) + ": NCCL asynchronous error " +
                                 ncclGetErrorString(async));
      }
      if (failed_) throw RealBackendError("rank " + std::to_string(rr.rank) + ": stopped because another rank failed");
      if (std::chrono::steady_clock::now() > deadline)
        throw RealBackendError("rank " + std::to_string(rr.rank) + ": iteration did not finish within " +
                               std::to_string(static_cast<int>(opt_.timeout_s)) + " s; communicators aborted");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void issue(RankRun& rr, Gemm& gemm, uint32_t i) {
    const Op& op = rr.prog->ops[i];
    set_context("rank " + std::to_string(rr.rank) + " op " + std::to_string(i) + " '" + plan_.names[op.name] + "' (" +
                std::string(to_string(op.kind)) + ")");
    cudaStream_t st = rr.streams[op.stream];
    for (uint32_t d = 0; d < op.dep_count; ++d) {
      const uint32_t dep = rr.prog->deps[op.dep_begin + d];
      if (rr.prog->ops[dep].stream != op.stream) CS_CUDA(cudaStreamWaitEvent(st, rr.end[dep], 0));
    }
    if (rr.begin[i]) CS_CUDA(cudaEventRecord(rr.begin[i], st));
    Buffers b = rr.buf;  // this op's regions of the pools
    b.a = static_cast<char*>(b.a) + scattered_offset(i, kPool);
    b.b = static_cast<char*>(b.b) + scattered_offset(i + 7919, kPool);
    b.c = static_cast<char*>(b.c) + scattered_offset(i + 104729, kPool);
    // A compute node known only by its recorded time (an imported foreign trace): a
    // kernel that holds the GPU that long.
    const bool timed = op.fixed_seconds > 0 &&
                       (op.kind == OpKind::Gemm || op.kind == OpKind::Attention || op.kind == OpKind::Memory);
    if (timed) {
      spin(op.fixed_seconds, st);
      if (rr.end[i]) CS_CUDA(cudaEventRecord(rr.end[i], st));
      return;
    }
    switch (op.kind) {
      case OpKind::Gemm:
        // Transformer Engine's recipe: fast FP8 accumulation in the forward, split in dgrad and wgrad.
        gemm.run(op.dtype, op.m, op.n, op.k, op.batch, b.a, b.b, b.c, st, backward_kernel(op));
        break;
      case OpKind::Attention: {
        AttentionShape s{static_cast<int>(op.batch),
                         static_cast<int>(op.heads),
                         static_cast<int>(op.kv_heads),
                         static_cast<int>(op.q_len),
                         static_cast<int>(op.kv_len),
                         static_cast<int>(op.head_dim),
                         op.causal};
        const AttnLayout l = attn_layout(op, 2);
        char* c = static_cast<char*>(b.c);
        const size_t qn = static_cast<size_t>(op.batch * op.heads * op.q_len * op.head_dim) * 2;
        const size_t kn = static_cast<size_t>(op.batch * op.kv_heads * op.kv_len * op.head_dim) * 2;
        const Elem e = elem_of(op.dtype);
        // cuDNN's fused attention where it runs the shape, else the own kernel
        // (cudnn_attention.h; one backend per shape, forward and backward alike).
        AttentionBackend ran;
        if (!backward_kernel(op)) {
          ran = run_attention_forward(e, s, b.a, b.b, static_cast<char*>(b.b) + l.kv, c, b.f + l.lse, st);
        } else {
          ran = run_attention_backward(e, s, b.a, b.b, static_cast<char*>(b.b) + l.kv, c, c + qn, b.f + l.lse,
                                       b.f + l.delta, b.f + l.dq, b.f + l.dk, b.f + l.dv, c + 2 * qn, c + 3 * qn,
                                       c + 3 * qn + kn, st);
        }
        rr.attention_backend[i] = static_cast<int8_t>(ran);
        break;
      }
      case OpKind::Memory:
        // Transformer Engine's cast-transpose, as TE runs it: the FP8 copy, its transpose
        // and the amax (a BF16 input of m x n, both FP8 outputs in the op's written bytes).
        if (op.access == MemAccess::Fp8CastTranspose && op.m * op.n * 2 <= op.bytes_read &&
            op.m * op.n * 2 <= op.bytes_written) {
          CS_CUDA(cudaMemsetAsync(b.amax(), 0, sizeof(float), st));
          fp8_cast_transpose_amax(b.a, op.m, op.n, 1.f, b.c, static_cast<char*>(b.c) + op.m * op.n, b.amax(), st);
        } else if (op.access == MemAccess::HostSync) {
          // The host waits for its stream, as `.item()` or `nonzero` does, op.m times; then
          // dispatches op.k small ops one by one (a 4-byte fill each).
          for (int64_t k = 0; k < op.m; ++k) CS_CUDA(cudaStreamSynchronize(st));
          for (int64_t k = 0; k < op.k; ++k) CS_CUDA(cudaMemsetAsync(b.c, 0, 4, st));
        } else if (const int64_t k = memory_kernels(op); k > 1) {
          // k small kernels, as the simulator charges them (a floor and a launch gap each),
          // each its share of the bytes and at least one vector written.
          const int64_t r = op.bytes_read / k, w = std::max<int64_t>(16, op.bytes_written / k);
          for (int64_t j = 0; j < k; ++j) memory_op(b.a, b.c, r, w, st);
        } else {
          memory_op(b.a, b.c, op.bytes_read, op.bytes_written, st);
        }
        break;
      case OpKind::Collective:
        collective(rr, op, st);
        break;
      case OpKind::Send:
      case OpKind::Recv:
        p2p(rr, op, st);
        break;
    }
    if (rr.end[i]) CS_CUDA(cudaEventRecord(rr.end[i], st));
  }

  int group_position(int rank, int32_t g) const {
    const auto& m = plan_.groups[static_cast<size_t>(g)].ranks;
    return static_cast<int>(std::find(m.begin(), m.end(), rank) - m.begin());
  }

  void collective(RankRun& rr, const Op& op, cudaStream_t st) {
    const int32_t g = plan_.group_of(rr.rank, op.group);
    if (g < 0) return;  // a group of one: nothing to exchange
    ncclComm_t comm = rr.comms[static_cast<size_t>(op.group)];
    const int p = static_cast<int>(plan_.groups[static_cast<size_t>(g)].ranks.size());
    const ncclDataType_t t = nccl_type(op.dtype);
    const size_t count = static_cast<size_t>(op.bytes) / nccl_bytes(t);
    switch (op.collective) {
      case CollectiveKind::AllReduce:
        CS_NCCL(ncclAllReduce(rr.buf.a, rr.buf.b, count, t, ncclSum, comm, st));
        break;
      case CollectiveKind::AllGather:
        CS_NCCL(ncclAllGather(rr.buf.a, rr.buf.b, count / p, t, comm, st));
        break;
      case CollectiveKind::ReduceScatter:
        CS_NCCL(ncclReduceScatter(rr.buf.a, rr.buf.b, count / p, t, ncclSum, comm, st));
        break;
      case CollectiveKind::Broadcast:
        CS_NCCL(ncclBroadcast(rr.buf.a, rr.buf.b, count, t, 0, comm, st));
        break;
      case CollectiveKind::Reduce:
        CS_NCCL(ncclReduce(rr.buf.a, rr.buf.b, count, t, ncclSum, 0, comm, st));
        break;
      case CollectiveKind::AllToAll: {
        const size_t per = static_cast<size_t>(op.bytes) / static_cast<size_t>(p);
        CS_NCCL(ncclGroupStart());
        for (int peer = 0; peer < p; ++peer) {
          CS_NCCL(
              ncclSend(static_cast<char*>(rr.buf.a) + per * static_cast<size_t>(peer), per, ncclInt8, peer, comm, st));
          CS_NCCL(
              ncclRecv(static_cast<char*>(rr.buf.b) + per * static_cast<size_t>(peer), per, ncclInt8, peer, comm, st));
        }
        CS_NCCL(ncclGroupEnd());
        break;
      }
    }
  }

  void p2p(RankRun& rr, const Op& op, cudaStream_t st) {
    const int32_t g = plan_.group_of(rr.rank, op.group);
    if (g < 0) throw RealBackendError("rank " + std::to_string(rr.rank) + " has no group for " + context());
    const int p = static_cast<int>(plan_.groups[static_cast<size_t>(g)].ranks.size());
    const int peer = op.relative_peer ? (group_position(rr.rank, g) + op.peer) % p : op.peer;
    ncclComm_t comm = rr.comms[static_cast<size_t>(op.group)];
    CS_NCCL(ncclGroupStart());
    if (op.kind == OpKind::Send)
      CS_NCCL(ncclSend(rr.buf.a, static_cast<size_t>(op.bytes), ncclInt8, peer, comm, st));
    else
      CS_NCCL(ncclRecv(rr.buf.b, static_cast<size_t>(op.bytes), ncclInt8, peer, comm, st));
    CS_NCCL(ncclGroupEnd());
  }

  RealResult collect() {
    RealResult res;
    res.devices = static_cast<int>(launch_.ranks.size());
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) res.device_name = prop.name;
    const size_t iters = runs_.empty() ? 0 : runs_[0].times.size();
    res.iteration_s.assign(iters, 0.0);
    auto median = [](std::vector<float> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.f : v[v.size() / 2];
    };
    for (const RankRun& rr : runs_) {
      for (size_t it = 0; it < iters; ++it)
        for (const auto& [b, e] : rr.times[it])
          res.iteration_s[it] = std::max(res.iteration_s[it], static_cast<double>(e) * 1e-3);
      if (!opt_.op_events) continue;  // iteration times alone
      for (size_t i = 0; i < rr.prog->ops.size(); ++i) {
        std::vector<float> b, e;
        for (size_t it = 0; it < iters; ++it) {
          b.push_back(rr.times[it][i].first);
          e.push_back(rr.times[it][i].second);
        }
        const int64_t bp = static_cast<int64_t>(static_cast<double>(median(b)) * 1e9);
        const int64_t ep = std::max(bp, static_cast<int64_t>(static_cast<double>(median(e)) * 1e9));
        res.spans.push_back(SpanRecord{rr.rank, rr.prog->ops[i].stream, static_cast<uint32_t>(i), bp, ep});
      }
    }
    std::vector<double> sorted = res.iteration_s;
    std::sort(sorted.begin(), sorted.end());
    res.median_iteration_s = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    res.clocks = monitor_.summary();
    // Which kernels ran the plan's attention ops (each op's last iteration; every rank).
    size_t n[2] = {0, 0};
    for (const RankRun& rr : runs_)
      for (int8_t b : rr.attention_backend)
        if (b >= 0) ++n[static_cast<size_t>(b)];
    for (AttentionBackend b : {AttentionBackend::Cudnn, AttentionBackend::Own}) {
      const size_t k = n[static_cast<size_t>(b)];
      if (k == 0) continue;
      if (!res.attention_backend.empty()) res.attention_backend += "; ";
      res.attention_backend += attention_backend_name(b) + " (" + std::to_string(k) + " ops)";
    }
    return res;
  }

  const Plan& plan_;
  RealOptions opt_;
  Launch launch_;
  std::barrier<> barrier_;
  GpuMonitor monitor_;  // SM clock and power over the timed iterations
  std::vector<RankRun> runs_;
  std::vector<ncclComm_t> world_;
  std::mutex mu_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  CS_CUDA(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

RealResult run_plan(const Plan& plan, const RealOptions& opt) {
  const int have = device_count();
  if (plan.world_size > have)
    throw RealBackendError(
        "the plan has " + std::to_string(plan.world_size) + " ranks but this machine has " + std::to_string(have) +
        " GPU(s); one process runs one thread per local GPU (multi-node launch runs one process per GPU under MPI)");
  for (int d = 0; d < plan.world_size; ++d) check_gemm_support(plan, d);
  if (opt.iterations < 1 || opt.warmup < 0) throw RealBackendError("iterations must be >= 1 and warmup >= 0");
  Launch launch;
  for (int r = 0; r < plan.world_size; ++r) {
    launch.ranks.push_back(r);
    launch.devices.push_back(r);
  }
  launch.init_world = [&](std::vector<ncclComm_t>& world) {
    CS_NCCL(ncclCommInitAll(world.data(), plan.world_size, launch.devices.data()));
  };
  return run_local(plan, opt, std::move(launch));
}

void check_gemm_support(const Plan& plan, int device) {
  cudaDeviceProp prop{};
  CS_CUDA(cudaGetDeviceProperties(&prop, device));
  for (const Program& p : plan.programs)
    for (const Op& op : p.ops)
      if (op.kind == OpKind::Gemm && !Gemm::supported(op.dtype, prop.major))
        throw RealBackendError(std::string("GEMMs in ") + std::string(to_string(op.dtype)) + " do not run on " +
                               prop.name);
}

RealResult run_local(const Plan& plan, const RealOptions& opt, Launch launch) {
  return Runner(plan, opt, std::move(launch)).run();
}

}  // namespace clustersim::real
