// simd_target.cpp - reports the instruction set HWY_DYNAMIC_DISPATCH selects, through the same dispatch
// mechanism the kernels use (so a test that forces a target can see that it took effect).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/simd_target.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include "kernels/cpu/simd_target.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
int64_t CompiledTarget() { return HWY_TARGET; }
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(CompiledTarget);
int64_t simd_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }
const char* simd_target_name() { return hwy::TargetName(simd_target()); }
}  // namespace ddp::kernels::cpu
#endif
