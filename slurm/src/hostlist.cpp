#include "hardy/slurm/hostlist.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "hardy/batch/environment.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::slurm {

namespace {

// Far beyond any machine (Frontier has 9,408 nodes); stops a typo like [1-99999999] from
// exhausting memory.
constexpr std::size_t kMaxHosts = 1'000'000;
// And at most this many bytes of names: a million hosts of long names with many groups each
// would otherwise take gigabytes (and minutes) to spell out.
constexpr std::size_t kMaxNameBytes = std::size_t{32} << 20;

class Expander {
 public:
  explicit Expander(std::string_view expression) : expression_(expression) {}

  std::vector<std::string> run() {
    if (expression_.empty()) fail("it is empty");
    std::vector<std::string> hosts;
    for (const std::string_view name : split_outside_brackets()) {
      if (name.empty()) fail("it has an empty host name (two commas, or one at an end)");
      const auto expanded = expand_name(name);
      if (hosts.size() + expanded.size() > kMaxHosts)
        fail(fmt::format("it names more than {} hosts", kMaxHosts));
      hosts.insert(hosts.end(), expanded.begin(), expanded.end());
      name_bytes_ += expanded.empty() ? 0 : expanded.size() * expanded.front().size();
    }
    return hosts;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgument(fmt::format("hostlist '{}' is malformed: {}", expression_, why));
  }

  // Top-level names: commas inside a bracket group separate numbers, not names.
  std::vector<std::string_view> split_outside_brackets() const {
    std::vector<std::string_view> names;
    std::size_t start = 0;
    bool in_group = false;
    for (std::size_t i = 0; i < expression_.size(); ++i) {
      const char c = expression_[i];
      if (c == '[') {
        if (in_group) fail("brackets are nested");
        in_group = true;
      } else if (c == ']') {
        if (!in_group) fail("a ']' has no '['");
        in_group = false;
      } else if (c == ',' && !in_group) {
        names.push_back(expression_.substr(start, i - start));
        start = i + 1;
      }
    }
    if (in_group) fail("a '[' has no ']'");
    names.push_back(expression_.substr(start));
    return names;
  }

  // One name with any number of bracket groups: the product of its groups, in order.
  std::vector<std::string> expand_name(std::string_view name) const {
    std::vector<std::string> prefixes = {""};
    std::size_t position = 0;
    while (position < name.size()) {
      const std::size_t open = name.find('[', position);
      const std::string_view literal = name.substr(position, open - position);
      for (auto& prefix : prefixes) prefix += literal;
      if (open == std::string_view::npos) break;
      const std::size_t close = name.find(']', open);
      const auto numbers = expand_group(name.substr(open + 1, close - open - 1));
      if (prefixes.size() * numbers.size() > kMaxHosts)
        fail(fmt::format("it names more than {} hosts", kMaxHosts));
      // Names in one product have about the same length: the first one's stands for all.
      if (name_bytes_ + prefixes.size() * numbers.size() *
                            (prefixes.front().size() + numbers.front().size()) >
          kMaxNameBytes)
        fail(fmt::format("its host names take more than {} MiB", kMaxNameBytes >> 20));
      std::vector<std::string> longer;
      longer.reserve(prefixes.size() * numbers.size());
      for (const auto& prefix : prefixes)
        for (const auto& number : numbers) longer.push_back(prefix + number);
      prefixes = std::move(longer);
      position = close + 1;
    }
    return prefixes;
  }

  // The inside of one [...]: numbers and lo-hi ranges, comma-separated, zero-padded to lo's width.
  std::vector<std::string> expand_group(std::string_view group) const {
    std::vector<std::string> numbers;
    std::size_t start = 0;
    while (start <= group.size()) {
      const std::size_t comma = std::min(group.find(',', start), group.size());
      const std::string_view entry = group.substr(start, comma - start);
      if (entry.empty()) fail("a bracket group has an empty entry");
      const std::size_t dash = entry.find('-');
      const std::string_view low = entry.substr(0, dash);
      const std::string_view high = dash == std::string_view::npos ? low : entry.substr(dash + 1);
      const long lo = number(low), hi = number(high);
      if (hi < lo) fail(fmt::format("the range {} ends below its start", entry));
      if (static_cast<std::size_t>(hi - lo) >= kMaxHosts)
        fail(fmt::format("the range {} is too long", entry));
      // Checked before this range is spelled out: a group of many long ranges ("[0-999999,
      // 0-999999,...]") would otherwise take gigabytes before any other check sees it.
      if (numbers.size() + static_cast<std::size_t>(hi - lo) + 1 > kMaxHosts)
        fail(fmt::format("it names more than {} hosts", kMaxHosts));
      for (long n = lo; n <= hi; ++n) numbers.push_back(fmt::format("{:0{}d}", n, low.size()));
      start = comma + 1;
    }
    return numbers;
  }

  long number(std::string_view digits) const {
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fail(fmt::format("'{}' in a bracket group is not a number", digits));
    if (digits.size() > 12) fail(fmt::format("the number {} is too long", digits));
    return batch::parse_count(digits, "a hostlist number");
  }

  std::string_view expression_;
  std::size_t name_bytes_ = 0;  // of the names expanded so far
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expression) {
  return Expander(expression).run();
}

}  // namespace hardy::slurm
