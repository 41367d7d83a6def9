// A minimal blocking HTTP/1.1 client for tests (the agent's /metrics,
// /healthz, /readyz and Prometheus's query API): one request per
// connection, read to EOF, every step bounded by a socket timeout.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <string>

namespace oomsnap_test {

struct HttpReply {
  int status = 0;        // 0: no answer (refused, timeout, closed without one)
  std::string headers;   // the header block, status line included
  std::string body;
};

// A TCP connection to 127.0.0.1:port with send/receive timeouts; -1 on failure.
inline int connect_loopback(uint16_t port, std::chrono::milliseconds timeout) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until EOF (or timeout / error) and splits status, headers and body.
inline HttpReply read_reply(int fd) {
  std::string raw;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  HttpReply r;
  const auto end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.headers = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

// `method target` on 127.0.0.1:port, the whole exchange within ~timeout per step.
inline HttpReply http_request(uint16_t port, const std::string& method, const std::string& target,
                              std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                              const std::string& extra_headers = "") {
  int fd = connect_loopback(port, timeout);
  if (fd < 0) return {};
  HttpReply r;
  if (send_all(fd, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers +
                       "\r\n"))
    r = read_reply(fd);
  close(fd);
  return r;
}

inline HttpReply http_get(uint16_t port, const std::string& target,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  return http_request(port, "GET", target, timeout);
}

// A port nothing listens on right now (bound to 0 and released).
inline uint16_t free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

}  // namespace oomsnap_test
