// Portability macros shared by the host and device code.
#pragma once

#if defined(__CUDACC__)
#define WINRS_HD __host__ __device__
#define WINRS_UNROLL _Pragma("unroll")
#else
#define WINRS_HD
#define WINRS_UNROLL
#endif
