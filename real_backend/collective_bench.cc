#include "real_backend/collective_bench.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "real_backend/check.h"
#include "real_backend/gemm.h"
#include "real_backend/kernels.h"
#include "real_backend/real_executor.h"

namespace clustersim::real {
namespace {

// One operation on every rank of a group, each rank from its own thread; returns the
// slowest rank's median over `reps` samples of back-to-back runs.
double time_group(const std::vector<ncclComm_t>& comms, const std::vector<cudaStream_t>& streams,
                  const std::vector<void*>& send, const std::vector<void*>& recv, const std::string& op, int64_t bytes,
                  int warmup, int reps) {
  const int n = static_cast<int>(comms.size());
  std::vector<double> worst(static_cast<size_t>(reps), 0.0);
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex mu;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        CS_CUDA(cudaSetDevice(r));
        cudaStream_t st = streams[static_cast<size_t>(r)];
        ncclComm_t c = comms[static_cast<size_t>(r)];
        const size_t count = static_cast<size_t>(bytes) / 2;  // bf16 elements
        auto once = [&] {
          if (op == "all-reduce")
            CS_NCCL(ncclAllReduce(send[r], recv[r], count, ncclBfloat16, ncclSum, c, st));
          else if (op == "all-gather")
            CS_NCCL(ncclAllGather(send[r], recv[r], count / n, ncclBfloat16, c, st));
          else if (op == "reduce-scatter")
            CS_NCCL(ncclReduceScatter(send[r], recv[r], count / n, ncclBfloat16, ncclSum, c, st));
          else if (op == "broadcast")
            CS_NCCL(ncclBroadcast(send[r], recv[r], count, ncclBfloat16, 0, c, st));
          else if (op == "reduce")
            CS_NCCL(ncclReduce(send[r], recv[r], count, ncclBfloat16, ncclSum, 0, c, st));
          else if (op == "all-to-all") {
            const size_t per = static_cast<size_t>(bytes) / static_cast<size_t>(n);
            CS_NCCL(ncclGroupStart());
            for (int p = 0; p < n; ++p) {
              CS_NCCL(ncclSend(static_cast<char*>(send[r]) + per * p, per, ncclInt8, p, c, st));
              CS_NCCL(ncclRecv(static_cast<char*>(recv[r]) + per * p, per, ncclInt8, p, c, st));
            }
            CS_NCCL(ncclGroupEnd());
          } else if (op == "send-recv") {  // 0 -> 1
            CS_NCCL(ncclGroupStart());
            if (r == 0) CS_NCCL(ncclSend(send[r], static_cast<size_t>(bytes), ncclInt8, 1, c, st));
            if (r == 1) CS_NCCL(ncclRecv(recv[r], static_cast<size_t>(bytes), ncclInt8, 0, c, st));
            CS_NCCL(ncclGroupEnd());
          }
        };
        for (int i = 0; i < warmup; ++i) once();
        cudaEvent_t a, b;
        CS_CUDA(cudaEventCreate(&a));
        CS_CUDA(cudaEventCreate(&b));
        const int batch = bytes >= (int64_t{1} << 28) ? 1 : 8;
        for (int s = 0; s < reps; ++s) {
          CS_CUDA(cudaEventRecord(a, st));
          for (int j = 0; j < batch; ++j) once();
          CS_CUDA(cudaEventRecord(b, st));
          CS_CUDA(cudaEventSynchronize(b));
          float ms = 0;
          CS_CUDA(cudaEventElapsedTime(&ms, a, b));
          std::lock_guard<std::mutex> lock(mu);
          worst[static_cast<size_t>(s)] = std::max(worst[static_cast<size_t>(s)], ms * 1e-3 / batch);
        }
        cudaEventDestroy(a);
        cudaEventDestroy(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  std::sort(worst.begin(), worst.end());
  return worst[worst.size() / 2];
}

}  // namespace

std::vector<CollectiveMeasurement> run_collective_bench(const CollectiveBenchOptions& opt) {
  const int gpus = device_count();
  if (gpus < 2)
    throw RealBackendError("the collectives and p2p suites need at least 2 GPUs; this machine has " +
                           std::to_string(gpus));
  std::vector<int> sizes;
  for (int g = 2; g <= gpus; g *= 2) sizes.push_back(g);
  if (sizes.back() != gpus) sizes.push_back(gpus);
  // What NCCL can run: ring for every collective; tree for all-reduce only (NCCL refuses
  // NCCL_ALGO=Tree for the others); all-to-all is grouped send/recv, so only the protocol
  // varies; and each operation once more with NCCL's own choice of both.
  struct Series {
    std::string algo, algo_env, proto, proto_env;  // an empty env: left to NCCL
    std::vector<std::string> ops;
    std::vector<int> groups;
  };
  const std::vector<std::string> protos = {"LL", "LL128", "Simple"};
  const std::vector<std::string> all_ops = {"all-reduce", "all-gather", "reduce-scatter",
                                            "broadcast",  "reduce",     "all-to-all"};
  std::vector<Series> series;
  if (opt.collectives) {
    for (const std::string& p : protos) {
      series.push_back(
          {"ring", "Ring", p, p, {"all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce"}, sizes});
      series.push_back({"tree", "Tree", p, p, {"all-reduce"}, sizes});
      series.push_back({"direct", "", p, p, {"all-to-all"}, sizes});
    }
    series.push_back({"nccl", "", "auto", "", all_ops, sizes});
  }
  if (opt.p2p) {
    for (const std::string& p : protos) series.push_back({"p2p", "", p, p, {"send-recv"}, {2}});
    series.push_back({"p2p", "", "auto", "", {"send-recv"}, {2}});
  }
  std::vector<int64_t> bytes;
  for (int64_t b = opt.min_bytes; b <= opt.max_bytes; b *= 2) bytes.push_back(b);
  int total = 0;
  for (const Series& s : series) total += static_cast<int>(s.ops.size() * s.groups.size() * bytes.size());
  int done = 0;
  // Small messages take microseconds and vary with launch timing: four times the samples.
  constexpr int64_t kSmall = int64_t{16} << 20;
  std::vector<CollectiveMeasurement> out;
  // Buffers on every GPU, big enough for the largest size (all-gather's and all-to-all's
  // `bytes` are the whole output).
  std::vector<void*> send(static_cast<size_t>(gpus)), recv(static_cast<size_t>(gpus));
  std::vector<cudaStream_t> streams(static_cast<size_t>(gpus));
  for (int d = 0; d < gpus; ++d) {
    CS_CUDA(cudaSetDevice(d));
    CS_CUDA(cudaMalloc(&send[static_cast<size_t>(d)], static_cast<size_t>(opt.max_bytes)));
    CS_CUDA(cudaMalloc(&recv[static_cast<size_t>(d)], static_cast<size_t>(opt.max_bytes)));
    CS_CUDA(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(d)], cudaStreamNonBlocking));
  }
  // The caller's own NCCL_ALGO / NCCL_PROTO come back when the suite is done.
  const char* algo0 = std::getenv("NCCL_ALGO");
  const char* proto0 = std::getenv("NCCL_PROTO");
  const std::string saved_algo = algo0 ? algo0 : "", saved_proto = proto0 ? proto0 : "";
  auto set_env = [](const char* name, const std::string& value) {
    if (value.empty())
      unsetenv(name);
    else
      setenv(name, value.c_str(), 1);
  };
  for (const Series& s : series)
    for (int g : s.groups) {
      // NCCL reads NCCL_ALGO / NCCL_PROTO when a communicator is created.
      set_env("NCCL_ALGO", s.algo_env);
      set_env("NCCL_PROTO", s.proto_env);
      std::vector<ncclComm_t> comms(static_cast<size_t>(g));
      std::vector<int> devs(static_cast<size_t>(g));
      for (int i = 0; i < g; ++i) devs[static_cast<size_t>(i)] = i;
      CS_NCCL(ncclCommInitAll(comms.data(), g, devs.data()));
      for (const std::string& op : s.ops)
        for (int64_t b : bytes) {
          const std::string key =
              "coll " + op + " " + s.algo + " " + s.proto + " " + std::to_string(g) + " " + std::to_string(b);
          double t = 0;
          if (!(opt.cached && opt.cached(key, t))) {
            t = time_group(comms, std::vector<cudaStream_t>(streams.begin(), streams.begin() + g),
                           std::vector<void*>(send.begin(), send.begin() + g),
                           std::vector<void*>(recv.begin(), recv.begin() + g), op, b, opt.warmup,
                           b < kSmall ? opt.reps * 4 : opt.reps);
            if (opt.record) opt.record(key, t);
          }
          out.push_back({op, s.algo, s.proto, g, b, t});
          if (opt.progress) opt.progress(++done, total, key);
        }
      for (auto c : comms) ncclCommDestroy(c);
    }
  set_env("NCCL_ALGO", saved_algo);
  set_env("NCCL_PROTO", saved_proto);
  for (int d = 0; d < gpus; ++d) {
    cudaSetDevice(d);
    cudaFree(send[static_cast<size_t>(d)]);
    cudaFree(recv[static_cast<size_t>(d)]);
    cudaStreamDestroy(streams[static_cast<size_t>(d)]);
  }
  return out;
}

std::vector<OverlapMeasurement> run_overlap_bench(int warmup, int reps) {
  if (device_count() < 2)
    throw RealBackendError("the overlap suite needs 2 GPUs; this machine has " + std::to_string(device_count()));
  std::vector<ncclComm_t> comms(2);
  int devs[2] = {0, 1};
  CS_NCCL(ncclCommInitAll(comms.data(), 2, devs));
  cudaStream_t compute, comm0, comm1;
  CS_CUDA(cudaSetDevice(1));
  CS_CUDA(cudaStreamCreateWithFlags(&comm1, cudaStreamNonBlocking));
  const size_t comm_bytes = size_t{64} << 20;
  void *buf1 = nullptr, *buf0 = nullptr;
  CS_CUDA(cudaMalloc(&buf1, comm_bytes));
  CS_CUDA(cudaSetDevice(0));
  CS_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CS_CUDA(cudaStreamCreateWithFlags(&comm0, cudaStreamNonBlocking));
  CS_CUDA(cudaMalloc(&buf0, comm_bytes));

  const int64_t g = 8192;
  const size_t gemm_bytes = static_cast<size_t>(g * g * 2);
  AttentionShape att;
  att.heads = att.kv_heads = 32;
  att.q_len = att.kv_len = 4096;
  att.head_dim = 128;
  const size_t att_bytes = static_cast<size_t>(att.heads) * att.q_len * att.head_dim * 2;
  const size_t mem_bytes = size_t{512} << 20;
  std::vector<void*> bufs;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    CS_CUDA(cudaMalloc(&p, bytes));
    CS_CUDA(cudaMemset(p, 0, bytes));
    bufs.push_back(p);
    return p;
  };
  void *a = alloc(gemm_bytes), *b = alloc(gemm_bytes), *c = alloc(gemm_bytes);
  fill_random(Elem::BF16, a, g * g, 1, 1.0f, compute);
  fill_random(Elem::BF16, b, g * g, 2, 1.0f, compute);
  void *q = alloc(att_bytes), *k = alloc(att_bytes), *v = alloc(att_bytes), *o = alloc(att_bytes);
  auto* lse = static_cast<float*>(alloc(static_cast<size_t>(att.heads) * att.q_len * sizeof(float)));
  fill_random(Elem::BF16, q, static_cast<int64_t>(att_bytes / 2), 3, 1.0f, compute);
  fill_random(Elem::BF16, k, static_cast<int64_t>(att_bytes / 2), 4, 1.0f, compute);
  fill_random(Elem::BF16, v, static_cast<int64_t>(att_bytes / 2), 5, 1.0f, compute);
  void *in = alloc(mem_bytes), *out = alloc(mem_bytes);
  Gemm gemm;
  const std::vector<std::pair<std::string, std::function<void()>>> kernels = {
      {"gemm", [&] { gemm.run(DType::BF16, g, g, g, 1, a, b, c, compute); }},
      {"attention", [&] { attention_forward(Elem::BF16, att, q, k, v, o, lse, compute); }},
      {"memory",
       [&] { memory_op(in, out, static_cast<int64_t>(mem_bytes), static_cast<int64_t>(mem_bytes), compute); }},
  };
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * reps));
  for (auto& e : ev) CS_CUDA(cudaEventCreate(&e));
  // `reps` runs back to back on the compute stream after `warmup`; the median run.
  auto timed = [&](const std::function<void()>& f) {
    for (int i = 0; i < warmup; ++i) f();
    for (int r = 0; r < reps; ++r) {
      CS_CUDA(cudaEventRecord(ev[static_cast<size_t>(2 * r)], compute));
      f();
      CS_CUDA(cudaEventRecord(ev[static_cast<size_t>(2 * r + 1)], compute));
    }
  };
  auto median = [&] {
    CS_CUDA(cudaEventSynchronize(ev.back()));
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      float ms = 0;
      CS_CUDA(cudaEventElapsedTime(&ms, ev[static_cast<size_t>(2 * r)], ev[static_cast<size_t>(2 * r + 1)]));
      t.push_back(ms * 1e-3);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::vector<OverlapMeasurement> result;
  for (const auto& [name, f] : kernels) {
    timed(f);
    const double alone = median();
    for (const std::string comm : {"p2p", "collective"}) {
      // GPU 1 joins only after the whole window, so GPU 0's NCCL kernel waits (resident)
      // throughout; a short spin first on the compute stream lets it reach its SMs.
      const double window = 2.0 * (warmup + reps) * alone + 0.02;
      CS_CUDA(cudaSetDevice(1));
      spin(window, comm1);
      CS_CUDA(cudaSetDevice(0));
      CS_NCCL(ncclGroupStart());
      if (comm == "p2p") {
        CS_NCCL(ncclRecv(buf0, comm_bytes, ncclInt8, 1, comms[0], comm0));
        CS_NCCL(ncclSend(buf1, comm_bytes, ncclInt8, 0, comms[1], comm1));
      } else {
        CS_NCCL(ncclAllReduce(buf0, buf0, comm_bytes / 2, ncclBfloat16, ncclSum, comms[0], comm0));
        CS_NCCL(ncclAllReduce(buf1, buf1, comm_bytes / 2, ncclBfloat16, ncclSum, comms[1], comm1));
      }
      CS_NCCL(ncclGroupEnd());
      CS_CUDA(cudaSetDevice(0));
      spin(1e-3, compute);
      timed(f);
      const double shared = median();
      CS_CUDA(cudaStreamSynchronize(comm0));
      CS_CUDA(cudaSetDevice(1));
      CS_CUDA(cudaStreamSynchronize(comm1));
      CS_CUDA(cudaSetDevice(0));
      result.push_back({comm, name, alone, shared});
    }
  }
  for (auto& e : ev) cudaEventDestroy(e);
  for (void* p : bufs) cudaFree(p);
  cudaFree(buf0);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(comm0);
  CS_CUDA(cudaSetDevice(1));
  cudaFree(buf1);
  cudaStreamDestroy(comm1);
  CS_CUDA(cudaSetDevice(0));
  for (auto cm : comms) ncclCommDestroy(cm);
  return result;
}

}  // namespace clustersim::real
