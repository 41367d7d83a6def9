// A small HTTP/1.1 server (Boost.Beast) for the agent's /metrics, /healthz
// and /readyz, on its own thread with its own io_context: a scrape never
// runs on, or waits for, the agent's event loop (so /healthz can report that
// loop stalled). Everything a local client can do is bounded: one request per
// connection, an 8 KiB request header and no body, a deadline on reading the
// request and on writing the answer, a cap on open connections per client
// address and in all (at the cap a new connection replaces the oldest one
// still waiting for its request, so clients that hold idle connections cannot
// keep the kubelet's probes out). Only GET and HEAD, only the routes given.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "agent/ops/listen_address.h"

namespace oomsnap {

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Runs on the server's thread, once per request.
using HttpHandler = std::function<HttpResponse()>;

struct HttpServerOptions {
  ListenAddress address;
  std::chrono::milliseconds io_timeout{5000};  // to read a whole request; to write a whole answer
  size_t max_connections = 16;
  // One address (a pod, or the node: the kubelet's probes) never needs more
  // than a few at once; half the cap leaves the rest to everyone else.
  size_t max_connections_per_peer = 8;
  size_t header_limit = 8192;
};

class HttpServer {
 public:
  // Binds and listens before returning (so a port in use fails the agent's
  // start, naming the address), then serves on its own thread.
  // nullptr + error when it cannot listen.
  static std::unique_ptr<HttpServer> start(HttpServerOptions options, std::map<std::string, HttpHandler> routes,
                                           std::string& error);
  ~HttpServer();  // closes every connection and joins the thread
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address bound (the real port when asked for port 0).
  const ListenAddress& bound() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace oomsnap
