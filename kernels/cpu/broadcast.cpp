// broadcast.cpp - shape arithmetic of NumPy broadcasting.
#include "kernels/cpu/broadcast.h"

#include <algorithm>
#include <cstddef>

namespace ddp::kernels::cpu {

Dims broadcast_shapes(const Dims& a, const Dims& b, bool* ok) {
  *ok = true;
  size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      *ok = false;
      return {};
    }
  }
  return out;
}

Dims broadcast_strides(const Dims& in, const Dims& out) {
  Dims s(out.size(), 0);
  int64_t stride = 1;
  size_t off = out.size() - in.size();
  for (size_t i = in.size(); i-- > 0;) {
    s[i + off] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

}  // namespace ddp::kernels::cpu
