// test_staging_plan.cpp - the Gloo staging plan of CUDA collectives (runtime/distributed/staging_plan.h),
// checked against an independent model on the CPU: each rank's "device" memory is a plain host arena, the
// plan's host blocks are bounds-checked byte arrays, and the host collective writes what gloo_group.cpp's
// execute() writes (all-reduce and broadcast in place on the output block, all-gather world x count into the
// output block, reduce-scatter one chunk). Every collective, in place and out of place, every root and rank
// position, worlds 1-4, seeded sizes (0 included) and three element sizes: no access outside a block or a
// device buffer, the result equals the collective's definition, and no device byte outside the output
// changes. Before the fix rank 0's in-place all-gather shared its n-element input block as output block.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/distributed/staging_plan.h"

using namespace ddp;
using namespace ddp::dist;

namespace {

// One pinned block: every access is bounds-checked and a violation is recorded, not performed.
struct Block {
  std::vector<unsigned char> bytes;
  explicit Block(size_t n) : bytes(n, 0xAB) {}  // 0xAB: a block is not zeroed, stale data shows in results
};

struct Failures {
  std::vector<std::string> list;
  void add(const std::string& s) {
    if (list.size() < 20) list.push_back(s);
  }
};

double get(const unsigned char* p, DType t) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    default: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}
void put(unsigned char* p, DType t, double x) {
  switch (t) {
    case DType::F32: {
      float v = static_cast<float>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::F64: {
      std::memcpy(p, &x, 8);
      return;
    }
    case DType::I64: {
      int64_t v = static_cast<int64_t>(x);
      std::memcpy(p, &v, 8);
      return;
    }
    default: {
      int32_t v = static_cast<int32_t>(x);
      std::memcpy(p, &v, 4);
      return;
    }
  }
}

// A rank's device arena and where its collective's buffers lie in it (byte offsets).
struct RankMemory {
  std::vector<unsigned char> arena;
  size_t in_off = 0, in_bytes = 0, out_off = 0, out_bytes = 0;
};

enum class Layout { InPlace, OutOfPlace };

struct Case {
  CollectiveKind kind;
  int world;
  int64_t count;  // elements of the input (per rank), as CollectiveDesc::count
  DType dtype;
  Layout layout;
  int root;
  std::string str() const {
    return std::string(collective_name(kind)) + " world " + std::to_string(world) + " count " +
           std::to_string(count) + " elem " + std::to_string(dtype_size(dtype)) + " B " +
           (layout == Layout::InPlace ? "in place" : "out of place") +
           (kind == CollectiveKind::Broadcast ? " root " + std::to_string(root) : "");
  }
};

// Runs one case through the plan and the model; adds every violation to `f`.
void run_case(const Case& c, Failures& f) {
  const size_t e = dtype_size(c.dtype);
  const size_t n = static_cast<size_t>(c.count);
  const size_t W = static_cast<size_t>(c.world);
  const size_t guard = 64;  // bytes of untouched device memory around the buffers
  std::mt19937 rng(static_cast<unsigned>(c.count * 131 + c.world * 7 + static_cast<int>(c.kind)));
  std::uniform_int_distribution<int> val(-50, 50);

  // Device layouts per rank.
  std::vector<RankMemory> mem(W);
  for (size_t r = 0; r < W; ++r) {
    RankMemory& m = mem[r];
    size_t in_b = n * e, out_b = n * e;
    if (c.kind == CollectiveKind::Allgather) out_b = W * n * e;
    if (c.kind == CollectiveKind::ReduceScatter) out_b = n / W * e;
    m.in_bytes = in_b;
    m.out_bytes = out_b;
    const bool single = c.kind == CollectiveKind::Allreduce || c.kind == CollectiveKind::Broadcast;
    if (single) {
      m.in_off = m.out_off = guard;
      m.arena.resize(guard + in_b + guard);
    } else if (c.layout == Layout::OutOfPlace) {
      m.in_off = guard;
      m.out_off = guard + in_b + guard;
      m.arena.resize(m.out_off + out_b + guard);
    } else if (c.kind == CollectiveKind::Allgather) {  // input = this rank's slice of the output
      m.out_off = guard;
      m.in_off = guard + r * n * e;
      m.arena.resize(guard + out_b + guard);
    } else {  // reduce-scatter in place: output = this rank's chunk of the input
      m.in_off = guard;
      m.out_off = guard + r * (n / W) * e;
      m.arena.resize(guard + in_b + guard);
    }
    for (auto& b : m.arena) b = static_cast<unsigned char>(rng());
    for (size_t i = 0; i < n; ++i) put(&m.arena[m.in_off + i * e], c.dtype, val(rng));
  }
  const std::vector<RankMemory> before = mem;

  // The expected output of each rank, from the definition of the collective (elements as doubles).
  auto in_elem = [&](size_t r, size_t i) { return get(&before[r].arena[before[r].in_off + i * e], c.dtype); };
  std::vector<std::vector<double>> expect(W);
  for (size_t r = 0; r < W; ++r) {
    switch (c.kind) {
      case CollectiveKind::Allreduce:
        for (size_t i = 0; i < n; ++i) {
          double s = 0;
          for (size_t q = 0; q < W; ++q) s += in_elem(q, i);
          expect[r].push_back(s);
        }
        break;
      case CollectiveKind::Broadcast:
        for (size_t i = 0; i < n; ++i) expect[r].push_back(in_elem(static_cast<size_t>(c.root), i));
        break;
      case CollectiveKind::Allgather:
        for (size_t q = 0; q < W; ++q)
          for (size_t i = 0; i < n; ++i) expect[r].push_back(in_elem(q, i));
        break;
      case CollectiveKind::ReduceScatter:
        for (size_t i = r * (n / W); i < (r + 1) * (n / W); ++i) {
          double s = 0;
          for (size_t q = 0; q < W; ++q) s += in_elem(q, i);
          expect[r].push_back(s);
        }
        break;
      case CollectiveKind::Barrier:
        break;
    }
  }

  // The plan of each rank, its blocks, and the copy in.
  std::vector<StagingPlan> plan(W);
  std::vector<Block> in_block, own_out_block;
  in_block.reserve(W);
  own_out_block.reserve(W);
  std::vector<Block*> out_block(W);
  for (size_t r = 0; r < W; ++r) {
    RankMemory& m = mem[r];
    CommBuffer in{
        m.arena.data() + m.in_off, static_cast<int64_t>(m.in_bytes / e), c.dtype, Device::cuda(0), {}};
    CommBuffer out{
        m.arena.data() + m.out_off, static_cast<int64_t>(m.out_bytes / e), c.dtype, Device::cuda(0), {}};
    if (c.kind == CollectiveKind::Allreduce || c.kind == CollectiveKind::Broadcast) out = in;
    plan[r] = plan_staging(c.kind, c.world, in, out);
    in_block.emplace_back(plan[r].in_block_bytes);
    own_out_block.emplace_back(plan[r].out_shares_in_block ? 0 : plan[r].out_block_bytes);
    out_block[r] = plan[r].out_shares_in_block ? &in_block[r] : &own_out_block[r];
    const std::string who = c.str() + ", rank " + std::to_string(r) + ": ";
    if (plan[r].copy_in_bytes > m.in_bytes)
      f.add(who + "the copy in reads " + std::to_string(plan[r].copy_in_bytes) + " B from a " +
            std::to_string(m.in_bytes) + " B device input");
    else if (plan[r].copy_in_bytes > in_block[r].bytes.size())
      f.add(who + "the copy in writes " + std::to_string(plan[r].copy_in_bytes) + " B into a " +
            std::to_string(in_block[r].bytes.size()) + " B block");
    else
      std::memcpy(in_block[r].bytes.data(), &m.arena[m.in_off], plan[r].copy_in_bytes);
  }

  // The host collective, as gloo_group.cpp's execute() runs it on host_in / host_out. Reads first (every
  // rank), then writes, each bounds-checked against its block.
  bool ok = true;
  auto read = [&](size_t r, Block& b, size_t bytes, const char* what) {
    std::vector<double> v;
    if (bytes > b.bytes.size()) {
      f.add(c.str() + ", rank " + std::to_string(r) + ": the host collective reads " + std::to_string(bytes) +
            " B of the " + what + " block of " + std::to_string(b.bytes.size()) + " B");
      ok = false;
      return v;
    }
    for (size_t i = 0; i < bytes / e; ++i) v.push_back(get(&b.bytes[i * e], c.dtype));
    return v;
  };
  auto write = [&](size_t r, Block& b, const std::vector<double>& v) {
    if (v.size() * e > b.bytes.size()) {
      f.add(c.str() + ", rank " + std::to_string(r) + ": the host collective writes " +
            std::to_string(v.size() * e) + " B into an output block of " + std::to_string(b.bytes.size()) +
            " B");
      ok = false;
      return;
    }
    for (size_t i = 0; i < v.size(); ++i) put(&b.bytes[i * e], c.dtype, v[i]);
  };
  std::vector<std::vector<double>> got(W);
  switch (c.kind) {
    case CollectiveKind::Allreduce: {  // in place on the output block
      for (size_t r = 0; r < W; ++r) got[r] = read(r, *out_block[r], n * e, "output");
      if (!ok) break;
      std::vector<double> s(n, 0.0);
      for (size_t r = 0; r < W; ++r)
        for (size_t i = 0; i < n; ++i) s[i] += got[r][i];
      for (size_t r = 0; r < W; ++r) write(r, *out_block[r], s);
      break;
    }
    case CollectiveKind::Broadcast: {  // the root's output block to every output block
      auto v = read(static_cast<size_t>(c.root), *out_block[static_cast<size_t>(c.root)], n * e, "output");
      if (!ok) break;
      if (W > 1 && n > 0)
        for (size_t r = 0; r < W; ++r) write(r, *out_block[r], v);
      break;
    }
    case CollectiveKind::Allgather: {  // every input block into every output block, world x count
      if (n == 0) break;
      for (size_t r = 0; r < W; ++r) got[r] = read(r, in_block[r], n * e, "input");
      if (!ok) break;
      std::vector<double> all;
      for (size_t r = 0; r < W; ++r) all.insert(all.end(), got[r].begin(), got[r].end());
      for (size_t r = 0; r < W; ++r)
        if (!(W == 1 && out_block[r] == &in_block[r]))
          write(r, *out_block[r], all);  // world 1: memcpy if apart
      break;
    }
    case CollectiveKind::ReduceScatter: {  // all-reduce a copy of the input, keep this rank's chunk
      const size_t chunk = n / W;
      if (chunk == 0) break;
      for (size_t r = 0; r < W; ++r) got[r] = read(r, in_block[r], n * e, "input");
      if (!ok) break;
      for (size_t r = 0; r < W; ++r) {
        std::vector<double> mine(chunk, 0.0);
        for (size_t q = 0; q < W; ++q)
          for (size_t i = 0; i < chunk; ++i) mine[i] += got[q][r * chunk + i];
        write(r, *out_block[r], mine);
      }
      break;
    }
    case CollectiveKind::Barrier:
      break;
  }
  if (!ok) return;

  // The copy out, then the results and the untouched device bytes.
  for (size_t r = 0; r < W; ++r) {
    RankMemory& m = mem[r];
    const std::string who = c.str() + ", rank " + std::to_string(r) + ": ";
    if (plan[r].copy_out_bytes > out_block[r]->bytes.size()) {
      f.add(who + "the copy out reads " + std::to_string(plan[r].copy_out_bytes) +
            " B from an output block of " + std::to_string(out_block[r]->bytes.size()) + " B");
      continue;
    }
    if (plan[r].copy_out_bytes > m.out_bytes) {
      f.add(who + "the copy out writes " + std::to_string(plan[r].copy_out_bytes) + " B into a " +
            std::to_string(m.out_bytes) + " B device output");
      continue;
    }
    std::memcpy(&m.arena[m.out_off], out_block[r]->bytes.data(), plan[r].copy_out_bytes);
    for (size_t i = 0; i < expect[r].size(); ++i) {
      const double v = get(&m.arena[m.out_off + i * e], c.dtype);
      if (v != expect[r][i]) {
        f.add(who + "output element " + std::to_string(i) + " is " + std::to_string(v) + ", expected " +
              std::to_string(expect[r][i]));
        break;
      }
    }
    for (size_t b = 0; b < m.arena.size(); ++b) {
      if (b >= m.out_off && b < m.out_off + m.out_bytes) continue;
      if (m.arena[b] != before[r].arena[b]) {
        f.add(who + "device byte " + std::to_string(b) + " outside the output changed");
        break;
      }
    }
  }
}

}  // namespace

TEST(StagingPlan, EveryCollectiveLayoutRootAndRankStaysInBoundsAndIsCorrect) {
  Failures f;
  int cases = 0;
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    for (int world = 1; world <= 4; ++world) {
      for (DType dtype : {DType::F32, DType::F64, DType::I32}) {
        // Sizes: the edges (0, 1, a few) and a seeded larger one; reduce-scatter's count is a world multiple.
        std::vector<int64_t> sizes = {0, 1, 3, static_cast<int64_t>(rng() % 1000 + 2)};
        for (int64_t s : sizes) {
          for (CollectiveKind kind : {CollectiveKind::Allreduce, CollectiveKind::Broadcast,
                                      CollectiveKind::Allgather, CollectiveKind::ReduceScatter}) {
            const int64_t count = kind == CollectiveKind::ReduceScatter ? s * world : s;
            const bool two_buffers =
                kind == CollectiveKind::Allgather || kind == CollectiveKind::ReduceScatter;
            for (Layout layout : {Layout::InPlace, Layout::OutOfPlace}) {
              if (!two_buffers && layout == Layout::OutOfPlace) continue;
              const int roots = kind == CollectiveKind::Broadcast ? world : 1;
              for (int root = 0; root < roots; ++root) {
                run_case({kind, world, count, dtype, layout, root}, f);
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  std::string all;
  for (const auto& s : f.list) all += "  " + s + "\n";
  EXPECT_TRUE(f.list.empty()) << f.list.size() << "+ violations in " << cases << " cases, e.g.:\n" << all;
}

TEST(StagingPlan, InPlaceAllgatherOfRankZeroGetsAnOutputBlockOfTheWholeOutput) {
  std::vector<float> out(4 * 10);
  CommBuffer o = comm_buffer(out.data(), 40, Device::cuda(0));
  CommBuffer i = comm_buffer(out.data(), 10, Device::cuda(0));  // rank 0: its slice starts the output
  const StagingPlan p = plan_staging(CollectiveKind::Allgather, 4, i, o);
  EXPECT_FALSE(p.out_shares_in_block);
  EXPECT_EQ(p.in_block_bytes, 40u);
  EXPECT_EQ(p.out_block_bytes, 160u);
  EXPECT_EQ(p.copy_in_bytes, 40u);
  EXPECT_EQ(p.copy_out_bytes, 160u);
}

TEST(StagingPlan, AllreduceAndBroadcastShareOneBlock) {
  std::vector<float> buf(10);
  CommBuffer b = comm_buffer(buf.data(), 10, Device::cuda(0));
  for (CollectiveKind k : {CollectiveKind::Allreduce, CollectiveKind::Broadcast}) {
    const StagingPlan p = plan_staging(k, 3, b, b);
    EXPECT_TRUE(p.out_shares_in_block);
    EXPECT_EQ(p.in_block_bytes, 40u);
    EXPECT_EQ(p.copy_in_bytes, 40u);
    EXPECT_EQ(p.copy_out_bytes, 40u);
  }
}
