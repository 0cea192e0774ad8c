// test_tool_messages.cpp - what ddprun, trace_summary, bucket_sim and checkpoint_loss print when something is
// wrong: no source locations (unless DDP_DEBUG=INFO), the program's name once, bytes of a corrupt file
// escaped rather than sent raw to the terminal; their --help lists only flags that mean something to them.
// Also escape_for_terminal itself, over random byte strings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "tests/support/run_process.h"

namespace ddp {
namespace {
namespace fs = std::filesystem;

std::string bin(const std::string& name) { return std::string(DDP_BIN_DIR) + "/" + name; }

testing::ProcessResult run(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
  testing::ProcessOptions o;
  o.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "DDP_DEBUG", "DDP_RUN_TOKEN"};
  o.set_env = std::move(env);
  o.timeout_s = 60;
  return testing::run_process(argv, o);
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ddp_tool_messages_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& content) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

// True when `s` is valid UTF-8 without control characters other than newline and tab.
bool terminal_safe(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) return false;
      ++i;
      continue;
    }
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || c > 0xF4 || i + n > s.size()) return false;
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp < 0xA0))
      return false;
    i += n;
  }
  return true;
}

// A corrupt trace: valid JSON up to bytes a JSON parser quotes in its error (invalid UTF-8, an ESC sequence).
const std::string kCorruptTrace = std::string("{\"traceEvents\": [") + "\xff\xfe\x1b[2J\xc3" + "]}";

}  // namespace

TEST(ToolMessages, CorruptTraceIsReportedEscapedWithoutSourceLocation) {
  TempDir dir;
  const std::string trace = dir.file("corrupt.json", kCorruptTrace);
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{bin("trace_summary"), trace},
        std::vector<std::string>{bin("bucket_sim"), "--model", "mlp", "--world", "2", "--trace", trace}}) {
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 1) << argv[0] << "\n" << r.err;
    EXPECT_NE(r.err.find("is not valid JSON"), std::string::npos) << r.err;
    EXPECT_TRUE(terminal_safe(r.err))
        << "raw bytes reached the terminal: " << log::escape_for_terminal(r.err);
    EXPECT_NE(r.err.find("\\xff"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << "a source location leaked: " << r.err;
    const std::string program = fs::path(argv[0]).filename().string();
    EXPECT_EQ(r.err.rfind(program + ": ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find(program + ": " + program + ": "), std::string::npos) << "the name twice: " << r.err;
  }
  // DDP_DEBUG=INFO keeps the location for developers (and still escapes).
  auto debug = run({bin("trace_summary"), trace}, {{"DDP_DEBUG", "INFO"}});
  EXPECT_NE(debug.err.find(".cpp:"), std::string::npos) << debug.err;
  EXPECT_TRUE(terminal_safe(debug.err)) << log::escape_for_terminal(debug.err);
}

TEST(ToolMessages, ErrorsOfTheToolsThemselvesHaveNoSourceLocation) {
  TempDir dir;
  // bucket_sim's own check (a DDP_CHECK in tools/bucket_sim.cpp), and ddprun's (one in runtime/launch/).
  auto sim = run({bin("bucket_sim"), "--model", "mlp", "--world", "2"});
  EXPECT_EQ(sim.exit_code, 1) << sim.err;
  EXPECT_EQ(sim.err.rfind("bucket_sim: give --backward-ms", 0), 0u) << sim.err;
  EXPECT_EQ(sim.err.find(".cpp:"), std::string::npos) << sim.err;
  auto launch = run({bin("ddprun"), "--log-dir", "/proc/ddp_no_such_dir", "true"});
  EXPECT_EQ(launch.exit_code, 1) << launch.err;
  EXPECT_NE(launch.err.find("ddprun: cannot create log directory /proc/ddp_no_such_dir/"), std::string::npos)
      << launch.err;
  EXPECT_EQ(launch.err.find(".cpp:"), std::string::npos) << launch.err;
  EXPECT_EQ(launch.err.find("ddprun: ddprun: "), std::string::npos) << launch.err;
  const std::string not_a_checkpoint =
      dir.file("not_a_checkpoint.safetensors", std::string("\x08\0\0\0\0\0\0\0", 8) + "{\"a\": \xff}");
  auto loss = run({bin("checkpoint_loss"), "--checkpoint", not_a_checkpoint, "--batch", not_a_checkpoint});
  EXPECT_EQ(loss.exit_code, 1) << loss.err;
  EXPECT_EQ(loss.err.rfind("checkpoint_loss: error: ", 0), 0u) << loss.err;
  EXPECT_EQ(loss.err.find(".cpp:"), std::string::npos) << loss.err;
  EXPECT_TRUE(terminal_safe(loss.err)) << log::escape_for_terminal(loss.err);
  auto missing = run({bin("trace_summary"), (dir.path / "missing.json").string()});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err.rfind("trace_summary: cannot read trace", 0), 0u) << missing.err;
}

TEST(ToolMessages, HelpListsNoLocalRankWhereItMeansNothing) {
  for (const char* tool : {"trace_summary", "bucket_sim", "checkpoint_loss"}) {
    auto r = run({bin(tool), "--help"});
    EXPECT_EQ(r.exit_code, 0) << tool << "\n" << r.err;
    EXPECT_NE(r.out.find("usage: "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("local-rank"), std::string::npos) << tool << " --help:\n" << r.out;
    auto flag = run({bin(tool), "--local-rank", "0"});
    EXPECT_EQ(flag.exit_code, 2) << tool << " accepted --local-rank:\n" << flag.out << flag.err;
  }
}

// Valid UTF-8 without controls passes unchanged; everything else becomes \xNN byte by byte. Random strings of
// pieces whose expected escape is known: printable ASCII, valid sequences of each length (from the edges of
// their ranges too), controls, C1 controls, lone continuation bytes, bytes that never start a sequence,
// truncated, overlong and surrogate sequences (each followed by ASCII so that no piece completes another).
TEST(ToolMessages, EscapeForTerminalOverRandomPieces) {
  const auto hex = [](const std::string& bytes) {
    std::string out;
    static const char digits[] = "0123456789abcdef";
    for (unsigned char c : bytes) out += std::string("\\x") + digits[c >> 4] + digits[c & 15];
    return out;
  };
  const auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::mt19937 rng(20261201);
  const auto pick = [&](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::string input, expected;
    const int pieces = static_cast<int>(pick(0, 12));
    for (int p = 0; p < pieces; ++p) {
      std::string in, out;
      switch (pick(0, 10)) {
        case 0:
          in = out = std::string(1, static_cast<char>(pick(0x20, 0x7E)));
          break;
        case 1:
          in = out = std::string(1, pick(0, 1) ? '\n' : '\t');
          break;
        case 2: {  // valid, 2..4 bytes, not a C1 control, not a surrogate
          const uint32_t edges[] = {0xA0, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
          uint32_t cp = pick(0, 1) ? edges[pick(0, 7)] : pick(0xA0, 0x10FFFF);
          if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE9;
          in = out = utf8(cp);
          break;
        }
        case 3:
          in = std::string(1, static_cast<char>(pick(0, 0x1F)));
          if (in == "\n" || in == "\t") in = "\x1b";
          out = hex(in);
          break;
        case 4:
          in = "\x7f";
          out = hex(in);
          break;
        case 5:
          in = utf8(pick(0x80, 0x9F));
          out = hex(in);
          break;  // C1 control
        case 6:
          in = std::string(1, static_cast<char>(pick(0x80, 0xBF)));
          out = hex(in);
          break;   // continuation
        case 7: {  // never starts a sequence
          const unsigned char never[] = {0xC0, 0xC1, 0xF5, 0xF8, 0xFE, 0xFF};
          in = std::string(1, static_cast<char>(never[pick(0, 5)]));
          out = hex(in);
          break;
        }
        case 8: {  // truncated: a 3- or 4-byte sequence cut short, then ASCII
          const std::string full = utf8(pick(0, 1) ? pick(0x800, 0xD7FF) : pick(0x10000, 0x10FFFF));
          in = full.substr(0, pick(1, static_cast<uint32_t>(full.size()) - 1));
          out = hex(in) + "z";
          in += "z";
          break;
        }
        case 9: {  // overlong forms and a code point above U+10FFFF
          const char* bad[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\xf4\x90\x80\x80"};
          in = bad[pick(0, 3)];
          out = hex(in) + "z";
          in += "z";
          break;
        }
        default: {  // a UTF-16 surrogate encoded as UTF-8
          in = utf8(pick(0xD800, 0xDFFF));
          out = hex(in) + "z";
          in += "z";
          break;
        }
      }
      input += in;
      expected += out;
    }
    const std::string got = log::escape_for_terminal(input);
    ASSERT_EQ(got, expected) << "trial " << trial << ": input " << hex(input);
    ASSERT_TRUE(terminal_safe(got)) << hex(got);
  }
  EXPECT_EQ(log::escape_for_terminal(""), "");
  EXPECT_EQ(log::escape_for_terminal(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(log::escape_for_terminal("caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x90\xb3"),
            "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x90\xb3");
  // for_user escapes at every level: DDP_DEBUG=INFO keeps locations, not raw bytes.
  const log::Level saved = log::level();
  log::set_level(log::Level::Info);
  EXPECT_EQ(log::for_user("x.cpp:3: bad \xff"), "x.cpp:3: bad \\xff");
  log::set_level(log::Level::Warn);
  EXPECT_EQ(log::for_user("x.cpp:3: bad \xff"), "bad \\xff");
  log::set_level(saved);
}

}  // namespace ddp
