#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "hardy/core/support/error.hpp"
#include "hardy/jobs/train_spec.hpp"

using namespace hardy;
using namespace hardy::jobs;

namespace {

std::filesystem::path write_config(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("hardy-test-" + name + ".ini");
  std::ofstream(path) << text;
  return path;
}

TrainSpec parse(std::vector<std::string> args) {
  auto spec = parse_train_spec(args);
  REQUIRE(spec.has_value());
  return *spec;
}

}  // namespace

TEST_CASE("train spec: defaults give a synthetic job with group normalization", "[jobs]") {
  const TrainSpec spec = parse({"--run-dir", "/tmp/x"});
  CHECK(spec.data.synthetic);
  CHECK(spec.global_batch == 8);
  CHECK(spec.model.norm == core::NormKind::group);
  CHECK(spec.model.aspp_rates == std::vector<int>{2, 4, 6});
  CHECK(spec.run_dir == "/tmp/x");
  CHECK_FALSE(spec.overlap_input.has_value());  // auto: on with a device backend
  CHECK(parse({"--overlap-input", "on"}).overlap_input == true);
  CHECK(parse({"--overlap-input", "off"}).overlap_input == false);
}

TEST_CASE("train spec: the command line overrides the configuration file", "[jobs]") {
  const auto config =
      write_config("override", "steps = 30\nlr = 0.5\nglobal-batch = 4\naspp-rates = 1,3\n");
  const TrainSpec spec = parse({"--config", config.string(), "--lr", "0.25"});
  CHECK(spec.steps == 30);
  CHECK(spec.global_batch == 4);
  CHECK(spec.schedule.base_lr == Approx(0.25f));
  CHECK(spec.model.aspp_rates == std::vector<int>{1, 3});
  CHECK_THAT(spec.config_ini, Catch::Contains("lr = 0.25") && Catch::Contains("steps = 30"));
}

TEST_CASE("train spec: a data source on the command line hides the file's", "[jobs]") {
  const auto with_dataset = write_config("dataset", "dataset = /data/climate\n");
  CHECK_FALSE(parse({"--config", with_dataset.string()}).data.synthetic);
  CHECK(parse({"--config", with_dataset.string(), "--synthetic"}).data.synthetic);
  const auto with_synthetic = write_config("synthetic", "synthetic = true\n");
  const TrainSpec spec = parse({"--config", with_synthetic.string(), "--dataset", "/data/other"});
  CHECK_FALSE(spec.data.synthetic);
  CHECK(spec.data.dataset == "/data/other");
  CHECK_THROWS_AS(parse({"--synthetic", "--dataset", "/d"}), InvalidArgument);
}

TEST_CASE("train spec: the effective configuration reads back to the same job", "[jobs]") {
  const TrainSpec first =
      parse({"--steps", "12", "--optimizer", "lars", "--model-width", "8", "--norm", "batch"});
  const auto config = write_config("roundtrip", first.config_ini);
  const TrainSpec second = load_train_spec(config);
  CHECK(second.steps == 12);
  CHECK(second.optimizer.kind == core::OptimizerKind::lars);
  CHECK(second.model.width == 8);
  CHECK(second.model.norm == core::NormKind::batch);
  CHECK(second.run_dir == first.run_dir);
  CHECK(second.config_ini == first.config_ini);
}

TEST_CASE("train spec: the domain exchange is a property of the job, kept in its configuration",
          "[jobs]") {
  CHECK(parse({}).domain_exchange == resilience::DomainExchange::leader);
  const TrainSpec sharded = parse({"--domain-exchange", "sharded"});
  CHECK(sharded.domain_exchange == resilience::DomainExchange::sharded);
  // A relaunched domain reads config.ini: it must exchange as the others do.
  CHECK(load_train_spec(write_config("sharded", sharded.config_ini)).domain_exchange ==
        resilience::DomainExchange::sharded);
}

TEST_CASE("train spec: bad values are rejected with a message naming the option", "[jobs]") {
  CHECK_THROWS_WITH(parse({"--global-batch", "0"}), Catch::Contains("--global-batch"));
  CHECK_THROWS_WITH(parse({"--height", "60"}), Catch::Contains("--height"));
  CHECK_THROWS_WITH(parse({"--optimizer", "rmsprop"}), Catch::Contains("rmsprop"));
  CHECK_THROWS_WITH(parse({"--aspp-rates", "2,x"}), Catch::Contains("--aspp-rates"));
  CHECK_THROWS_WITH(parse({"--class-weights", "1,2"}), Catch::Contains("3 values"));
  CHECK_THROWS_WITH(parse({"--lr", "-1"}), Catch::Contains("--lr"));
  CHECK_THROWS_WITH(parse({"--no-such-option"}), Catch::Contains("no-such-option"));
  CHECK_THROWS_WITH(parse({"--domain-exchange", "ring"}),
                    Catch::Contains("'ring'") && Catch::Contains("leader or sharded"));
  CHECK_THROWS_WITH(parse({"--config", "/nonexistent/job.ini"}),
                    Catch::Contains("/nonexistent/job.ini"));
  const auto unknown = write_config("unknown", "stepz = 3\n");
  CHECK_THROWS_WITH(parse({"--config", unknown.string()}), Catch::Contains("stepz"));
}
