#include "hardy/batch/job_request.hpp"

#include <fmt/format.h>

#include <array>
#include <regex>

#include "hardy/batch/environment.hpp"
#include "hardy/batch/shell.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::batch {

namespace {

constexpr std::array kPlaceholders = {
    Placeholder{"job_name", "--job-name"},
    Placeholder{"nodes", "--nodes"},
    Placeholder{"ranks_per_node", "--ranks-per-node"},
    Placeholder{"tasks", "nodes x ranks per node"},
    Placeholder{"gpus_per_node", "--gpus-per-node; not given when 0"},
    Placeholder{"cpus_per_task", "--cpus-per-rank; not given when 0 (Slurm --cpus-per-task)"},
    Placeholder{"cpus_per_rank", "--cpus-per-rank, 0 when not given (for `hardy run`)"},
    Placeholder{"gpus_per_rank",
                "--gpus-per-node / --ranks-per-node, 0 without GPUs (for `hardy run`)"},
    Placeholder{"time", "--time, HH:MM:SS"},
    Placeholder{"time_hhmm", "--time rounded up to minutes, HH:MM (LSF -W)"},
    Placeholder{"account", "--account; optional"},
    Placeholder{"queue", "--queue (Slurm partition, LSF queue); optional"},
    Placeholder{"run_dir", "the absolute run directory"},
    Placeholder{"config", "RUN_DIR/job.ini, the copy of --config the job trains with"},
    Placeholder{"output", "RUN_DIR/job.out, the batch script's standard output"},
    Placeholder{"error", "RUN_DIR/job.err, the batch script's standard error"},
    Placeholder{"hardy", "the absolute path of this hardy executable"},
    Placeholder{"signal_lead_seconds",
                "--signal-lead: SIGUSR1 comes this long before the time limit"},
    Placeholder{"signal_lead_minutes", "--signal-lead rounded up to minutes (LSF -wt)"},
    Placeholder{"requeue_exit_status",
                "the exit status of `hardy run` that asks for a requeue (4)"},
    Placeholder{"min_world_size",
                "--min-nodes x ranks per node: fewer healthy ranks and the job is requeued"},
    Placeholder{"max_requeues", "--max-requeues"},
    Placeholder{"start_timeout",
                "--start-timeout: seconds a launch may take to start before hardy run ends and "
                "relaunches it (0: learned)"},
    Placeholder{
        "nodes_per_domain",
        "--nodes-per-domain: fault domains of this many nodes, each its own MPI job (0: one)"},
    Placeholder{"rendezvous",
                "--rendezvous: where the fault domains' leaders meet, file (the run directory) or "
                "redis (a redis-server on the batch host)"},
    Placeholder{"domain_interface",
                "--domain-interface: the network the fault domains' leaders exchange over, an "
                "interface's name or a subnet ('': the host name's)"},
    Placeholder{"exclude_nodes_file",
                "RUN_DIR/exclude-nodes, the nodes the job lost, one per line, to exclude"},
    Placeholder{"launcher", "LSF only: --lsf-launcher, jsrun or mpirun"},
};

long minutes_rounded_up(long seconds) { return (seconds + 59) / 60; }

void require_positive(long value, std::string_view option) {
  if (value <= 0) throw InvalidArgument(fmt::format("{} must be positive, not {}", option, value));
}

}  // namespace

long parse_time_limit(std::string_view text) {
  static const std::regex pattern(R"((\d+):([0-5]\d):([0-5]\d))");
  std::cmatch parts;
  if (!std::regex_match(text.begin(), text.end(), parts, pattern))
    throw InvalidArgument(
        fmt::format("--time '{}' is not HH:MM:SS (e.g. 02:00:00 or 36:30:00)", text));
  const long hours = parse_count(parts.str(1), "--time hours");
  if (hours > 100000) throw InvalidArgument(fmt::format("--time '{}' is too long", text));
  const long seconds = hours * 3600 + std::stol(parts.str(2)) * 60 + std::stol(parts.str(3));
  if (seconds == 0) throw InvalidArgument("--time 00:00:00 gives the job no time");
  return seconds;
}

void validate(const JobRequest& request) {
  directive_value(request.job_name, "--job-name");
  require_positive(request.nodes, "--nodes");
  require_positive(request.ranks_per_node, "--ranks-per-node");
  if (request.gpus_per_node < 0)
    throw InvalidArgument(
        fmt::format("--gpus-per-node must be 0 or more, not {}", request.gpus_per_node));
  if (request.cpus_per_rank < 0)
    throw InvalidArgument(
        fmt::format("--cpus-per-rank must be 0 or more, not {}", request.cpus_per_rank));
  const long limit = parse_time_limit(request.time);
  if (request.account) directive_value(*request.account, "--account");
  if (request.queue) directive_value(*request.queue, "--queue");
  if (!request.run_dir.is_absolute())
    throw InvalidArgument(
        fmt::format("the run directory '{}' must be absolute", request.run_dir.string()));
  directive_value(request.run_dir.string(), "--run-dir");
  require_positive(request.signal_lead_seconds, "--signal-lead");
  require_positive(request.min_nodes, "--min-nodes");
  if (request.min_nodes > request.nodes)
    throw InvalidArgument(
        fmt::format("--min-nodes {} is more than --nodes {}: the job could never run",
                    request.min_nodes, request.nodes));
  if (request.nodes_per_domain < 0 ||
      (request.nodes_per_domain > 0 && request.nodes % request.nodes_per_domain != 0))
    throw InvalidArgument(
        fmt::format("--nodes-per-domain {} does not divide --nodes {} into whole fault domains",
                    request.nodes_per_domain, request.nodes));
  if (request.rendezvous != "file" && request.rendezvous != "redis")
    throw InvalidArgument(fmt::format("--rendezvous {}: choose file or redis", request.rendezvous));
  if (request.rendezvous == "redis" && request.nodes_per_domain == 0)
    throw InvalidArgument(
        "--rendezvous redis is where fault domains meet: it needs --nodes-per-domain");
  if (!request.domain_interface.empty() && request.nodes_per_domain == 0)
    throw InvalidArgument(
        "--domain-interface is the network fault domains exchange over: it needs "
        "--nodes-per-domain");
  if (request.max_requeues < 0)
    throw InvalidArgument(
        fmt::format("--max-requeues must be 0 or more, not {}", request.max_requeues));
  if (request.start_timeout_seconds < 0)
    throw InvalidArgument(fmt::format("--start-timeout must be 0 (learned) or more, not {}",
                                      request.start_timeout_seconds));
  if (request.signal_lead_seconds >= limit)
    throw InvalidArgument(
        fmt::format("--signal-lead {} s is not shorter than --time {}: the job would be warned "
                    "before it starts",
                    request.signal_lead_seconds, request.time));
}

std::span<const Placeholder> placeholders() { return kPlaceholders; }

TemplateValues template_values(const JobRequest& request) {
  const long limit_minutes = minutes_rounded_up(parse_time_limit(request.time));
  const auto number = [](long value) { return std::optional<std::string>(std::to_string(value)); };
  TemplateValues values = {
      {"job_name", request.job_name},
      {"nodes", number(request.nodes)},
      {"ranks_per_node", number(request.ranks_per_node)},
      {"tasks", number(static_cast<long>(request.nodes) * request.ranks_per_node)},
      {"gpus_per_node", request.gpus_per_node > 0 ? number(request.gpus_per_node) : std::nullopt},
      {"cpus_per_task", request.cpus_per_rank > 0 ? number(request.cpus_per_rank) : std::nullopt},
      {"cpus_per_rank", number(request.cpus_per_rank)},
      {"gpus_per_rank", number(request.gpus_per_node / request.ranks_per_node)},
      {"time", request.time},
      {"time_hhmm", fmt::format("{:02d}:{:02d}", limit_minutes / 60, limit_minutes % 60)},
      {"account", request.account},
      {"queue", request.queue},
      {"run_dir", request.run_dir.string()},
      {"config", request.config().string()},
      {"output", request.output().string()},
      {"error", request.error().string()},
      {"hardy", request.hardy.string()},
      {"signal_lead_seconds", number(request.signal_lead_seconds)},
      {"signal_lead_minutes", number(minutes_rounded_up(request.signal_lead_seconds))},
      {"requeue_exit_status", number(kRequeueExitStatus)},
      {"min_world_size", number(static_cast<long>(request.min_nodes) * request.ranks_per_node)},
      {"max_requeues", number(request.max_requeues)},
      {"start_timeout", number(request.start_timeout_seconds)},
      {"nodes_per_domain", number(request.nodes_per_domain)},
      {"rendezvous", request.rendezvous},
      {"domain_interface", request.domain_interface},
      {"exclude_nodes_file", request.exclude_nodes().string()},
      {"launcher", std::nullopt},
  };
  return values;
}

}  // namespace hardy::batch
