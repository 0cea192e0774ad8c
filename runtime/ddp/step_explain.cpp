// step_explain.cpp - the text of an iteration's explanation (see step_explain.h): per rank, then across
// ranks, then the simulator's what-if. All times in ms on rank 0's clock, from rank 0's forward end.
#include "runtime/ddp/step_explain.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "runtime/core/error.h"

namespace ddp {
namespace {

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s * 1e3);
  return b;
}

std::string human_bytes(int64_t n) {
  char b[32];
  if (n >= (1 << 20))
    std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(n) / (1 << 20));
  else if (n >= (1 << 10))
    std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(n) / (1 << 10));
  else
    std::snprintf(b, sizeof b, "%lld B", static_cast<long long>(n));
  return b;
}

std::string params_of(const ExplainBucket& b) {
  std::string s = std::to_string(b.num_params) + (b.num_params == 1 ? " parameter (" : " parameters (");
  s += b.first_param;
  if (b.num_params > 1) s += " .. " + b.last_param;
  return s + ")";
}

}  // namespace

std::string explain_iteration(const std::string& word, int64_t number,
                              const std::vector<ExplainBucket>& layout, const std::vector<ExplainRank>& ranks,
                              const ExplainWhatIf* what_if) {
  DDP_CHECK(!ranks.empty(), "explain_iteration: no ranks");
  for (const ExplainRank& r : ranks)
    DDP_CHECK(r.shadow || r.buckets.size() == layout.size(), "explain_iteration: rank ", r.rank, " recorded ",
              r.buckets.size(), " buckets, the layout has ", layout.size());
  const ExplainRank* ref = nullptr;  // the earliest computing rank's forward end is the origin
  for (const ExplainRank& r : ranks)
    if (!r.shadow && (!ref || r.forward_end_s < ref->forward_end_s)) ref = &r;
  const double origin = ref ? ref->forward_end_s : 0;
  double worst_clock = 0;
  for (const ExplainRank& r : ranks) worst_clock = std::max(worst_clock, r.clock_error_s);
  // On the common clock, from the origin.
  auto at = [&](const ExplainRank& r, double since_forward_s) {
    return r.forward_end_s + since_forward_s - origin;
  };

  // The collective, as a noun ("all-reduce") and a participle ("all-reduced").
  const std::string collective = what_if ? what_if->collective : "all-reduce";
  const std::string done_as = collective == "all-reduce" ? "all-reduced" : collective + "ed";

  std::ostringstream os;
  os << "explain " << word << " " << number << ": " << ranks.size()
     << (ranks.size() == 1 ? " rank, " : " ranks, ") << layout.size()
     << (layout.size() == 1 ? " bucket" : " buckets");
  if (collective != "all-reduce") os << " (" << done_as << ")";
  if (what_if && what_if->layout_given)
    os << "; the buckets are the given layout (ZeRO-3: one per unit), the bucket cap does not shape them";
  os << ". Times in ms from the first forward end (rank " << (ref ? ref->rank : 0)
     << "), all ranks on rank 0's clock";
  if (ranks.size() > 1) os << " (offsets within +-" << ms(worst_clock) << " ms)";
  os << ".\n";

  for (const ExplainRank& r : ranks) {
    if (r.shadow) {
      os << "rank " << r.rank << ": had no batch (Join): it shadowed the others' " << collective
         << "s with zeros.\n";
      continue;
    }
    os << "rank " << r.rank << ": forward ended at " << ms(at(r, 0)) << ", backward computed until "
       << ms(at(r, r.backward_compute_s)) << " (" << ms(r.backward_compute_s) << " ms), then waited "
       << ms(r.exposed_s) << " ms for communication (exposed)";
    // The bucket whose completion the rank waited for last.
    const BucketTiming* last = nullptr;
    for (const BucketTiming& b : r.buckets)
      if (!last || b.completed_s > last->completed_s) last = &b;
    if (last && r.exposed_s > 0 && last->completed_s > r.backward_compute_s)
      os << ", bucket " << last->index << " finishing last";
    os << ".\n";
    for (size_t k = 0; k < r.buckets.size(); ++k) {
      const BucketTiming& b = r.buckets[k];
      os << "  bucket " << k << ": " << human_bytes(layout[k].bytes) << ", " << params_of(layout[k])
         << ": last gradient at " << ms(at(r, b.ready_s)) << ", issued at " << ms(at(r, b.launched_s))
         << ", done at " << ms(at(r, b.completed_s)) << " (" << ms(b.completed_s - b.launched_s)
         << " ms in flight";
      if (b.launched_s > b.ready_s + 1e-6)
        os << "; issued " << ms(b.launched_s - b.ready_s) << " ms after it was full: buckets go out in order";
      os << ")\n";
    }
    if (!r.no_gradient.empty()) {
      os << "  no gradient on this rank (" << done_as << " as zeros):";
      for (const std::string& n : r.no_gradient) os << " " << n;
      os << "\n";
    }
  }

  std::vector<const ExplainRank*> computing;
  for (const ExplainRank& r : ranks)
    if (!r.shadow) computing.push_back(&r);
  if (computing.size() > 1) {
    const auto by_end = [&](const ExplainRank* a, const ExplainRank* b) {
      return at(*a, a->backward_compute_s) < at(*b, b->backward_compute_s);
    };
    const ExplainRank* slowest = *std::max_element(computing.begin(), computing.end(), by_end);
    const ExplainRank* fastest = *std::min_element(computing.begin(), computing.end(), by_end);
    const double lag = at(*slowest, slowest->backward_compute_s) - at(*fastest, fastest->backward_compute_s);
    os << "slowest: rank " << slowest->rank << " finished backward " << ms(lag) << " ms after rank "
       << fastest->rank;
    if (lag <= 2 * worst_clock) os << " (within the clocks' error: no rank was clearly slower)";
    os << "; rank " << fastest->rank << " waited " << ms(fastest->exposed_s) << " ms, rank " << slowest->rank
       << " " << ms(slowest->exposed_s) << " ms.\n";
    for (size_t k = 0; k < layout.size(); ++k) {
      const ExplainRank* last_issuer = computing.front();
      const ExplainRank* first_issuer = computing.front();
      for (const ExplainRank* r : computing) {
        if (at(*r, r->buckets[k].launched_s) > at(*last_issuer, last_issuer->buckets[k].launched_s))
          last_issuer = r;
        if (at(*r, r->buckets[k].launched_s) < at(*first_issuer, first_issuer->buckets[k].launched_s))
          first_issuer = r;
      }
      const double start = at(*last_issuer, last_issuer->buckets[k].launched_s);
      const double wait = start - at(*first_issuer, first_issuer->buckets[k].launched_s);
      os << "  bucket " << k << " could start at " << ms(start) << ", when rank " << last_issuer->rank
         << " issued it last";
      if (first_issuer != last_issuer)
        os << " (rank " << first_issuer->rank << " had waited " << ms(wait) << " ms)";
      os << "\n";
    }
  }
  // Parameters no rank gave a gradient.
  std::vector<std::string> nobody;
  if (!computing.empty())
    for (const std::string& n : computing.front()->no_gradient) {
      bool all = true;
      for (const ExplainRank* r : computing)
        all = all && std::find(r->no_gradient.begin(), r->no_gradient.end(), n) != r->no_gradient.end();
      if (all) nobody.push_back(n);
    }
  if (nobody.empty()) {
    os << "unused parameters: none (every parameter got a gradient on some rank)\n";
  } else {
    os << "unused parameters (no gradient on any rank):";
    for (const std::string& n : nobody) os << " " << n;
    os << "\n";
  }
  if (what_if && what_if->rows.empty() && !what_if->basis.empty())
    os << "what-if: " << what_if->basis << "\n";
  if (what_if && !what_if->rows.empty()) {
    os << "what-if (bucket simulator, " << what_if->basis << "):\n";
    // The best predicted row; on a tie this run's cap (no change needed), else the first.
    const ExplainWhatIf::Row* best = &what_if->rows.front();
    for (const auto& row : what_if->rows)
      if (row.cap_mb == what_if->current_cap_mb) best = &row;
    for (const auto& row : what_if->rows)
      if (row.step_s < best->step_s) best = &row;
    for (const auto& row : what_if->rows) {
      char line[200];
      if (what_if->layout_given) {  // this run's buckets only: no other cap applies
        std::snprintf(line, sizeof line, "  this run: %zu %s, exposed %s ms, backward + exposed %s ms\n",
                      row.buckets, row.buckets == 1 ? "bucket" : "buckets", ms(row.exposed_s).c_str(),
                      ms(row.step_s).c_str());
        os << line;
        continue;
      }
      std::snprintf(line, sizeof line,
                    "  cap %8.3f MiB: %3zu %s, exposed %s ms, backward + exposed %s ms%s%s\n", row.cap_mb,
                    row.buckets, row.buckets == 1 ? "bucket" : "buckets", ms(row.exposed_s).c_str(),
                    ms(row.step_s).c_str(), row.cap_mb == what_if->current_cap_mb ? "  (this run)" : "",
                    &row == best ? "  <- best" : "");
      os << line;
    }
  }
  return os.str();
}

}  // namespace ddp
