#include "hardy/batch/script_template.hpp"

#include <fmt/format.h>

#include "hardy/batch/shell.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::batch {

namespace {

std::string known_names(const TemplateValues& values) {
  std::string names;
  for (const auto& [name, value] : values) names += (names.empty() ? "" : " ") + name;
  return names;
}

// One rendered line, or nullopt when it is a directive line naming a setting that was not given.
std::optional<std::string> render_line(std::string_view line, const TemplateValues& values,
                                       bool directive, const std::string& where) {
  std::string out;
  std::size_t position = 0;
  while (true) {
    const std::size_t open = line.find("{{", position);
    out += line.substr(position, open - position);
    if (open == std::string_view::npos) return out;
    const std::size_t close = line.find("}}", open + 2);
    if (close == std::string_view::npos)
      throw InvalidArgument(fmt::format("{}: '{{{{' without '}}}}'", where));
    const std::string name(line.substr(open + 2, close - open - 2));
    const auto found = values.find(name);
    if (found == values.end())
      throw InvalidArgument(
          fmt::format("{}: unknown placeholder {{{{{}}}}}; the known ones are: {}", where, name,
                      known_names(values)));
    if (!found->second) {
      if (directive) return std::nullopt;
      throw InvalidArgument(
          fmt::format("{}: {{{{{}}}}} has no value here (it is an optional setting that was not "
                      "given); only a directive "
                      "line may use it, and is then left out",
                      where, name));
    }
    try {
      out += directive ? directive_value(*found->second, "{{" + name + "}}")
                       : shell_quote(*found->second);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}: {}", where, e.what()));
    }
    position = close + 2;
  }
}

}  // namespace

std::string render_script(std::string_view text, const TemplateValues& values,
                          std::string_view directive_prefix, std::string_view source) {
  std::string script;
  std::size_t start = 0, number = 1;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (line.ends_with('\r')) line.remove_suffix(1);  // a template saved with CRLF line ends
    const bool directive = line.starts_with(directive_prefix);
    if (auto rendered =
            render_line(line, values, directive, fmt::format("{} line {}", source, number)))
      script += *rendered + "\n";
    start = end + 1;
    ++number;
  }
  return script;
}

}  // namespace hardy::batch
