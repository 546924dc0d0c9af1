// --audit-samples: which samples each committed step trained on (samples.jsonl).
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class SampleAudit final : public StepHook {
 public:
  SampleAudit(RunFiles& files, const Trainer& trainer)
      : StepHook("sample audit", std::nullopt), files_(files), trainer_(trainer) {}

  void after_commit(const CommittedStep&) override {
    files_.keep_audit_line(trainer_.step(), trainer_.batch());
    files_.write_audit_line();
  }

 private:
  RunFiles& files_;
  const Trainer& trainer_;
};

}  // namespace

std::unique_ptr<StepHook> sample_audit_hook(RunFiles& files, const Trainer& trainer) {
  return std::make_unique<SampleAudit>(files, trainer);
}

}  // namespace hardy::resilience
