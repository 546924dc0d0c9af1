#pragma once
// What `hardy submit` asks of a scheduler, independent of which one, and the template
// placeholders it provides.
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "hardy/batch/script_template.hpp"

namespace hardy::batch {

// The exit status with which `hardy train`, and so `hardy run`, says "the scheduler warned me
// (SIGUSR1) that the time limit is near; I wrote a checkpoint and stopped: run me again"
// (resilience::kPreempted; jobs/ checks at compile time that the two agree). The batch scripts
// requeue the job on it (Slurm: scontrol requeue; LSF: bsub -Q).
inline constexpr int kRequeueExitStatus = 4;
// The file in the run directory where `hardy run` lists the nodes a job lost, one per line, for
// the batch script to exclude when it requeues the job (resilience::exclude_nodes_file).
inline constexpr std::string_view kExcludeNodesFile = "exclude-nodes";

struct JobRequest {
  std::string job_name = "hardy";
  int nodes = 1;
  int ranks_per_node = 1;
  int gpus_per_node = 0;
  int cpus_per_rank = 0;  // cores for each rank (Slurm --cpus-per-task); 0: the scheduler's default
  std::string time;       // wall-clock limit, HH:MM:SS
  std::optional<std::string> account;  // charged project (Slurm --account, LSF -P)
  std::optional<std::string> queue;    // Slurm partition or LSF queue
  std::filesystem::path run_dir;       // absolute
  std::filesystem::path hardy;         // absolute path of the hardy executable the job runs
  int signal_lead_seconds = 120;       // warn (SIGUSR1) this long before the time limit
  // Fewer healthy nodes than this and the job asks to be requeued (without the lost ones)
  // instead of relaunching inside its allocation; 1: relaunch on whatever is left.
  int min_nodes = 1;
  int max_requeues = 10;          // requeues in a row without progress before the job stops
  int start_timeout_seconds = 0;  // `hardy run --start-timeout` (0: learned)
  int nodes_per_domain = 0;       // fault domains of this many nodes (0: one domain of every node)
  std::string rendezvous = "file";  // where the domains' leaders meet: file or redis
  // The network the domains' leaders exchange over: an interface's name or a subnet of it
  // (empty: wherever each node's host name resolves).
  std::string domain_interface;
  std::string launcher;  // LSF only: jsrun or mpirun

  // Files inside the run directory that the scripts name.
  std::filesystem::path config() const { return run_dir / "job.ini"; }  // the submitted --config
  std::filesystem::path output() const { return run_dir / "job.out"; }  // the batch shell's stdout
  std::filesystem::path error() const { return run_dir / "job.err"; }   // and stderr
  std::filesystem::path exclude_nodes() const { return run_dir / kExcludeNodesFile; }
};

// Seconds in an HH:MM:SS time limit (hours may exceed 24; minutes and seconds below 60; more than
// zero in all). Throws InvalidArgument naming the text.
long parse_time_limit(std::string_view text);

// Checks every field against what a scheduler accepts and a directive can hold (positive counts,
// the time format, a warning lead shorter than the limit, an absolute run directory); throws
// InvalidArgument naming the `hardy submit` option and its value.
void validate(const JobRequest& request);

struct Placeholder {
  std::string_view name;
  std::string_view meaning;
};
// Every placeholder, documented once (`hardy submit --help` prints this list).
std::span<const Placeholder> placeholders();

// The value of every placeholder for a validated request; `launcher` is left unset here (the
// schedulers that have a choice of launcher set it).
TemplateValues template_values(const JobRequest& request);

}  // namespace hardy::batch
