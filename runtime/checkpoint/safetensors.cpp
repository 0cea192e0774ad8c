// safetensors.cpp - the byte layout and I/O of safetensors files: length prefix, header, data section.
// The header itself (JSON, validation) lives in safetensors_header.cpp; the atomic write in atomic_file.cpp.
#include "runtime/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include "runtime/checkpoint/atomic_file.h"
#include "runtime/checkpoint/safetensors_header.h"
#include "runtime/core/error.h"

namespace ddp::checkpoint {

// The data section is written as the host's bytes; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little,
              "safetensors.cpp writes host bytes as little-endian data: add byte swapping for this host");

namespace {

#define DDP_BAD_FILE(...) DDP_FAIL("safetensors file '", source, "': ", __VA_ARGS__)

// Copies n bytes at offset into dst; throws when the source cannot provide them.
using ByteReader = std::function<void(uint64_t offset, uint64_t n, uint8_t* dst)>;

struct Layout {
  std::string header;                    // padded JSON
  std::vector<const TensorView*> order;  // data section order
};

// Validates the views and orders them by descending element size, then name, so each tensor starts at a
// multiple of its element size (the data section itself starts at 8 + header length, a multiple of 8).
Layout plan_layout(const std::vector<TensorView>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  Layout layout;
  std::set<std::string_view> names;
  for (const TensorView& t : tensors) {
    checked_tensor_bytes(t);
    DDP_CHECK(names.insert(t.name).second, "cannot save two tensors named '", t.name,
              "': names in a checkpoint must be unique");
    layout.order.push_back(&t);
  }
  std::stable_sort(layout.order.begin(), layout.order.end(), [](const TensorView* a, const TensorView* b) {
    size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  layout.header = encode_header(layout.order, metadata);
  return layout;
}

std::array<uint8_t, 8> length_prefix(uint64_t n) {
  std::array<uint8_t, 8> bytes{};
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
  return bytes;
}

SafetensorsContent parse_from(uint64_t size, const ByteReader& read, const std::string& source) {
  if (size < 8)
    DDP_BAD_FILE("the file has ", size,
                 " bytes, fewer than the 8-byte header length (truncated or empty file)");
  uint8_t prefix[8];
  read(0, 8, prefix);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
  if (header_bytes == 0) DDP_BAD_FILE("the header length is 0 (not a safetensors file)");
  if (header_bytes > size - 8)
    DDP_BAD_FILE("the header length ", header_bytes, " is larger than the rest of the file (", size - 8,
                 " bytes): truncated file or not a safetensors file");
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    DDP_BAD_FILE("the header length ", header_bytes, " exceeds the limit of ", kMaxSafetensorsHeaderBytes,
                 " bytes");
  std::string header(header_bytes, '\0');
  read(8, header_bytes, reinterpret_cast<uint8_t*>(header.data()));
  const uint64_t data_start = 8 + header_bytes;
  ParsedHeader parsed = parse_header(header, size - data_start, source);

  SafetensorsContent content;
  content.metadata = std::move(parsed.metadata);
  content.tensors.reserve(parsed.entries.size());
  for (HeaderEntry& e : parsed.entries) {
    NamedBuffer t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    // Safe to allocate: parse_header checked end <= data section size <= real file size.
    t.bytes.resize(e.end - e.begin);
    if (!t.bytes.empty()) read(data_start + e.begin, t.bytes.size(), t.bytes.data());
    content.tensors.push_back(std::move(t));
  }
  return content;
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::vector<uint8_t> encode_safetensors(const std::vector<TensorView>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  Layout layout = plan_layout(tensors, metadata);
  size_t total = 8 + layout.header.size();
  for (const TensorView* t : layout.order) total += t->nbytes;
  std::vector<uint8_t> out(total);
  auto prefix = length_prefix(layout.header.size());
  std::memcpy(out.data(), prefix.data(), 8);
  std::memcpy(out.data() + 8, layout.header.data(), layout.header.size());
  size_t at = 8 + layout.header.size();
  for (const TensorView* t : layout.order) {
    if (t->nbytes) std::memcpy(out.data() + at, t->data, t->nbytes);
    at += t->nbytes;
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata, const WriteOptions& options) {
  Layout layout = plan_layout(tensors, metadata);
  const size_t chunk = std::max<size_t>(options.chunk_bytes, 1);
  AtomicFileWriter file(path);
  auto report = [&] {
    if (options.on_progress) options.on_progress(file.bytes_written());
  };
  auto prefix = length_prefix(layout.header.size());
  file.write(prefix.data(), prefix.size());
  file.write(layout.header.data(), layout.header.size());
  report();
  for (const TensorView* t : layout.order) {
    const uint8_t* p = static_cast<const uint8_t*>(t->data);
    for (size_t done = 0; done < t->nbytes; done += chunk) {
      file.write(p + done, std::min(chunk, t->nbytes - done));
      report();
    }
  }
  file.commit();
}

SafetensorsContent parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  ByteReader read = [&](uint64_t offset, uint64_t n, uint8_t* dst) { std::memcpy(dst, data + offset, n); };
  return parse_from(size, read, source);
}

SafetensorsContent read_safetensors(const std::string& path) {
  const std::string& source = path;
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) DDP_BAD_FILE("cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) DDP_BAD_FILE("cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) DDP_BAD_FILE("not a regular file");
  ByteReader read = [&](uint64_t offset, uint64_t n, uint8_t* dst) {
    while (n > 0) {
      ssize_t r = ::pread(fd.get(), dst, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) DDP_BAD_FILE("read at offset ", offset, " failed: ", std::strerror(errno));
      if (r == 0)
        DDP_BAD_FILE("the file ended at offset ", offset, " while reading (was it truncated meanwhile?)");
      dst += r;
      n -= static_cast<uint64_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  };
  return parse_from(static_cast<uint64_t>(st.st_size), read, source);
}

}  // namespace ddp::checkpoint
