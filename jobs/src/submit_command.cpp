#include <fmt/chrono.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "command_line.hpp"
#include "hardy/batch/script_template.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/run_directory.hpp"
#include "hardy/jobs/schedulers.hpp"
#include "hardy/jobs/train_spec.hpp"
#include "submission.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kSubmitUsage =
    R"(Usage: hardy submit --scheduler slurm|lsf --time HH:MM:SS --config job.ini [options]

Writes a batch script for a training job into its run directory (with a copy of the
configuration as job.ini), submits it with sbatch or bsub, records the job id in
RUN_DIR/scheduler.json and prints it. The job runs `hardy run` (the supervisor), which restarts
it on failures; the scheduler requeues it after a node failure or, after a checkpoint, before its
time limit, and every run resumes from the newest checkpoint. Watch it with `hardy status RUN_DIR`.
)";

}  // namespace

po::options_description submit_options() {
  po::options_description options("hardy submit options");
  options.add_options()("help,h", "print this help, with the template placeholders")(
      "scheduler", po::value<std::string>(), "slurm or lsf")(
      "config", po::value<std::string>(),
      "the job's `hardy train` configuration (INI); copied into the run directory")(
      "nodes", po::value<int>()->default_value(1), "nodes")(
      "ranks-per-node", po::value<int>()->default_value(1), "MPI ranks on each node (one per GPU)")(
      "gpus-per-node", po::value<int>()->default_value(0),
      "GPUs to request on each node (0: none)")(
      "cpus-per-rank", po::value<int>()->default_value(0),
      "CPU cores to request for each rank (Slurm --cpus-per-task, LSF affinity, jsrun "
      "--cpu_per_rs); a rank's threads follow what it gets (0: the scheduler's default, often "
      "one)")("time", po::value<std::string>(), "wall-clock limit, HH:MM:SS")(
      "account", po::value<std::string>(),
      "account or project to charge (Slurm --account, LSF -P)")("queue", po::value<std::string>(),
                                                                "Slurm partition or LSF queue")(
      "job-name", po::value<std::string>()->default_value("hardy"),
      "the scheduler's name for the job")("run-dir", po::value<std::string>(),
                                          "run directory (default: runs/<job-name>-<time>)")(
      "template", po::value<std::string>(),
      "batch-script template file instead of the built-in one")(
      "lsf-launcher", po::value<std::string>(), "LSF: jsrun (the default; Summit-like) or mpirun")(
      "signal-lead", po::value<int>()->default_value(120),
      "seconds before the time limit at which the job checkpoints and requeues itself")(
      "min-nodes", po::value<int>()->default_value(1),
      "after a node failure, relaunch inside the allocation while this many nodes are healthy; "
      "with fewer, requeue the job without the lost nodes")(
      "nodes-per-domain", po::value<int>()->default_value(0),
      "fault domains of K nodes, each its own MPI job: a lost node stops only its domain (0: one)")(
      "rendezvous", po::value<std::string>()->default_value("file"),
      "where the fault domains' leaders meet: file (the run directory) or redis (a redis-server "
      "on the batch host; for run directories on NFS, Lustre or GPFS)")(
      "domain-interface", po::value<std::string>()->default_value(""),
      "the network the fault domains' leaders (and a redis rendezvous) use: an interface's name "
      "(hsn0, ib0) or a subnet of it (10.100.0.0/16); default: where the host name resolves, "
      "often the management Ethernet")(
      "max-requeues", po::value<int>()->default_value(10),
      "requeues the job may ask for in a row without committing a new step, before it stops")(
      "start-timeout", po::value<int>()->default_value(0),
      "seconds a launch may take to start (its ranks logging job_started) before `hardy run` "
      "ends it and launches again (0: learned from the run's earlier starts, 600 s before any)")(
      "dry-run", po::bool_switch(), "print the script and stop: nothing is created or submitted")(
      "print-template", po::bool_switch(),
      "print the built-in template of --scheduler, to start a --template from");
  return options;
}

namespace {

std::string placeholder_help() {
  std::string help =
      "Template placeholders, each replaced by one whole word: quoted for the shell, or checked "
      "and\n"
      "double-quoted when it has spaces in a #SBATCH/#BSUB line (so never put one inside quotes).\n"
      "A directive line that names an optional setting not given is left out.\n";
  for (const auto& [name, meaning] : batch::placeholders())
    help += fmt::format("  {:<24} {}\n", fmt::format("{{{{{}}}}}", name), meaning);
  return help +
         "The built-in LSF scripts take the launcher from HARDY_LSF_LAUNCHER (mpirun, mpiexec, "
         "srun or\n"
         "jsrun) when it is set in the job's environment.\n";
}

std::string read_text(const std::filesystem::path& path, const std::string& option) {
  std::ifstream file(path);
  if (!file || std::filesystem::is_directory(path))
    throw InvalidArgument(
        fmt::format("{} {} does not exist or cannot be read", option, path.string()));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string local_time_stamp() {
  return fmt::format(
      "{:%Y%m%d-%H%M%S}",
      fmt::localtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())));
}

// The default run directory is named after the job; characters a path should not have are
// replaced so that any job name gives one directory under runs/.
std::filesystem::path default_run_dir(const std::string& job_name) {
  std::string safe = job_name;
  for (char& c : safe) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.';
    if (!plain) c = '_';
  }
  return std::filesystem::path("runs") / fmt::format("{}-{}", safe, local_time_stamp());
}

batch::JobRequest request_from(const po::variables_map& vm, const batch::Scheduler& scheduler) {
  batch::JobRequest request;
  request.job_name = vm["job-name"].as<std::string>();
  request.nodes = vm["nodes"].as<int>();
  request.ranks_per_node = vm["ranks-per-node"].as<int>();
  request.gpus_per_node = vm["gpus-per-node"].as<int>();
  request.cpus_per_rank = vm["cpus-per-rank"].as<int>();
  request.time = vm["time"].as<std::string>();
  if (vm.count("account")) request.account = vm["account"].as<std::string>();
  if (vm.count("queue")) request.queue = vm["queue"].as<std::string>();
  const auto run_dir = vm.count("run-dir") ? std::filesystem::path(vm["run-dir"].as<std::string>())
                                           : default_run_dir(request.job_name);
  request.run_dir = std::filesystem::absolute(run_dir).lexically_normal();
  if (request.run_dir.has_parent_path() && !request.run_dir.has_filename())
    request.run_dir = request.run_dir.parent_path();  // no trailing slash: it shows in every path
  request.hardy = std::filesystem::read_symlink("/proc/self/exe");
  request.signal_lead_seconds = vm["signal-lead"].as<int>();
  request.min_nodes = vm["min-nodes"].as<int>();
  request.max_requeues = vm["max-requeues"].as<int>();
  request.start_timeout_seconds = vm["start-timeout"].as<int>();
  request.nodes_per_domain = vm["nodes-per-domain"].as<int>();
  request.rendezvous = vm["rendezvous"].as<std::string>();
  request.domain_interface = vm["domain-interface"].as<std::string>();
  if (vm.count("lsf-launcher"))
    request.launcher = vm["lsf-launcher"].as<std::string>();
  else if (scheduler.name() == "lsf")
    request.launcher = "jsrun";
  batch::validate(request);
  return request;
}

}  // namespace

int submit_command(const std::vector<std::string>& args) {
  const auto options = submit_options();
  po::variables_map vm;
  if (!parse_command_line(args, options, {"hardy submit", kSubmitUsage}, vm, placeholder_help()))
    return 0;
  if (!vm.count("scheduler"))
    throw InvalidArgument("--scheduler is required (see hardy submit --help)");
  const auto scheduler = make_scheduler(vm["scheduler"].as<std::string>());
  if (vm["print-template"].as<bool>()) {
    batch::JobRequest request;
    request.launcher = vm.count("lsf-launcher") ? vm["lsf-launcher"].as<std::string>() : "";
    std::cout << scheduler->builtin_template(request);
    return 0;
  }
  for (const char* required : {"config", "time"})
    if (!vm.count(required))
      throw InvalidArgument(fmt::format("--{} is required (see hardy submit --help)", required));
  const batch::JobRequest request = request_from(vm, *scheduler);

  // A bad configuration fails here, not after the job waited in the queue.
  const std::filesystem::path config = vm["config"].as<std::string>();
  const std::string config_text = read_text(config, "--config");
  load_train_spec(config);

  const std::string source = vm.count("template")
                                 ? vm["template"].as<std::string>()
                                 : fmt::format("the built-in {} template", scheduler->name());
  const std::string text =
      vm.count("template") ? read_text(source, "--template") : scheduler->builtin_template(request);
  const std::string script = batch::render_script(text, scheduler->template_values(request),
                                                  scheduler->directive_prefix(), source);
  if (vm["dry-run"].as<bool>()) {
    std::cout << script;
    return 0;
  }

  const bool run_dir_existed = std::filesystem::exists(request.run_dir);
  const RunDirectory run_dir(request.run_dir);
  run_dir.write_file(request.config().filename(), config_text);
  const auto script_path = run_dir.path() / scheduler->script_name();
  run_dir.write_file(script_path.filename(), script);
  ::chmod(script_path.c_str(), 0755);  // runnable by hand too (`bash job.sbatch` inside salloc)
  std::string job_id;
  try {
    job_id = scheduler->submit(script_path);
  } catch (const std::exception&) {
    // Nothing was queued: a run directory this call created holds only its own two files, and
    // leaving it would make the next attempt look like a resubmission of an existing run.
    if (!run_dir_existed) {
      std::error_code ignored;
      std::filesystem::remove_all(run_dir.path(), ignored);
    }
    throw;
  }
  write_submission(run_dir.path(), Submission{.scheduler = std::string(scheduler->name()),
                                              .job_id = job_id,
                                              .job_name = request.job_name,
                                              .submitted = core::iso_time(core::unix_time()),
                                              .script = script_path});
  std::cerr << fmt::format("submitted {} job {}; run directory {}\n", scheduler->name(), job_id,
                           run_dir.path().string());
  std::cout << job_id << "\n";
  return 0;
}

}  // namespace hardy::jobs
