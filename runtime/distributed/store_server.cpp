// store_server.cpp - the store's server: an accept thread plus one thread per client connection.
// The key-value map is guarded by one mutex; blocking gets and waits sleep on one condition variable that
// every write notifies. A connection thread never trusts its peer: lengths are capped, fields bounds-checked.
#include "runtime/distributed/store_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <system_error>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/core/log.h"
#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store_frame_auth.h"
#include "runtime/distributed/store_protocol.h"

namespace ddp::dist {

using proto::Op;
using proto::Status;

namespace {
constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;
// Warnings about dropped clients: the first few at once, then one summary line per interval at most.
constexpr int kWarnBurst = 3;
constexpr auto kWarnInterval = std::chrono::seconds(10);

bool parse_int(const std::string& s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

struct Connection {
  net::Socket socket;
  std::thread thread;
  std::atomic<bool> done{false};
  bool authenticated = false;  // guarded by State::mu
};
}  // namespace

struct StoreServer::State {
  std::string token;
  std::string job_id;  // "" = clients of any job
  StoreServerLimits limits;
  net::Socket listener;
  int port = 0;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> dropped{0};

  std::mutex mu;  // guards data, connections, unauthenticated
  std::condition_variable changed;
  std::map<std::string, std::string> data;
  std::list<Connection> connections;
  int unauthenticated = 0;

  std::mutex warn_mu;  // guards the rate limiter
  net::Clock::time_point warn_window_start{};
  int warned_in_window = 0;
  int64_t suppressed = 0;
  std::atomic<int64_t> warnings{0};

  void accept_loop();
  void serve(Connection& c);
  // The handshake; true when the client proved the token. *auth then tags the frames that follow.
  bool authenticate(Connection& c, proto::FrameAuth* auth);
  // Handles one request; returns the reply frame. Throws proto::ProtocolError on malformed input.
  std::string handle(const std::string& body);
  void warn(const std::string& what);
  // Counts and logs a dropped connection (before anything is sent back, so a refused client sees it counted).
  void note_drop(const std::string& why) {
    dropped++;
    if (!stopping) warn("dropping a client connection: " + why);
  }
  void drop(Connection& c, const std::string& why) {
    note_drop(why);
    c.socket.shutdown();
  }
  void reap_finished();
};

StoreServer::StoreServer(const std::string& host, int port, std::string token, StoreServerLimits limits,
                         std::string job_id)
    : state_(std::make_unique<State>()) {
  state_->token = std::move(token);
  state_->job_id = std::move(job_id);
  state_->limits = std::move(limits);
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
  for (auto& c : conns)
    if (c.thread.joinable()) c.thread.join();
}

int StoreServer::port() const { return state_->port; }
int64_t StoreServer::dropped_connections() const { return state_->dropped; }
int64_t StoreServer::warnings_printed() const { return state_->warnings; }
int StoreServer::open_connections() const {
  std::lock_guard<std::mutex> g(state_->mu);
  int n = 0;
  for (auto& c : state_->connections) n += c.done ? 0 : 1;
  return n;
}

void StoreServer::State::warn(const std::string& what) {
  std::lock_guard<std::mutex> g(warn_mu);
  auto now = net::Clock::now();
  if (now - warn_window_start >= kWarnInterval) {
    if (suppressed > 0) {
      DDP_LOG(Warn, "store server: ", suppressed, " similar warning(s) suppressed in the last ",
              std::chrono::duration_cast<std::chrono::seconds>(now - warn_window_start).count(), " s");
      warnings++;
    }
    warn_window_start = now;
    warned_in_window = 0;
    suppressed = 0;
  }
  if (warned_in_window < kWarnBurst) {
    warned_in_window++;
    warnings++;
    DDP_LOG(Warn, "store server: ", what,
            warned_in_window == kWarnBurst ? " (more such warnings are summarized every 10 s)" : "");
  } else {
    suppressed++;
  }
}

void StoreServer::State::reap_finished() {
  for (auto it = connections.begin(); it != connections.end();) {
    if (it->done) {
      if (it->thread.joinable()) it->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
}

void StoreServer::State::accept_loop() {
  while (!stopping) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) {
          warn("cannot accept a connection: out of file descriptors");
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        continue;
      }
      break;
    }
    net::Socket incoming(fd);
    net::set_nodelay(fd);
    std::lock_guard<std::mutex> g(mu);
    reap_finished();
    if (stopping) break;
    if (unauthenticated >= limits.max_unauthenticated) {
      dropped++;
      warn("refusing a connection: " + std::to_string(unauthenticated) +
           " clients are already in their handshake (a port scanner or an attack?)");
      continue;  // `incoming` closes it
    }
    if (static_cast<int>(connections.size()) >= limits.max_connections) {
      dropped++;
      warn("refusing a connection: " + std::to_string(connections.size()) + " connections are open already");
      continue;
    }
    Connection& c = connections.emplace_back();
    c.socket = std::move(incoming);
    try {
      if (limits.before_spawn) limits.before_spawn();
      c.thread = std::thread([this, &c] {
        serve(c);
        std::lock_guard<std::mutex> lock(mu);
        if (!c.authenticated) unauthenticated--;
        c.done = true;
      });
      unauthenticated++;
    } catch (const std::system_error& e) {
      dropped++;
      c.done = true;  // reaped (and its socket closed) on the next accept or at shutdown
      c.socket.close();
      warn(std::string("cannot start a thread for a new connection (") + e.what() + "); dropped it");
    }
  }
}

bool StoreServer::State::authenticate(Connection& c, proto::FrameAuth* auth) {
  const int fd = c.socket.fd();
  const auto deadline = net::Clock::now() + limits.hello_timeout;
  std::string body;
  // Hello: small, soon, with our magic and the client's nonce. Nothing larger is ever allocated before the
  // client has proved the token.
  auto r = proto::read_frame(fd, body, deadline, proto::kMaxHelloBytes);
  if (r == proto::FrameResult::TooLarge)
    return drop(c, "first message is not a hello (declared length too large)"), false;
  if (r != proto::FrameResult::Ok) return drop(c, "no complete hello within the handshake timeout"), false;
  std::string client_nonce;
  try {
    proto::Reader in(body);
    if (static_cast<Op>(in.u8()) != Op::Hello || in.str() != proto::kMagic)
      return drop(c, "not a ddp store client (or one of another version)"), false;
    client_nonce = in.str();
    if (client_nonce.size() != proto::kNonceBytes || !in.at_end()) return drop(c, "malformed hello"), false;
  } catch (const proto::ProtocolError& e) {
    return drop(c, "malformed hello: " + e.what), false;
  }
  const std::string server_nonce = proto::random_nonce();
  proto::Writer challenge;
  challenge.u8(static_cast<uint8_t>(Status::Ok))
      .str(server_nonce)
      .str(proto::server_proof(token, client_nonce, server_nonce));
  try {
    net::send_all(fd, challenge.frame().data(), challenge.frame().size(), "store client");
  } catch (const Error&) {
    return drop(c, "client went away during the handshake"), false;
  }
  r = proto::read_frame(fd, body, deadline, proto::kMaxHelloBytes);
  if (r == proto::FrameResult::Closed)
    return drop(c,
                "the client hung up during the handshake: it found this server's proof wrong (wrong run "
                "token: its DDP_RUN_TOKEN differs?)"),
           false;
  if (r != proto::FrameResult::Ok)
    return drop(c, "no proof of the run token within the handshake timeout"), false;
  bool proved = false;
  std::string client_job;
  try {
    proto::Reader in(body);
    proved = static_cast<Op>(in.u8()) == Op::Prove &&
             bytes_equal_constant_time(in.str(), proto::client_proof(token, client_nonce, server_nonce));
    if (!in.at_end()) client_job = in.str();  // optional: a client outside any launch sends none
    proved = proved && in.at_end();
  } catch (const proto::ProtocolError&) {
    proved = false;
  }
  // A client of another launch (two jobs given one port and one token): refused with both job ids, before it
  // can read or write this job's keys.
  const bool other_job = proved && !job_id.empty() && !client_job.empty() && client_job != job_id;
  proto::Writer answer;
  if (!proved) {
    note_drop("wrong run token");
    answer.u8(static_cast<uint8_t>(Status::Refused)).str("wrong run token");
  } else if (other_job) {
    note_drop("a rank of another job");
    answer.u8(static_cast<uint8_t>(Status::Refused))
        .str("another job (its ddprun job " + job_id + "; this rank's job " + client_job + ")");
    proved = false;
  } else {
    answer.u8(static_cast<uint8_t>(Status::Ok));
  }
  try {
    net::send_all(fd, answer.frame().data(), answer.frame().size(), "store client");
  } catch (const Error&) {
    if (proved) return drop(c, "client went away during the handshake"), false;
  }
  if (!proved) {
    c.socket.shutdown();
    return false;
  }
  *auth = proto::FrameAuth(token, client_nonce, server_nonce, proto::FrameAuth::Side::Server);
  std::lock_guard<std::mutex> g(mu);
  c.authenticated = true;
  unauthenticated--;
  return true;
}

void StoreServer::State::serve(Connection& c) {
  proto::FrameAuth auth;
  if (!authenticate(c, &auth)) return;
  const int fd = c.socket.fd();
  std::string body;
  while (!stopping) {
    auto r = proto::read_frame(fd, body, net::Clock::time_point::max());
    if (r == proto::FrameResult::Closed) return;  // a clean close between messages is normal
    if (r == proto::FrameResult::TooLarge) return drop(c, "message larger than 64 MiB");
    if (r != proto::FrameResult::Ok) return drop(c, "receive failed");
    // Checked before a byte of the request is interpreted: nothing of a forged request is applied.
    if (!auth.open(body))
      return drop(
          c,
          "a request failed its authentication tag after the handshake (altered, injected, replayed or "
          "reordered on the way: something between the client and this server tampers with the "
          "connection); nothing of it was applied");
    std::string reply;
    try {
      reply = auth.seal(handle(body));
    } catch (const proto::ProtocolError& e) {
      return drop(c, "malformed request: " + e.what);
    } catch (const Error& e) {  // a reply too large to tag
      return drop(c, e.what());
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
  // Called after the last field, before anything is applied: a malformed request changes nothing.
  auto end_of_fields = [&in] {
    if (!in.at_end()) throw proto::ProtocolError{"trailing bytes after the request"};
  };
  const Op op = static_cast<Op>(in.u8());
  switch (op) {
    case Op::Set: {
      std::string key = in.str(), value = in.str();
      end_of_fields();
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
      end_of_fields();
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
      end_of_fields();
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
      end_of_fields();
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
      end_of_fields();
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
      end_of_fields();
      std::lock_guard<std::mutex> g(mu);
      ok().u8(data.erase(key) ? 1 : 0);
      break;
    }
    case Op::NumKeys: {
      end_of_fields();
      std::lock_guard<std::mutex> g(mu);
      ok().i64(static_cast<int64_t>(data.size()));
      break;
    }
    default:
      throw proto::ProtocolError{"unknown op " + std::to_string(static_cast<int>(op))};
  }
  return out.frame();
}

}  // namespace ddp::dist
