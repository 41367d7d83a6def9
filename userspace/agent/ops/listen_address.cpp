#include "agent/ops/listen_address.h"

#include <charconv>

#include <boost/asio/ip/address.hpp>

namespace oomsnap {

std::optional<ListenAddress> parse_listen_address(const std::string& text, std::string& why) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    why = "no port (expected host:port, e.g. \"127.0.0.1:9463\")";
    return std::nullopt;
  }
  std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);

  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(host, ec);
  if (host.empty() || ec) {
    why = "host '" + host + "' is not an IP address (a name is not resolved; use e.g. 127.0.0.1, 0.0.0.0 or [::1])";
    return std::nullopt;
  }
  // The port is always after the last colon, so an IPv6 host may also come
  // unbracketed ("fd00::5:9463"): what the DaemonSet's "$(POD_IP):9463"
  // gives on an IPv6 cluster.
  if (bracketed && !ip.is_v6()) {
    why = "brackets are for IPv6 hosts only";
    return std::nullopt;
  }
  unsigned value = 0;
  const auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || err != std::errc() || end != port.data() + port.size() || value > 65535) {
    why = "port '" + port + "' is not a number from 0 to 65535";
    return std::nullopt;
  }
  return ListenAddress{host, static_cast<uint16_t>(value)};
}

std::string to_string(const ListenAddress& a) {
  const bool v6 = a.host.find(':') != std::string::npos;
  return (v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.port);
}

}  // namespace oomsnap
