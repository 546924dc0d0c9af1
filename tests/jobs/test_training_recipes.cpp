// Each network's training recipe (hardy/jobs/training_recipes.hpp) as `hardy train` resolves it:
// the defaults a job of --model NAME gets, what a user's option changes, and config.ini naming
// where every value came from. No training: the resolved specification only.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hardy/core/support/error.hpp"
#include "hardy/jobs/train_spec.hpp"
#include "hardy/jobs/training_recipes.hpp"

using namespace hardy;
using namespace hardy::jobs;

namespace {

TrainSpec parse(std::vector<std::string> args) {
  args.insert(args.end(), {"--run-dir", "/tmp/hardy-recipe-test"});
  auto spec = parse_train_spec(args);
  REQUIRE(spec.has_value());
  return *spec;
}

const std::vector<std::string> kCosmoFlow{"--model", "cosmoflow", "--volume", "32", "--synthetic"};

}  // namespace

TEST_CASE("recipes: every network's recipe sets every recipe option, each with a source",
          "[jobs]") {
  for (auto architecture : {core::Architecture::compact, core::Architecture::tiramisu,
                            core::Architecture::deepcam, core::Architecture::cosmoflow}) {
    const auto& recipe = training_recipe(architecture);
    INFO(core::to_string(architecture));
    for (const auto option : recipe_options()) {
      if (option == "class-weights" && architecture == core::Architecture::cosmoflow) continue;
      const auto found = std::find_if(recipe.values.begin(), recipe.values.end(),
                                      [&](const RecipeValue& v) { return v.option == option; });
      INFO(option);
      REQUIRE(found != recipe.values.end());
      CHECK_FALSE(found->source.empty());
    }
  }
  const auto help = recipes_help();
  CHECK_THAT(help, Catch::Contains("configs/cosmo.yaml") && Catch::Contains("run_training.sh") &&
                       Catch::Contains("tiramisu-tf-train.py") &&
                       Catch::Contains("--model compact"));
}

TEST_CASE("recipes: CosmoFlow trains with MLPerf HPC's SGD, scaled linearly from batch 64",
          "[jobs]") {
  const TrainSpec spec = parse(kCosmoFlow);
  CHECK(spec.optimizer.kind == core::OptimizerKind::sgd);
  CHECK(spec.optimizer.momentum == Approx(0.9f));
  CHECK(spec.optimizer.weight_decay == 0.0f);
  CHECK(spec.schedule.base_lr == Approx(0.001 * 8 / 64));  // --global-batch 8
  CHECK(spec.schedule.decay == core::LrSchedule::Decay::multistep);
  CHECK(spec.schedule.warmup_fraction == Approx(4.0 / 128));
  CHECK(spec.schedule.milestones == std::vector<double>{0.25, 0.5});
  CHECK(spec.schedule.milestone_factors == std::vector<float>{0.25f, 0.125f});
  CHECK(
      parse({"--model", "cosmoflow", "--volume", "32", "--global-batch", "128"}).schedule.base_lr ==
      Approx(0.002));
  CHECK_THAT(spec.config_ini,
             Catch::Contains("optimizer = sgd  # --model cosmoflow's recipe: cosmo.yaml") &&
                 Catch::Contains("(peak rate at --global-batch 8: 0.000125)") &&
                 Catch::Contains("lr-milestones = 0.25,0.5"));
}

TEST_CASE(
    "recipes: DeepCAM trains with MLPerf HPC's LAMB, Tiramisu with the Gordon Bell run's "
    "Adam, the compact network as before",
    "[jobs]") {
  const TrainSpec deepcam = parse({"--model", "deepcam"});
  CHECK(deepcam.optimizer.kind == core::OptimizerKind::lamb);
  CHECK(deepcam.optimizer.eps == Approx(1e-6f));
  CHECK(deepcam.optimizer.weight_decay == Approx(0.01f));
  CHECK(deepcam.optimizer.lamb_max_grad_norm == Approx(1.0f));
  CHECK(deepcam.schedule.base_lr == Approx(0.0055f));  // not scaled with the batch
  CHECK(deepcam.schedule.warmup_steps == 400);
  CHECK(deepcam.schedule.warmup_may_outlast_run);
  CHECK(deepcam.schedule.milestones == std::vector<double>{1200});
  CHECK(deepcam.schedule.milestone_factors == std::vector<float>{0.1f});
  CHECK(deepcam.class_weight_power == Approx(-0.125));
  CHECK_FALSE(deepcam.class_weights);

  const TrainSpec tiramisu = parse({"--model", "tiramisu"});
  CHECK(tiramisu.optimizer.kind == core::OptimizerKind::adam);
  CHECK(tiramisu.schedule.base_lr == Approx(1e-4f));
  CHECK(tiramisu.schedule.decay == core::LrSchedule::Decay::none);
  CHECK(tiramisu.optimizer.weight_decay == Approx(1e-4f));
  CHECK(tiramisu.class_weight_power == Approx(-1.0));

  const TrainSpec compact = parse({});
  CHECK(compact.optimizer.kind == core::OptimizerKind::adam);
  CHECK(compact.schedule.base_lr == Approx(0.002f));
  CHECK(compact.schedule.decay == core::LrSchedule::Decay::cosine);
  CHECK(compact.optimizer.weight_decay == Approx(1e-4f));
  CHECK(compact.class_weight_power == Approx(-0.5));
}

TEST_CASE("recipes: the user's options win, and config.ini says which were given", "[jobs]") {
  auto args = kCosmoFlow;
  args.insert(args.end(), {"--optimizer", "adam", "--lr", "0.001", "--warmup-steps", "10"});
  const TrainSpec spec = parse(args);
  CHECK(spec.optimizer.kind == core::OptimizerKind::adam);
  // A --lr of the user's is the job's own peak rate: the recipe's scaling is not applied to it.
  CHECK(spec.schedule.base_lr == Approx(0.001f));
  // A warm-up of the user's replaces the recipe's fraction.
  CHECK(spec.schedule.warmup_steps == 10);
  CHECK(spec.schedule.warmup_fraction == 0.0f);
  // What was not given still comes from the recipe.
  CHECK(spec.schedule.decay == core::LrSchedule::Decay::multistep);
  CHECK_THAT(spec.config_ini, Catch::Contains("optimizer = adam  # given") &&
                                  Catch::Contains("lr-scaling = none  # --lr was given") &&
                                  Catch::Contains("warmup-fraction = 0  # the warm-up was given"));
  // With --lr-scaling given too, the user's rate is scaled.
  args.insert(args.end(), {"--lr-scaling", "sqrt", "--lr-reference-batch", "32"});
  CHECK(parse(args).schedule.base_lr == Approx(0.001 * 0.5));

  // config.ini read back gives the same job and the same text.
  const auto path = std::filesystem::temp_directory_path() / "hardy-test-recipe-config.ini";
  const TrainSpec first = parse(kCosmoFlow);
  std::ofstream(path) << first.config_ini;
  const TrainSpec second = load_train_spec(path);
  CHECK(second.schedule.base_lr == Approx(first.schedule.base_lr));
  CHECK(second.config_ini == first.config_ini);
}

TEST_CASE("recipes: bad recipe options are refused naming the option", "[jobs]") {
  CHECK_THROWS_WITH(parse({"--lr-scaling", "cubic"}), Catch::Contains("--lr-scaling"));
  CHECK_THROWS_WITH(parse({"--lr-decay", "multistep"}), Catch::Contains("--lr-milestones"));
  CHECK_THROWS_WITH(parse({"--lr-decay", "multistep", "--lr-milestones", "0.5,0.25",
                           "--lr-milestone-factors", "0.5,0.1"}),
                    Catch::Contains("ascending"));
  CHECK_THROWS_WITH(parse({"--class-weights", "frequency^x"}), Catch::Contains("frequency^P"));
  // Close fractions are distinct steps of a long enough job: not refused before it starts.
  CHECK(parse({"--lr-decay", "multistep", "--lr-milestones", "0.25,0.3", "--lr-milestone-factors",
               "0.5,0.1"})
            .schedule.milestones.size() == 2);
  CHECK_THROWS_WITH(parse({"--warmup-fraction", "2"}), Catch::Contains("--warmup-fraction"));
  CHECK_THROWS_WITH(parse({"--divergence-factor", "0.5"}), Catch::Contains("--divergence-factor"));
  auto cosmo = kCosmoFlow;
  cosmo.insert(cosmo.end(), {"--class-weights", "auto"});
  CHECK_THROWS_WITH(parse(cosmo), Catch::Contains("--class-weights"));
  CHECK_THROWS_AS(parse({"--optimizer", "lion"}), InvalidArgument);
}
