// iteration_stats.h - what the reducer measured in one synchronized iteration: per bucket when it became
// ready, was launched and completed; backward compute, communication and EXPOSED communication (the time
// the step waited for communication after backward's last node finished).
// Which clock (runtime/ddp/step_timing.h): on the CPU, and for CUDA parameters on a backend without device
// events (Gloo staging), host time stamps. For CUDA parameters on NCCL, CUDA events: ready_s and the finalize
// times are when the compute stream got there, launched_s / completed_s the NCCL collective's start and end
// on the comm stream, and exposed communication is how long the compute stream waited in finalize; all
// seconds since forward's end on the compute stream. Reading them (Reducer::last_stats) waits for those
// events.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

struct BucketTiming {
  size_t index = 0;
  int64_t bytes = 0;
  size_t num_params = 0;
  double ready_s = 0;  // seconds since forward ended
  double launched_s = 0;
  // When the reducer observed completion (the work's own end when the backend reports it).
  double completed_s = 0;
};

struct IterationStats {
  // The iteration's number: the reducer's errors' (Reducer::number_iterations_from; train: its step, from 1).
  int64_t iteration = 0;
  double backward_compute_s = 0;       // forward end -> last backward node done (finalize starts)
  double communication_s = 0;          // first launch -> last completion
  double exposed_communication_s = 0;  // finalize start -> all buckets reduced and written back
  size_t num_unused_marked = 0;        // parameters marked ready with no gradient (find_unused_parameters)
  size_t num_gradients_copied = 0;     // gradients copied into their bucket slot (0 for those backward wrote
                                       // there itself: gradient_as_bucket_view, autograd/node.h)
  // Gradients divided by the world size in a pass of their own, in their slot (backward wrote them there and
  // the all-reduce does not divide): none where the all-reduce divides (shm's in-place buckets) and none at
  // world 1, where the division is by 1 and is skipped (the first GPU profile: 148 kernels, 0.55 ms of a
  // GPT-2 small step).
  size_t num_gradients_scaled = 0;
  // Gradients the write-back cloned out of their bucket (default mode): only while the caller still holds
  // gradients of the bucket's other buffer (docs/ddp-step.md, "write-back"); else .grad views the bucket.
  size_t num_gradients_cloned = 0;
  double unused_search_s = 0;          // the graph traversal after forward (find_unused_parameters)
  // Host wait for the used-map's copy to the host (find_unused_parameters on GPU).
  double used_map_sync_s = 0;
  bool device_clock = false;  // true: the times above come from CUDA events (see below), else host time
  size_t num_reachability_searches = 0;  // such traversals this iteration (0 with static_graph)
  std::vector<BucketTiming> buckets;
  // One line: "iteration 3: backward 12.1 ms, comm 8.0 ms, exposed 0.4 ms (3 buckets)" (`word`: train
  // says "step").
  std::string summary(const std::string& word = "iteration") const;
  // One line per bucket: "  bucket 0 (3 params, 4096 B): full 1.2 ms, issued 1.2 ms, done 2.0 ms after
  // forward\n" (what DDP_DEBUG=DETAIL adds to summary()).
  std::string bucket_times() const;
};

}  // namespace ddp
