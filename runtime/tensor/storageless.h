// storageless.h - tensors without memory: release_storage drops a tensor's memory and keeps its device, and
// why a tensor has no memory, for the error that reading it raises (Tensor::raw_data). A
// ZeRO-3 parameter at rest has none (its unit gathers it); one whose ShardedDataParallel was destroyed has
// none for good, and the owner records that here so the error says so instead of blaming the unit's hooks.
// Held weakly: an entry dies with its tensor. It never allocates or frees a tensor's memory.
#pragma once
#include <memory>
#include <string>

namespace ddp {

struct TensorImpl;
class Tensor;

// Drops `t`'s memory (its storage handle; other tensors sharing the storage keep it) and keeps the device it
// was on: t.device() still says where it lives (a ZeRO-3 parameter at rest on cuda:0 stays a cuda:0 tensor).
void release_storage(Tensor& t);

// Records `why` (a sentence: what happened and what to do) for the tensor; "" forgets it.
void set_storageless_reason(const std::shared_ptr<TensorImpl>& t, std::string why);
// The recorded reason, "" when none.
std::string storageless_reason(const TensorImpl* t);

}  // namespace ddp
