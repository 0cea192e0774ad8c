// config_match.cpp - flat JSON object comparison for resume checks (see config_match.h).
#include "runtime/checkpoint/config_match.h"

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors_header.h"
#include "runtime/core/error.h"

namespace ddp::checkpoint {
namespace {

using json = nlohmann::json;

// Parses a flat object (values are strings, numbers, booleans or null) into *out; false when `text` is
// anything else.
bool parse_flat_object(const std::string& text, json* out) {
  if (json_nesting_depth(text, 1) > 1) return false;  // checked first: nested input is never parsed
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return out->is_object();
}

}  // namespace

ConfigComparison compare_configs(const std::string& saved_json, const std::string& live_json,
                                 const std::string& path) {
  json saved, live;
  DDP_CHECK(parse_flat_object(saved_json, &saved), "checkpoint '", path,
            "': metadata field 'config' is not a flat JSON object of flag values (edited or corrupt): '",
            saved_json.substr(0, 80), saved_json.size() > 80 ? "...'" : "'");
  DDP_CHECK(parse_flat_object(live_json, &live), "compare_configs: the live configuration '",
            live_json.substr(0, 80), "' is not a flat JSON object");
  ConfigComparison result;
  for (const auto& [key, value] : live.items()) {
    auto it = saved.find(key);
    if (it == saved.end()) {
      result.only_live.push_back(key);
      continue;
    }
    if (*it == value) continue;
    result.differences.push_back({key, it->dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80),
                                  value.dump(-1, ' ', false, json::error_handler_t::replace)});
  }
  for (const auto& [key, value] : saved.items())
    if (!live.contains(key)) result.only_saved.push_back(message_excerpt(key));
  return result;
}

}  // namespace ddp::checkpoint
