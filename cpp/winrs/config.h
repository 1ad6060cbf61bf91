// Portability macros shared by the host and device code.
#pragma once

#if defined(__CUDACC__)
#define WINRS_HD __host__ __device__
// Inlined in the kernels whatever their size: a piece of a block's walk whose locals stay in registers.
#define WINRS_HD_INLINE __host__ __device__ __forceinline__
#define WINRS_UNROLL _Pragma("unroll")
#else
#define WINRS_HD
#define WINRS_HD_INLINE inline
#define WINRS_UNROLL
#endif
