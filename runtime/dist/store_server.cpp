// store_server.cpp - the store's server: an accept thread plus one thread per client connection.
// The key-value map is guarded by one mutex; blocking gets and waits sleep on one condition variable that
// every write notifies. A connection thread never trusts its peer: lengths are capped, fields bounds-checked.
#include "runtime/dist/store_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/core/log.h"
#include "runtime/dist/socket_io.h"
#include "runtime/dist/store_protocol.h"

namespace ddp::dist {

using proto::Op;
using proto::Status;

namespace {
constexpr auto kHelloTimeout = std::chrono::seconds(10);
constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;

bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.size() + 1)]);
  return diff == 0;
}

bool parse_int(const std::string& s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

struct Connection {
  net::Socket socket;
  std::thread thread;
  std::atomic<bool> done{false};
};
}  // namespace

struct StoreServer::State {
  std::string token;
  net::Socket listener;
  int port = 0;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> dropped{0};

  std::mutex mu;  // guards data and connections
  std::condition_variable changed;
  std::map<std::string, std::string> data;
  std::list<Connection> connections;

  void accept_loop();
  void serve(Connection& c);
  // Handles one request; returns the reply frame. Throws proto::ProtocolError on malformed input.
  std::string handle(const std::string& body);
  // Counts and logs a dropped connection (before anything is sent back, so a refused client sees it counted).
  void note_drop(const std::string& why) {
    dropped++;
    if (!stopping) DDP_LOG(Warn, "store server: dropping a client connection: ", why);
  }
  void drop(Connection& c, const std::string& why) {
    note_drop(why);
    c.socket.shutdown();
  }
};

StoreServer::StoreServer(const std::string& host, int port, std::string token)
    : state_(std::make_unique<State>()) {
  state_->token = std::move(token);
  state_->listener = net::listen_on(host, port);
  state_->port = net::local_port(state_->listener);
  state_->accept_thread = std::thread([s = state_.get()] { s->accept_loop(); });
  DDP_LOG(Info, "store server listening on ", host.empty() ? "*" : host, ":", state_->port);
}

StoreServer::~StoreServer() {
  state_->stopping = true;
  state_->listener.shutdown();
  state_->accept_thread.join();
  std::list<Connection> conns;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    for (auto& c : state_->connections) c.socket.shutdown();
    conns.splice(conns.end(), state_->connections);
  }
  state_->changed.notify_all();
  for (auto& c : conns) c.thread.join();
}

int StoreServer::port() const { return state_->port; }
int64_t StoreServer::dropped_connections() const { return state_->dropped; }

void StoreServer::State::accept_loop() {
  while (!stopping) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      break;
    }
    net::set_nodelay(fd);
    std::lock_guard<std::mutex> g(mu);
    // Reap connections whose threads have finished.
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->done) {
        it->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
    if (stopping) {
      ::close(fd);
      break;
    }
    Connection& c = connections.emplace_back();
    c.socket = net::Socket(fd);
    c.thread = std::thread([this, &c] {
      serve(c);
      c.done = true;
    });
  }
}

void StoreServer::State::serve(Connection& c) {
  const int fd = c.socket.fd();
  std::string body;
  // Hello: the first frame must arrive soon and carry the magic and the run token.
  auto r = proto::read_frame(fd, body, net::Clock::now() + kHelloTimeout);
  if (r == proto::FrameResult::TooLarge)
    return drop(c, "first message is not a hello (declared length too large)");
  if (r != proto::FrameResult::Ok) return drop(c, "no complete hello within 10 s");
  try {
    proto::Reader in(body);
    if (static_cast<Op>(in.u8()) != Op::Hello || in.str() != proto::kMagic)
      return drop(c, "not a ddp store client");
    std::string token = in.str();
    if (!equal_constant_time(token, this->token)) {
      note_drop("wrong run token");
      proto::Writer w;
      w.u8(static_cast<uint8_t>(Status::Refused)).str("wrong run token");
      try {
        net::send_all(fd, w.frame().data(), w.frame().size(), "store client");
      } catch (const Error&) {
      }
      c.socket.shutdown();
      return;
    }
  } catch (const proto::ProtocolError& e) {
    return drop(c, "malformed hello: " + e.what);
  }
  proto::Writer ok;
  ok.u8(static_cast<uint8_t>(Status::Ok));
  try {
    net::send_all(fd, ok.frame().data(), ok.frame().size(), "store client");
  } catch (const Error&) {
    return drop(c, "client went away during hello");
  }

  while (!stopping) {
    r = proto::read_frame(fd, body, net::Clock::time_point::max());
    if (r == proto::FrameResult::Closed) return;  // a clean close between messages is normal
    if (r == proto::FrameResult::TooLarge) return drop(c, "message larger than 64 MiB");
    if (r != proto::FrameResult::Ok) return drop(c, "receive failed");
    std::string reply;
    try {
      reply = handle(body);
    } catch (const proto::ProtocolError& e) {
      return drop(c, "malformed request: " + e.what);
    }
    if (stopping) return;
    try {
      net::send_all(fd, reply.data(), reply.size(), "store client");
    } catch (const Error&) {
      return;
    }
  }
}

std::string StoreServer::State::handle(const std::string& body) {
  proto::Reader in(body);
  proto::Writer out;
  auto ok = [&out]() -> proto::Writer& { return out.u8(static_cast<uint8_t>(Status::Ok)); };
  auto read_timeout = [&in] {
    int64_t ms = in.i64();
    if (ms < 0 || ms > kMaxWaitMs) throw proto::ProtocolError{"timeout out of range"};
    return net::Clock::now() + std::chrono::milliseconds(ms);
  };
  const Op op = static_cast<Op>(in.u8());
  switch (op) {
    case Op::Set: {
      std::string key = in.str(), value = in.str();
      {
        std::lock_guard<std::mutex> g(mu);
        data[std::move(key)] = std::move(value);
      }
      changed.notify_all();
      ok();
      break;
    }
    case Op::Get: {
      std::string key = in.str();
      auto deadline = read_timeout();
      std::unique_lock<std::mutex> g(mu);
      bool found = changed.wait_until(g, deadline, [&] { return stopping || data.count(key) > 0; });
      if (found && !stopping)
        ok().str(data[key]);
      else
        out.u8(static_cast<uint8_t>(Status::TimedOut));
      break;
    }
    case Op::Add: {
      std::string key = in.str();
      int64_t delta = in.i64();
      std::unique_lock<std::mutex> g(mu);
      int64_t current = 0;
      auto it = data.find(key);
      if (it != data.end() && !parse_int(it->second, current)) {
        out.u8(static_cast<uint8_t>(Status::Error))
            .str("key '" + key + "' holds a value that is not an integer");
        break;
      }
      int64_t next = 0;
      if (__builtin_add_overflow(current, delta, &next)) {
        out.u8(static_cast<uint8_t>(Status::Error)).str("add on key '" + key + "' overflows int64");
        break;
      }
      data[key] = std::to_string(next);
      g.unlock();
      changed.notify_all();
      ok().i64(next);
      break;
    }
    case Op::Wait: {
      uint32_t n = in.u32();
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n; ++i) keys.push_back(in.str());
      auto deadline = read_timeout();
      std::unique_lock<std::mutex> g(mu);
      auto all_present = [&] {
        for (auto& k : keys)
          if (!data.count(k)) return false;
        return true;
      };
      if (changed.wait_until(g, deadline, [&] { return stopping || all_present(); }) && !stopping) {
        ok();
      } else {
        std::vector<std::string> missing;
        for (auto& k : keys)
          if (!data.count(k)) missing.push_back(k);
        out.u8(static_cast<uint8_t>(Status::TimedOut)).u32(static_cast<uint32_t>(missing.size()));
        for (auto& k : missing) out.str(k);
      }
      break;
    }
    case Op::CompareSet: {
      std::string key = in.str(), expected = in.str(), desired = in.str();
      std::unique_lock<std::mutex> g(mu);
      auto it = data.find(key);
      bool swap = (it == data.end() && expected.empty()) || (it != data.end() && it->second == expected);
      if (swap) data[key] = desired;
      std::string now = data.count(key) ? data[key] : std::string();
      g.unlock();
      if (swap) changed.notify_all();
      ok().str(now);
      break;
    }
    case Op::Delete: {
      std::string key = in.str();
      std::lock_guard<std::mutex> g(mu);
      ok().u8(data.erase(key) ? 1 : 0);
      break;
    }
    case Op::NumKeys: {
      std::lock_guard<std::mutex> g(mu);
      ok().i64(static_cast<int64_t>(data.size()));
      break;
    }
    default:
      throw proto::ProtocolError{"unknown op " + std::to_string(static_cast<int>(op))};
  }
  if (!in.at_end()) throw proto::ProtocolError{"trailing bytes after the request"};
  return out.frame();
}

}  // namespace ddp::dist
