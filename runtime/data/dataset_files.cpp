// dataset_files.cpp - presence check for packaged data files, and whether a path is the packaged one.
#include "runtime/data/dataset_files.h"

#include <filesystem>

#include "runtime/core/error.h"

namespace ddp::data {

void require_data_file(const std::string& path, const std::string& debian_package) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::exists(status)) {
    DDP_CHECK(std::filesystem::is_regular_file(status), "data file '", path,
              "' exists but is not a regular file; pass the path of the file itself");
    return;
  }
  if (debian_package.empty()) DDP_FAIL("data file '", path, "' does not exist; check the path");
  DDP_FAIL("data file '", path, "' does not exist. It comes with the Debian package ", debian_package,
           ": `tools/ddp demo` installs it, or run `apt-get install ", debian_package,
           "` (as root, after `apt-get update`)");
}

std::string package_if_packaged_path(const std::string& path, const std::string& packaged_path,
                                     const std::string& debian_package) {
  const auto normal = [](const std::string& p) {
    std::string s = std::filesystem::path(p).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  return normal(path) == normal(packaged_path) ? debian_package : "";
}

}  // namespace ddp::data
