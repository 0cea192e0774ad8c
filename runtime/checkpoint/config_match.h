// config_match.h - compares the run configuration a checkpoint recorded (metadata "config", a flat JSON object
// of flag values) with the configuration of the run resuming it, so a resume with another batch size, seed or
// model shape is an error naming each differing field rather than a silently different run.
#pragma once
#include <string>
#include <vector>

namespace ddp::checkpoint {

struct ConfigDifference {
  std::string key;    // "batch_size"
  std::string saved;  // its value in the checkpoint, as JSON text ("16")
  std::string live;   // its value in this run
};

// The keys present in both objects whose values differ, in key order. A key only one side has is not a
// difference (configurations of older and newer versions can still be compared). Throws ddp::Error naming
// `path` when `saved_json` is not a flat JSON object (the file was edited); `live_json` must be one.
std::vector<ConfigDifference> config_differences(const std::string& saved_json, const std::string& live_json,
                                                 const std::string& path);

}  // namespace ddp::checkpoint
