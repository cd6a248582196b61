// Blocking TCP helpers shared by the rendezvous store (launch.cpp) and the multi-process
// communicator (tcp_world.cpp). Errors are trainplan::Error naming `peer` (e.g. "the tcp
// store at node0:29500"); EINTR is retried.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace trainplan::executor::net {

/// Writes all n bytes (MSG_NOSIGNAL: a closed peer is an Error, not SIGPIPE).
void send_all(int fd, const void* data, size_t n, const std::string& peer);
/// Reads exactly n bytes; false when the peer closed the connection before the first byte.
bool recv_all(int fd, void* data, size_t n, const std::string& peer);
/// A listening IPv4 socket on every interface at `port` (0: a free one); returns the fd and
/// sets `bound_port`.
int listen_tcp(int port, int& bound_port);
/// Connects to host:port, retrying every 50 ms until `deadline`; the connected fd (tuned).
/// The Error says "cannot reach <what> at host:port within <timeout_s> s: <reason>".
int connect_tcp(const std::string& what, const std::string& host, int port,
                std::chrono::steady_clock::time_point deadline, double timeout_s);
/// Waits up to `deadline` for a connection on `listen_fd`; -1 at the deadline.
int accept_until(int listen_fd, std::chrono::steady_clock::time_point deadline);
/// TCP_NODELAY, and keepalive probes after 10 s idle every 5 s (3 lost: the connection
/// breaks), so a peer machine that vanished is noticed within about 25 s.
void tune_socket(int fd);
/// The local IPv4 address of a connected socket ("" when unknown).
std::string local_address(int fd);
/// This machine's first non-loopback IPv4 address, or its host name.
std::string this_host_address();

}  // namespace trainplan::executor::net
