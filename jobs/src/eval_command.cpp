#include <fmt/format.h>
#include <omp.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "command_line.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/data/dataset.hpp"
#include "hardy/core/nn/evaluation.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/run_directory.hpp"
#include "hardy/jobs/train_spec.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

po::options_description eval_options() {
  po::options_description options("hardy eval options");
  options.add_options()("help,h", "print this help")(
      "run-dir", po::value<std::string>(),
      "run directory of a finished training job (its config.ini and model.h5)")(
      "model", po::value<std::string>(),
      "model or checkpoint file to score instead of RUN_DIR/model.h5")(
      "predictions", po::value<std::string>(),
      "also write every scored sample's input and the network's output to this HDF5 file "
      "(float32 datasets fields, (N, C, H, W) or (N, C, D, H, W), and logits, (N, K, H, W), or "
      "for a regression outputs, (N, targets)), e.g. to check an exported model against "
      "hardy's")("dataset", po::value<std::string>(),
                 "score every sample of this dataset directory instead of the held-out set")(
      "split", po::value<std::string>(),
      "a job on a DeepCAM- or ClimateNet-layout dataset: score this split of it (validation, "
      "test or train), "
      "every sample unless --eval-samples")(
      "eval-samples", po::value<long>(),
      "held-out samples to score (default: the job's --eval-samples)")(
      "threads", po::value<int>()->default_value(0), "CPU threads (0: all cores)")(
      "json", po::bool_switch(), "print the result as one JSON object");
  return options;
}

int eval_command(const std::vector<std::string>& args) {
  const auto options = eval_options();
  po::variables_map vm;
  if (!parse_command_line(
          args, options,
          {"hardy eval",
           "Usage: hardy eval --run-dir DIR [--model FILE] [--split validation] [--json]\n\n"
           "Scores a trained model: intersection over union per class and its mean "
           "(a regression,\n"
           "--model cosmoflow: the mean absolute error per target) on samples the job did not\n"
           "train on (the held-out samples of its data, or another dataset).\n"},
          vm))
    return 0;
  if (!vm.count("run-dir"))
    throw InvalidArgument("--run-dir is required (the directory of a training job)");
  const std::filesystem::path run_path = vm["run-dir"].as<std::string>();
  if (!std::filesystem::is_directory(run_path))
    throw InvalidArgument(fmt::format("run directory {} does not exist", run_path.string()));
  const RunDirectory run_dir(run_path);
  if (!std::filesystem::exists(run_dir.config()))
    throw InvalidArgument(
        fmt::format("{} has no config.ini; is it a hardy run directory?", run_dir.path().string()));
  TrainSpec spec = load_train_spec(run_dir.config());
  if (vm.count("eval-samples")) {
    const long samples = vm["eval-samples"].as<long>();
    if (samples <= 0) throw InvalidArgument("--eval-samples must be positive");
    spec.data.eval_samples = static_cast<std::size_t>(samples);
  }
  if (vm.count("split") && vm.count("dataset"))
    throw InvalidArgument("--split and --dataset are exclusive");
  if (vm.count("split") && (spec.data.synthetic ||
                            core::dataset_layout(spec.data.dataset) == core::DatasetLayout::other))
    throw InvalidArgument(
        "--split needs a job trained on a dataset of splits: the DeepCAM layout (ROOT/stats.h5, "
        "ROOT/train/, ROOT/validation/), CosmoFlow's (ROOT/train/, ROOT/validation/) or "
        "ClimateNet's (ROOT/train/*.nc, ROOT/test/*.nc)");
  if (spec.data.eval_samples == 0 && !vm.count("dataset") && !vm.count("split"))
    throw InvalidArgument(
        "the job held out no samples (eval-samples = 0); give --eval-samples N or --dataset DIR");
  if (const int threads = vm["threads"].as<int>(); threads > 0) omp_set_num_threads(threads);
  const std::filesystem::path model_file =
      vm.count("model") ? std::filesystem::path(vm["model"].as<std::string>())
                        : run_dir.final_model();

  auto backend = core::make_backend(spec.backend, spec.precision);
  core::Model model(*backend, spec.model);
  checkpoint::load_model(model, model_file);

  std::unique_ptr<core::SampleSource> dataset;
  core::DataSources data;
  const core::SampleSource* source = nullptr;
  std::unique_ptr<core::SampleSource> subset;
  if (vm.count("dataset")) {
    dataset = std::make_unique<core::Hdf5Dataset>(vm["dataset"].as<std::string>());
    source = dataset.get();
  } else if (vm.count("split")) {
    const auto split = vm["split"].as<std::string>();
    if (split != "validation" && split != "test" && split != "train")
      throw InvalidArgument(
          fmt::format("--split must be validation, test or train, not '{}'", split));
    dataset = core::open_split(spec.data, split);
    source = dataset.get();
    if (vm.count("eval-samples"))
      source = (subset = std::make_unique<core::SampleRange>(
                    *dataset, 0, std::min(spec.data.eval_samples, dataset->size())))
                   .get();
  } else {
    data = core::open_data(spec.data);
    source = data.held_out.get();
  }
  // --predictions: every scored sample's input and the network's output (a segmentation's
  // logits, a regression's outputs), to check an exported network against.
  core::EvaluatedBatch save;
  core::h5::Handle predictions, fields_dataset, outputs_dataset;
  const auto close_predictions = [&] {
    fields_dataset.close();
    outputs_dataset.close();
    predictions.close();
  };
  if (vm.count("predictions")) {
    predictions = core::h5::create_file(vm["predictions"].as<std::string>());
    const auto shape = source->shape();
    const auto extent = [](auto value) { return static_cast<core::h5::Extent>(value); };
    const core::h5::Extent n = source->size();
    std::vector<core::h5::Extent> fields{n, extent(shape.channels)};
    if (shape.volumetric()) fields.push_back(extent(shape.depth));
    fields.insert(fields.end(), {extent(shape.height), extent(shape.width)});
    const auto outputs =
        shape.regression()
            ? std::vector<core::h5::Extent>{n, extent(shape.targets)}
            : std::vector<core::h5::Extent>{n, extent(spec.model.num_classes), extent(shape.height),
                                            extent(shape.width)};
    const auto f32 = core::h5::native_type(core::h5::number_type<float>());
    fields_dataset = core::h5::create_dataset(predictions.id(), "fields", f32, fields);
    outputs_dataset = core::h5::create_dataset(
        predictions.id(), shape.regression() ? "outputs" : "logits", f32, outputs);
    save = [&](std::size_t first, const core::Tensor& fields, const core::Tensor& outputs) {
      for (auto [tensor, dataset] :
           {std::pair{&fields, &fields_dataset}, {&outputs, &outputs_dataset}}) {
        core::Tensor host = core::Tensor::host(
            tensor->dims(), core::DType::f32,
            tensor->dims().size() == 2 ? core::Layout::flat : core::Layout::nchw);
        backend->copy(*tensor, host);
        core::h5::write_rows<float>(dataset->id(), first,
                                    static_cast<core::h5::Extent>(tensor->dims()[0]), host.f32());
      }
    };
  }
  if (spec.model.regression()) {
    // CosmoFlow: MLPerf HPC's metric, the mean absolute error over every target of every sample.
    const auto errors = core::evaluate_regression(
        model, *source, static_cast<std::size_t>(spec.global_batch), save);
    close_predictions();
    if (vm["json"].as<bool>()) {
      std::cout << nlohmann::json{{"model", model_file.string()},
                                  {"data", source->describe()},
                                  {"samples", source->size()},
                                  {"mae", errors.mean_absolute_error()},
                                  {"target_mae", errors.mean_absolute_errors()},
                                  {"mse", errors.mean_squared_error()}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt::format(
          "model:               {}\ndata:                {} ({} samples)\n"
          "mean absolute error: {:.4f}\nper target:          {:.4f}\n"
          "mean squared error:  {:.4f}\n",
          model_file.string(), source->describe(), source->size(), errors.mean_absolute_error(),
          fmt::join(errors.mean_absolute_errors(), ", "), errors.mean_squared_error());
    }
    return 0;
  }
  const auto confusion =
      core::evaluate(model, *source, static_cast<std::size_t>(spec.global_batch), save);
  close_predictions();
  const auto iou = confusion.iou();
  // The score of a model that predicts background everywhere, on the same pixels.
  const auto baseline = confusion.with_constant_prediction(core::kBackground);
  if (vm["json"].as<bool>()) {
    nlohmann::json result = {{"model", model_file.string()},
                             {"data", source->describe()},
                             {"samples", source->size()},
                             {"mean_iou", confusion.mean_iou()},
                             {"pixel_accuracy", confusion.pixel_accuracy()},
                             {"all_background_mean_iou", baseline.mean_iou()},
                             {"all_background_pixel_accuracy", baseline.pixel_accuracy()}};
    for (std::size_t c = 0; c < iou.size(); ++c)
      result["iou"][std::string(core::kClassNames[c])] =
          std::isnan(iou[c]) ? nlohmann::json(nullptr) : nlohmann::json(iou[c]);
    std::cout << result.dump(2) << "\n";
  } else {
    std::cout << fmt::format("model:          {}\ndata:           {} ({} samples)\n",
                             model_file.string(), source->describe(), source->size());
    for (std::size_t c = 0; c < iou.size(); ++c)
      std::cout << fmt::format("IoU {:<22} {:.4f}\n", std::string(core::kClassNames[c]) + ":",
                               iou[c]);
    std::cout << fmt::format(
        "mean IoU:       {:.4f}   (all background: {:.4f})\npixel accuracy: {:.4f}   (all "
        "background: {:.4f})\n",
        confusion.mean_iou(), baseline.mean_iou(), confusion.pixel_accuracy(),
        baseline.pixel_accuracy());
  }
  return 0;
}

}  // namespace hardy::jobs
