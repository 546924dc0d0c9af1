#include "recipe_defaults.hpp"

#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "hardy/core/support/error.hpp"
#include "hardy/jobs/training_recipes.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

bool given(const po::variables_map& vm, std::string_view option) {
  const std::string name(option);
  return vm.count(name) && !vm[name].defaulted();
}

// `text` as `option`'s typed value, parsed by the option table itself.
po::variable_value parsed_value(const po::options_description& options, std::string_view option,
                                std::string_view text) {
  const std::vector<std::string> args{fmt::format("--{}", option), std::string(text)};
  po::variables_map one;
  po::store(po::command_line_parser(args).options(options).run(), one);
  return po::variable_value(one[std::string(option)].value(), /*defaulted=*/true);
}

// Whether two option values are the same (the types hardy train's recipe options take).
bool same_value(const boost::any& a, const boost::any& b) {
  if (const auto* x = boost::any_cast<std::string>(&a), *y = boost::any_cast<std::string>(&b);
      x && y)
    return *x == *y;
  if (const auto* x = boost::any_cast<long>(&a), *y = boost::any_cast<long>(&b); x && y)
    return *x == *y;
  if (const auto* x = boost::any_cast<float>(&a), *y = boost::any_cast<float>(&b); x && y)
    return *x == *y;
  return false;
}

}  // namespace

RecipeOrigins apply_training_recipe(po::variables_map& vm, const po::options_description& options) {
  const std::string model =
      vm.count("model") ? vm["model"].as<std::string>() : std::string("compact");
  const auto& recipe = training_recipe(core::parse_architecture(model));
  RecipeOrigins origins;
  // The rules that keep the recipe from contradicting what the user gave.
  const bool own_lr = given(vm, "lr") && !given(vm, "lr-scaling");
  const bool own_warmup = given(vm, "warmup-steps") || given(vm, "warmup-fraction");
  for (const auto& value : recipe.values) {
    const std::string name(value.option);
    std::string origin = fmt::format("--model {}'s recipe: {}", model, value.source);
    if (given(vm, name)) {
      // A value equal to the recipe's (a run's config.ini read back) keeps the recipe's source.
      origins[name] = same_value(vm[name].value(), parsed_value(options, name, value.value).value())
                          ? origin
                          : "given";
      continue;
    }
    std::string_view text = value.value;
    if (name == "lr-scaling" && own_lr) {
      text = "none";
      origin = "--lr was given: the job's own peak rate";
    } else if ((name == "warmup-steps" || name == "warmup-fraction") && own_warmup) {
      text = "0";
      origin = "the warm-up was given with the other warm-up option";
    }
    vm.erase(name);
    vm.insert({name, parsed_value(options, name, text)});
    origins[name] = std::move(origin);
  }
  return origins;
}

}  // namespace hardy::jobs
