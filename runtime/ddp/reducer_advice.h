// reducer_advice.h - how the reducer's errors speak to the person running the program: what to change to
// turn an option on or off, and what an iteration is called. The defaults speak to C++ users of
// DistributedDataParallel; a program with flags of its own puts its words here, so that its users read its
// flags ("run train with --find-unused-parameters") and the words of its log ("step"). Which number an
// iteration gets is Reducer::number_iterations_from's (by default the first synchronized backward is 1).
#pragma once
#include <string>

namespace ddp {

struct ReducerAdvice {
  // How to turn find_unused_parameters on, as an instruction; empty: "construct DistributedDataParallel
  // with find_unused_parameters = true".
  std::string enable_find_unused_parameters;
  // How to turn static_graph off; empty: "construct DistributedDataParallel without static_graph".
  std::string disable_static_graph;
  // What one synchronized iteration is called in the errors ("iteration 3"; train: "step 3").
  std::string iteration = "iteration";
};

}  // namespace ddp
