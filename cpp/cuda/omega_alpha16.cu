// Explicit instantiation of the Omega kernels of alpha class 16 (one translation unit per class).
#include "cuda/omega_kernel.cuh"

namespace winrs::cuda {

cudaError_t launch_omega_alpha16(int variant, const OmegaArgs& args, cudaStream_t stream) {
  return launch_alpha_class<16>(variant, args, stream);
}

}  // namespace winrs::cuda
