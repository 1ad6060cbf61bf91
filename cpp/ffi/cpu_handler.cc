// XLA FFI handler "winrs_backward_filter" for platform "cpu".
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cpu/backward_filter.h"
#include "cpu/grouped.h"
#include "ffi/grouped_call.h"
#include "ffi/handlers.h"
#include "ffi/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace winrs::ffi_glue {
namespace {

// Work sharing on XLA's intra-op thread pool. The calling thread works too, and waits only for the items to
// finish (not for the scheduled tasks to start), so a busy pool can never deadlock the call. Without a pool,
// plain threads are used. Exceptions never leave a worker: the first one is kept, the remaining items are
// skipped, and `error` receives its message once every item has finished (nothing still uses `body`).
struct Pool {
  ffi::ThreadPool* pool;
  std::string* error;

  void operator()(int64_t count, const std::function<void(int64_t)>& body) const {
    struct State {
      std::atomic<int64_t> next{0}, done{0};
      std::atomic<bool> failed{false};
      int64_t count = 0;
      const std::function<void(int64_t)>* body = nullptr;
      std::mutex mutex;
      std::condition_variable finished;
      std::string message;
    };
    auto state = std::make_shared<State>();
    state->count = count;
    state->body = &body;
    auto work = [state]() noexcept {
      for (int64_t i; (i = state->next.fetch_add(1)) < state->count;) {
        if (!state->failed.load()) {
          try {
            (*state->body)(i);
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(state->mutex);
            if (!state->failed.exchange(true)) state->message = e.what();
          } catch (...) {
            std::lock_guard<std::mutex> lock(state->mutex);
            if (!state->failed.exchange(true)) state->message = "unknown error";
          }
        }
        if (state->done.fetch_add(1) + 1 == state->count) {
          std::lock_guard<std::mutex> lock(state->mutex);
          state->finished.notify_all();
        }
      }
    };
    int64_t workers = pool->num_threads();
    const bool have_pool = workers > 0;
    if (!have_pool) workers = std::max(1u, std::thread::hardware_concurrency());
    workers = std::min(workers, count);
    std::vector<std::thread> threads;
    for (int64_t t = 1; t < workers; ++t) {
      try {
        if (have_pool) {
          pool->Schedule([work] { work(); });
        } else {
          threads.emplace_back(work);
        }
      } catch (...) {
        break;  // fewer helpers; the calling thread still finishes every item
      }
    }
    work();
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->finished.wait(lock, [&] { return state->done.load() >= count; });
    }
    for (std::thread& t : threads) t.join();
    if (state->failed.load() && error->empty()) *error = state->message;
  }
};

// Every WinRS target (handlers.h: the current ones and those before the strides, Attrs their attributes):
// the operator decode_target makes of the call, run by the CPU executor.
template <const char* Target, class Attrs>
ffi::Error backward_filter_cpu(ffi::ThreadPool pool, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                               ffi::ResultBuffer<ffi::F32> filter_grad, ffi::ResultBuffer<ffi::F32> workspace,
                               Attrs attrs) {
  return run_call<BackwardFilterOp>(
      Target,
      [&](BackwardFilterOp* op) { return decode_target(input, out_grad, filter_grad, workspace, attrs, op); },
      [&](const BackwardFilterOp& op) {
        std::string error;
        cpu::backward_filter(op,
                             {input.untyped_data(), out_grad.untyped_data(), filter_grad->typed_data(),
                              workspace->typed_data()},
                             Pool{&pool, &error});
        return error;
      });
}

ffi::Error grouped_filter_grad_cpu(ffi::ThreadPool pool, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                   ffi::ResultBuffer<ffi::F32> filter_grad,
                                   ffi::ResultBuffer<ffi::F32> workspace, GroupedAttrs attrs) {
  return run_call<GroupedOp>(
      "winrs_grouped_filter_grad",
      [&](GroupedOp* op) { return decode_grouped_call(input, out_grad, filter_grad, workspace, attrs, op); },
      [&](const GroupedOp& op) {
        std::string error;
        cpu::grouped_filter_grad(op,
                                 {input.untyped_data(), out_grad.untyped_data(), filter_grad->typed_data(),
                                  workspace->typed_data()},
                                 Pool{&pool, &error});
        return error;
      });
}

}  // namespace
}  // namespace winrs::ffi_glue

// The handler symbol of one WinRS target (module.cc registers each under its name).
#define WINRS_BACKWARD_FILTER_SYMBOL(symbol, target, attrs)                                            \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                                       \
      symbol, (winrs::ffi_glue::backward_filter_cpu<winrs::ffi_glue::target, winrs::ffi_glue::attrs>), \
      (ffi::Ffi::Bind()                                                                                \
           .Ctx<ffi::ThreadPool>()                                                                     \
           .Arg<ffi::AnyBuffer>()                                                                      \
           .Arg<ffi::AnyBuffer>()                                                                      \
           .Ret<ffi::Buffer<ffi::F32>>()                                                               \
           .Ret<ffi::Buffer<ffi::F32>>()                                                               \
           .Attrs<winrs::ffi_glue::attrs>()))

WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilterCpu, kTarget, PlanAttrs);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilter3dCpu, kDepthTarget, DepthAttrs);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilterV2Cpu, kTargetV2, PlanAttrsV2);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilter3dV2Cpu, kDepthTargetV2, DepthAttrsV2);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilterV1Cpu, kTargetV1, PlanAttrsV1);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilter3dV1Cpu, kDepthTargetV1, DepthAttrsV1);

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsGroupedFilterGradCpu, winrs::ffi_glue::grouped_filter_grad_cpu,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::ThreadPool>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::GroupedAttrs>()));
