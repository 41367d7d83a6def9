#include "agent/ops/http_server.h"

#include <list>
#include <optional>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace oomsnap {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

class Session;

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  std::map<std::string, HttpHandler> routes;
  ListenAddress bound;
  // Declared before io so they outlive the sessions io's destructor frees.
  // All on the server's one thread.
  size_t open_connections = 0;
  std::map<asio::ip::address, size_t> per_peer;  // open connections by client address
  // Sessions still reading their request, oldest first: the ones a new
  // connection at the cap evicts (a client that sent a request is being answered).
  std::list<std::weak_ptr<Session>> reading;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;

  void accept();
  // Closes the oldest connection still waiting for its request; false if none.
  bool evict_oldest_reading();
};

namespace {

// One connection, one request, one answer; then closed. Each step runs under
// the stream's deadline, so a client that sends nothing, or sends slowly,
// is cut at io_timeout.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, asio::ip::address peer, HttpServer::Impl& server)
      : stream_(std::move(socket)), peer_(peer), server_(server) {
    ++server_.open_connections;
    ++server_.per_peer[peer_];
  }
  ~Session() { release(); }

  // Counted out now (its handlers end with an error and free it later), so
  // the connection that evicted it takes its place at once.
  void evict() {
    release();
    close();
  }

  void read() {
    server_.reading.push_back(weak_from_this());
    reading_ = std::prev(server_.reading.end());
    parser_.header_limit(static_cast<std::uint32_t>(server_.options.header_limit));
    parser_.body_limit(0);
    stream_.expires_after(server_.options.io_timeout);
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    done_reading();
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      answer(431, "request header too large\n", false);
      return;
    }
    if (ec == http::error::unexpected_body || ec == http::error::body_limit) {
      answer(413, "no request body accepted\n", false);
      return;
    }
    if (ec) return close();  // timeout, reset, garbage: nothing to answer
    const auto& req = parser_.get();
    std::string path(req.target());
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    auto route = server_.routes.find(path);
    if (route == server_.routes.end()) return answer(404, "not found\n", req.method() == http::verb::head);
    if (req.method() != http::verb::get && req.method() != http::verb::head)
      return answer(405, "method not allowed (GET or HEAD)\n", false);
    HttpResponse r = route->second();
    reply(r, req.method() == http::verb::head);
  }

  void answer(unsigned status, std::string body, bool head) { reply({status, "text/plain; charset=utf-8", std::move(body)}, head); }

  void reply(const HttpResponse& r, bool head) {
    res_.result(r.status);
    res_.version(11);
    res_.set(http::field::server, "oomsnap");
    res_.set(http::field::content_type, r.content_type);
    if (r.status == 405) res_.set(http::field::allow, "GET, HEAD");
    res_.keep_alive(false);  // one request per connection
    res_.content_length(r.body.size());
    if (!head) res_.body() = r.body;  // HEAD: the length of what GET would send, no body
    stream_.expires_after(server_.options.io_timeout);
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code, size_t) { self->close(); });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  void done_reading() {
    if (!reading_) return;
    server_.reading.erase(*reading_);
    reading_.reset();
  }

  void release() {
    done_reading();
    if (!counted_) return;
    counted_ = false;
    --server_.open_connections;
    if (auto it = server_.per_peer.find(peer_); it != server_.per_peer.end() && --it->second == 0)
      server_.per_peer.erase(it);
  }

  beast::tcp_stream stream_;
  asio::ip::address peer_;
  HttpServer::Impl& server_;
  bool counted_ = true;
  std::optional<std::list<std::weak_ptr<Session>>::iterator> reading_;
  // Holds at most a header's worth: the parser stops at header_limit first.
  beast::flat_buffer buffer_{16384};
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> res_;
};

}  // namespace

bool HttpServer::Impl::evict_oldest_reading() {
  while (!reading.empty()) {
    auto oldest = reading.front().lock();
    if (!oldest) {
      reading.pop_front();
      continue;
    }
    oldest->evict();  // leaves `reading`
    return true;
  }
  return false;
}

// Two rules keep the port usable for the kubelet's probes and the scraper
// while other clients hold connections open: one client address holds at
// most max_connections_per_peer (past it, closed at once), and at the cap a
// new connection takes the place of the oldest one that has not sent its
// request yet (an idle holder), or is closed at once when every one is
// being answered.
void HttpServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      beast::error_code peer_ec;
      const auto peer = socket.remote_endpoint(peer_ec).address();
      auto held = per_peer.find(peer);
      const bool peer_full = held != per_peer.end() && held->second >= options.max_connections_per_peer;
      if (peer_ec || peer_full || (open_connections >= options.max_connections && !evict_oldest_reading())) {
        beast::error_code ignored;
        socket.close(ignored);  // refused at once rather than queued
      } else {
        std::make_shared<Session>(std::move(socket), peer, *this)->read();
      }
    }
    accept();
  });
}

std::unique_ptr<HttpServer> HttpServer::start(HttpServerOptions options, std::map<std::string, HttpHandler> routes,
                                              std::string& error) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->routes = std::move(routes);
  const std::string where = to_string(impl->options.address);
  beast::error_code ec;
  const auto ip = asio::ip::make_address(impl->options.address.host, ec);
  if (ec) {
    error = "cannot listen on " + where + ": " + ec.message();
    return nullptr;
  }
  const tcp::endpoint endpoint(ip, impl->options.address.port);
  auto step = [&](const char* what) {
    if (!ec) return true;
    error = "cannot listen on " + where + ": " + what + ": " + ec.message();
    return false;
  };
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!step("socket")) return nullptr;
  // A restarted agent takes its port back while old connections sit in
  // TIME_WAIT; a port another process listens on still fails to bind.
  impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!step("SO_REUSEADDR")) return nullptr;
  impl->acceptor.bind(endpoint, ec);
  if (!step("bind")) return nullptr;
  impl->acceptor.listen(64, ec);
  if (!step("listen")) return nullptr;
  impl->bound = impl->options.address;
  impl->bound.port = impl->acceptor.local_endpoint().port();
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const ListenAddress& HttpServer::bound() const { return impl_->bound; }

}  // namespace oomsnap
