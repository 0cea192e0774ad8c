// env_number.h - reading a whole-number setting from the environment, with the one error text every such
// setting gives: "NAME='value' is not valid: expected <what>".
#pragma once
#include <optional>
#include <string>

namespace ddp {

// The value of environment variable `name`: nullopt when it is unset or empty; else it must be a whole
// number in [lo, hi] and a multiple of `multiple_of`, or an error names the variable, the value and
// `expected`.
std::optional<long long> integer_from_env(const char* name, long long lo, long long hi,
                                          const std::string& expected, long long multiple_of = 1);

}  // namespace ddp
