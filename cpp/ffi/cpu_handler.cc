// XLA FFI handler "winrs_backward_filter" for platform "cpu".
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/backward_filter.h"
#include "ffi/handlers.h"
#include "ffi/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace winrs::ffi_glue {
namespace {

// Work sharing on XLA's intra-op thread pool. The calling thread works too, and waits only for the items to
// finish (not for the scheduled tasks to start), so a busy pool can never deadlock the call. Without a pool,
// plain threads are used.
cpu::ParallelFor make_parallel_for(ffi::ThreadPool& pool) {
  return [&pool](int64_t count, const std::function<void(int64_t)>& body) {
    int64_t workers = pool.num_threads();
    const bool have_pool = workers > 0;
    if (!have_pool) workers = std::max(1u, std::thread::hardware_concurrency());
    workers = std::min(workers, count);
    if (workers <= 1) {
      for (int64_t i = 0; i < count; ++i) body(i);
      return;
    }
    struct State {
      std::atomic<int64_t> next{0}, done{0};
      int64_t count = 0;
      const std::function<void(int64_t)>* body = nullptr;
      std::mutex mutex;
      std::condition_variable finished;
    };
    auto state = std::make_shared<State>();
    state->count = count;
    state->body = &body;
    auto work = [state] {
      for (int64_t i; (i = state->next.fetch_add(1)) < state->count;) {
        (*state->body)(i);
        if (state->done.fetch_add(1) + 1 == state->count) {
          std::lock_guard<std::mutex> lock(state->mutex);
          state->finished.notify_all();
        }
      }
    };
    std::vector<std::thread> threads;
    for (int64_t t = 1; t < workers; ++t) {
      if (have_pool) {
        pool.Schedule([work] { work(); });
      } else {
        threads.emplace_back(work);
      }
    }
    work();
    std::unique_lock<std::mutex> lock(state->mutex);
    state->finished.wait(lock, [&] { return state->done.load() == count; });
    lock.unlock();
    for (std::thread& t : threads) t.join();
  };
}

ffi::Error backward_filter_cpu(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> input,
                               ffi::Buffer<ffi::F32> out_grad, ffi::ResultBuffer<ffi::F32> filter_grad,
                               ffi::ResultBuffer<ffi::F32> workspace, PlanAttrs attrs) {
  Launch launch;
  const std::string error = decode_launch(input, out_grad, filter_grad, workspace, attrs, &launch);
  if (!error.empty()) return ffi::Error::InvalidArgument("winrs_backward_filter: " + error);
  try {
    const Problem& p = launch.problem;
    const int64_t workspace_elems = (launch.grid.buckets() - 1) * p.filter_elems();
    for (int64_t g = 0; g < launch.groups; ++g)
      cpu::backward_filter(
          p, launch.variant0, launch.variant1, launch.grid,
          {input.typed_data() + g * p.input_elems(), out_grad.typed_data() + g * p.grad_elems(),
           filter_grad->typed_data() + g * p.filter_elems(), workspace->typed_data() + g * workspace_elems},
          make_parallel_for(pool));
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("winrs_backward_filter: ") + e.what());
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace winrs::ffi_glue

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsBackwardFilterCpu, winrs::ffi_glue::backward_filter_cpu,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::ThreadPool>()
                                   .Arg<ffi::Buffer<ffi::F32>>()
                                   .Arg<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::PlanAttrs>()));
