// Blocking TCP helpers (socket_io.hpp).
#include "socket_io.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"

namespace trainplan::executor::net {

void send_all(int fd, const void* data, size_t n, const std::string& peer) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) throw Error(fmt::format("sending to {} failed: {}", peer, std::strerror(errno)));
    p += sent;
    n -= static_cast<size_t>(sent);
  }
}

bool recv_all(int fd, void* data, size_t n, const std::string& peer) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && got == 0) return false;
    if (r <= 0)
      throw Error(fmt::format("the connection to {} broke: {}", peer, r == 0 ? "closed mid-message" : std::strerror(errno)));
    got += static_cast<size_t>(r);
  }
  return true;
}

int listen_tcp(int port, int& bound_port) {
  if (port < 0 || port > 65535) throw Error(fmt::format("port {} is out of range", port));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(fmt::format("socket() failed: {}", std::strerror(errno)));
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot listen on port {}: {}", port, std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  bound_port = ntohs(addr.sin_port);
  return fd;
}

int connect_tcp(const std::string& what, const std::string& host, int port,
                std::chrono::steady_clock::time_point deadline, double timeout_s) {
  std::string last_error = "no attempt";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    int fd = -1;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
        const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) continue;
        if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
          fd = s;
        } else {
          last_error = std::strerror(errno);
          ::close(s);
        }
      }
      ::freeaddrinfo(found);
    }
    if (fd >= 0) {
      tune_socket(fd);
      return fd;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(fmt::format("cannot reach {} at {}:{} within {} s: {}", what, host, port, timeout_s, last_error));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int accept_until(int listen_fd, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -1;
    pollfd p{listen_fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) throw Error(fmt::format("poll() failed: {}", std::strerror(errno)));
    if (r <= 0) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      throw Error(fmt::format("accept() failed: {}", std::strerror(errno)));
    }
    tune_socket(fd);
    return fd;
  }
}

void tune_socket(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int idle_s = 10, interval_s = 5, count = 3;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

std::string local_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET) return "";
  char text[INET_ADDRSTRLEN] = {};
  if (!::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text))) return "";
  return text;
}

std::string this_host_address() {
  ifaddrs* list = nullptr;
  std::string found;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
      char text[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text))) found = text;
    }
    ::freeifaddrs(list);
  }
  if (!found.empty()) return found;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0]) return name;
  return "127.0.0.1";
}

}  // namespace trainplan::executor::net
