// cli.cpp - the hand-written command-line parser of cli.h: spelling normalisation, typed values, the
// closest-flag suggestion, --help text and the --local-rank / LOCAL_RANK reconciliation.
#include "runtime/core/cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace ddp::cli {

namespace {

// "batch_size" -> "batch-size": the one spelling options are stored under.
std::string dash_spelling(std::string s) {
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// How a number's text parsed: a number, not a number at all, or a number outside the type's range
// ("1e400", "99999999999999999999").
enum class Parsed { Ok, Malformed, OutOfRange };

template <class T>
Parsed parse_number(const std::string& s, T* out) {
  if (s.empty()) return Parsed::Malformed;
  const char* b = s.data();
  const char* e = b + s.size();
  if (*b == '+') ++b;
  T v{};
  auto [p, ec] = std::from_chars(b, e, v);
  if (p != e || (ec != std::errc() && ec != std::errc::result_out_of_range)) return Parsed::Malformed;
  if (ec == std::errc::result_out_of_range) return Parsed::OutOfRange;
  *out = v;
  return Parsed::Ok;
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "1" || s == "yes" || s == "on") return *out = true, true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return *out = false, true;
  return false;
}

// "-5", "-0.5" and "-1e400" are values or positionals, not flags.
bool looks_like_number(const std::string& s) {
  double d;
  return parse_number(s, &d) != Parsed::Malformed;
}

template <class T>
std::string to_text(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool Bounds::contains(double v) const {
  if (min_open ? !(v > min) : !(v >= min)) return false;
  if (max_open ? !(v < max) : !(v <= max)) return false;
  return true;
}

std::string Bounds::text() const {
  const bool has_min = min > -1e308, has_max = max < 1e308;
  if (has_min && has_max) return "in " + std::string(min_open ? "(" : "[") + to_text(min) + ", " + to_text(max) +
                                 (max_open ? ")" : "]");
  if (has_min) return (min_open ? "> " : ">= ") + to_text(min);
  if (has_max) return (max_open ? "< " : "<= ") + to_text(max);
  return "any number";
}

void Parser::check_bounds(const std::string& flag, const std::string& text, double v, const Bounds& b) const {
  if (!b.contains(v)) fail(flag + " must be " + b.text() + ", got " + text);
}

namespace detail {
void fail_choice(const std::string& program, const std::string& flag, const std::string& value,
                 const std::vector<std::string>& allowed) {
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + allowed[i];
  throw UsageError(program + ": " + flag + " got '" + value + "'; allowed values: " + list);
}
}  // namespace detail

Parser::Parser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {
  add("local-rank", &local_rank_flag_,
      "this process's local rank; launchers set it (the LOCAL_RANK environment variable works too)");
  options_.back().default_text = "none";
}

void Parser::fail(const std::string& msg) const { throw UsageError(program_ + ": " + msg); }

void Parser::add_option(Option opt) {
  opt.name = dash_spelling(opt.name);
  if (opt.name.empty() || opt.name[0] == '-')
    DDP_FAIL("cli option name '", opt.name, "' must be given without leading dashes, e.g. \"batch-size\"");
  if (opt.name == "help") DDP_FAIL("cli option --help is built in; choose another name");
  if (find(opt.name)) DDP_FAIL("cli option --", opt.name, " is declared twice in program ", program_);
  options_.push_back(std::move(opt));
}

Parser::Option* Parser::find(const std::string& name) {
  for (auto& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

bool Parser::given(const std::string& name) const {
  std::string n = dash_spelling(name);
  for (auto& o : options_)
    if (o.name == n) return o.given;
  DDP_FAIL("cli: given(\"", name, "\") asks about an option program ", program_, " never declared");
}

namespace {
// Reads an integer of type T from `v` into *out; else returns what is wrong with it (not an integer, or
// outside T's range), to follow the flag's name.
template <class T>
std::string read_integer(const std::string& v, T* out) {
  int64_t x = 0;
  const Parsed parsed = parse_number(v, &x);
  if (parsed == Parsed::Malformed) return "expects an integer, got '" + v + "'";
  if (parsed == Parsed::OutOfRange || x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
    return "got '" + v + "', which is out of range: an integer from " +
           std::to_string(std::numeric_limits<T>::min()) + " to " +
           std::to_string(std::numeric_limits<T>::max());
  *out = static_cast<T>(x);
  return "";
}
}  // namespace

void Parser::add(const std::string& name, int* value, const std::string& help) {
  add_option({name, "INT", help, to_text(*value), false, "", false, [this, value](auto& flag, auto& v) {
                if (auto wrong = read_integer(v, value); !wrong.empty()) fail(flag + " " + wrong);
              }});
}

void Parser::add(const std::string& name, int64_t* value, const std::string& help) {
  add_option({name, "INT", help, to_text(*value), false, "", false, [this, value](auto& flag, auto& v) {
                if (auto wrong = read_integer(v, value); !wrong.empty()) fail(flag + " " + wrong);
              }});
}

void Parser::add(const std::string& name, double* value, const std::string& help) {
  add_option({name, "FLOAT", help, to_text(*value), false, "", false, [this, value](auto& flag, auto& v) {
                double x;
                const Parsed parsed = parse_number(v, &x);
                if (parsed == Parsed::Malformed) fail(flag + " expects a number, got '" + v + "'");
                if (parsed == Parsed::OutOfRange)
                  fail(flag + " got '" + v +
                       "', which is out of range: a number's magnitude must lie between "
                       "about 1e-308 and 1.8e308 (or be 0)");
                if (!std::isfinite(x)) fail(flag + " expects a finite number, got '" + v + "'");
                *value = x;
              }});
}

// The bounded variants parse like the plain ones, then check the range.
void Parser::add(const std::string& name, int* value, const std::string& help, Bounds bounds) {
  add(name, value, help);
  auto plain = options_.back().set;
  options_.back().set = [this, value, plain, bounds](auto& flag, auto& v) {
    plain(flag, v);
    check_bounds(flag, v, *value, bounds);
  };
}

void Parser::add(const std::string& name, int64_t* value, const std::string& help, Bounds bounds) {
  add(name, value, help);
  auto plain = options_.back().set;
  options_.back().set = [this, value, plain, bounds](auto& flag, auto& v) {
    plain(flag, v);
    check_bounds(flag, v, static_cast<double>(*value), bounds);
  };
}

void Parser::add(const std::string& name, double* value, const std::string& help, Bounds bounds) {
  add(name, value, help);
  auto plain = options_.back().set;
  options_.back().set = [this, value, plain, bounds](auto& flag, auto& v) {
    plain(flag, v);
    check_bounds(flag, v, *value, bounds);
  };
}

void Parser::add(const std::string& name, std::string* value, const std::string& help) {
  add_option({name, "STR", help, value->empty() ? "\"\"" : *value, false, "", false,
              [value](auto&, auto& v) { *value = v; }});
}

void Parser::add(const std::string& name, bool* value, const std::string& help) {
  add_option(
      {name, "", help, *value ? "true" : "false", true, "true", false, [this, value](auto& flag, auto& v) {
         if (!parse_bool(v, value)) fail(flag + " expects true or false, got '" + v + "'");
       }});
}

void Parser::add_choice(const std::string& name, std::string* value, std::vector<std::string> allowed,
                        const std::string& help) {
  std::string metavar = "{";
  for (size_t i = 0; i < allowed.size(); ++i) metavar += (i ? "," : "") + allowed[i];
  metavar += "}";
  add_option(
      {name, metavar, help, *value, false, "", false, [value, allowed, prog = program_](auto& flag, auto& v) {
         if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
           detail::fail_choice(prog, flag, v, allowed);
         *value = v;
       }});
}

void Parser::add_choice_optional_value(const std::string& name, std::string* value,
                                       std::vector<std::string> allowed, const std::string& implicit,
                                       const std::string& help) {
  std::string metavar = "[={";
  for (size_t i = 0; i < allowed.size(); ++i) metavar += (i ? "," : "") + allowed[i];
  metavar += "}]";
  add_option({name, metavar, help, *value, true, implicit, false,
              [value, allowed, prog = program_](auto& flag, auto& v) {
                if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
                  detail::fail_choice(prog, flag, v, allowed);
                *value = v;
              }});
}

void Parser::disable_local_rank() {
  local_rank_enabled_ = false;
  options_.erase(std::remove_if(options_.begin(), options_.end(),
                                [](const Option& o) { return o.name == "local-rank"; }),
                 options_.end());
}

void Parser::add_positionals(const std::string& metavar, std::vector<std::string>* values,
                             const std::string& help) {
  positionals_ = values;
  positional_metavar_ = metavar;
  positional_help_ = help;
}

void Parser::fail_unknown(const std::string& flag) const {
  size_t start = flag.find_first_not_of('-');
  std::string name = start == std::string::npos ? "" : flag.substr(start);
  name = dash_spelling(name.substr(0, name.find('=')));
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  auto consider = [&](const std::string& candidate) {
    int d = edit_distance(name, candidate);
    if (d < best_d) best_d = d, best = candidate;
  };
  consider("help");
  for (auto& o : options_) consider(o.name);
  std::string shown = flag.substr(0, flag.find('='));
  int limit = std::max<int>(2, static_cast<int>(name.size()) / 3);
  if (!name.empty() && best_d <= limit) fail("unknown flag " + shown + "; did you mean --" + best + "?");
  fail("unknown flag " + shown + "; run '" + program_ + " --help' to list the flags");
}

void Parser::record(Option& opt, const std::string& spelled, const std::string& value) {
  opt.set(spelled, value);
  auto [earlier, first_time] = given_as_.try_emplace(opt.name, spelled, value);
  const auto& [was_spelled, was_value] = earlier->second;
  if (!first_time && was_value != value && (was_spelled != spelled || opt.name == "local-rank"))
    fail(was_spelled + "=" + was_value + " and " + spelled + "=" + value +
         " give one option two different values; pass it once");
  earlier->second = {spelled, value};
  opt.given = true;
}

bool Parser::parse(const std::vector<std::string>& args) {
  rest_.clear();
  given_as_.clear();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      for (size_t j = i + 1; j < args.size(); ++j) {
        if (stop_at_positional_)
          rest_.push_back(args[j]);
        else if (positionals_)
          positionals_->push_back(args[j]);
        else
          fail("unexpected argument '" + args[j] + "' (this program takes no positional arguments)");
      }
      break;
    }
    if (a == "-h") return false;
    bool is_flag_like = a.size() > 1 && a[0] == '-' && !looks_like_number(a);
    if (!is_flag_like) {
      if (stop_at_positional_) {
        rest_.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
        break;
      }
      if (!positionals_) fail("unexpected argument '" + a + "' (this program takes no positional arguments)");
      positionals_->push_back(a);
      continue;
    }
    if (a.size() < 3 || a[1] != '-') fail_unknown(a);
    std::string body = a.substr(2);
    size_t eq = body.find('=');
    bool has_value = eq != std::string::npos;
    std::string spelled = "--" + body.substr(0, eq);
    std::string name = dash_spelling(body.substr(0, eq));
    std::string value = has_value ? body.substr(eq + 1) : "";
    if (name == "help") return false;
    Option* opt = find(name);
    if (!opt && !has_value && name.rfind("no-", 0) == 0) {
      Option* negated = find(name.substr(3));
      if (negated && negated->is_flag && negated->metavar.empty()) {  // bool flags only
        record(*negated, spelled, "false");
        continue;
      }
    }
    if (!opt) fail_unknown(a);
    if (opt->is_flag) {
      record(*opt, spelled, has_value ? value : opt->implicit);
    } else {
      if (!has_value) {
        if (i + 1 >= args.size()) fail(spelled + " needs a value (" + opt->metavar + ")");
        value = args[++i];
      }
      record(*opt, spelled, value);
    }
  }
  finish_local_rank();
  return true;
}

void Parser::finish_local_rank() {
  local_rank_ = -1;
  if (!local_rank_enabled_) return;
  bool flag_given = find("local-rank")->given;
  if (flag_given && local_rank_flag_ < 0)
    fail("--local-rank must be >= 0, got " + std::to_string(local_rank_flag_));
  int env_rank = -1;
  if (const char* env = std::getenv("LOCAL_RANK"); env && *env) {
    int64_t x;
    if (parse_number(env, &x) != Parsed::Ok || x < 0 || x > std::numeric_limits<int>::max())
      fail(std::string("LOCAL_RANK='") + env + "' in the environment is not a non-negative integer");
    env_rank = static_cast<int>(x);
  }
  if (flag_given && env_rank >= 0 && env_rank != local_rank_flag_)
    fail("--local-rank=" + std::to_string(local_rank_flag_) + " disagrees with LOCAL_RANK=" +
         std::to_string(env_rank) + " in the environment; pass one of them, or the same value");
  local_rank_ = flag_given ? local_rank_flag_ : env_rank;
}

void Parser::parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  if (!parse(args)) {
    std::string text = help();
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
}

std::string Parser::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]";
  if (stop_at_positional_)
    os << " PROGRAM [ARGS...]";
  else if (positionals_)
    os << " [" << positional_metavar_ << "...]";
  os << "\n\n";
  if (!description_.empty()) os << description_ << "\n\n";
  if (positionals_) os << "positional:\n  " << positional_metavar_ << "  " << positional_help_ << "\n\n";
  os << "options (--a-b and --a_b are the same flag; write --flag VALUE or --flag=VALUE):\n";
  // Help text starts at column 30 and wraps at 110 columns.
  auto line = [&os](const std::string& left, const std::string& text) {
    constexpr size_t kColumn = 30, kWidth = 110;
    os << "  " << left;
    if (left.size() + 2 < kColumn)
      os << std::string(kColumn - left.size() - 2, ' ');
    else
      os << "\n" << std::string(kColumn, ' ');
    std::istringstream words(text);
    std::string word;
    size_t col = kColumn;
    bool first = true;
    while (words >> word) {
      if (!first && col + 1 + word.size() > kWidth) {
        os << "\n" << std::string(kColumn, ' ');
        col = kColumn;
        first = true;
      }
      if (!first) os << ' ', ++col;
      os << word;
      col += word.size();
      first = false;
    }
    os << "\n";
  };
  for (auto& o : options_) {
    std::string sep = o.metavar.rfind("[=", 0) == 0 ? "" : " ";
    std::string left = "--" + o.name + (o.metavar.empty() ? "" : sep + o.metavar);
    bool says_default = o.help.find("(default") != std::string::npos;
    bool quiet_default = o.metavar.empty() && o.default_text == "false";  // a bool flag that is off
    line(left, o.help + (says_default || quiet_default ? "" : " (default: " + o.default_text + ")"));
  }
  line("-h, --help", "show this help and exit");
  return os.str();
}

}  // namespace ddp::cli
