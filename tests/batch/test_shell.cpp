#include <catch2/catch.hpp>

#include "hardy/batch/command.hpp"
#include "hardy/batch/shell.hpp"
#include "hardy/core/support/error.hpp"

using hardy::InvalidArgument;
using hardy::batch::directive_value;
using hardy::batch::run_command;
using hardy::batch::shell_quote;

namespace {

// What bash makes of a quoted word: the word must come back exactly, never run.
std::string through_bash(const std::string& word) {
  const auto result = run_command({"bash", "-c", "printf '%s' " + shell_quote(word)});
  REQUIRE(result.status == 0);
  return result.out;
}

}  // namespace

TEST_CASE("plain words stay unquoted", "[batch]") {
  CHECK(shell_quote("nid001") == "nid001");
  CHECK(shell_quote("/scratch/runs/a-1_b.c:d=e@f+g,h") == "/scratch/runs/a-1_b.c:d=e@f+g,h");
  CHECK(shell_quote("") == "''");
}

TEST_CASE("every dangerous word survives bash unchanged", "[batch]") {
  const std::vector<std::string> words = {
      "two words",
      "it's",
      "\"double\"",
      "$(touch /tmp/hardy-pwned)",
      "`touch /tmp/hardy-pwned`",
      "$HOME",
      "a;b|c&d>e<f",
      "new\nline",
      "tab\there",
      "'",
      "''",
      "back\\slash",
      "*?[a]~{b,c}",
      "!event",
      "#comment",
      " leading space",
      "trailing ",
      "quote'in'middle",
      "ünïcödé",
  };
  for (const auto& word : words) {
    INFO("word: " << word);
    CHECK(through_bash(word) == word);
  }
}

TEST_CASE("single quotes are closed, escaped and reopened", "[batch]") {
  CHECK(shell_quote("it's") == R"('it'\''s')");
  CHECK(shell_quote("a b") == "'a b'");
}

TEST_CASE("directive values: spaces are double-quoted, the rest kept", "[batch]") {
  CHECK(directive_value("climate", "--job-name") == "climate");
  CHECK(directive_value("my job", "--job-name") == "\"my job\"");
  CHECK(directive_value("/scratch/o'neil/run", "--run-dir") == "/scratch/o'neil/run");
  CHECK(directive_value("a;b|c&d(e)", "--job-name") == "a;b|c&d(e)");
}

TEST_CASE("directive values that would break the line are refused, naming option and character",
          "[batch]") {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"two\nlines", "a newline"},
      {"cr\rhere", "a carriage return"},
      {"tab\there", "a tab"},
      {"say \"hi\"", "'\"'"},
      {"back\\slash", "'\\'"},
      {"out-%j", "'%'"},
      {"$(reboot)", "'$'"},
      {"`reboot`", "'`'"},
      {std::string("nul\0x", 5), "0x00"},
  };
  for (const auto& [value, why] : refused) {
    INFO("value: " << value);
    try {
      directive_value(value, "--job-name");
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      CHECK(message.find("--job-name") != std::string::npos);
      CHECK(message.find(why) != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);  // the message itself stays one line
    }
  }
  CHECK_THROWS_AS(directive_value("", "--queue"), InvalidArgument);
}
