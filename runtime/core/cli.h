// cli.h - the command-line parser every ddp.cpp program uses (training programs, benchmarks, tools, ddprun).
//
//   ddp::cli::Parser p("train", "Trains the reference model with data parallelism.");
//   int batch = 32;
//   p.add("batch-size", &batch, "per-rank batch size");
//   p.parse(argc, argv);          // throws ddp::cli::UsageError on bad input; --help prints and exits 0
//   int local_rank = p.local_rank();  // from --local-rank or the LOCAL_RANK environment variable, -1 if none
//
// Rules, the same for every program:
// - Flags are declared in dash spelling ("batch-size"); the user may write --batch-size or --batch_size,
//   and the value as "--batch-size 64" or "--batch-size=64".
// - Bool flags take no separate value: "--verbose" sets true, "--verbose=false" / "--no-verbose" set false.
// - An unknown flag is an error naming it and the closest valid flag (edit distance).
// - Every parser accepts --local-rank N (any spelling) and the LOCAL_RANK environment variable, because
//   launchers pass one or the other (torchrun: env; torch.distributed.launch: --local-rank / --local_rank).
//   The flag wins; both given with different values is an error.
// - An option given twice with different values is an error when the two spellings differ
//   ("--local_rank=1 --local-rank 0": two sources disagree) and, for --local-rank, always; the same spelling
//   twice is an override and the last value wins.
// - Numbers: FLOAT options reject nan and inf; an option declared with Bounds rejects values outside them.
//   Either error names the flag, the rule and the value ("train: --lr must be > 0, got -1").
// - "--" ends the options; everything after it is positional.
// The parser is written by hand (no CLI11) so the runtime library needs no extra dependency and the error
// messages are exactly ours.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/error.h"

namespace ddp::cli {

// A mistake on the command line (or in LOCAL_RANK). It is a ddp::Error; its what() is the message for the
// user ("train: unknown flag --bach-size; did you mean --batch-size?") without a source location.
class UsageError : public Error {
 public:
  using Error::Error;
};

// The allowed range of a numeric option, checked when it is parsed: p.add("lr", &lr, "...", Bounds::above(0)).
struct Bounds {
  double min = -1e308, max = 1e308;
  bool min_open = false, max_open = false;  // open: the end itself is excluded

  static Bounds at_least(double v) { return {v, 1e308, false, false}; }
  static Bounds above(double v) { return {v, 1e308, true, false}; }
  // [lo, hi], or [lo, hi) with hi_open.
  static Bounds between(double lo, double hi, bool hi_open = false) { return {lo, hi, false, hi_open}; }
  bool contains(double v) const;
  std::string text() const;  // ">= 0", "> 0", "in [0, 1)"
};

// Levenshtein distance between two strings (insert, delete, substitute each cost 1).
int edit_distance(const std::string& a, const std::string& b);

class Parser {
 public:
  Parser(std::string program, std::string description);
  Parser(const Parser&) = delete;  // options hold pointers back into the parser
  Parser& operator=(const Parser&) = delete;

  // Typed options. name: dash spelling without "--" ("batch-size"). The current value of *value is the
  // default shown by --help; the pointer must outlive parse().
  void add(const std::string& name, int* value, const std::string& help);
  void add(const std::string& name, int64_t* value, const std::string& help);
  void add(const std::string& name, double* value, const std::string& help);
  void add(const std::string& name, std::string* value, const std::string& help);
  void add(const std::string& name, bool* value, const std::string& help);
  // Numeric options whose value must lie within `bounds`.
  void add(const std::string& name, int* value, const std::string& help, Bounds bounds);
  void add(const std::string& name, int64_t* value, const std::string& help, Bounds bounds);
  void add(const std::string& name, double* value, const std::string& help, Bounds bounds);
  // A string that must be one of `allowed`; a bad value names the flag and the allowed values.
  void add_choice(const std::string& name, std::string* value, std::vector<std::string> allowed,
                  const std::string& help);
  // A choice whose value is optional: "--name" alone means `implicit`, "--name=VALUE" picks one of
  // `allowed` (the value can only be attached with '=', since a bare word after it is not consumed).
  void add_choice_optional_value(const std::string& name, std::string* value,
                                 std::vector<std::string> allowed, const std::string& implicit,
                                 const std::string& help);
  // An enum given by name: p.add_enum("mode", &mode, {{"fast", Mode::Fast}, {"safe", Mode::Safe}}, "...").
  template <class E>
  void add_enum(const std::string& name, E* value, std::vector<std::pair<std::string, E>> choices,
                const std::string& help);

  // Accept positional arguments (collected into *values); without this call a positional is an error.
  void add_positionals(const std::string& metavar, std::vector<std::string>* values, const std::string& help);
  // Launcher mode: options end at the first positional; it and everything after it go to rest() untouched.
  void stop_at_first_positional() { stop_at_positional_ = true; }
  const std::vector<std::string>& rest() const { return rest_; }

  // Programs that must not take --local-rank (ddprun itself) switch the built-in option off.
  void disable_local_rank();

  // Parses argv[1..argc). --help / -h prints help() to stdout and exits 0. Throws UsageError.
  void parse(int argc, const char* const* argv);
  // Same on a vector (argv without the program name); returns false when help was asked for (nothing
  // printed), so tests and embedders decide what to do.
  bool parse(const std::vector<std::string>& args);

  // The local rank: --local-rank if given, else LOCAL_RANK from the environment, else -1.
  int local_rank() const { return local_rank_; }
  // True when the user gave this option on the command line (any spelling).
  bool given(const std::string& name) const;
  // The --help text: usage line, description, every flag with its type, default and help.
  std::string help() const;
  const std::string& program() const { return program_; }

 private:
  struct Option {
    std::string name;     // dash spelling
    std::string metavar;  // "INT", "FLOAT", "STR", "{a,b}"; empty for bool flags
    std::string help;
    std::string default_text;
    bool is_flag = false;  // takes no separate value: bool flags and optional-value choices
    std::string implicit;  // the value of a bare "--name" when is_flag
    bool given = false;
    std::function<void(const std::string& flag, const std::string& value)> set;
  };
  void add_option(Option opt);
  // Sets `opt` from one occurrence on the command line and rejects a conflicting earlier one.
  void record(Option& opt, const std::string& spelled, const std::string& value);
  void check_bounds(const std::string& flag, const std::string& text, double v, const Bounds& b) const;
  Option* find(const std::string& name);
  [[noreturn]] void fail(const std::string& msg) const;
  [[noreturn]] void fail_unknown(const std::string& flag) const;
  void finish_local_rank();

  std::string program_, description_;
  std::vector<Option> options_;
  std::vector<std::string>* positionals_ = nullptr;
  std::string positional_metavar_, positional_help_;
  bool stop_at_positional_ = false;
  std::map<std::string, std::pair<std::string, std::string>> given_as_;  // option -> last spelling, value
  std::vector<std::string> rest_;
  bool local_rank_enabled_ = true;
  int local_rank_flag_ = -1;
  int local_rank_ = -1;
};

// ---- template implementation ----------------------------------------------------------------------

namespace detail {
[[noreturn]] void fail_choice(const std::string& program, const std::string& flag, const std::string& value,
                              const std::vector<std::string>& allowed);
}  // namespace detail

template <class E>
void Parser::add_enum(const std::string& name, E* value, std::vector<std::pair<std::string, E>> choices,
                      const std::string& help) {
  Option opt;
  opt.name = name;
  opt.help = help;
  std::vector<std::string> names;
  for (auto& c : choices) {
    names.push_back(c.first);
    if (c.second == *value) opt.default_text = c.first;
  }
  opt.metavar = "{";
  for (size_t i = 0; i < names.size(); ++i) opt.metavar += (i ? "," : "") + names[i];
  opt.metavar += "}";
  opt.set = [value, choices, names, prog = program_](const std::string& flag, const std::string& v) {
    for (auto& c : choices) {
      if (c.first == v) {
        *value = c.second;
        return;
      }
    }
    detail::fail_choice(prog, flag, v, names);
  };
  add_option(std::move(opt));
}

}  // namespace ddp::cli
