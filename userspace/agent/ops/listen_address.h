// "host:port" of the agent's HTTP endpoint ([http] Listen, --http-listen).
// The host is an IP address literal (IPv6 in brackets, or bare: the port
// is what follows the last colon): the endpoint is
// meant for loopback or the pod's IP, and a name would make the agent's
// start depend on a resolver.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace oomsnap {

struct ListenAddress {
  std::string host;   // as written, without brackets: "127.0.0.1", "::1"
  uint16_t port = 0;  // 0: any free port (tests; the agent logs the one it bound)
};

// nullopt + why when `text` is not "IPv4:port", "[IPv6]:port" or "IPv6:port".
std::optional<ListenAddress> parse_listen_address(const std::string& text, std::string& why);

// "127.0.0.1:9463", "[::1]:9463".
std::string to_string(const ListenAddress& a);

}  // namespace oomsnap
