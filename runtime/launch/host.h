// host.h - the few facts ddprun asks the operating system: a free TCP port, random hex from /dev/urandom,
// where a program is on PATH, and a signal's name.
#pragma once
#include <string>

namespace ddp::launch {

// A TCP port that was free a moment ago: binds port 0 on 127.0.0.1 and reads back what the kernel chose.
// (Another process may grab it before the program binds it; torchrun's --standalone has the same race.)
int pick_free_port();
// `nbytes` random bytes from /dev/urandom as 2*nbytes lowercase hex characters.
std::string random_hex(int nbytes);
// The executable file `program` names: itself when it contains '/', else the first match in PATH.
// Throws ddp::Error naming the program when nothing executable is found.
std::string find_program(const std::string& program);
// "SIGKILL" for 9, "signal 77" for numbers without a name.
std::string signal_name(int sig);
// Number of online CPU cores (at least 1).
int cpu_core_count();

}  // namespace ddp::launch
