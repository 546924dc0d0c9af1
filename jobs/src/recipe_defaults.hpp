#pragma once
// Fills the `hardy train` options a job leaves unset from its network's training recipe
// (hardy/jobs/training_recipes.hpp), and says where each recipe option's value came from.
#include <boost/program_options.hpp>
#include <map>
#include <string>

namespace hardy::jobs {

// Option name -> where its value came from, for every recipe option: "given", or the recipe's
// source ("--model cosmoflow's recipe: cosmo.yaml ..."), or the rule that set it.
using RecipeOrigins = std::map<std::string, std::string>;

// Stores, in vm, the recipe's value of each recipe option vm lacks (marked defaulted, so that a
// later --config merge would still replace it), following the rules of training_recipes.hpp.
// `options` is hardy train's table (the values are parsed with it). Throws InvalidArgument for a
// --model that names no network.
RecipeOrigins apply_training_recipe(boost::program_options::variables_map& vm,
                                    const boost::program_options::options_description& options);

}  // namespace hardy::jobs
