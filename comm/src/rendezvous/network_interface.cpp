#include "hardy/comm/rendezvous/network_interface.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "hardy/core/support/error.hpp"

namespace hardy::comm {
namespace {

struct Subnet {
  std::uint32_t network = 0;  // host byte order
  std::uint32_t mask = 0;
};

// "A.B.C.D/N" -> the subnet; nothing for a spec without a '/' (an interface's name).
std::optional<Subnet> parse_subnet(const std::string& spec) {
  const auto slash = spec.find('/');
  if (slash == std::string::npos) return std::nullopt;
  in_addr address{};
  int bits = -1;
  const std::string_view length = std::string_view(spec).substr(slash + 1);
  const auto [end, error] = std::from_chars(length.data(), length.data() + length.size(), bits);
  if (::inet_pton(AF_INET, spec.substr(0, slash).c_str(), &address) != 1 || error != std::errc() ||
      end != length.data() + length.size() || bits < 0 || bits > 32)
    throw InvalidArgument(fmt::format(
        "'{}' is neither a network interface's name nor an IPv4 subnet such as 10.100.0.0/16",
        spec));
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  return Subnet{ntohl(address.s_addr) & mask, mask};
}

struct Interface {
  std::string name;
  std::string address;
  std::uint32_t host_order = 0;
};

std::vector<Interface> ipv4_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    throw IoError(
        fmt::format("cannot list this host's network interfaces: {}", std::strerror(errno)));
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, &::freeifaddrs);
  std::vector<Interface> found;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &address->sin_addr, text, sizeof text);
    found.push_back({entry->ifa_name, text, ntohl(address->sin_addr.s_addr)});
  }
  return found;
}

}  // namespace

std::string interface_address(const std::string& spec) {
  if (spec.empty()) throw InvalidArgument("an empty name names no network interface");
  const std::optional<Subnet> subnet = parse_subnet(spec);
  const std::vector<Interface> interfaces = ipv4_interfaces();
  for (const Interface& candidate : interfaces)
    if (subnet ? (candidate.host_order & subnet->mask) == subnet->network : candidate.name == spec)
      return candidate.address;
  std::vector<std::string> listed;
  for (const Interface& candidate : interfaces)
    listed.push_back(fmt::format("{} {}", candidate.name, candidate.address));
  throw InvalidArgument(
      fmt::format("'{}': this host has {} (its IPv4 interfaces: {})", spec,
                  subnet ? "no address in that subnet" : "no such interface",
                  listed.empty() ? "none" : fmt::format("{}", fmt::join(listed, ", "))));
}

}  // namespace hardy::comm
