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

struct ConfigComparison {
  std::vector<ConfigDifference> differences;  // keys both have, with different values, in key order
  std::vector<std::string> only_saved;        // keys only the checkpoint has (a flag this run does not know)
  std::vector<std::string> only_live;         // keys only this run has (a flag newer than the checkpoint)
};

// Compares the two objects. A key only one side has is not a difference (configurations of older and newer
// versions can still be compared) but is listed, so the caller can say it was not checked. Throws
// ddp::Error naming `path` when `saved_json` is not a flat JSON object (the file was edited); `live_json`
// must be one.
ConfigComparison compare_configs(const std::string& saved_json, const std::string& live_json,
                                 const std::string& path);

}  // namespace ddp::checkpoint
