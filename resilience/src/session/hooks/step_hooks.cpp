#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

std::vector<std::unique_ptr<StepHook>> make_step_hooks(const HookParts& parts) {
  std::vector<std::unique_ptr<StepHook>> hooks;
  hooks.push_back(step_lines_hook(parts));  // every copy of the step below carries them
  if (parts.config.sync_every() > 1)
    hooks.push_back(synced_copy_hook(parts.store, parts.trainer, parts.config));
  hooks.push_back(node_snapshot_hook(parts.store, parts.injector, parts.trainer, parts.progress));
  hooks.push_back(heartbeat_hook(parts.watchdog, parts.membership, parts.trainer, parts.progress));
  if (parts.config.verify_replicas_every > 0)
    hooks.push_back(replica_check_hook(parts.trainer, parts.membership, parts.files.events(),
                                       parts.config.verify_replicas_every));
  // Before a checkpoint, so that a committed step is logged even if rank 0 dies writing one.
  hooks.push_back(metrics_hook(parts));
  if (parts.config.divergence.factor > 0)
    hooks.push_back(divergence_hook(parts.trainer, parts.membership, parts.files.events(),
                                    parts.config.divergence));
  hooks.push_back(preemption_hook(parts.store, parts.files.events(), parts.trainer));
  hooks.push_back(checkpoint_hook(parts.store));
  return hooks;
}

}  // namespace hardy::resilience
