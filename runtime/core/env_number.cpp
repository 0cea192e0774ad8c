// env_number.cpp - integer_from_env (see env_number.h).
#include "runtime/core/env_number.h"

#include <cstdlib>

#include "runtime/core/error.h"

namespace ddp {

std::optional<long long> integer_from_env(const char* name, long long lo, long long hi,
                                          const std::string& expected, long long multiple_of) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  DDP_CHECK(end && *end == '\0' && n >= lo && n <= hi && n % multiple_of == 0, name, "='", v,
            "' is not valid: expected ", expected);
  return n;
}

}  // namespace ddp
