// dataset_files.h - the check that a data file installed by a Debian package is present, with an error that
// says which package brings it and how to install it.
#pragma once
#include <string>

namespace ddp::data {

// Raises ddp::Error when `path` does not exist or is not a regular file. With a non-empty `debian_package`
// the message names the package and the two ways to get it (`tools/ddp demo`, `apt-get install <package>`).
void require_data_file(const std::string& path, const std::string& debian_package);

// `debian_package` when `path` is where that package installs its data (`packaged_path`, compared after
// lexical normalisation: "a/./b/" is "a/b"), else "": a missing file the user pointed to elsewhere is a wrong
// path, not a missing package.
std::string package_if_packaged_path(const std::string& path, const std::string& packaged_path,
                                     const std::string& debian_package);

}  // namespace ddp::data
