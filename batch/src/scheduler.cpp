#include "hardy/batch/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "hardy/batch/command.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::batch {

void check_job_id(std::string_view job_id) {
  const bool digits =
      !job_id.empty() && job_id.size() <= 18 &&
      std::all_of(job_id.begin(), job_id.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || job_id.front() == '0')
    throw InvalidArgument(fmt::format(
        "'{}' is not a job id (a positive decimal number, as sbatch and bsub give)", job_id));
}

void cancel_job(const std::string& command, const std::string& job_id) {
  check_job_id(job_id);
  const auto result = run_command({command, job_id});
  if (result.status != 0)
    throw Error(fmt::format("{} {}: {}", command, job_id, first_line(result)));
}

std::string supervised_launch(std::string_view extra_run_options,
                              std::string_view on_requeue_status) {
  // Why in the background: a shell runs a trap only between commands, so a foreground `hardy
  // run` would never see the warning; `wait` is the one command a trapped signal interrupts.
  constexpr std::string_view start = R"sh(
# The scheduler warns this shell with SIGUSR1 {{signal_lead_seconds}} s before the time limit;
# the shell passes it on to `hardy run`, which writes a checkpoint, stops the ranks and exits
# with status {{requeue_exit_status}}. The job then goes back to the queue and resumes from that
# checkpoint (--resume latest). `hardy run` exits the same way when a node failure leaves fewer
# than {{min_world_size}} healthy ranks, after listing the lost nodes in {{exclude_nodes_file}}
# for the requeue to leave out; it resumes from the newest node-local snapshot or checkpoint.
set -u
echo "hardy: batch script started on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
child=
trap 'echo "hardy: SIGUSR1, passed on to hardy run" >&2; [ -n "$child" ] && kill -USR1 "$child"' USR1
{{hardy}} run )sh";
  constexpr std::string_view wait =
      R"sh(--nodes {{nodes}} --ranks-per-node {{ranks_per_node}} --run-dir {{run_dir}} \
  --cpus-per-rank {{cpus_per_rank}} --gpus-per-rank {{gpus_per_rank}} \
  --min-world-size {{min_world_size}} --max-requeues {{max_requeues}} \
  --nodes-per-domain {{nodes_per_domain}} --rendezvous {{rendezvous}} \
  --domain-interface {{domain_interface}} \
  --start-timeout {{start_timeout}} \
  -- --config {{config}} --resume latest &
child=$!
status=0
wait "$child" || status=$?
# A trapped signal interrupts `wait` while hardy run goes on: wait again for its exit status.
while kill -0 "$child" 2>/dev/null; do
  status=0
  wait "$child" || status=$?
done
if [ "$status" -eq {{requeue_exit_status}} ]; then
)sh";
  constexpr std::string_view end = R"sh(
fi
exit "$status"
)sh";
  return std::string(start) + std::string(extra_run_options) + std::string(wait) +
         std::string(on_requeue_status) + std::string(end);
}

}  // namespace hardy::batch
