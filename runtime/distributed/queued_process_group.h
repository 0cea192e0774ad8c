// queued_process_group.h - the base of the CPU process groups (gloo, shm, hier) that run their collectives on
// one background thread in issue order. It owns what they share: the five collective entry points (buffer
// checks and the collective's description), the queue with its sequence numbers, the worker thread, and the
// failure rule (the first failure makes the group unusable; later collectives fail at once, saying why).
// A backend implements run() (the collective itself, on the worker thread) and may refuse buffers or attach
// state in prepare() and choose its Work type in make_work(). Derived destructors call stop_worker() first,
// so no collective runs while the derived part is torn down. abort() fails the queued collectives and every
// later one at once with its reason, and asks the backend (interrupt()) to end the one running on the worker.
// With ProcessGroupOptions::run_on_caller there is no worker thread: each collective runs on the thread that
// issues it, before the entry point returns (callers take turns in issue order); abort() from another thread
// ends it the same way.
#pragma once
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/distributed/collective.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/process_group.h"

namespace ddp::dist {

class QueuedProcessGroup : public ProcessGroup {
 public:
  ~QueuedProcessGroup() override;

  std::shared_ptr<Work> allreduce(CommBuffer buf, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(CommBuffer buf, int root) override;
  std::shared_ptr<Work> allgather(CommBuffer in, CommBuffer out) override;
  std::shared_ptr<Work> reduce_scatter(CommBuffer in, CommBuffer out, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;
  uint64_t next_sequence_number() const override;
  // Every collective of this group, recorded (flight_recorder.h); on a failure it is written to
  // $DDP_FLIGHT_RECORDER_DIR/flight.rank<R>.json when that variable is set.
  const FlightRecorder* flight_recorder() const override { return flight_.get(); }
  // Records the reason, fails the queued collectives, makes later ones fail at once, then calls interrupt()
  // for the collective running on the worker thread (whose error then names the reason).
  void abort(const std::string& why) override;
  bool aborted() const override;

 protected:
  // What happens to collectives still queued when the group is destroyed.
  enum class OnStop { RunQueued, FailQueued };

  struct Task {
    CollectiveDesc desc;
    CommBuffer in, out;  // hold the keepalives until the collective finished
    std::shared_ptr<Work> work;
    std::shared_ptr<void> staging;  // backend state released with the buffers (gloo: CUDA host staging)
  };

  // `label` starts every message ("gloo", "shm", "hier"). Checks the arguments every such group needs: a
  // store, 0 <= rank < size, a positive collective timeout.
  QueuedProcessGroup(const Store* store, int rank, int size, const ProcessGroupOptions& options,
                     std::string label, OnStop on_stop);
  // Call once the backend is ready to run collectives (end of the derived constructor); `group_name` (the
  // store prefix) names the group in its flight record.
  void start_worker(const std::string& group_name);
  // Lets the running collective finish, handles the queued ones as OnStop says, joins the thread. Idempotent.
  void stop_worker();

  // Caller's thread, before the sequence number is taken: refuse buffers, attach `staging`.
  virtual void prepare(Task& t) { (void)t; }
  // Caller's thread, under the queue lock: the Work the caller gets.
  virtual std::shared_ptr<Work> make_work(Task& t) { return std::make_shared<Work>(t.desc.str()); }
  // Worker thread: runs the collective; an exception fails it and the group (its what() is the reason).
  virtual void run(Task& t) = 0;
  // Worker thread, after run() threw: tell the peers (shm marks itself failed). Not called after abort():
  // interrupt() told them.
  virtual void on_failure(const std::string& why) { (void)why; }
  // The thread that calls abort(), once, without the queue lock, while the worker may be inside run(): make
  // the running collective (if any) throw soon (~100 ms at most) and tell the peers this rank is gone. The
  // collectives run() starts afterwards must fail at once too (aborted() is true before this is called).
  virtual void interrupt(const std::string& why) { (void)why; }

  const std::string& label() const { return label_; }
  // ProcessGroupOptions::run_on_caller: run() is called on the issuing thread, which waits for it.
  bool runs_on_caller() const { return run_on_caller_; }

 private:
  std::shared_ptr<Work> enqueue(CollectiveDesc d, CommBuffer in, CommBuffer out);
  // With mu_ held: refuses a group being destroyed, gives t the next sequence number, records it, makes its Work.
  void number_locked(Task& t);
  void loop();
  void run_one(Task& t);
  void write_failure_record();

  std::string label_;
  OnStop on_stop_;
  bool run_on_caller_ = false;
  std::mutex caller_mu_;  // run_on_caller: one collective at a time, in issue order
  // The text every collective failed by abort() carries: "<label> <collective> <verb>: ... aborted ...: why".
  std::string aborted_message(const CollectiveDesc& d, const char* verb) const;

  mutable std::mutex mu_;  // guards queue_, next_seq_, stopping_, aborted_, abort_reason_
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  bool aborted_ = false;
  std::string abort_reason_;
  std::string broken_;  // the thread running collectives (worker, or callers in turn): the first failure
  std::unique_ptr<FlightRecorder> flight_;
  std::thread worker_;
};

}  // namespace ddp::dist
