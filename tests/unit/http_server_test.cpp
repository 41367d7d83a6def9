// The agent's HTTP server in-process, with short deadlines: routes and
// methods, HEAD, and every bound a local client could push on (an idle
// client, an oversized header, a request body, the connection cap) while
// others keep being answered.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "agent/http_server.h"
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

TEST(HttpServer, ConnectionsPastTheCapAreClosedAtOnce) {
  TestServer t(2, 1000ms);
  int a = connect_loopback(t.port, 5s), b = connect_loopback(t.port, 5s);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::this_thread::sleep_for(100ms);  // both accepted and waiting for a request
  const auto t0 = Clock::now();
  HttpReply refused = http_get(t.port, "/metrics", 3s);
  EXPECT_EQ(refused.status, 0);
  EXPECT_LT(Clock::now() - t0, 500ms) << "a connection over the cap was held, not closed";
  // Once the idle ones are cut, scrapes are served again.
  seconds_until_closed(a, 3s);
  seconds_until_closed(b, 3s);
  close(a);
  close(b);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(http_get(t.port, "/metrics").status, 200);
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
