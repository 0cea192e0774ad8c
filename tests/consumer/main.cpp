// main.cpp - uses the installed library: a tiny autograd computation and a world-of-one process group.
#include <cstdio>

#include "runtime/autograd/engine.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

// The installed headers need no configuration macro; the exported target must not define the library's own
// build switch in a consumer's code.
#ifdef DDP_WITH_CUDA
#error "the installed ddp::runtime forces DDP_WITH_CUDA on its consumers"
#endif

int main() {
  using namespace ddp;
  Tensor w = Tensor::from_vector({2.0, 3.0}, {2}, DType::F64).set_requires_grad(true);
  autograd::backward(ops::sum(w * w));
  std::vector<double> g = w.grad().to_double_vector();
  double total = 0;
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    Tensor t = Tensor::from_vector({g[0] + g[1]}, {1}, DType::F64);
    pg.allreduce(dist::CommBuffer{t.raw_data(), 1, DType::F64, Device::cpu(), t.storage()})->wait();
    total = t.item();
  });
  std::printf("consumer ok: grad sum %.1f\n", total);
  return total == 10.0 ? 0 : 1;
}
