#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "hardy/core/support/error.hpp"
#include "hardy/slurm/hostlist.hpp"

using hardy::InvalidArgument;
using hardy::slurm::expand_hostlist;
using Hosts = std::vector<std::string>;

TEST_CASE("single hosts and plain lists", "[slurm]") {
  CHECK(expand_hostlist("login1") == Hosts{"login1"});
  CHECK(expand_hostlist("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("node-1.cluster") == Hosts{"node-1.cluster"});
}

TEST_CASE("ranges keep their leading zeros", "[slurm]") {
  CHECK(expand_hostlist("nid[0001-0004,0007],login1") ==
        Hosts{"nid0001", "nid0002", "nid0003", "nid0004", "nid0007", "login1"});
  CHECK(expand_hostlist("n[08-11]") == Hosts{"n08", "n09", "n10", "n11"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[99-101]") == Hosts{"n99", "n100", "n101"});
  CHECK(expand_hostlist("n[0]") == Hosts{"n0"});
}

TEST_CASE("several bracket groups expand to their product, first group slowest", "[slurm]") {
  CHECK(expand_hostlist("a[1-2]b[3-4]") == Hosts{"a1b3", "a1b4", "a2b3", "a2b4"});
  CHECK(expand_hostlist("rack[1,3]-node[01-02].x") ==
        Hosts{"rack1-node01.x", "rack1-node02.x", "rack3-node01.x", "rack3-node02.x"});
  CHECK(expand_hostlist("[1-2]x") == Hosts{"1x", "2x"});
}

TEST_CASE("commas inside brackets separate numbers, outside separate hosts", "[slurm]") {
  CHECK(expand_hostlist("gpu[1,3-4],cpu[01,02],login") ==
        Hosts{"gpu1", "gpu3", "gpu4", "cpu01", "cpu02", "login"});
  CHECK(expand_hostlist("x[1,2]y[5],z") == Hosts{"x1y5", "x2y5", "z"});
}

TEST_CASE("malformed hostlists are errors naming the expression", "[slurm]") {
  for (const char* bad : {"", "n[1-2", "n1-2]", "n[[1]]", "n[]", "n[1,,2]", "n[a-b]", "n[3-1]",
                          "a,,b", "a,", "n[1-]", "n[-2]", "n[1-99999999]"}) {
    INFO("hostlist: " << bad);
    CHECK_THROWS_AS(expand_hostlist(bad), InvalidArgument);
  }
  CHECK_THROWS_WITH(expand_hostlist("nid[3-1]"),
                    Catch::Contains("nid[3-1]") && Catch::Contains("3-1"));
}

TEST_CASE("the host bound holds while a bracket group expands, not after", "[slurm]") {
  // 16 ranges of 999,999 numbers each: spelled out, 16 million names (half a gigabyte, seconds)
  // before a check after the group would refuse them.
  std::string expression = "n[0-999998";
  for (int i = 1; i < 16; ++i) expression += ",0-999998";
  expression += "]";
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(expand_hostlist(expression), Catch::Contains("more than 1000000 hosts"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
  // The bound is the sum over names too.
  CHECK_THROWS_WITH(expand_hostlist("a[0-599999],b[0-599999]"),
                    Catch::Contains("more than 1000000 hosts"));
}
