#pragma once
// Each network's published training recipe, as the values of `hardy train` options: what a job
// of `--model NAME` trains with where the user gives none of those options (on the command line
// or in a --config file). Every value names where it comes from (the reference's file and
// setting); docs/training.md explains each recipe and what hardy does differently.
//
// An option the user gives wins over the recipe's value. Two rules keep the recipe's other values
// from contradicting it: a user's --lr without --lr-scaling is the job's own peak rate (scaling
// none), and a user's --warmup-steps or --warmup-fraction replaces both of the recipe's.
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/nn/model.hpp"

namespace hardy::jobs {

struct RecipeValue {
  std::string_view option;  // a `hardy train` option, without its dashes
  std::string_view value;   // as it would be written on the command line
  std::string_view source;  // where the value comes from
};

struct TrainingRecipe {
  core::Architecture architecture;
  std::string_view name;       // "MLPerf HPC CosmoFlow reference"
  std::string_view reference;  // the repository and files the values come from
  std::vector<RecipeValue> values;
  // What hardy does differently from the reference, in a sentence each.
  std::vector<std::string_view> departures;
};

// The options a recipe sets; every recipe sets each of them (class-weights: the segmentation
// networks only).
const std::vector<std::string_view>& recipe_options();

// The recipe of `architecture`.
const TrainingRecipe& training_recipe(core::Architecture architecture);

// Every network's recipe as text, for `hardy train --help`.
std::string recipes_help();

}  // namespace hardy::jobs
