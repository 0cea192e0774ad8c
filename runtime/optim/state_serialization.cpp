// state_serialization.cpp - see state_serialization.h. Layout: u64 count, then per entry u64 name length,
// name, i32 dtype, u64 rank, i64 dims, u64 byte count, bytes.
#include "runtime/optim/state_serialization.h"

#include <cstring>

namespace ddp::optim {
namespace {
template <class T>
void put(std::vector<char>& out, const T& v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

struct Reader {
  const char* data;
  size_t size, pos = 0;
  void need(size_t n) const {
    DDP_CHECK(pos + n <= size, "optimizer state bytes: truncated at byte ", pos, " of ", size,
              " (needed ", n, " more); the sender and receiver disagree on the state's size");
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
};
}  // namespace

std::vector<char> serialize_state(const std::map<std::string, Tensor>& state) {
  std::vector<char> out;
  put<uint64_t>(out, state.size());
  for (auto& [name, t] : state) {
    put<uint64_t>(out, name.size());
    out.insert(out.end(), name.begin(), name.end());
    put<int32_t>(out, static_cast<int32_t>(t.dtype()));
    put<uint64_t>(out, static_cast<uint64_t>(t.dim()));
    for (int64_t d : t.shape()) put<int64_t>(out, d);
    Tensor host = t.to(Device::cpu());
    put<uint64_t>(out, host.nbytes());
    const char* p = static_cast<const char*>(host.raw_data());
    out.insert(out.end(), p, p + host.nbytes());
  }
  return out;
}

std::map<std::string, Tensor> deserialize_state(const char* data, size_t size) {
  Reader r{data, size};
  std::map<std::string, Tensor> out;
  const uint64_t count = r.get<uint64_t>();
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t len = r.get<uint64_t>();
    r.need(len);
    std::string name(data + r.pos, len);
    r.pos += len;
    const auto dtype = static_cast<DType>(r.get<int32_t>());
    const uint64_t ndim = r.get<uint64_t>();
    DDP_CHECK(ndim <= 16, "optimizer state bytes: entry ", name, " claims ", ndim, " dimensions");
    Shape shape(ndim);
    for (auto& d : shape) d = r.get<int64_t>();
    const uint64_t nbytes = r.get<uint64_t>();
    Tensor t = Tensor::empty(shape, dtype);
    DDP_CHECK(nbytes == t.nbytes(), "optimizer state bytes: entry ", name, " has ", nbytes,
              " bytes for shape ", shape_str(shape));
    r.need(nbytes);
    std::memcpy(t.raw_data(), data + r.pos, nbytes);
    r.pos += nbytes;
    out.emplace(std::move(name), std::move(t));
  }
  return out;
}

}  // namespace ddp::optim
