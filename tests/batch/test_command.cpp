#include <catch2/catch.hpp>

#include "hardy/batch/command.hpp"
#include "hardy/core/support/error.hpp"

using hardy::batch::first_line;
using hardy::batch::run_command;

TEST_CASE("run_command collects stdout, stderr and the exit status", "[batch]") {
  const auto result = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(result.status == 3);
  CHECK(result.out == "out\n");
  CHECK(result.err == "err\n");
  CHECK(first_line(result) == "err");
}

TEST_CASE("run_command passes arguments without a shell", "[batch]") {
  const auto result = run_command({"printf", "%s|", "a b", "$(x)", "it's"});
  CHECK(result.out == "a b|$(x)|it's|");
}

TEST_CASE("run_command feeds standard input, also more than a pipe holds", "[batch]") {
  const std::string input(1 << 20, 'x');
  const auto result = run_command({"wc", "-c"}, input);
  CHECK(std::stol(result.out) == static_cast<long>(input.size()));
}

TEST_CASE("a program that does not read its input does not kill the caller", "[batch]") {
  const auto result = run_command({"true"}, std::string(1 << 20, 'x'));
  CHECK(result.status == 0);
}

TEST_CASE("a missing program is an error naming it", "[batch]") {
  CHECK_THROWS_WITH(run_command({"hardy-no-such-program"}),
                    Catch::Contains("hardy-no-such-program") && Catch::Contains("not found"));
}

TEST_CASE("a signal death is reported as 128 + signal", "[batch]") {
  CHECK(run_command({"sh", "-c", "kill -9 $$"}).status == 128 + 9);
}
