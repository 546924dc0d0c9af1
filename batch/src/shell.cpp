#include "hardy/batch/shell.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "hardy/core/support/error.hpp"

namespace hardy::batch {

namespace {

bool needs_no_quotes(char c) {
  const bool alphanumeric =
      (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  return alphanumeric || std::string_view("_-./:=@+,").find(c) != std::string_view::npos;
}

// How a character is shown in an error message: control characters by name, so that a newline
// does not break the message itself.
std::string describe(char c) {
  switch (c) {
    case '\n':
      return "a newline";
    case '\r':
      return "a carriage return";
    case '\t':
      return "a tab";
    default:
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        return fmt::format("control character 0x{:02x}", static_cast<unsigned char>(c));
      return fmt::format("'{}'", c);
  }
}

// The value with control characters escaped, so that an error message stays on one line.
std::string printable(std::string_view value) {
  std::string text;
  for (const char c : value) {
    if (c == '\n')
      text += "\\n";
    else if (c == '\r')
      text += "\\r";
    else if (c == '\t')
      text += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      text += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      text += c;
  }
  return text;
}

}  // namespace

std::string shell_quote(std::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), needs_no_quotes))
    return std::string(word);
  std::string quoted = "'";
  for (const char c : word) {
    if (c == '\'')
      quoted += "'\\''";  // close the quotes, an escaped quote, open them again
    else
      quoted += c;
  }
  return quoted + "'";
}

std::string directive_value(std::string_view value, std::string_view what) {
  if (value.empty()) throw InvalidArgument(fmt::format("{} is empty", what));
  for (const char c : value) {
    const bool control = static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
    if (control || std::string_view("\"\\%$`").find(c) != std::string_view::npos) {
      throw InvalidArgument(fmt::format(
          "{} '{}' contains {}, which cannot go into a batch-script directive (#SBATCH, #BSUB)",
          what, printable(value), describe(c)));
    }
  }
  if (value.find(' ') == std::string_view::npos) return std::string(value);
  return fmt::format("\"{}\"", value);
}

}  // namespace hardy::batch
