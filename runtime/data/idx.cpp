// idx.cpp - IDX parsing over zlib's gz* interface, which reads gzip'd and plain files alike. Data is
// read in chunks as it arrives, so a corrupt header that claims billions of elements fails on the size
// check instead of allocating them.
#include "runtime/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "runtime/core/error.h"
#include "runtime/data/dataset_files.h"

namespace ddp::data {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

// An open gz stream that reports every zlib error with the file's name.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    DDP_CHECK(file_ != nullptr, "IDX file '", path, "': cannot be opened for reading (permissions?)");
    gzbuffer(file_, 1 << 17);
  }
  ~GzReader() {
    if (file_) gzclose_r(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; returns how many arrived (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(file_, static_cast<char*>(dst) + got, chunk);
      check_stream();
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }
  bool compressed() const { return gzdirect(file_) == 0; }

 private:
  void check_stream() {
    int errnum = Z_OK;
    const char* msg = gzerror(file_, &errnum);
    if (errnum == Z_OK) return;
    if (errnum == Z_BUF_ERROR)
      DDP_FAIL("IDX file '", path_, "': the gzip stream is cut short (", msg,
               "); the file is truncated, reinstall or re-download it");
    DDP_FAIL("IDX file '", path_, "': reading failed: ", msg, " (zlib error ", errnum,
             "); the file is corrupt, reinstall or re-download it");
  }
  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t big_endian32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::string magic_meaning(uint32_t magic) {
  if (magic == kIdxImagesMagic) return "IDX unsigned-byte images, 3 dims";
  if (magic == kIdxLabelsMagic) return "IDX unsigned-byte labels, 1 dim";
  return "IDX unsigned-byte, " + std::to_string(magic & 0xFF) + " dims";
}

}  // namespace

IdxArray read_idx(const std::string& path, uint32_t expected_magic, const std::string& debian_package) {
  require_data_file(path, debian_package);
  GzReader in(path);
  const char* what = in.compressed() ? "decompressed data" : "file";

  uint8_t head[4];
  const size_t got_head = in.read(head, 4);
  DDP_CHECK(got_head == 4, "IDX file '", path, "': truncated, the ", what, " has only ", got_head,
            " bytes, less than the 4-byte magic number");
  const uint32_t magic = big_endian32(head);
  DDP_CHECK(magic == expected_magic, "IDX file '", path, "': bad magic number ", hex32(magic), ", expected ",
            hex32(expected_magic), " (", magic_meaning(expected_magic), ")",
            (head[0] || head[1]) ? "; this is not an IDX file"
            : head[2] != 0x08    ? "; only the unsigned-byte type (0x08) is supported"
                                 : "; the number of dimensions differs");

  IdxArray out;
  const int ndims = head[3];
  uint8_t dim_bytes[4 * 255];
  const size_t got_dims = in.read(dim_bytes, static_cast<size_t>(4 * ndims));
  DDP_CHECK(got_dims == static_cast<size_t>(4 * ndims), "IDX file '", path,
            "': truncated inside the header (", ndims, " dims need ", 4 * ndims,
            " bytes after the magic, the ", what, " has ", got_dims, ")");
  uint64_t expected_bytes = 1;
  constexpr uint64_t kMaxBytes = uint64_t{1} << 40;  // far above any real IDX file; stops overflow
  for (int d = 0; d < ndims; ++d) {
    const uint32_t v = big_endian32(dim_bytes + 4 * d);
    out.dims.push_back(v);
    DDP_CHECK(v > 0, "IDX file '", path, "': dimension ", d, " is 0; an IDX file here must hold data");
    DDP_CHECK(expected_bytes <= kMaxBytes / v, "IDX file '", path, "': dims ", dims_str(out.dims),
              "... describe more than 2^40 bytes; the header is corrupt");
    expected_bytes *= v;
  }

  // Read in chunks so a lying header cannot make us allocate what the file does not hold.
  constexpr size_t kChunk = size_t{1} << 24;
  while (out.data.size() < expected_bytes) {
    const size_t before = out.data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, expected_bytes - before));
    out.data.resize(before + want);
    const size_t got = in.read(out.data.data() + before, want);
    out.data.resize(before + got);
    DDP_CHECK(got == want, "IDX file '", path, "': truncated, dims ", dims_str(out.dims), " need ",
              expected_bytes, " data bytes after the ", 4 + 4 * ndims, "-byte header but the ", what,
              " holds only ", out.data.size(), "; the file is cut short or its header is wrong");
  }
  uint8_t extra[4096];
  size_t trailing = 0;
  for (size_t got; (got = in.read(extra, sizeof extra)) > 0;) trailing += got;
  DDP_CHECK(trailing == 0, "IDX file '", path, "': ", trailing, " bytes follow the ", expected_bytes,
            " data bytes that dims ", dims_str(out.dims), " describe; the dims do not match the ", what,
            " size");
  return out;
}

IdxImagesAndLabels read_idx_images_and_labels(const std::string& images_path, const std::string& labels_path,
                                              const std::string& debian_package) {
  IdxImagesAndLabels out;
  out.images = read_idx(images_path, kIdxImagesMagic, debian_package);
  out.labels = read_idx(labels_path, kIdxLabelsMagic, debian_package);
  DDP_CHECK(out.images.dims[0] == out.labels.dims[0], "IDX files '", images_path, "' and '", labels_path,
            "': ", out.images.dims[0], " images but ", out.labels.dims[0],
            " labels; the two files must describe the same samples (mixed up train and test files?)");
  return out;
}

}  // namespace ddp::data
