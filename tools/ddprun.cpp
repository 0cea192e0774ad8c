// ddprun.cpp - the torchrun-compatible launcher: `ddprun [options] PROGRAM [ARGS...]` starts PROGRAM once per
// local rank with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / ... set. The logic lives in runtime/launch/;
// this file only maps errors to exit codes (2: bad command line, 1: launcher failure). See docs/launcher.md.
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "runtime/launch/launch_config.h"
#include "runtime/launch/supervisor.h"

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto config = ddp::launch::parse_launch_config(args);
    if (!config) {
      std::fputs(ddp::launch::launch_help().c_str(), stdout);
      return 0;
    }
    return ddp::launch::run_workers(*config);
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", ddp::log::for_user(e.what()).c_str());
    return 2;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "%s\n", ddp::log::error_line("ddprun", e.what()).c_str());
    return 1;
  }
}
