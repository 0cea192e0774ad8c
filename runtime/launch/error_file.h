// error_file.h - the error file torchrun's agent reads (TORCHELASTIC_ERROR_FILE): a failing worker writes
// its message there, so the launcher's failure summary shows it instead of "error_file: <N/A>". ddprun sets
// the same variable for its workers and shows the message in its own table.
//
// Shape (PyTorch's elastic/multiprocessing/errors, the same in 1.13 and 2.x; the agent needs the timestamp):
//   {"message": {"message": "<text>",
//                "extraInfo": {"py_callstack": "<text>", "timestamp": "<unix seconds>"}}}
// torchrun's summary prints extraInfo.py_callstack, so our message goes there too (we have no Python stack).
#pragma once
#include <optional>
#include <string>

namespace ddp::launch {

// Writes the file (atomically: a temporary file renamed over it). Throws ddp::Error on an I/O failure.
void write_error_file(const std::string& path, const std::string& message);

// Writes `message` to $TORCHELASTIC_ERROR_FILE when it is set and not empty. Never throws (a failing
// program must still exit with its own error); returns whether the file was written.
bool report_error_to_launcher(const std::string& message);

// The message in an error file of the shape above (or the plain {"message": "<text>"} form); nullopt when
// the file is missing or not of that shape.
std::optional<std::string> read_error_file(const std::string& path);

}  // namespace ddp::launch
