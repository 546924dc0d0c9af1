// The four networks' training recipes (hardy/jobs/training_recipes.hpp). The references, read on
// 2026-11-29:
//   CosmoFlow: github.com/mlcommons/hpc (commit 2c627d4) cosmoflow/configs/cosmo.yaml,
//              cosmoflow/utils/optimizers.py, cosmoflow/models/cosmoflow.py;
//   DeepCAM:   github.com/mlcommons/hpc (commit 2c627d4) deepcam/src/deepCam/run_scripts/
//              run_training.sh and run_training_nranks1024.sh, train.py, utils/parser.py,
//              utils/optimizer_helpers.py, utils/schedulers.py;
//   Tiramisu:  the Gordon Bell climate run's repository (Kurth et al., SC18),
//              github.com/azrael417/ClimDeepLearn semanticsegm/tiramisu-tf/tiramisu-tf-train.py,
//              semanticsegm/utils/common_helpers.py and semanticsegm/run_scripts/gori/
//              run_tiramisu_lite_gori_v100.sh; the same files in NERSC's climate-seg-benchmark
//              (github.com/sparticlesteve/climate-seg-benchmark utils/common_helpers.py) and the
//              fp32 script of github.com/hpcac/ISC19-SCC scripts/run_tiramisu_lite.sh.
#include "hardy/jobs/training_recipes.hpp"

#include <fmt/format.h>

#include <sstream>

#include "hardy/core/support/error.hpp"

namespace hardy::jobs {

namespace {

TrainingRecipe compact_recipe() {
  constexpr std::string_view own = "hardy's own (tests/jobs/tiny_learns.py)";
  return {
      .architecture = core::Architecture::compact,
      .name = "hardy's compact DeepLabv3+",
      .reference = "none published: hardy's own settings, measured by tests/jobs/tiny_learns.py",
      .values = {{"optimizer", "adam", own},
                 {"lr", "0.002", own},
                 {"lr-reference-batch", "0", own},
                 {"lr-scaling", "none", own},
                 {"momentum", "0.9", own},
                 {"weight-decay", "1e-4", own},
                 {"eps", "1e-8", own},
                 {"warmup-steps", "0", own},
                 {"warmup-fraction", "0", own},
                 {"lr-decay", "cosine", own},
                 {"final-lr-fraction", "0", own},
                 {"lr-milestones", "none", own},
                 {"lr-milestone-factors", "none", own},
                 {"class-weights", "auto", own}},
      .departures = {}};
}

TrainingRecipe cosmoflow_recipe() {
  return {
      .architecture = core::Architecture::cosmoflow,
      .name = "MLPerf HPC CosmoFlow reference",
      .reference =
          "github.com/mlcommons/hpc cosmoflow/ (configs/cosmo.yaml, utils/optimizers.py, "
          "models/cosmoflow.py)",
      .values =
          {{"optimizer", "sgd", "cosmo.yaml optimizer: name SGD"},
           {"lr", "0.001", "cosmo.yaml lr_schedule: base_lr 0.001"},
           {"lr-reference-batch", "64", "cosmo.yaml lr_schedule: base_batch_size 64"},
           {"lr-scaling", "linear",
            "cosmo.yaml lr_schedule: scaling linear (optimizers.py: peak_lr = base_lr x global "
            "batch / 64)"},
           {"momentum", "0.9", "cosmo.yaml optimizer: momentum 0.9"},
           {"weight-decay", "0",
            "models/cosmoflow.py build_model l2=0 (cosmo.yaml sets none; dropout 0.5 is the "
            "network's)"},
           {"eps", "1e-8", "unused by sgd"},
           {"warmup-steps", "0", "the warm-up is a fraction of the run (next)"},
           {"warmup-fraction", "0.03125", "cosmo.yaml: n_warmup_epochs 4 of n_epochs 128"},
           {"lr-decay", "multistep", "cosmo.yaml lr_schedule: decay_schedule"},
           {"final-lr-fraction", "0", "unused by multistep"},
           {"lr-milestones", "0.25,0.5", "cosmo.yaml decay_schedule: epochs 32 and 64 of 128"},
           {"lr-milestone-factors", "0.25,0.125",
            "cosmo.yaml decay_schedule: {32: 0.25, 64: 0.125} of the peak rate"}},
      .departures = {
          "the reference's epochs become fractions of the job's steps, so that a job of any "
          "length keeps its proportions (its decay starts after epoch 32, hardy's at 25% of the "
          "steps)",
          "the reference's warm-up rises from the unscaled 0.001 to the scaled peak; hardy's "
          "rises from peak / warm-up steps, as every hardy warm-up",
          "the reference takes log(1 + x) of the volumes in its reader; hardy's CosmoFlow data "
          "is normalised by its own reader (docs/data.md)"}};
}

TrainingRecipe deepcam_recipe() {
  return {
      .architecture = core::Architecture::deepcam,
      .name = "MLPerf HPC DeepCAM reference",
      .reference =
          "github.com/mlcommons/hpc deepcam/src/deepCam/ (run_scripts/run_training.sh, "
          "run_training_nranks1024.sh, train.py, utils/parser.py, "
          "utils/optimizer_helpers.py, utils/schedulers.py)",
      .values = {{"optimizer", "lamb",
                  "run_training.sh --optimizer LAMB (optimizer_helpers.py: apex FusedLAMB)"},
                 {"lr", "0.0055", "run_training.sh --start_lr 0.0055"},
                 {"lr-reference-batch", "2048",
                  "run_training_nranks1024.sh: 1024 ranks x --local_batch_size 2"},
                 {"lr-scaling", "none",
                  "the reference sets --start_lr for its batch and never scales it"},
                 {"momentum", "0.9",
                  "unused by lamb (its betas: parser.py --optimizer_betas 0.9 0.999)"},
                 {"weight-decay", "0.01", "run_training.sh --weight_decay 1e-2"},
                 {"eps", "1e-6", "run_training.sh --adam_eps 1e-6 (optimizer_helpers.py adam_eps)"},
                 {"warmup-steps", "400",
                  "run_training.sh --lr_warmup_steps 400 --lr_warmup_factor 1. (a job shorter than "
                  "that ends inside it)"},
                 {"warmup-fraction", "0", "the warm-up is in steps (previous)"},
                 {"lr-decay", "multistep", "run_training.sh --lr_schedule type=\"multistep\""},
                 {"final-lr-fraction", "0", "unused by multistep"},
                 {"lr-milestones", "1200",
                  "run_training.sh milestones=\"800\", counted after the 400 warm-up steps "
                  "(schedulers.py MultiStepLRWarmup)"},
                 {"lr-milestone-factors", "0.1", "run_training.sh decay_rate=\"0.1\""},
                 {"class-weights", "frequency^-0.125",
                  "train.py: loss_pow = -0.125, class_weights = frequency ** loss_pow"}},
      .departures = {
          "the class frequencies are measured on the job's training data, as hardy's auto "
          "weights are, and the weights normalised to a mean pixel weight of 1 (the reference "
          "uses the CAM5 set's frequencies 0.986, 0.000458, 0.0133: weights 1.00, 2.62, 1.72)",
          "LAMB's weight decay and trust ratio skip biases and normalization parameters, as "
          "hardy's decay always does; the reference's apex FusedLAMB decays and adapts every "
          "parameter",
          "the warm-up and milestone stay in steps, as published for global batch 2048: at a "
          "smaller batch they come after fewer samples"}};
}

TrainingRecipe tiramisu_recipe() {
  return {
      .architecture = core::Architecture::tiramisu,
      .name = "Gordon Bell 2018 Tiramisu (Kurth et al., SC18)",
      .reference =
          "NERSC climate-seg-benchmark: utils/common_helpers.py "
          "(github.com/sparticlesteve/climate-seg-benchmark), tiramisu-tf/"
          "tiramisu-tf-train.py and scripts/run_tiramisu_lite.sh (as copied into "
          "github.com/hpcac/ISC19-SCC)",
      .values = {{"optimizer", "adam",
                  "run_tiramisu_lite.sh --optimizer opt_type=LARC-Adam (Adam under LARC clipping; "
                  "hardy has no LARC-Adam: see the departures)"},
                 {"lr", "1e-4",
                  "run_tiramisu_lite.sh learning_rate=0.0001 (common_helpers.py default 1.e-4)"},
                 {"lr-reference-batch", "0", "not scaled with the batch"},
                 {"lr-scaling", "none", "common_helpers.py get_learning_rate: no batch scaling"},
                 {"momentum", "0.9",
                  "unused by adam (betas: common_helpers.py beta1 0.9, beta2 0.999)"},
                 {"weight-decay", "1e-4", "tiramisu-tf-train.py create_tiramisu(..., wd=1e-4): L2"},
                 {"eps", "1e-8", "tf.train.AdamOptimizer's default epsilon"},
                 {"warmup-steps", "0", "common_helpers.py: no warm-up"},
                 {"warmup-fraction", "0", "common_helpers.py: no warm-up"},
                 {"lr-decay", "none", "common_helpers.py get_learning_rate: lr_decay \"none\""},
                 {"final-lr-fraction", "0", "unused without decay"},
                 {"lr-milestones", "none", "no decay"},
                 {"lr-milestone-factors", "none", "no decay"},
                 {"class-weights", "frequency^-1",
                  "tiramisu-tf-train.py: weights = 1 / frequencies, normalised (--loss weighted)"}},
      .departures = {
          "LARC's clipping (eta 0.002) of each tensor's gradient before Adam is not applied: "
          "Adam divides each step by the gradient's own running scale, so LARC-Adam moves "
          "weights as Adam does except where the clipping ratio changes from step to step",
          "the class frequencies are measured on the job's training data, and the weights "
          "normalised to a mean pixel weight of 1 (the reference's --frequencies default "
          "0.991, 0.0266, 0.13)",
          "the reference's loss --scale_factor (0.1 by default, 1.0 in its run scripts) is "
          "left out: it scales the loss, which Adam's step does not see"}};
}

}  // namespace

const std::vector<std::string_view>& recipe_options() {
  static const std::vector<std::string_view> options{"optimizer",
                                                     "lr",
                                                     "lr-reference-batch",
                                                     "lr-scaling",
                                                     "momentum",
                                                     "weight-decay",
                                                     "eps",
                                                     "warmup-steps",
                                                     "warmup-fraction",
                                                     "lr-decay",
                                                     "final-lr-fraction",
                                                     "lr-milestones",
                                                     "lr-milestone-factors",
                                                     "class-weights"};
  return options;
}

const TrainingRecipe& training_recipe(core::Architecture architecture) {
  static const std::vector<TrainingRecipe> recipes{compact_recipe(), deepcam_recipe(),
                                                   tiramisu_recipe(), cosmoflow_recipe()};
  for (const auto& recipe : recipes)
    if (recipe.architecture == architecture) return recipe;
  throw Error(fmt::format("no training recipe for {}", core::to_string(architecture)));
}

std::string recipes_help() {
  std::ostringstream text;
  text << "Training recipes: what --model NAME trains with where the options above are not "
          "given\n(docs/training.md; config.ini in the run directory names each value's "
          "source).\n";
  for (auto architecture : {core::Architecture::compact, core::Architecture::tiramisu,
                            core::Architecture::deepcam, core::Architecture::cosmoflow}) {
    const auto& recipe = training_recipe(architecture);
    text << fmt::format("\n  --model {}: {}\n    from {}\n", core::to_string(architecture),
                        recipe.name, recipe.reference);
    for (const auto& value : recipe.values)
      text << fmt::format("    {:<21} {:<17} {}\n", value.option, value.value, value.source);
    for (const auto& departure : recipe.departures)
      text << fmt::format("    differs: {}\n", departure);
  }
  return text.str();
}

}  // namespace hardy::jobs
