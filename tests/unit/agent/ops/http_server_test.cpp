// The agent's HTTP server in-process, with short deadlines: routes and
// methods, HEAD, and every bound a local client could push on (an idle
// client, an oversized header, a request body, the connection cap) while
// others keep being answered.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "agent/ops/http_server.h"
#include "http_get.h"

using namespace oomsnap;
using namespace oomsnap_test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct TestServer {
  explicit TestServer(size_t max_connections = 16, std::chrono::milliseconds timeout = 500ms) {
    HttpServerOptions o;
    o.address = {"127.0.0.1", 0};
    o.io_timeout = timeout;
    o.max_connections = max_connections;
    std::map<std::string, HttpHandler> routes;
    routes["/metrics"] = [this] {
      ++scrapes;
      return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", "up 1\n"};
    };
    routes["/healthz"] = [] { return HttpResponse{503, "text/plain; charset=utf-8", "event loop stalled\n"}; };
    std::string error;
    server = HttpServer::start(o, std::move(routes), error);
    if (!server) throw std::runtime_error(error);
    port = server->bound().port;
  }
  std::atomic<int> scrapes{0};
  std::unique_ptr<HttpServer> server;
  uint16_t port = 0;
};

// Seconds until the server closes `fd` (recv gives 0 or an error), at most `limit`.
double seconds_until_closed(int fd, std::chrono::milliseconds limit) {
  const auto t0 = Clock::now();
  timeval tv{static_cast<time_t>(limit.count() / 1000), static_cast<suseconds_t>((limit.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  while (recv(fd, buf, sizeof buf, 0) > 0) {
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST(HttpServer, ServesRoutesWithGetAndHeadOnly) {
  TestServer t;
  ASSERT_NE(t.port, 0);
  HttpReply r = http_get(t.port, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "up 1\n");
  EXPECT_NE(r.headers.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r.headers;
  EXPECT_NE(r.headers.find("Connection: close"), std::string::npos) << r.headers;
  EXPECT_EQ(http_get(t.port, "/metrics?debug=1").status, 200);

  HttpReply head = http_request(t.port, "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_NE(head.headers.find("Content-Length: 5"), std::string::npos) << head.headers;

  HttpReply h = http_get(t.port, "/healthz");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body, "event loop stalled\n");

  EXPECT_EQ(http_get(t.port, "/").status, 404);
  EXPECT_EQ(http_get(t.port, "/metrics/../etc/passwd").status, 404);
  HttpReply post = http_request(t.port, "POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_NE(post.headers.find("Allow: GET, HEAD"), std::string::npos) << post.headers;
  EXPECT_EQ(http_request(t.port, "DELETE", "/healthz").status, 405);
  // A body is never read: refused, not buffered.
  EXPECT_EQ(http_request(t.port, "GET", "/metrics", 5s, "Content-Length: 100000\r\n").status, 413);
}

TEST(HttpServer, IdleClientIsCutAtTheDeadlineWhileOthersAreServed) {
  TestServer t(16, 500ms);
  int idle = connect_loopback(t.port, 5s);
  ASSERT_GE(idle, 0);
  const auto t0 = Clock::now();
  HttpReply r = http_get(t.port, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_LT(Clock::now() - t0, 400ms) << "a scrape waited for the idle client";
  const double cut = seconds_until_closed(idle, 5s);
  close(idle);
  EXPECT_GT(cut, 0.2);
  EXPECT_LT(cut, 2.0) << "the idle connection was not cut near its 0.5 s deadline";
}

TEST(HttpServer, OversizedHeaderIsRefusedAndTheServerGoesOn) {
  TestServer t;
  int fd = connect_loopback(t.port, 5s);
  ASSERT_GE(fd, 0);
  // 1 MiB of header: the server stops reading at 8 KiB and answers 431 (or,
  // still being sent to, resets the connection): either way it is over.
  std::string big = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(1 << 20, 'a') + "\r\n\r\n";
  send_all(fd, big);  // may fail half-way when the server closes: that is the point
  HttpReply r = read_reply(fd);
  close(fd);
  EXPECT_TRUE(r.status == 431 || r.status == 0) << r.status;
  EXPECT_EQ(http_get(t.port, "/metrics").status, 200);
}

TEST(HttpServer, AtTheCapANewConnectionTakesTheOldestIdleOnesPlace) {
  TestServer t(2, 3000ms);
  int a = connect_loopback(t.port, 5s);
  std::this_thread::sleep_for(50ms);
  int b = connect_loopback(t.port, 5s);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::this_thread::sleep_for(100ms);  // both accepted and waiting for a request
  // The scrape is answered at once; the oldest idle holder is closed for it,
  // the other one keeps its place: never more than the cap open.
  const auto t0 = Clock::now();
  EXPECT_EQ(http_get(t.port, "/metrics", 3s).status, 200);
  EXPECT_LT(Clock::now() - t0, 500ms) << "the scrape waited for an idle holder's deadline";
  EXPECT_LT(seconds_until_closed(a, 2s), 0.5) << "the oldest idle connection was not evicted";
  EXPECT_GT(seconds_until_closed(b, 300ms), 0.25) << "the newer idle connection was evicted too";
  close(a);
  close(b);
}

namespace {
// A connection to the server from a given loopback source address.
int connect_from(const char* source, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, source, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}
}  // namespace

// Issue #28: a pod that holds idle connections must not make the kubelet's
// probes fail. One address holds at most max_connections_per_peer (8 of the
// 16); many addresses together are evicted oldest first when a probe comes.
TEST(HttpServer, IdleHoldersFromOtherAddressesNeverKeepTheProbeOut) {
  TestServer t(16, 5000ms);
  std::vector<int> held;
  for (int i = 0; i < 16; ++i) held.push_back(connect_from("127.0.0.2", t.port));
  std::this_thread::sleep_for(200ms);
  size_t open = 0;
  for (int fd : held) open += fd >= 0 && seconds_until_closed(fd, 100ms) >= 0.09;
  EXPECT_EQ(open, HttpServerOptions{}.max_connections_per_peer)
      << "one address holds max_connections_per_peer, the rest are closed at once";
  auto t0 = Clock::now();
  EXPECT_EQ(http_get(t.port, "/healthz", 1s).status, 503);  // answered (the test route says stalled)
  EXPECT_LT(Clock::now() - t0, 1s);
  // Holders from four more addresses fill the cap; the probe still gets in.
  for (const char* src : {"127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"})
    for (int i = 0; i < 8; ++i) held.push_back(connect_from(src, t.port));
  std::this_thread::sleep_for(200ms);
  t0 = Clock::now();
  EXPECT_EQ(http_get(t.port, "/healthz", 1s).status, 503);
  EXPECT_LT(Clock::now() - t0, 1s);
  for (int fd : held)
    if (fd >= 0) close(fd);
}

TEST(HttpServer, PortInUseIsAnErrorNamingTheAddress) {
  TestServer first;
  HttpServerOptions o;
  o.address = {"127.0.0.1", first.port};
  std::string error;
  auto second = HttpServer::start(o, {}, error);
  EXPECT_EQ(second, nullptr);
  EXPECT_NE(error.find("127.0.0.1:" + std::to_string(first.port)), std::string::npos) << error;
  EXPECT_NE(error.find("in use"), std::string::npos) << error;
}
