// timing_event.h - CUDA events that carry a time stamp, for statistics measured on the GPU's own clock (the
// reducer's step clock, runtime/ddp/step_clock.h). Opaque pointers (cudaEvent_t) so that CPU-only code can
// hold them. Only compiled in CUDA builds.
#pragma once

namespace ddp::cuda {

// Records a timing event on `stream` (nullptr: the current stream of the current device). The caller owns it.
void* record_timing_event(void* stream = nullptr);
// Seconds from event `from` to event `to` (both recorded, on one device). Waits for both to complete.
double elapsed_seconds(void* from, void* to);
void destroy_event(void* event);

}  // namespace ddp::cuda
