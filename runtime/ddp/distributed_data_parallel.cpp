// distributed_data_parallel.cpp - model verification across ranks, initial and per-forward broadcasts.
#include "runtime/ddp/distributed_data_parallel.h"

#include <cstring>
#include <sstream>

#include "runtime/autograd/node.h"
#include "runtime/ddp/joinable.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"

namespace ddp {

namespace {

// One line per parameter: "name shape dtype".
std::vector<std::string> describe_params(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& p : m.named_parameters())
    out.push_back(p.name + " " + shape_str(p.tensor.shape()) + " " +
                  std::string(dtype_name(p.tensor.dtype())));
  return out;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (auto& l : lines) s += l + "\n";
  return s;
}
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  std::string l;
  while (std::getline(is, l)) out.push_back(l);
  return out;
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<dist::ProcessGroup> pg, DDPOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  DDP_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  DDP_CHECK(pg_ != nullptr, "DistributedDataParallel: no process group");
  if (pg_->size() > 1) {
    dist::FlightIssuer who("ddp model check");
    verify_same_model();
    autograd::NoGradGuard ng;
    broadcast_from(module_->parameters(), 0);
    broadcast_from(module_->buffers(), 0);
  }
  reducer_ = std::make_unique<Reducer>(module_->named_parameters(), pg_, options_);
  if (options_.deterministic_micro_batches > 0) {
    DDP_CHECK(!options_.comm_hook || std::string(options_.comm_hook->name()) == "allreduce",
              "DistributedDataParallel: deterministic_micro_batches with the comm hook '",
              options_.comm_hook->name(), "': the deterministic mode moves exact integers, not the hook's ",
              "bucket sums; leave comm_hook unset (docs/determinism.md)");
    reducer_->set_sync(false);  // the exact mean is the only gradient communication
    deterministic_ = std::make_unique<DeterministicReduction>(
        module_->parameters(), module_->buffers(), pg_,
        DeterministicOptions{.micro_batches = options_.deterministic_micro_batches});
  }
}

void DistributedDataParallel::hand_over_micro_batch() {
  bool any = false;
  const std::vector<Tensor> params = module_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    DDP_CHECK(mean_grads_.empty() || mean_grads_[i].impl() != g.impl(),
              "DistributedDataParallel (deterministic mode): a parameter still holds the mean finish_step() ",
              "wrote, and this micro-batch's backward would add into it; call optimizer.zero_grad() (or set ",
              "each .grad to none) after the optimizer step");
    any = true;
  }
  mean_grads_.clear();
  if (any) deterministic_->end_micro_batch();
}

int64_t DistributedDataParallel::finish_step() {
  DDP_CHECK(deterministic_ != nullptr, "DistributedDataParallel::finish_step() is the deterministic mode's; ",
            "this DDP was built without DDPOptions::deterministic_micro_batches (its backward already ",
            "averaged the gradients)");
  hand_over_micro_batch();
  const int64_t count = deterministic_->finish_step();
  for (const Tensor& p : module_->parameters()) mean_grads_.push_back(p.grad());  // by index; none stays none
  return count;
}

void DistributedDataParallel::verify_same_model() {
  // Every rank learns every rank's parameter list (two all-gathers), so each can name the first difference.
  const std::string mine = join_lines(describe_params(*module_));
  const int world = pg_->size();
  Tensor len = Tensor::from_data<int64_t>({static_cast<int64_t>(mine.size())}, {1});
  Tensor lens = Tensor::empty({world}, DType::I64);
  host_allgather(*pg_, len, lens);
  int64_t max_len = 1;
  for (int r = 0; r < world; ++r) max_len = std::max(max_len, lens.data<int64_t>()[r]);
  Tensor bytes = Tensor::zeros({max_len}, DType::U8);
  std::copy(mine.begin(), mine.end(), bytes.data<uint8_t>());
  // Gloo has no uint8 all-gather in our group API: move the text as int32 words.
  Tensor words = Tensor::zeros({(max_len + 3) / 4}, DType::I32);
  std::memcpy(words.raw_data(), bytes.raw_data(), static_cast<size_t>(max_len));
  Tensor all = Tensor::empty({world * words.numel()}, DType::I32);
  host_allgather(*pg_, words, all);
  std::vector<std::vector<std::string>> lists(world);
  for (int r = 0; r < world; ++r) {
    const char* p = static_cast<const char*>(all.raw_data()) + r * words.numel() * 4;
    lists[r] = split_lines(std::string(p, static_cast<size_t>(lens.data<int64_t>()[r])));
  }
  // The first index where any rank differs from rank 0, and which ranks differ there.
  size_t first = SIZE_MAX;
  for (int r = 1; r < world; ++r) {
    size_t n = std::max(lists[0].size(), lists[r].size());
    for (size_t i = 0; i < n && i < first; ++i) {
      bool same = i < lists[0].size() && i < lists[r].size() && lists[0][i] == lists[r][i];
      if (!same) first = i;
    }
  }
  if (first == SIZE_MAX) return;
  std::vector<int> differ;
  for (int r = 1; r < world; ++r) {
    auto at = [&](int q) {
      return first < lists[q].size() ? lists[q][first] : std::string("<no parameter>");
    };
    if (at(r) != at(0) || lists[r].size() != lists[0].size()) differ.push_back(r);
  }
  std::ostringstream os;
  os << "rank " << pg_->rank() << ": DistributedDataParallel: the model differs across ranks. Rank 0 has "
     << lists[0].size() << " parameters; at parameter #" << first << ":\n";
  for (int r = 0; r < world; ++r)
    os << "    rank " << r << ": " << (first < lists[r].size() ? lists[r][first] : "<no parameter>") << "  ("
       << lists[r].size() << " parameters)\n";
  os << "  ranks that differ from rank 0:";
  for (int r : differ) os << " " << r;
  os << "\n  Every rank must build the same model (same arguments, same registration order).";
  throw Error(os.str());
}

void DistributedDataParallel::broadcast_from(const std::vector<Tensor>& tensors, int root) {
  std::vector<std::shared_ptr<dist::Work>> works;
  const bool device_only = pg_->device_memory_only();
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    if (device_only && t.device().is_cpu()) {  // host buffers (e.g. generator states) go through the GPU
      Tensor h = t;
      host_broadcast(*pg_, h, root);
    } else {
      works.push_back(pg_->broadcast(comm_buffer_of(t), root));
    }
  }
  for (auto& w : works) w->wait();
}

void DistributedDataParallel::broadcast_buffers_from(int root) {
  if (!options_.broadcast_buffers || pg_->size() == 1) return;
  autograd::NoGradGuard ng;
  dist::FlightIssuer who("ddp buffers");
  broadcast_from(module_->buffers(), root);
}

void DistributedDataParallel::before_forward() {
  if (!reducer_->sync()) return;
  int root = 0;
  if (join_enabled_ && autograd::grad_enabled()) {
    // A synchronized training iteration: tell joined ranks to shadow it (Join).
    std::vector<int32_t> active = exchange_activity(true);
    int count = 0;
    for (int r = 0; r < pg_->size(); ++r)
      if (active[static_cast<size_t>(r)]) {
        ++count;
        root = r;  // buffers come from the highest rank still training (a joined rank's are stale)
      }
    reducer_->set_divide_factor(divide_by_initial_world_size_ ? pg_->size() : count);
  }
  broadcast_buffers_from(root);
}

void DistributedDataParallel::enable_join(bool divide_by_initial_world_size) {
  join_enabled_ = true;
  divide_by_initial_world_size_ = divide_by_initial_world_size;
}

void DistributedDataParallel::disable_join() {
  join_enabled_ = false;
  reducer_->set_divide_factor(pg_->size());
}

std::vector<int32_t> DistributedDataParallel::exchange_activity(bool active) {
  return join_exchange(*pg_, JoinPoint::Forward, active);
}

void DistributedDataParallel::shadow_backward() { reducer_->shadow_backward(); }

void DistributedDataParallel::sync_final_model(bool last_joiner) {
  if (pg_->size() == 1) return;
  dist::FlightIssuer issuer("join final sync");
  Tensor who = Tensor::from_data<int32_t>({last_joiner ? pg_->rank() : -1}, {1});
  host_allreduce(*pg_, who, dist::ReduceOp::Max);
  const int root = who.data<int32_t>()[0];
  DDP_CHECK(root >= 0, "DDP Join: no rank says it joined last; every rank must call Join::join()");
  autograd::NoGradGuard ng;
  if (options_.sync_parameters_after_join) broadcast_from(module_->parameters(), root);
  broadcast_from(module_->buffers(), root);
}

void DistributedDataParallel::after_forward(const std::vector<Tensor>& outputs) {
  if (autograd::grad_enabled()) reducer_->prepare_for_backward(outputs);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (deterministic_ && autograd::grad_enabled()) {
    hand_over_micro_batch();  // the previous backward's gradients, if it ran, are one micro-batch
    deterministic_->before_micro_batch();
  }
  before_forward();
  Tensor y = module_->forward(x);
  after_forward({y});
  return y;
}

}  // namespace ddp
