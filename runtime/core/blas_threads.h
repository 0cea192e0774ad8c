// blas_threads.h - the number of threads OpenBLAS uses in this process (one per rank when ranks share cores).
#pragma once

namespace ddp {
// Sets OpenBLAS's thread count (n >= 1).
void set_blas_threads(int n);
// OpenBLAS's current thread count.
int blas_threads();
}  // namespace ddp
