// `hardy export RUN_DIR --onnx FILE`: a trained network as ONNX, for inference outside hardy.
// tools/export_onnx.py builds the PyTorch twin of the run's network (bench/step/torch_networks.py,
// parameter for parameter by hardy's names), loads the weights and traces it; the C++ side
// resolves the run's network and sample size as training did, and turns what is missing into a
// clear error. Python is a tool here, never on the training path.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/run_directory.hpp"
#include "hardy/jobs/train_spec.hpp"
#include "python_tools.hpp"
#include "submission.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace hardy::jobs {

namespace {

constexpr const char* kExportUsage = R"(Usage: hardy export RUN_DIR --onnx FILE [--model FILE]

Writes the run's trained network (RUN_DIR/model.h5, or --model, a model or checkpoint file) as
ONNX (opset 13): input "fields" (N, C, H, W) float32, normalised as the run's samples are, output
"logits" (N, classes, H, W); N is free, H and W are the run's sample size. Any of the networks:
compact (group or batch norm), deepcam, tiramisu, and cosmoflow, whose input is its volumes
(N, 4, D, H, W) and output "outputs" (N, 4). `hardy eval --predictions FILE` writes hardy's own
outputs for the same samples, to check an exported model against. Needs Python 3 with torch,
h5py and numpy ($HARDY_PYTHON, else the checkout's .venv/bin/python, python3 on PATH,
/usr/bin/python3).
)";

}  // namespace

po::options_description export_options() {
  auto options = run_dir_options("hardy export options");
  options.add_options()("onnx", po::value<std::string>(), "the ONNX file to write")(
      "model", po::value<std::string>(),
      "model or checkpoint file to export instead of RUN_DIR/model.h5");
  return options;
}

int export_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  const auto run_path =
      parse_existing_run_dir_command(args, export_options(), "hardy export", kExportUsage, vm);
  if (!run_path) return 0;
  if (!vm.count("onnx")) throw InvalidArgument("hardy export needs --onnx FILE");
  const RunDirectory run_dir(*run_path);
  if (!fs::exists(run_dir.config()))
    throw InvalidArgument(
        fmt::format("{} has no config.ini; is it a hardy run directory?", run_path->string()));
  const TrainSpec spec = load_train_spec(run_dir.config());
  const fs::path weights =
      vm.count("model") ? fs::path(vm["model"].as<std::string>()) : run_dir.final_model();
  if (!fs::exists(weights))
    throw InvalidArgument(
        fmt::format("{} does not exist (has the run finished? give --model "
                    "FILE to export a checkpoint)",
                    weights.string()));
  // The sample size training saw: the generator's, or the dataset's after --crop/--downsample.
  const core::SampleShape shape = core::open_data(spec.data).train->shape();

  const fs::path helper = find_helper("export_onnx.py");
  const fs::path python = find_python(helper, {"torch", "h5py", "numpy"},
                                      "torch, h5py and numpy (apt install python3-torch "
                                      "python3-h5py python3-numpy, or pip install them)");
  std::vector<std::string> helper_args{"--config",  core::to_json(spec.model).dump(),
                                       "--weights", weights.string(),
                                       "--height",  std::to_string(shape.height),
                                       "--width",   std::to_string(shape.width),
                                       "--output",  shape.regression() ? "outputs" : "logits",
                                       "--out",     vm["onnx"].as<std::string>()};
  if (shape.volumetric())
    helper_args.insert(helper_args.end(), {"--depth", std::to_string(shape.depth)});
  run_helper(python, helper, helper_args);
  return 0;
}

}  // namespace hardy::jobs
