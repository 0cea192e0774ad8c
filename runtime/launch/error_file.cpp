// error_file.cpp - TORCHELASTIC_ERROR_FILE writing and reading (see error_file.h).
#include "runtime/launch/error_file.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace ddp::launch {

void write_error_file(const std::string& path, const std::string& message) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json j;
  j["message"]["message"] = message;
  j["message"]["extraInfo"]["py_callstack"] = message;
  j["message"]["extraInfo"]["timestamp"] =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  // Replace invalid UTF-8 rather than fail: the message may quote arbitrary input.
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DDP_CHECK(out.good(), "cannot create the error file ", tmp, " (TORCHELASTIC_ERROR_FILE)");
    out << text << "\n";
    out.close();
    DDP_CHECK(out.good(), "cannot write the error file ", tmp, " (TORCHELASTIC_ERROR_FILE)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  DDP_CHECK(!ec, "cannot rename the error file onto ", path, " (TORCHELASTIC_ERROR_FILE)");
}

bool report_error_to_launcher(const std::string& message) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return false;
  try {
    write_error_file(path, message);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: could not write the launcher's error file: %s\n", e.what());
    return false;
  }
}

std::optional<std::string> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    const auto& m = j.at("message");
    if (m.is_string()) return m.get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].contains("py_callstack"))
      return m["extraInfo"]["py_callstack"].get<std::string>();
    return m.at("message").get<std::string>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddp::launch
