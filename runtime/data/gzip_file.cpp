// gzip_file.cpp - gzopen/gzwrite with every error checked.
#include "runtime/data/gzip_file.h"

#include <zlib.h>

#include <algorithm>

#include "runtime/core/error.h"

namespace ddp::data {

void write_gzip_file(const std::string& path, const std::vector<uint8_t>& bytes, int level) {
  DDP_CHECK(level >= 1 && level <= 9, "write_gzip_file: level must be in 1..9, got ", level);
  const std::string mode = "wb" + std::to_string(level);
  gzFile f = gzopen(path.c_str(), mode.c_str());
  DDP_CHECK(f != nullptr, "write_gzip_file: cannot create '", path,
            "' (does the directory exist and is it writable?)");
  size_t done = 0;
  while (done < bytes.size()) {
    const auto chunk = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1u << 30));
    const int w = gzwrite(f, bytes.data() + done, chunk);
    if (w <= 0) {
      int errnum = Z_OK;
      const std::string msg = gzerror(f, &errnum);
      gzclose_w(f);
      DDP_FAIL("write_gzip_file: writing '", path, "' failed: ", msg, " (disk full?)");
    }
    done += static_cast<size_t>(w);
  }
  DDP_CHECK(gzclose_w(f) == Z_OK, "write_gzip_file: closing '", path, "' failed (disk full?)");
}

}  // namespace ddp::data
