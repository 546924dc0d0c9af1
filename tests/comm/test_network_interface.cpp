// comm::interface_address: the network the fault domains' leaders use, named as users name it
// (an interface, or a subnet of it), and a clear refusal for one this host does not have.
#include <catch2/catch.hpp>
#include <string>

#include "hardy/comm/rendezvous/network_interface.hpp"
#include "hardy/core/support/error.hpp"

using hardy::InvalidArgument;
using hardy::comm::interface_address;

TEST_CASE("an interface's name gives this host's IPv4 address on it") {
  // Every Linux host, network namespaces included, has the loopback interface.
  CHECK(interface_address("lo") == "127.0.0.1");
}

TEST_CASE("a subnet names the interface that holds an address in it") {
  CHECK(interface_address("127.0.0.0/8") == "127.0.0.1");
  CHECK(interface_address("127.0.0.1/32") == "127.0.0.1");
}

TEST_CASE("a network this host does not have is refused, naming the ones it has") {
  try {
    interface_address("hsn-nonexistent0");
    FAIL("no exception");
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    CHECK(message.find("'hsn-nonexistent0'") != std::string::npos);
    CHECK(message.find("no such interface") != std::string::npos);
    CHECK(message.find("lo 127.0.0.1") != std::string::npos);
  }
  // TEST-NET-3 (RFC 5737): on no host's interfaces.
  CHECK_THROWS_WITH(interface_address("203.0.113.0/24"),
                    Catch::Contains("no address in that subnet"));
  CHECK_THROWS_AS(interface_address("10.0.0.0/33"), InvalidArgument);
  CHECK_THROWS_AS(interface_address("10.0.0/8"), InvalidArgument);
  CHECK_THROWS_WITH(interface_address("not-an-address/8"),
                    Catch::Contains("neither a network interface's name nor an IPv4 subnet"));
  CHECK_THROWS_AS(interface_address(""), InvalidArgument);
}
