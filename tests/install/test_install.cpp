// test_install.cpp - `cmake --install` puts headers, the library, ddprun and a package config in a prefix,
// and a separate project builds and runs against it with find_package(ddp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {
int run(const std::string& cmd) { return std::system((cmd + " > /dev/null 2>&1").c_str()); }
}  // namespace

TEST(Install, ConsumerProjectFindsAndLinksDdpRuntime) {
  namespace fs = std::filesystem;
  const fs::path work = fs::temp_directory_path() / ("ddp_install_" + std::to_string(::getpid()));
  fs::remove_all(work);
  const std::string prefix = (work / "prefix").string();
  ASSERT_EQ(run("cmake --install " DDP_BUILD_DIR " --prefix " + prefix), 0) << "cmake --install failed";
  EXPECT_TRUE(fs::exists(prefix + "/bin/ddprun"));
  EXPECT_TRUE(fs::exists(prefix + "/include/ddp/runtime/ddp/distributed_data_parallel.h"));
  EXPECT_TRUE(fs::exists(prefix + "/lib/cmake/ddp/ddpConfig.cmake"));
  const std::string build = (work / "consumer").string();
  ASSERT_EQ(run("cmake -S " DDP_SOURCE_DIR "/tests/consumer -B " + build +
                " -G Ninja -DCMAKE_PREFIX_PATH=" + prefix),
            0)
      << "configuring the consumer against the install failed";
  ASSERT_EQ(run("cmake --build " + build), 0) << "building the consumer failed";
  EXPECT_EQ(run(build + "/consumer"), 0) << "the consumer did not run correctly";
  EXPECT_EQ(run(prefix + "/bin/ddprun --help"), 0) << "installed ddprun does not start";
  fs::remove_all(work);
}
