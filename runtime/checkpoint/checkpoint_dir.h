// checkpoint_dir.h - the folder a training run writes its checkpoints to: the `latest` file naming the newest
// checkpoint (read strictly: missing, empty, or pointing outside the folder are three different errors), its
// atomic update, and the removal of temp files that interrupted saves left behind ("<file>.tmp.<pid>").
#pragma once
#include <string>
#include <vector>

namespace ddp::checkpoint {

// The path of the checkpoint `dir`/latest names. Throws ddp::Error when `dir` is empty, when `latest` is
// missing or empty, or when it names anything but a file directly inside `dir` ("../x", "/abs", "a/b").
std::string read_latest(const std::string& dir);

// Atomically makes `dir`/latest name `file_name` (a plain file name inside dir).
void write_latest(const std::string& dir, const std::string& file_name);

// Removes "<name>.tmp.<pid>" files in `dir` whose pid is not a live process on this machine (writes that
// were killed; a live writer's temp file is kept, and so is this process's). Returns the removed paths.
// Errors while listing or removing are ignored: cleaning up is best effort and must not stop a save.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

}  // namespace ddp::checkpoint
