// run_process_reuse.cpp - compiles the launcher tests' process runner (tests/launch/run_process.cpp:
// fork/exec with captured output and a hard timeout) into test_netns too, since each tests/<area>/ folder is
// its own executable. Not a copy: the one source file is built twice. (It could move to tests/support/.)
#include "tests/launch/run_process.cpp"
