// Launch helpers (launch.hpp): the in-process and TCP rendezvous stores, the launch
// environment (mpirun / srun / torchrun-style / plain variables) and the ranks of a process.
//
// TCP protocol (one request, one reply, over a persistent connection): a request is
//   op (1 byte: 'S' set, 'G' get-if-present) | key length (u32, network order) | key |
//   value length (u32) | value        (the value only for 'S')
// and the reply is 'K' (set done), 'Y' | length (u32) | value (present) or 'N' (absent).
// A client's blocking get polls with growing pauses (1 ms to 50 ms).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "socket_io.hpp"
#include "trainplan/executor/launch.hpp"

namespace trainplan::executor {
namespace {

using Clock = std::chrono::steady_clock;

std::string timeout_message(const std::string& key, const std::string& store, double timeout_s) {
  return fmt::format("rendezvous: key \"{}\" was not set within {} s in the {}", key, timeout_s, store);
}
const char* kTimeoutHint = "a rank did not start or failed before publishing it; check every rank's output";

// ---- in-process store --------------------------------------------------------------------------

class InProcessRendezvous final : public Rendezvous {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mutex_);
      table_[key] = value;
    }
    cv_.notify_all();
  }
  std::string get(const std::string& key, double timeout_s) override {
    std::unique_lock lock(mutex_);
    const bool found = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                    [&] { return table_.count(key) != 0; });
    if (!found) throw Error(timeout_message(key, describe(), timeout_s)).hint(kTimeoutHint);
    return table_.at(key);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    std::lock_guard lock(mutex_);
    auto it = table_.find(key);
    if (it == table_.end()) return std::nullopt;
    return it->second;
  }
  std::string describe() const override { return "in-process store"; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::string> table_;
};

// ---- socket helpers ------------------------------------------------------------------------------

using net::recv_all;
using net::send_all;

void send_u32(int fd, uint32_t v, const std::string& peer) {
  const uint32_t be = htonl(v);
  send_all(fd, &be, 4, peer);
}
uint32_t recv_u32(int fd, const std::string& peer) {
  uint32_t be = 0;
  if (!recv_all(fd, &be, 4, peer)) throw Error(fmt::format("rendezvous: {} closed the connection", peer));
  return ntohl(be);
}
std::string recv_string(int fd, const std::string& peer) {
  const uint32_t n = recv_u32(fd, peer);
  constexpr uint32_t kMaxBytes = 64u << 20;
  if (n > kMaxBytes) throw Error(fmt::format("rendezvous: {} sent a {}-byte field (corrupt stream?)", peer, n));
  std::string s(n, '\0');
  if (n > 0 && !recv_all(fd, s.data(), n, peer)) throw Error(fmt::format("rendezvous: {} closed the connection", peer));
  return s;
}
void send_string(int fd, const std::string& s, const std::string& peer) {
  send_u32(fd, static_cast<uint32_t>(s.size()), peer);
  send_all(fd, s.data(), s.size(), peer);
}

int parse_int(const char* text, const char* name) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 1 << 30)
    throw Error(fmt::format("launch: {}={} is not a non-negative integer", name, text));
  return static_cast<int>(v);
}

}  // namespace

// ---- TCP store -------------------------------------------------------------------------------------

struct TcpRendezvous::Impl {
  bool server = false;
  std::string host;
  int port = 0;
  // Server: the table, the listening socket, one thread per client.
  std::mutex mutex;
  std::map<std::string, std::string> table;
  int listen_fd = -1;
  std::atomic<bool> stopping{false};
  std::thread acceptor;
  std::mutex clients_mutex;
  std::vector<int> client_fds;
  std::vector<std::thread> client_threads;
  // Client: one connection, one request at a time.
  int fd = -1;
  std::mutex request_mutex;

  std::string peer() const { return fmt::format("{}:{}", host, port); }

  void serve_client(int cfd) {
    const std::string who = "a rendezvous client";
    try {
      while (!stopping) {
        char op = 0;
        if (!recv_all(cfd, &op, 1, who)) return;
        const std::string key = recv_string(cfd, who);
        if (op == 'S') {
          std::string value = recv_string(cfd, who);
          {
            std::lock_guard lock(mutex);
            table[key] = std::move(value);
          }
          send_all(cfd, "K", 1, who);
        } else if (op == 'G') {
          std::optional<std::string> value;
          {
            std::lock_guard lock(mutex);
            auto it = table.find(key);
            if (it != table.end()) value = it->second;
          }
          if (value) {
            send_all(cfd, "Y", 1, who);
            send_string(cfd, *value, who);
          } else {
            send_all(cfd, "N", 1, who);
          }
        } else {
          return;  // not our protocol: drop the connection
        }
      }
    } catch (const Error&) {
      // A broken client connection ends that client only.
    }
  }

  void accept_loop() {
    while (!stopping) {
      const int cfd = ::accept(listen_fd, nullptr, nullptr);
      if (cfd < 0) {
        if (errno == EINTR) continue;
        return;  // the listening socket was shut down
      }
      net::tune_socket(cfd);
      std::lock_guard lock(clients_mutex);
      if (stopping) {
        ::close(cfd);
        return;
      }
      client_fds.push_back(cfd);
      client_threads.emplace_back([this, cfd] { serve_client(cfd); });
    }
  }

  ~Impl() {
    stopping = true;
    if (listen_fd >= 0) {
      ::shutdown(listen_fd, SHUT_RDWR);
      ::close(listen_fd);
    }
    if (acceptor.joinable()) acceptor.join();
    {
      std::lock_guard lock(clients_mutex);
      for (int cfd : client_fds) ::shutdown(cfd, SHUT_RDWR);
    }
    for (std::thread& t : client_threads) t.join();
    for (int cfd : client_fds) ::close(cfd);
    if (fd >= 0) ::close(fd);
  }
};

TcpRendezvous::TcpRendezvous(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpRendezvous::~TcpRendezvous() = default;

std::unique_ptr<TcpRendezvous> TcpRendezvous::serve(const std::string& host, int port) {
  if (port < 0 || port > 65535) throw Error(fmt::format("rendezvous: port {} is out of range", port));
  auto impl = std::make_unique<Impl>();
  impl->server = true;
  impl->host = host.empty() ? "0.0.0.0" : host;
  try {
    impl->listen_fd = net::listen_tcp(port, impl->port);
  } catch (const Error& e) {
    throw Error(fmt::format("rendezvous: {}", e.what()))
        .hint("another job may use the port; pick another TRAINPLAN_RENDEZVOUS port");
  }
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<TcpRendezvous>(new TcpRendezvous(std::move(impl)));
}

std::unique_ptr<TcpRendezvous> TcpRendezvous::connect(const std::string& host, int port, double timeout_s) {
  auto impl = std::make_unique<Impl>();
  impl->host = host;
  impl->port = port;
  try {
    impl->fd = net::connect_tcp("the tcp store", host, port,
                               Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)),
                               timeout_s);
  } catch (const Error& e) {
    throw Error(fmt::format("rendezvous: {}", e.what()))
        .hint("rank 0 serves the store; check that it started and that the host and port are right");
  }
  return std::unique_ptr<TcpRendezvous>(new TcpRendezvous(std::move(impl)));
}

void TcpRendezvous::set(const std::string& key, const std::string& value) {
  Impl& m = *impl_;
  if (m.server) {
    std::lock_guard lock(m.mutex);
    m.table[key] = value;
    return;
  }
  std::lock_guard lock(m.request_mutex);
  send_all(m.fd, "S", 1, m.peer());
  send_string(m.fd, key, m.peer());
  send_string(m.fd, value, m.peer());
  char reply = 0;
  if (!recv_all(m.fd, &reply, 1, m.peer()) || reply != 'K')
    throw Error(fmt::format("rendezvous: the tcp store at {} did not confirm setting \"{}\"", m.peer(), key));
}

std::optional<std::string> TcpRendezvous::try_get(const std::string& key) {
  Impl& m = *impl_;
  if (m.server) {
    std::lock_guard lock(m.mutex);
    auto it = m.table.find(key);
    if (it == m.table.end()) return std::nullopt;
    return it->second;
  }
  std::lock_guard lock(m.request_mutex);
  send_all(m.fd, "G", 1, m.peer());
  send_string(m.fd, key, m.peer());
  char reply = 0;
  if (!recv_all(m.fd, &reply, 1, m.peer())) throw Error(fmt::format("rendezvous: the tcp store at {} closed", m.peer()));
  if (reply == 'N') return std::nullopt;
  if (reply != 'Y') throw Error(fmt::format("rendezvous: unexpected reply from the tcp store at {}", m.peer()));
  return recv_string(m.fd, m.peer());
}

std::string TcpRendezvous::get(const std::string& key, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    if (std::optional<std::string> v = try_get(key)) return *v;
    if (Clock::now() >= deadline) throw Error(timeout_message(key, describe(), timeout_s)).hint(kTimeoutHint);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::string TcpRendezvous::describe() const {
  return fmt::format("tcp store {} {}", impl_->server ? "served on" : "at", impl_->peer());
}
int TcpRendezvous::port() const { return impl_->port; }
std::string TcpRendezvous::local_address() const { return impl_->server ? "" : net::local_address(impl_->fd); }

std::shared_ptr<Rendezvous> make_in_process_rendezvous() { return std::make_shared<InProcessRendezvous>(); }

// ---- launch environment ----------------------------------------------------------------------------

std::string LaunchInfo::describe() const {
  std::string s = fmt::format("rank {} of {} (local {} of {}) under {}", rank, world_size, local_rank,
                              local_world_size, launcher);
  if (rendezvous_port > 0) s += fmt::format(", rendezvous {}:{}", rendezvous_host, rendezvous_port);
  return s;
}

LaunchInfo detect_launch(const std::function<const char*(const char*)>& env_fn) {
  auto env = [&](const char* name) -> const char* {
    const char* v = env_fn ? env_fn(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  };
  LaunchInfo info;
  info.launcher = "single";
  struct Names {
    const char* launcher;
    const char *rank, *size, *local_rank, *local_size;
  };
  const Names launchers[] = {
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"env", "TRAINPLAN_RANK", "TRAINPLAN_WORLD_SIZE", "TRAINPLAN_LOCAL_RANK", "TRAINPLAN_LOCAL_WORLD_SIZE"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
  };
  for (const Names& n : launchers) {
    if (!env(n.rank)) continue;
    if (!env(n.size)) throw Error(fmt::format("launch: {} is set but {} is not", n.rank, n.size));
    info.launcher = n.launcher;
    info.rank = parse_int(env(n.rank), n.rank);
    info.world_size = parse_int(env(n.size), n.size);
    info.local_rank = env(n.local_rank) ? parse_int(env(n.local_rank), n.local_rank) : info.rank;
    info.local_world_size = env(n.local_size) ? parse_int(env(n.local_size), n.local_size) : info.world_size;
    if (info.world_size < 1 || info.rank >= info.world_size)
      throw Error(fmt::format("launch: {} rank {} is outside the world of {} ranks", n.launcher, info.rank,
                              info.world_size));
    break;
  }
  if (const char* rv = env("TRAINPLAN_RENDEZVOUS")) {
    const std::string text(rv);
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw Error(fmt::format("launch: TRAINPLAN_RENDEZVOUS={} is not host:port", text));
    info.rendezvous_host = text.substr(0, colon);
    info.rendezvous_port = parse_int(text.substr(colon + 1).c_str(), "the TRAINPLAN_RENDEZVOUS port");
  } else if (env("MASTER_ADDR") && env("MASTER_PORT")) {
    info.rendezvous_host = env("MASTER_ADDR");
    info.rendezvous_port = parse_int(env("MASTER_PORT"), "MASTER_PORT");
  }
  if (info.rendezvous_port > 65535)
    throw Error(fmt::format("launch: rendezvous port {} is out of range", info.rendezvous_port));
  // mpirun without an address: MPI itself carries process 0's address (connect_rendezvous).
  if (info.world_size > 1 && info.rendezvous_port == 0 && info.launcher != "mpirun")
    throw Error(fmt::format("launch: {} ranks under {} but no rendezvous address", info.world_size, info.launcher))
        .hint("set TRAINPLAN_RENDEZVOUS=host:port (rank 0's host and a free port) for every rank");
  return info;
}

std::shared_ptr<Rendezvous> connect_rendezvous(const LaunchInfo& launch, double timeout_s) {
  if (launch.world_size <= 1) return make_in_process_rendezvous();
  if (launch.rendezvous_port == 0) {
    if (!mpi_available())
      throw Error(fmt::format("launch: {} processes under {} but no rendezvous address, and this trainplan was built "
                              "without MPI",
                              launch.world_size, launch.launcher))
          .hint("set MASTER_ADDR and MASTER_PORT (or TRAINPLAN_RENDEZVOUS=host:port: process 0's host and a free "
                "port) for every process, or build with libopenmpi-dev installed");
    std::shared_ptr<Rendezvous> store;
    mpi_bootstrap(launch, store);
    return store;
  }
  if (launch.rank == 0) return TcpRendezvous::serve(launch.rendezvous_host, launch.rendezvous_port);
  return TcpRendezvous::connect(launch.rendezvous_host, launch.rendezvous_port, timeout_s);
}

std::string default_rendezvous_host(const LaunchInfo& launch) {
  return launch.single_node() ? "127.0.0.1" : net::this_host_address();
}

std::vector<int> process_ranks(int world_size, int process, int processes) {
  if (processes < 1 || process < 0 || process >= processes)
    throw Error(fmt::format("launch: process {} of {} is not a process of the job", process, processes));
  if (world_size % processes != 0)
    throw Error(fmt::format("the plan has {} ranks, which do not divide evenly over {} processes", world_size,
                            processes))
        .hint(fmt::format("start a number of processes that divides {} (each process holds world size / processes "
                          "consecutive ranks)",
                          world_size));
  const int per = world_size / processes;
  std::vector<int> ranks;
  for (int r = process * per; r < (process + 1) * per; ++r) ranks.push_back(r);
  return ranks;
}

}  // namespace trainplan::executor
