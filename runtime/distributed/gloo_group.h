// gloo_group.h - the CPU process group on Gloo's TCP transport. The mesh connects through our Store (keys
// under "<group prefix>/gloo/"). Collectives run on ONE background thread in issue order
// (queued_process_group.h): issuing only queues the collective and returns its Work, which completes when the
// thread has run it; the ones still queued when the group is destroyed run first. Avg = Sum then divide. CUDA
// buffers (CUDA builds) are staged through pinned host memory on a side stream; see cuda/host_staging.h. A
// failure or abort() closes this rank's connections, so peers blocked on it fail at once (connection closed)
// instead of at their timeout.
#pragma once
#include <memory>
#include <string>

#include "runtime/distributed/queued_process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

class GlooProcessGroup : public QueuedProcessGroup {
 public:
  // `store` should be this group's own connection (new_process_group passes a clone). `master_addr` picks the
  // local address to listen on when the options name none. Blocks until every rank connected (or the
  // timeout).
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                   const std::string& master_addr = "127.0.0.1");
  // Runs the collectives still queued (none after abort()), then joins the thread.
  ~GlooProcessGroup() override;

  std::string backend_name() const override { return "gloo"; }

  struct Impl;

 protected:
  void prepare(Task& t) override;
  std::shared_ptr<Work> make_work(Task& t) override;
  void run(Task& t) override;
  // Both fail every Gloo operation pending on this rank's connections and close them (gloo_group.cpp).
  void on_failure(const std::string& why) override;
  void interrupt(const std::string& why) override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist
