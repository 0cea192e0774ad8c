// flight_analysis.cpp - finds where the ranks' flight records diverge and words each finding as one sentence.
//
// Per group, over the ranks that left a record with a ring (capacity > 0; D):
//   mismatch:     the first seq two ranks both hold with a different call (op, dtype, count, reduce op, root)
//                 or a different DDP bucket;
//   levels:       for each distinct `recorded` value v below the largest, in ascending order: the ranks whose
//                 record ends at v never issued #v. If a rank that issued #v did not complete it, that is a
//                 missing issue (uneven steps when the behind ranks' groups were destroyed, reason "exit")
//                 and the scan stops; if all that issued it completed it, the behind rank was only dumped
//                 earlier (rank ahead, completed); if no rank holds #v any more, the rings do not overlap;
//   stall:        the first seq (below the missing issue) that a rank holding it did not complete: completed
//                 on some ranks only, or on none (every rank waiting);
//   no dump:      ranks of the world without a record, with what the others waited on.
// The lead is the earliest of these by seq (ties: mismatch, no dump, uneven steps, missing issue, completed
// on some only, all waiting, no overlap), then rank ahead, recorder off, nothing.
#include "runtime/distributed/flight_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace ddp::dist::flight {

const char* divergence_kind_name(DivergenceKind k) {
  switch (k) {
    case DivergenceKind::Mismatch:
      return "mismatch";
    case DivergenceKind::MissingIssue:
      return "missing issue";
    case DivergenceKind::UnevenSteps:
      return "uneven steps";
    case DivergenceKind::NoDump:
      return "no dump";
    case DivergenceKind::NoOverlap:
      return "rings do not overlap";
    case DivergenceKind::PartialCompletion:
      return "completed on some ranks only";
    case DivergenceKind::AllWaiting:
      return "completed on no rank";
    case DivergenceKind::RankAhead:
      return "rank ahead";
    case DivergenceKind::RecorderOff:
      return "recorder off";
    case DivergenceKind::Nothing:
      return "nothing diverged";
  }
  return "?";
}

std::string rank_list_text(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  if (ranks.empty()) return "no rank";
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
      i = j + 1;
    } else {
      parts.push_back(std::to_string(ranks[i]));
      ++i;
    }
  }
  std::string out = (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += (i + 1 == parts.size() ? " and " : ", ");
    out += parts[i];
  }
  return out;
}

namespace {
std::string three_digits(double v, const char* unit) {
  char buf[64];
  if (v >= 100)
    std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
  else
    std::snprintf(buf, sizeof buf, "%.3g %s", v, unit);
  return buf;
}
}  // namespace

std::string duration_text(int64_t ns) {
  if (ns < 0) return "?";
  const double v = static_cast<double>(ns);
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (ns < 1000000) return three_digits(v / 1e3, "us");
  if (ns < 1000000000) return three_digits(v / 1e6, "ms");
  return three_digits(v / 1e9, "s");
}

std::string bytes_text(int64_t bytes) {
  if (bytes < 0) return "?";
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f %s" : "%.3g %s", v, units[u]);
  return buf;
}

int64_t entry_bytes(const DumpEntry& e) {
  if (e.bucket_bytes >= 0) return e.bucket_bytes;
  static const std::map<std::string, int64_t> sizes = {{"float32", 4}, {"float64", 8}, {"bfloat16", 2},
                                                       {"int32", 4},   {"int64", 8},   {"uint8", 1}};
  auto it = sizes.find(e.dtype);
  return it == sizes.end() ? -1 : e.count * it->second;
}

namespace {
// with_call: name dtype x count when no bucket says what it is (off where the sentence already names the
// call).
std::string context_parts(const DumpEntry& e, bool with_iteration, bool with_call = true) {
  std::vector<std::string> parts;
  if (e.bucket >= 0) {
    std::string b = "bucket " + std::to_string(e.bucket);
    if (!e.params.empty()) b += ": " + e.params;
    parts.push_back(b);
    if (e.bucket_bytes >= 0) parts.push_back(bytes_text(e.bucket_bytes));
  } else {
    if (!e.issuer.empty()) parts.push_back(e.issuer);
    if (!e.params.empty()) parts.push_back(e.params);
    if (with_call) parts.push_back(e.dtype + " x " + std::to_string(e.count));
  }
  if (with_iteration && e.iteration >= 0) parts.push_back("iteration " + std::to_string(e.iteration));
  if (parts.empty()) return "";
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out + ")";
}
}  // namespace

std::string entry_context(const DumpEntry& e) { return context_parts(e, true); }

namespace {

// Where seq s stands on one rank.
enum class At { NotIssued, Evicted, Held };
struct Look {
  At at = At::NotIssued;
  const DumpEntry* entry = nullptr;
};
Look look(const GroupRecord& r, uint64_t s) {
  if (s >= r.recorded) return {At::NotIssued, nullptr};
  if (const DumpEntry* e = r.find(s)) return {At::Held, e};
  return {At::Evicted, nullptr};
}

// How long the rank waited on `e`: from started (or issued) to ended, or to the dump when still pending.
int64_t waited_ns(const GroupRecord& r, const DumpEntry& e) {
  const int64_t start = e.started_ns >= 0 ? e.started_ns : e.issued_ns;
  if (start < 0) return -1;
  if (e.pending()) return r.dumped_unix_ns >= 0 ? r.dumped_unix_ns - r.to_unix(start) : -1;
  return e.ended_ns >= 0 ? e.ended_ns - start : -1;
}

std::string coll(const DumpEntry& e) { return e.op + " #" + std::to_string(e.seq); }

// "allreduce float32 x 262144", "broadcast float32 x 1024 from root 0", with the reduce op when asked:
// "allreduce float32 x 262144 (max)".
std::string call_text(const DumpEntry& e, bool with_reduce_op) {
  std::string s = e.op + " " + e.dtype + " x " + std::to_string(e.count);
  if (e.root >= 0) s += " from root " + std::to_string(e.root);
  if (with_reduce_op) s += " (" + e.reduce_op + ")";
  return s;
}

// The ranks' sides as one verb phrase ("rank 1's", "ranks 0 and 2's").
std::string possessive(const std::vector<int>& ranks) { return rank_list_text(ranks) + "'s"; }

class Analyzer {
 public:
  explicit Analyzer(GroupAnalysis& g) : g_(g) {
    for (int r = 0; r < g.world_size; ++r) {
      if (!g.ranks[r])
        no_dump_.push_back(r);
      else if (g.ranks[r]->capacity == 0)
        off_.push_back(r);
      else
        d_.push_back(r);
    }
    inner_ = g.group.find('/') != std::string::npos;
  }

  void run() {
    if (!d_.empty()) {
      lo_min_ = UINT64_MAX;
      for (int r : d_) {
        lo_min_ = std::min(lo_min_, rec(r).first_seq());
        lo_max_ = std::max(lo_max_, rec(r).first_seq());
        max_r_ = std::max(max_r_, rec(r).recorded);
      }
      find_mismatch();
      const uint64_t missing_at = find_levels();
      find_stall(missing_at);
    }
    add_no_dump();
    add_recorder_off();
    if (found_.empty()) add_nothing();
    order();
  }

 private:
  const GroupRecord& rec(int r) const { return *g_.ranks[r]; }

  // "rank 1" or, in an inner group, "rank 1 (global rank 3)".
  std::string who(const std::vector<int>& ranks) const {
    std::string s = rank_list_text(ranks);
    if (!inner_) return s;
    std::vector<std::string> globals;
    for (int r : ranks)
      if (g_.ranks[r] && g_.ranks[r]->global_rank >= 0 && g_.ranks[r]->global_rank != r)
        globals.push_back(std::to_string(g_.ranks[r]->global_rank));
    if (globals.size() != ranks.size() || globals.empty()) return s;
    s += globals.size() == 1 ? " (global rank " : " (global ranks ";
    for (size_t i = 0; i < globals.size(); ++i) s += (i ? ", " : "") + globals[i];
    return s + ")";
  }

  // "waited 600 s" / "waited 2.1 to 600 s" / "waited on it" from the ranks' entries at seq s.
  std::string waited(const std::vector<int>& ranks, uint64_t s, Divergence& d) const {
    int64_t lo = -1, hi = -1;
    bool all_known = true;
    for (int r : ranks) {
      const Look l = look(rec(r), s);
      const int64_t w = l.entry ? waited_ns(rec(r), *l.entry) : -1;
      if (w < 0) {
        all_known = false;
        continue;
      }
      lo = lo < 0 ? w : std::min(lo, w);
      hi = std::max(hi, w);
    }
    d.waited_min_ns = lo;
    d.waited_max_ns = hi;
    if (hi < 0) return "waited on it";
    std::string t = duration_text(lo) == duration_text(hi) ? duration_text(hi)
                                                           : duration_text(lo) + " to " + duration_text(hi);
    return "waited " + t + (all_known ? "" : " (not known for all of them)");
  }

  // "rank 1's last completed collective is #4811" for the ranks in `ranks`.
  std::string last_completed_text(const std::vector<int>& ranks) const {
    std::map<std::string, std::vector<int>> by_text;
    for (int r : ranks) {
      const GroupRecord& g = rec(r);
      std::string t;
      for (auto it = g.entries.rbegin(); it != g.entries.rend() && t.empty(); ++it)
        if (it->completed()) t.append("#").append(std::to_string(it->seq));
      by_text[t].push_back(r);
    }
    std::string out;
    for (const auto& [t, rs] : by_text) {
      if (!out.empty()) out += "; ";
      if (!t.empty())
        out += possessive(rs) + " last completed collective is " + t;
      else if (rec(rs.front()).recorded == 0)
        out += rank_list_text(rs) + " issued no collective at all";
      else
        out += rank_list_text(rs) + " completed none of the collectives in " +
               (rs.size() == 1 ? "its" : "their") + " window";
    }
    return out;
  }

  // The first failure message among `ranks`, as "; rank 1's error: ...".
  std::string failure_text(const std::vector<int>& ranks) const {
    for (int r : ranks)
      if (!rec(r).failure.empty()) return "; " + possessive({r}) + " error: " + log::for_user(rec(r).failure);
    return "";
  }

  // The first held entry of seq s among `ranks` (there is one by construction).
  const DumpEntry& held(const std::vector<int>& ranks, uint64_t s) const {
    for (int r : ranks)
      if (const DumpEntry* e = rec(r).find(s)) return *e;
    DDP_FAIL("flight analysis: no rank holds #", s);
  }

  // The sequence numbers some rank's record holds, ascending: the only ones that can differ or wait (walking
  // every number up to `recorded` instead took forever on a record whose count was damaged, issue 36).
  const std::vector<uint64_t>& held_seqs() {
    if (held_seqs_.empty()) {
      for (int r : d_)
        for (const DumpEntry& e : rec(r).entries) held_seqs_.push_back(e.seq);
      std::sort(held_seqs_.begin(), held_seqs_.end());
      held_seqs_.erase(std::unique(held_seqs_.begin(), held_seqs_.end()), held_seqs_.end());
    }
    return held_seqs_;
  }

  void find_mismatch() {
    for (uint64_t s : held_seqs()) {
      if (s < lo_min_ || s >= max_r_) continue;
      std::vector<int> holders;
      for (int r : d_)
        if (rec(r).find(s)) holders.push_back(r);
      if (holders.size() < 2) continue;
      // Sides by call; a bucket index is compared only between DDP bucket entries that carry one.
      std::vector<std::vector<int>> sides;
      bool by_bucket = false;
      for (int pass = 0; pass < 2 && sides.size() < 2; ++pass) {
        by_bucket = pass == 1;
        sides.clear();
        for (int r : holders) {
          const DumpEntry& e = *rec(r).find(s);
          bool placed = false;
          for (auto& side : sides) {
            const DumpEntry& o = *rec(side.front()).find(s);
            const bool same =
                by_bucket ? (e.bucket < 0 || o.bucket < 0 || e.bucket == o.bucket) : e.same_call(o);
            if (same) {
              side.push_back(r);
              placed = true;
              break;
            }
          }
          if (!placed) sides.push_back({r});
        }
      }
      if (sides.size() < 2) continue;
      std::stable_sort(sides.begin(), sides.end(),
                       [](const auto& a, const auto& b) { return a.size() > b.size(); });
      const DumpEntry& major = *rec(sides[0].front()).find(s);
      Divergence d;
      d.kind = DivergenceKind::Mismatch;
      d.seq = s;
      d.others = sides[0];
      std::vector<std::string> fields;
      const DumpEntry& odd = *rec(sides[1].front()).find(s);
      if (by_bucket) {
        fields.push_back("bucket");
      } else {
        if (odd.op != major.op) fields.push_back("op");
        if (odd.dtype != major.dtype) fields.push_back("dtype");
        if (odd.count != major.count) fields.push_back("count");
        if (odd.reduce_op != major.reduce_op) fields.push_back("reduce_op");
        if (odd.root != major.root) fields.push_back("root");
      }
      for (size_t i = 0; i < fields.size(); ++i)
        d.field += (i == 0 ? "" : i + 1 == fields.size() ? " and " : ", ") + fields[i];
      const bool show_reduce_op = !by_bucket && odd.reduce_op != major.reduce_op;
      std::string odd_text;
      for (size_t i = 1; i < sides.size(); ++i) {
        for (int r : sides[i]) d.ranks.push_back(r);
        const DumpEntry& e = *rec(sides[i].front()).find(s);
        if (i > 1) odd_text += i + 1 == sides.size() ? " and " : ", ";
        odd_text +=
            who(sides[i]) + " issued " + call_text(e, show_reduce_op) + " " + context_parts(e, true, false);
      }
      const std::string major_text = who(sides[0]) + " issued " + call_text(major, show_reduce_op) + " " +
                                     context_parts(major, true, false);
      if (sides.size() == 2 && sides[0].size() == sides[1].size()) {
        // No majority: name both sides in rank order.
        const bool first_is_major = sides[0].front() < sides[1].front();
        d.sentence = "at collective #" + std::to_string(s) + " the ranks disagree on the " + d.field + ": " +
                     (first_is_major ? major_text + " where " + odd_text : odd_text + " where " + major_text);
      } else {
        d.sentence = "at collective #" + std::to_string(s) + " the ranks disagree on the " + d.field + ": " +
                     odd_text + " where " + major_text;
      }
      const bool no_majority = sides.size() == 2 && sides[0].size() == sides[1].size();
      const bool other_bucket = major.bucket >= 0 && odd.bucket >= 0 && major.bucket != odd.bucket;
      if (major.iteration >= 0 && odd.iteration >= 0 && major.iteration != odd.iteration) {
        // The side already in a later iteration skipped (or the other repeated) collectives of the earlier.
        const bool odd_later = odd.iteration > major.iteration;
        const std::vector<int>& later = odd_later ? sides[1] : sides[0];
        const std::vector<int>& earlier = odd_later ? sides[0] : sides[1];
        const int64_t it_later = std::max(odd.iteration, major.iteration);
        const int64_t it_earlier = std::min(odd.iteration, major.iteration);
        d.sentence += "; " + who(later) + (later.size() == 1 ? " is" : " are") + " in iteration " +
                      std::to_string(it_later) + " there while " + who(earlier) +
                      (earlier.size() == 1 ? " is" : " are") + " in " + std::to_string(it_earlier) + ": " +
                      rank_list_text(later) + " skipped collectives of iteration " +
                      std::to_string(it_earlier) + " that " + rank_list_text(earlier) + " issued";
      } else if (other_bucket) {
        d.sentence += "; the ranks' DDP buckets are out of step from here on (bucket " +
                      std::to_string(odd.bucket) + " against " + std::to_string(major.bucket) +
                      "): a rank skipped or reordered a bucket's all-reduce (a comm hook, or buckets built "
                      "differently)";
      } else {
        d.sentence += no_majority
                          ? "; every rank must issue the same collectives in the same order: find which "
                            "of them took another code path (or has another model, or other data)"
                          : "; every rank must issue the same collectives in the same order: find where "
                            "the odd rank's code path (or model, or data) differs";
      }
      found_.push_back(std::move(d));
      return;
    }
  }

  // The levels scan; returns the seq of the missing issue found, or max_r_.
  uint64_t find_levels() {
    std::set<uint64_t> levels;
    for (int r : d_) levels.insert(rec(r).recorded);
    for (uint64_t v : levels) {
      if (v == max_r_) break;
      std::vector<int> behind, waiting, done, evicted;
      for (int r : d_) {
        if (rec(r).recorded == v) behind.push_back(r);
        if (rec(r).recorded <= v) continue;
        const Look l = look(rec(r), v);
        if (l.at == At::Evicted)
          evicted.push_back(r);
        else if (l.entry->completed())
          done.push_back(r);
        else
          waiting.push_back(r);
      }
      if (behind.empty()) continue;
      if (!evicted.empty()) add_no_overlap(v, behind, evicted);
      if (!waiting.empty()) {
        add_missing(v, behind, waiting, done);
        return v;
      }
      if (!done.empty()) add_ahead_completed(v, behind, done);
      if (done.empty()) return v;  // nothing left to compare beyond v
    }
    return max_r_;
  }

  void add_no_overlap(uint64_t v, const std::vector<int>& behind, const std::vector<int>& evicted) {
    Divergence d;
    d.kind = DivergenceKind::NoOverlap;
    d.seq = v;
    d.ranks = evicted;
    d.others = behind;
    uint64_t start = UINT64_MAX, cap = 0, ahead = 0;
    for (int r : evicted) {
      start = std::min(start, rec(r).first_seq());
      cap = std::max<uint64_t>(cap, static_cast<uint64_t>(rec(r).capacity));
      ahead = std::max(ahead, rec(r).recorded - v);
    }
    d.ahead_by = static_cast<int64_t>(ahead);
    d.sentence = possessive(evicted) + " ring starts at #" + std::to_string(start) + ", after " +
                 possessive(behind) + " record ends at #" + std::to_string(v - 1) +
                 ": the windows do not overlap (" + rank_list_text(evicted) + " issued " +
                 std::to_string(ahead) + " collectives past it and the " + std::to_string(cap) +
                 "-entry ring wrapped), so the dumps cannot show whether " + rank_list_text(evicted) +
                 " completed #" + std::to_string(v) + "; raise DDP_FLIGHT_RECORDER_ENTRIES or dump sooner";
    found_.push_back(std::move(d));
  }

  void add_missing(uint64_t v, const std::vector<int>& behind, const std::vector<int>& waiting,
                   const std::vector<int>& done) {
    const DumpEntry& e = held(waiting, v);
    bool all_exit = true;
    for (int r : behind) all_exit = all_exit && rec(r).reason == "exit";
    uint64_t top = 0;
    std::vector<int> top_ranks;
    for (int r : waiting) top = std::max(top, rec(r).recorded);
    for (int r : d_)
      if (rec(r).recorded == top) top_ranks.push_back(r);
    Divergence d;
    d.kind = all_exit ? DivergenceKind::UnevenSteps : DivergenceKind::MissingIssue;
    d.seq = v;
    d.ranks = behind;
    d.others = waiting;
    d.ahead_by = static_cast<int64_t>(top - v);
    const std::string w = waited(waiting, v, d);
    if (all_exit) {
      d.sentence = who(behind) + " had finished after #" + std::to_string(v - 1) + " (" +
                   (behind.size() == 1 ? "its group was" : "their groups were") + " destroyed) while " +
                   who(waiting) + " issued " + coll(e);
      if (e.iteration >= 0) d.sentence += " in iteration " + std::to_string(e.iteration);
      d.sentence += " " + context_parts(e, false) + " and " + w;
      if (d.ahead_by > 1)
        d.sentence += " (" + rank_list_text(top_ranks) + " " + (top_ranks.size() == 1 ? "is " : "are ") +
                      std::to_string(d.ahead_by) + " collectives ahead)";
      d.sentence +=
          ": the ranks ran different numbers of steps (uneven inputs); give every rank the same number "
          "of batches, or wrap the training loop in ddp::Join";
    } else {
      d.sentence = who(behind) + " never issued " + coll(e) + " " + entry_context(e) + "; " + who(waiting) +
                   " " + w + "; " + last_completed_text(behind);
      if (!done.empty()) d.sentence += "; " + rank_list_text(done) + " completed it (a later dump)";
    }
    found_.push_back(std::move(d));
    if (top - v > 1) {
      Divergence a;
      a.kind = DivergenceKind::RankAhead;
      a.seq = v;
      a.ranks = top_ranks;
      a.others = behind;
      a.ahead_by = static_cast<int64_t>(top - v);
      std::string states;
      int completed = 0;
      for (const DumpEntry& x : rec(top_ranks.front()).entries)
        if (x.seq >= v && x.seq < top && x.completed()) ++completed;
      a.sentence =
          who(top_ranks) + " " + (top_ranks.size() == 1 ? "is " : "are ") + std::to_string(top - v) +
          " collectives ahead of " + rank_list_text(behind) + ": issued #" + std::to_string(v) + " to #" +
          std::to_string(top - 1) + ", " +
          (completed == 0 ? std::string("none of them completed (queued behind #") + std::to_string(v) + ")"
                          : std::to_string(completed) + " of them completed");
      found_.push_back(std::move(a));
    }
  }

  void add_ahead_completed(uint64_t v, const std::vector<int>& behind, const std::vector<int>& done) {
    Divergence d;
    d.kind = DivergenceKind::RankAhead;
    d.completed_ahead = true;
    d.seq = v;
    d.ranks = done;
    d.others = behind;
    uint64_t top = 0;
    int64_t behind_dump = -1, ahead_dump = -1;
    for (int r : done) {
      top = std::max(top, rec(r).recorded);
      ahead_dump = std::max(ahead_dump, rec(r).dumped_unix_ns);
    }
    for (int r : behind) behind_dump = std::max(behind_dump, rec(r).dumped_unix_ns);
    d.ahead_by = static_cast<int64_t>(top - v);
    const std::string reason = rec(behind.front()).reason;
    std::vector<std::string> why;
    if (behind_dump >= 0 && ahead_dump >= behind_dump)
      why.push_back("written " + duration_text(ahead_dump - behind_dump) + " earlier");
    if (!reason.empty()) why.push_back("reason " + reason);
    d.sentence = possessive(behind) + " record ends at #" + std::to_string(v - 1) + ", " +
                 std::to_string(top - v) + " collective" + (top - v == 1 ? "" : "s") + " before " +
                 possessive(done) + ", which completed #" + std::to_string(v) + ": " +
                 (behind.size() == 1 ? "its" : "their") + " dump is older";
    if (!why.empty()) d.sentence += " (" + why[0] + (why.size() > 1 ? ", " + why[1] : "") + ")";
    d.sentence += ", so it was not behind in the job; compare dumps written at the same time";
    found_.push_back(std::move(d));
  }

  // The first seq below `limit` that a rank holding it did not complete.
  void find_stall(uint64_t limit) {
    for (uint64_t s : held_seqs()) {
      if (s < lo_min_) continue;
      if (s >= limit) break;
      std::vector<int> done, not_done, not_issued;
      for (int r : d_) {
        const Look l = look(rec(r), s);
        if (l.at == At::NotIssued) not_issued.push_back(r);
        if (l.at != At::Held) continue;
        (l.entry->completed() ? done : not_done).push_back(r);
      }
      if (not_done.empty()) continue;
      const DumpEntry& e = held(not_done, s);
      Divergence d;
      d.seq = s;
      d.ranks = not_done;
      d.others = done;
      bool any_failed = false;
      for (int r : not_done) any_failed = any_failed || rec(r).find(s)->failed();
      const std::string w = waited(not_done, s, d);
      if (!done.empty()) {
        d.kind = DivergenceKind::PartialCompletion;
        d.sentence = coll(e) + " " + entry_context(e) + " completed on " + who(done) + " only; " +
                     who(not_done) + " did not complete it (" + w +
                     (any_failed ? " and failed" : ", still waiting") + ")" + failure_text(not_done);
      } else if (no_dump_.empty() && !not_issued.empty()) {
        // The ranks that had not issued s: their dumps are older (a RankAhead says so).
        const std::vector<int>& rest = not_issued;
        d.kind = DivergenceKind::AllWaiting;
        d.others = rest;
        d.sentence = who(not_done) + " issued " + coll(e) + " " + entry_context(e) +
                     " and did not complete it: " + w + failure_text(not_done) + "; " + who(rest) +
                     " had not issued it when " + (rest.size() == 1 ? "its" : "their") +
                     " older dump was written";
      } else if (no_dump_.empty()) {
        d.kind = DivergenceKind::AllWaiting;
        bool any_pending = false, any_failed_here = false;
        for (int r : not_done) {
          any_pending = any_pending || rec(r).find(s)->pending();
          any_failed_here = any_failed_here || rec(r).find(s)->failed();
        }
        const std::string how = !any_pending ? " and failed" : any_failed_here ? " (some failed)" : "";
        d.sentence = std::string(d_.size() == 1 ? "the only rank" : "every rank") + " issued " + coll(e) +
                     " " + entry_context(e) + " and none completed it: " + who(not_done) + " " + w + how +
                     failure_text(not_done);
        // Every rank still waiting and none failed: nobody said why, so the wait itself is the finding.
        if (!any_failed_here && d_.size() > 1)
          d.sentence +=
              "; no rank is missing from it, so look for a rank stuck inside it (stopped, or its "
              "transport stalled)";
      } else {
        return;  // every dumped rank waits: the ranks without a dump explain it (add_no_dump)
      }
      found_.push_back(std::move(d));
      return;
    }
  }

  void add_no_dump() {
    if (no_dump_.empty()) return;
    Divergence d;
    d.kind = DivergenceKind::NoDump;
    d.ranks = no_dump_;
    d.others = d_;
    d.sentence = who(no_dump_) + " left no dump (crashed, killed or stopped: see " +
                 (no_dump_.size() == 1 ? "its" : "their") + " exit in the launcher's log)";
    if (d_.empty()) {
      d.sentence += "; no other rank left a usable record either";
      found_.push_back(std::move(d));
      return;
    }
    // The first seq not every dumped rank completed.
    uint64_t s = lo_max_;
    std::vector<int> waiting;
    for (; s < max_r_; ++s) {
      bool all_done = true;
      for (int r : d_) {
        const Look l = look(rec(r), s);
        if (l.at != At::Held || !l.entry->completed()) all_done = false;
        if (l.at == At::Held && !l.entry->completed()) waiting.push_back(r);
      }
      if (!all_done) break;
    }
    d.seq = s;
    if (max_r_ == 0) {
      d.sentence += "; " + who(d_) + " recorded no collective";
    } else if (!waiting.empty()) {
      const DumpEntry& e = held(waiting, s);
      d.sentence +=
          "; " + who(waiting) + " " + waited(waiting, s, d) + " on " + coll(e) + " " + entry_context(e);
      if (s > lo_max_)
        d.sentence += "; the last collective every dumped rank completed is #" + std::to_string(s - 1);
    } else if (s > lo_max_) {
      d.sentence += "; " + who(d_) + " completed every collective up to #" + std::to_string(s - 1);
    }
    found_.push_back(std::move(d));
  }

  void add_recorder_off() {
    if (off_.empty()) return;
    Divergence d;
    d.kind = DivergenceKind::RecorderOff;
    d.ranks = off_;
    d.seq = max_r_;
    d.sentence = who(off_) +
                 " recorded nothing (ring capacity 0: DDP_FLIGHT_RECORDER_ENTRIES=0 there), so the "
                 "analysis leaves " +
                 (off_.size() == 1 ? "it" : "them") + " out; unset the variable to record";
    found_.push_back(std::move(d));
  }

  void add_nothing() {
    Divergence d;
    d.kind = DivergenceKind::Nothing;
    d.others = d_;
    if (max_r_ == 0) {
      d.sentence = "no collective of group '" + g_.group + "' was recorded yet (recorded 0 on " +
                   rank_list_text(d_) + ")";
      found_.push_back(std::move(d));
      return;
    }
    d.seq = max_r_ - 1;
    std::string last = "collective #" + std::to_string(max_r_ - 1);  // a record may lack its newest entry
    for (int r : d_)
      if (const DumpEntry* e = rec(r).find(max_r_ - 1)) last = coll(*e);
    const std::string ranks =
        d_.size() == 1 ? "the only rank (world " + std::to_string(g_.world_size) + ")" : "every rank";
    const std::string where = d_.size() == 1   ? ""
                              : d_.size() == 2 ? " on both ranks"
                                               : " on all " + std::to_string(d_.size()) + " ranks";
    d.sentence = ranks + " completed everything up to " + last + " in the window (#" +
                 std::to_string(lo_max_) + " to #" + std::to_string(max_r_ - 1) + where +
                 "): nothing diverged";
    found_.push_back(std::move(d));
  }

  static int priority(DivergenceKind k) {
    switch (k) {
      case DivergenceKind::Mismatch:
        return 0;
      case DivergenceKind::NoDump:
        return 1;
      case DivergenceKind::UnevenSteps:
        return 2;
      case DivergenceKind::MissingIssue:
        return 3;
      case DivergenceKind::PartialCompletion:
        return 4;
      case DivergenceKind::AllWaiting:
        return 5;
      case DivergenceKind::NoOverlap:
        return 6;
      case DivergenceKind::RankAhead:
        return 7;
      case DivergenceKind::RecorderOff:
        return 8;
      case DivergenceKind::Nothing:
        return 9;
    }
    return 10;
  }

  void order() {
    // Causes (priority < 7) by seq, then the rest by priority.
    std::stable_sort(found_.begin(), found_.end(), [](const Divergence& a, const Divergence& b) {
      const bool ca = priority(a.kind) < 7, cb = priority(b.kind) < 7;
      if (ca != cb) return ca;
      if (ca && a.seq != b.seq) return a.seq < b.seq;
      if (priority(a.kind) != priority(b.kind)) return priority(a.kind) < priority(b.kind);
      return a.seq < b.seq;
    });
    g_.divergences = std::move(found_);
    g_.focus_seq = g_.divergences.front().seq;
  }

  GroupAnalysis& g_;
  std::vector<int> d_, no_dump_, off_;
  bool inner_ = false;
  uint64_t lo_min_ = 0, lo_max_ = 0, max_r_ = 0;
  std::vector<uint64_t> held_seqs_;
  std::vector<Divergence> found_;
};

// The process a group's rank runs in, comparable across groups: its global rank, else its pid and host, else
// nothing (then it matches no other group's rank).
std::string process_of(const GroupAnalysis& g, int r) {
  const auto& rec = g.ranks[static_cast<size_t>(r)];
  if (!rec) return "";
  if (rec->global_rank >= 0) return "rank " + std::to_string(rec->global_rank);
  if (rec->pid >= 0) return "pid " + std::to_string(rec->pid) + " on " + rec->host;
  return "";
}

// "allgather #10 of zero3 param gather (bucket 2: ..., iteration 3)", "allreduce #20 (join activity, int32 x
// 2)".
std::string wait_text(const DumpEntry& e) {
  std::string s = coll(e);
  if (e.bucket >= 0 && !e.issuer.empty()) s += " of " + e.issuer;
  return s + " " + entry_context(e);
}

}  // namespace

std::string cross_group_wait(const std::vector<GroupAnalysis>& groups) {
  // One wait per group whose finding is a missing issue: its waiting ranks' processes wait for the behind
  // ranks' processes. Two of them in opposite directions between the same processes are a cycle.
  struct Wait {
    const GroupAnalysis* g;
    const Divergence* d;
    std::vector<std::string> waiters, behind;
    const DumpEntry* entry;
    int64_t issued_unix_ns;
  };
  std::vector<Wait> waits;
  for (const GroupAnalysis& g : groups) {
    // Top-level groups only: an inner group (hier's pg0/host1) carries its parent's collectives, so a wait in
    // both is one wait, not two.
    if (g.group.find('/') != std::string::npos) continue;
    if (g.divergences.empty() || g.lead().kind != DivergenceKind::MissingIssue) continue;
    const Divergence& d = g.lead();
    Wait w{&g, &d, {}, {}, nullptr, -1};
    for (int r : d.others) {
      w.waiters.push_back(process_of(g, r));
      const GroupRecord& rec = *g.ranks[static_cast<size_t>(r)];
      if (const DumpEntry* e = rec.find(d.seq)) {
        if (!w.entry) w.entry = e;
        const int64_t t = rec.to_unix(e->issued_ns);
        if (t >= 0 && (w.issued_unix_ns < 0 || t < w.issued_unix_ns)) w.issued_unix_ns = t;
      }
    }
    for (int r : d.ranks) w.behind.push_back(process_of(g, r));
    if (w.entry) waits.push_back(std::move(w));
  }
  const auto meets = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    for (const auto& x : a)
      if (!x.empty() && std::find(b.begin(), b.end(), x) != b.end()) return true;
    return false;
  };
  for (size_t i = 0; i < waits.size(); ++i)
    for (size_t j = i + 1; j < waits.size(); ++j) {
      const Wait* a = &waits[i];
      const Wait* b = &waits[j];
      if (!(meets(a->waiters, b->behind) && meets(b->waiters, a->behind))) continue;
      if (b->issued_unix_ns >= 0 && (a->issued_unix_ns < 0 || b->issued_unix_ns < a->issued_unix_ns))
        std::swap(a, b);
      const auto half = [](const Wait& w) {
        return "in group " + w.g->group + " " + rank_list_text(w.d->others) + " " +
               (w.d->others.size() == 1 ? "waits" : "wait") + " on " + wait_text(*w.entry) + " that " +
               rank_list_text(w.d->ranks) + " never issued";
      };
      return "the ranks wait on each other across two groups (a deadlock): " + half(*a) + ", while " +
             half(*b) +
             "; each waits in one group for a collective the other issues only after its own wait in the "
             "other "
             "group ends: every rank must issue the collectives of both groups in the same order (a joined "
             "rank "
             "must shadow every group's collectives)";
    }
  return "";
}

GroupAnalysis analyze_group(const std::vector<GroupRecord>& records) {
  DDP_CHECK(!records.empty(), "flight analysis: no record to analyse");
  GroupAnalysis g;
  g.group = records.front().group;
  g.backend = records.front().backend;
  g.world_size = records.front().world_size;
  g.ranks.resize(static_cast<size_t>(g.world_size));
  for (const GroupRecord& r : records) {
    DDP_CHECK(r.group == g.group, "flight analysis: records of groups '", g.group, "' and '", r.group,
              "' given as one group");
    DDP_CHECK(r.world_size == g.world_size, "records of group '", g.group,
              "' disagree on its size: ", g.world_size, " and ", r.world_size, " (", r.file,
              "): dumps of different jobs are mixed");
    DDP_CHECK(!g.ranks[r.rank], "two records of group '", g.group, "' rank ", r.rank, " (",
              g.ranks[r.rank]->file, ", ", r.file, "): merge them first (merge_flight_records)");
    g.ranks[r.rank] = std::make_shared<const GroupRecord>(r);
  }
  Analyzer(g).run();
  return g;
}

FlightAnalysis analyze_flight(const std::vector<GroupRecord>& records, const std::string& only_group) {
  std::map<std::string, std::vector<GroupRecord>> by_group;
  for (const GroupRecord& r : records) by_group[r.group].push_back(r);
  DDP_CHECK(!by_group.empty(), "no flight record to analyse (the dumps hold no group)");
  if (!only_group.empty()) {
    std::string names;
    for (const auto& [name, rs] : by_group) names += (names.empty() ? "" : ", ") + name;
    DDP_CHECK(by_group.count(only_group), "no record of group '", only_group, "' in the dumps; they hold ",
              names, ": pick one of those with --group");
  }
  FlightAnalysis out;
  std::vector<std::string> names;
  for (const auto& [name, rs] : by_group)
    if (only_group.empty() || name == only_group) names.push_back(name);
  std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return (a.find('/') == std::string::npos) > (b.find('/') == std::string::npos);
  });
  for (const std::string& n : names) out.groups.push_back(analyze_group(by_group[n]));
  // Lead: the group whose first finding names a rank that broke the step (tier 0), top-level groups before
  // inner ones; else one with any finding (tier 1), top-level first; else the first group. So a hier group
  // whose ranks all wait because one of its inner groups lost a rank leads with that inner group.
  const auto tier = [](const GroupAnalysis& g) {
    switch (g.lead().kind) {
      case DivergenceKind::Mismatch:
      case DivergenceKind::MissingIssue:
      case DivergenceKind::UnevenSteps:
      case DivergenceKind::NoDump:
      case DivergenceKind::PartialCompletion:
        return 0;
      case DivergenceKind::Nothing:
        return 2;
      default:
        return 1;
    }
  };
  out.lead = 0;
  for (size_t i = 1; i < out.groups.size(); ++i) {
    const GroupAnalysis& a = out.groups[i];
    const GroupAnalysis& b = out.groups[out.lead];
    if (std::make_pair(tier(a), a.group.find('/') != std::string::npos) <
        std::make_pair(tier(b), b.group.find('/') != std::string::npos))
      out.lead = i;
  }
  // Two groups whose ranks wait on each other outrank either group's own finding.
  out.cross_group = cross_group_wait(out.groups);
  if (!out.cross_group.empty()) {
    out.headline = out.cross_group;
    return out;
  }
  const GroupAnalysis& lead = out.groups[out.lead];
  int top_level = 0;
  for (const GroupAnalysis& g : out.groups) top_level += g.group.find('/') == std::string::npos;
  const bool name_it = out.groups.size() > 1 && (lead.group.find('/') != std::string::npos || top_level > 1);
  out.headline = (name_it ? "in group " + lead.group + ": " : "") + lead.lead().sentence;
  return out;
}

}  // namespace ddp::dist::flight
