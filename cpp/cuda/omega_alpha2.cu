// Explicit instantiation of the Omega kernels of alpha class 2 (one translation unit per class).
#include "cuda/omega_kernel.cuh"

namespace winrs::cuda {

cudaError_t launch_omega_alpha2(int variant, const OmegaArgs& args, cudaStream_t stream) {
  return launch_alpha_class<2>(variant, args, stream);
}

}  // namespace winrs::cuda
