// blas_threads.cpp - thin wrappers over OpenBLAS's thread controls.
#include "runtime/core/blas_threads.h"

#include "runtime/core/error.h"

extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace ddp {
void set_blas_threads(int n) {
  DDP_CHECK(n >= 1, "BLAS threads must be >= 1 (got ", n, ")");
  openblas_set_num_threads(n);
}
int blas_threads() { return openblas_get_num_threads(); }
}  // namespace ddp
