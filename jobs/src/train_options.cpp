// The table of every `hardy train` option, by group: name, default and help. Reading the values
// into a TrainSpec and checking them is train_spec.cpp's; the recipes' defaults for the options
// without one here are training_recipes.cpp's.
#include <boost/program_options.hpp>
#include <cstdint>
#include <string>

#include "command_line.hpp"
#include "hardy/core/support/private_tree.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {
// The job: its configuration, run directory, length, seed, backend and threads.
po::options_description job_options() {
  po::options_description general("Job");
  general.add_options()("help,h", "print this help")(
      "config", po::value<std::string>(),
      "INI file with any of these options as `name = value` lines; the command line wins")(
      "run-dir", po::value<std::string>(),
      "run directory for config.ini, metrics.jsonl, events.jsonl and checkpoints (default: "
      "runs/train-<time>); one run at a time holds it (RUN_DIR/lock)")(
      "run-lock-token", po::value<std::string>()->default_value(""),
      "set by `hardy run` for its launches: they run under its lock of the run directory")(
      "steps", po::value<long>()->default_value(0),
      "total optimizer steps of the job (0: derive from --epochs)")(
      "epochs", po::value<long>()->default_value(1),
      "passes over the training set when --steps is 0")(
      "global-batch", po::value<long>()->default_value(8), "samples per step over all ranks")(
      "seed", po::value<std::uint64_t>()->default_value(1),
      "seed for weights, data order and synthetic data")(
      "backend", po::value<std::string>()->default_value("cpu"),
      "kernel backend: cpu (oneDNN) or cuda")(
      "precision", po::value<std::string>()->default_value("auto"),
      "what the network computes in: f32, or mixed precision with activations in bf16 (CPUs "
      "with AVX512-BF16 or AMX, and GPUs) or fp16 (GPUs, with loss scaling); parameters, "
      "gradients and optimizer state stay f32, so a checkpoint resumes in any precision. auto: "
      "f32 on the cpu backend; with --backend cuda, HARDY_CUDA_PRECISION, else bf16")(
      "threads", po::value<int>()->default_value(0),
      "kernel (OpenMP) threads per rank (0: the CPUs the rank may run on, as a scheduler's cpuset "
      "or a binding left them, or else its share of the host's cores; with --backend cuda at "
      "most 4 of them)")("log-every", po::value<long>()->default_value(10),
                         "print a progress line every N steps");
  return general;
}

// Data parallelism: gradient buckets, lagged updates, audits.
po::options_description parallelism_options() {
  po::options_description parallel("Data parallelism (one MPI rank per GPU or CPU socket)");
  parallel.add_options()(
      "bucket-mib", po::value<double>()->default_value(25.0),
      "gradient fusion buffer size in MiB; each full buffer's allreduce starts during backward")(
      "gradient-lag", po::value<int>()->default_value(0),
      "1: reduce each step's gradients while the next step computes and apply them one step "
      "late (lagged updates, as the 2018 Summit climate run); 0: off (docs/resilience.md)")(
      "audit-samples", po::value<bool>()->default_value(false)->implicit_value(true),
      "rank 0 writes samples.jsonl: the global batch of every committed step")(
      "verify-replicas-every", po::value<long>()->default_value(0),
      "every N steps, check that all ranks hold bit-identical parameters (0: never)");
  return parallel;
}

// Checkpoints and node-local snapshots.
po::options_description checkpoint_options() {
  po::options_description checkpoints("Checkpoints");
  checkpoints.add_options()("checkpoint-every", po::value<long>()->default_value(0),
                            "write a checkpoint every N steps (0: never)")(
      "checkpoint-every-seconds", po::value<double>()->default_value(0.0),
      "write a checkpoint when S seconds passed since the last (0: never)")(
      "keep-last", po::value<int>()->default_value(3),
      "retention: keep the last K checkpoints ...")("keep-every",
                                                    po::value<int>()->default_value(0),
                                                    "... plus every M-th (by step count; 0: none)")(
      "checkpoint-mode", po::value<std::string>()->default_value("async"),
      "async (a background thread writes; training only copies the state) or sync")(
      "checkpoint-when-busy", po::value<std::string>()->default_value("wait"),
      "when the previous asynchronous write is still running: wait or skip")(
      "resume", po::value<std::string>()->default_value(""),
      "resume from `latest` (the newest valid checkpoint, or node-local snapshot when newer) or a "
      "checkpoint file; --steps stays the job's total")(
      "snapshot-every", po::value<std::string>()->default_value("auto"),
      "every N committed steps, the lowest rank of each node copies the committed state to "
      "--snapshot-dir in the background, so that a relaunch resumes from it (1: loses no "
      "committed step; 0: never). auto: whenever 100 times the last snapshot's cost has gone by "
      "since it, so that snapshots take at most 1% of the time: every step when steps are long, "
      "every few when they are short")(
      "snapshot-dir",
      po::value<std::string>()->default_value(core::default_node_local_root().string()),
      "node-local directory for those snapshots, this user's own (created 0700; one that other "
      "users could write or own is refused and the job trains on without snapshots); one "
      "subdirectory per run and host, removed when the job completes or stops");
  return checkpoints;
}

// Failures: how many, how found, how survived.
po::options_description resilience_options() {
  po::options_description resilience("Resilience");
  resilience.add_options()("ranks-per-node", po::value<int>()->default_value(1),
                           "ranks per node: losing a node loses all of them at once")(
      "min-world-size", po::value<int>()->default_value(1),
      "stop (after a final checkpoint) when fewer ranks survive")(
      "max-failures", po::value<int>()->default_value(3),
      "stop (after a final checkpoint) after more failures than this")(
      "rebalance", po::value<std::string>()->default_value("constant-global-batch"),
      "after a failure: constant-global-batch (re-split the batch over the survivors) or "
      "constant-local-batch (keep each rank's share, scale lr)")(
      "memory-snapshots", po::value<bool>()->default_value(true),
      "after a failure, roll back in memory when every survivor stands at the same committed step "
      "(no copy is needed: a step's update waits for its agreement); false: from the newest "
      "checkpoint")(
      "collective-timeout", po::value<double>()->default_value(300.0),
      "seconds a step may hang in communication before the watchdog declares a failure")(
      "hang-timeout", po::value<std::string>()->default_value("auto"),
      "seconds without progress after which a rank is hung and killed, so that the job shrinks "
      "around it: auto (5 x the longest step, at least 5 s, at most half --collective-timeout), "
      "a number, or off")(
      "hang-io-timeout", po::value<double>()->default_value(60.0),
      "seconds a rank may wait on data or write state before it is hung (at least --hang-timeout)")(
      "straggler", po::value<std::string>()->default_value("evict"),
      "slow ranks and links (docs/resilience.md, \"Slow ranks\"): off; detect (report them: "
      "rank_slow, rank_recovered; a probe of pairs of nodes when the exchange grows while no "
      "rank's own work does: link_probe, link_slow); rebalance (also give a slow rank fewer "
      "samples, in proportion to its speed, the global batch and every sample's once per "
      "epoch unchanged); or evict (the default: rebalance, and under hardy run with a spare "
      "node, once the time a slow rank or link cost reaches what a relaunch costs, leave its "
      "node out: node_evicted, a final checkpoint, and a relaunch on the spare). With fault "
      "domains the same inside each domain, and between them: a domain slower than the others "
      "(its slowest rank's own work per sample) is named (domain_slow) and, from rebalance on, "
      "given a smaller slice of the batch (domains_rebalanced)")(
      "straggler-slowdown", po::value<double>()->default_value(0.15),
      "how much slower than its peers' median a rank's own work per sample (data wait, forward, "
      "backward) must be to count: 0.15 is 15%")(
      "straggler-window", po::value<long>()->default_value(5),
      "steps in each rank's median own time, at least ...")(
      "straggler-window-s", po::value<double>()->default_value(1.0),
      "... and at least this many seconds of steps (at most 256 steps)")(
      "straggler-confirm", po::value<long>()->default_value(10),
      "steps a slowdown, or a recovery, must last before it is reported and acted on, at least "
      "...")("straggler-confirm-s", po::value<double>()->default_value(3.0),
             "... and at least this many seconds of steps (at a few milliseconds a step, one time "
             "slice of the scheduler doubles a step)")(
      "straggler-evict-cost", po::value<std::string>()->default_value("auto"),
      "seconds a relaunch without a slow node costs, against which --straggler evict weighs the "
      "time lost to it: auto (twice this launch's time from its start to its first committed "
      "step) or a number")(
      "regrow", po::value<std::string>()->default_value("auto"),
      "under hardy run, a job that shrank inside (a rank died, the others went on) stops at a "
      "committed step and is relaunched at its full world once the time it lost running shrunk "
      "reaches what a relaunch costs, or sooner when its measured loss over the steps left "
      "comes to twice that: auto (twice this launch's time from its start to its first "
      "committed step), a number of seconds, or off (it stays shrunk until it fails whole)")(
      "spare-nodes-left", po::value<int>()->default_value(0),
      "set by hardy run: the spare nodes it has left to relaunch on (--straggler evict leaves a "
      "slow node out only when one is there)")(
      "straggler-warmup", po::value<long>()->default_value(20),
      "steps after the start or a shrink that are not watched (the ranks warm up at their own "
      "pace)")(
      "inject-failure", po::value<std::vector<std::string>>()->composing(),
      "testing: kill ranks with SIGKILL, e.g. rank=3@step=40 or node=1@step=40:allreduce (phases "
      "forward, allreduce, checkpoint-write, snapshot-write, log-write (after the step's "
      "snapshot, before its log lines), recovery), or hang them: "
      "rank=3@step=40:stop (SIGSTOP), :spin (compute forever), :stall (block in the snapshot "
      "write), or slow them: rank=3@step=40:slow=3 (its forward and backward take 3x as long from "
      "step 40 on; slow=1 ends it), :noise=0.2 (each step up to 20% longer at random)");
  return resilience;
}

// Fault domains, set by `hardy run --nodes-per-domain`.
po::options_description domain_options() {
  po::options_description domains("Fault domains (set by `hardy run --nodes-per-domain`)");
  domains.add_options()("domain", po::value<int>()->default_value(-1),
                        "this process's fault domain (-1: the job is one MPI job)")(
      "domains", po::value<int>()->default_value(1), "how many fault domains the job has")(
      "domain-store", po::value<std::string>(),
      "where the domains' leaders meet: a directory on a file system every node sees, or "
      "redis://HOST:PORT")("domain-store-token", po::value<std::string>()->default_value(""),
                           "with a redis:// store: the file (mode 0600) that holds its password")(
      "domain-address", po::value<std::string>()->default_value(""),
      "address this domain's leader listens on for the others (default: its address on "
      "--domain-interface, else the host name)")(
      "domain-interface", po::value<std::string>()->default_value(""),
      "the network the domains' leaders exchange over: an interface's name (hsn0, ib0) or a "
      "subnet of it (10.100.0.0/16); the host name often resolves to the management Ethernet")(
      "domain-timeout", po::value<double>()->default_value(10.0),
      "seconds a cross-domain collective may take before its peer counts as lost")(
      "domain-join", po::value<std::string>()->default_value(""),
      "a relaunched domain's token: join the running job and heal from a live domain")(
      "domain-sync-every", po::value<int>()->default_value(1),
      "with fault domains: they meet every N-th step (average their state, commit it together) "
      "and train alone in between; a lost domain costs the survivors up to N-1 steps "
      "(docs/resilience.md)")(
      "domain-exchange", po::value<std::string>()->default_value("leader"),
      "with fault domains, how a step is summed across them: leader (each domain's rank 0 sends "
      "the whole sum) or sharded (rank i of every domain sums the i-th part: every rank carries "
      "1/R of the bytes; equal domains, and a domain that loses a rank is relaunched)");
  return domains;
}

// The data: sources, windows, staging and the input pipeline.
po::options_description data_options() {
  po::options_description data("Data");
  data.add_options()(
      "synthetic", po::value<bool>()->implicit_value(true)->zero_tokens(),
      "generate climate-like samples on the fly (the default when no --dataset is given)")(
      "dataset", po::value<std::string>(),
      "dataset directory: HDF5 files written by `hardy data generate`, or the DeepCAM or "
      "ClimateNet layout (docs/data.md)")("samples", po::value<long>()->default_value(1024),
                                          "synthetic training-set size")(
      "height", po::value<int>()->default_value(64), "synthetic sample height (divisible by 8)")(
      "width", po::value<int>()->default_value(64), "synthetic sample width (divisible by 8)")(
      "class-weights", po::value<std::string>(),
      "[recipe] loss weight per class, e.g. 1,4,4; auto (the inverse square root of each "
      "class's frequency); or frequency^P (its frequency to the power P, e.g. frequency^-0.125)")(
      "eval-samples", po::value<long>()->default_value(64),
      "held-out samples scored for mean IoU at the end (0: skip); of validation/ for a "
      "DeepCAM-layout dataset, of test/ for ClimateNet's (validation/ when it has one)")(
      "labels", po::value<int>()->default_value(0),
      "DeepCAM layout: label set 0 (labels_0) or 1 (labels_1, relaxed thresholds)")(
      "channels", po::value<std::string>()->default_value("all"),
      "DeepCAM or ClimateNet layout: input channels by name or index, e.g. TMQ,U850,V850,PSL "
      "(all: the 16)")(
      "crop", po::value<std::string>()->default_value("none"),
      "DeepCAM or ClimateNet layout: train on an H,W window of each sample, e.g. 384,576 (its "
      "position is fixed per sample, so a resumed job sees the same data)")(
      "downsample", po::value<int>()->default_value(1),
      "DeepCAM or ClimateNet layout: average KxK blocks of the fields (labels: the block's "
      "majority class)")(
      "normalization", po::value<std::string>()->default_value("auto"),
      "ClimateNet layout: per-variable mean and std, a JSON file with \"fields\": {\"TMQ\": "
      "{\"mean\": M, \"std\": S}, ...} such as ClimateNet's config.json (auto: "
      "ROOT/hardy_climatenet_stats.json, computed over train/ when missing)")(
      "bad-samples", po::value<std::string>()->default_value("fail"),
      "a sample that cannot be read or holds NaNs: fail (end the job naming the file) or skip "
      "(its pixels count for nothing; logged as sample_skipped)")(
      "stage-to", po::value<std::string>()->default_value(""),
      "node-local directory (NVMe, /tmp, /dev/shm): each node copies its share of the dataset's "
      "files there before training and reads them from there (DeepCAM or ClimateNet layout, or "
      "packed)")("stage-threads", po::value<int>()->default_value(4),
                 "parallel copies per node when staging")(
      "prefetch-batches", po::value<long>()->default_value(2),
      "batches loaded ahead on background threads, overlapped with compute (0: load in the "
      "step)")("loader-threads", po::value<std::string>()->default_value("auto"),
               "threads loading those batches (auto: 1 beside the CPU backend's kernels; with "
               "--backend cuda, half the rank's cores, at most 8)")(
      "overlap-input", po::value<std::string>()->default_value("auto"),
      "take the next step's batch from the loaders and copy it to the backend while the step "
      "computes: on, off or auto (on with --backend cuda, whose copies run beside its kernels; "
      "off on the CPU backend, whose kernels take the cores)")(
      "sample-cache-mib", po::value<double>()->default_value(1024),
      "MiB of training samples each rank keeps in memory after their first load, so that later "
      "epochs copy them instead of generating or reading them again (0: none; files read as "
      "stored, hardy's own HDF5 layout, keep none: the page cache holds them)");
  return data;
}

// The network.
po::options_description model_options() {
  po::options_description model("Model");
  model.add_options()("model", po::value<std::string>()->default_value("compact"),
                      "the network: compact (a compact DeepLabv3+, the default), deepcam (MLPerf "
                      "HPC DeepCAM's DeepLabv3+ on Xception, 56M parameters), tiramisu (the "
                      "2018 Gordon Bell run's FC-DenseNet, 7.5M) or cosmoflow (MLPerf HPC "
                      "CosmoFlow's 3-D network regressing 4 cosmological parameters, 8.9M at "
                      "128^3)")(
      "volume", po::value<int>()->default_value(128),
      "cosmoflow: edge of the input cube, a multiple of 32 (the published data's 128; smaller "
      "for tests)")(
      "dense-layers", po::value<std::string>()->default_value("2,2,2,4,5"),
      "tiramisu: layers per dense block down the encoder, the last one the bottleneck (the "
      "decoder mirrors them)")("growth", po::value<int>()->default_value(32),
                               "tiramisu: feature maps each dense layer adds")(
      "first-channels", po::value<int>()->default_value(64),
      "tiramisu: channels of the first convolution")(
      "dense-kernel", po::value<int>()->default_value(5),
      "tiramisu: kernel size of the dense layers' convolutions")(
      "dropout", po::value<float>()->default_value(0.2f),
      "tiramisu: dropout rate after every layer and on the logits")(
      "model-width", po::value<int>()->default_value(16),
      "channels of the first encoder stage (later stages double it)")(
      "model-depth", po::value<int>()->default_value(1),
      "3x3 convolution blocks per encoder stage")("aspp-channels",
                                                  po::value<int>()->default_value(32),
                                                  "channels of each pyramid-pooling branch")(
      "aspp-rates", po::value<std::string>()->default_value("2,4,6"),
      "dilation rates of the pyramid's 3x3 branches")(
      "low-level-channels", po::value<int>()->default_value(16),
      "decoder projection of the stride-4 features")(
      "decoder-channels", po::value<int>()->default_value(32), "decoder width")(
      "norm", po::value<std::string>()->default_value("group"),
      "normalization: group (per sample) or batch (synchronised across ranks)")(
      "groups", po::value<int>()->default_value(8), "groups of group normalization");
  return model;
}

// The optimizer and the learning-rate schedule. The options without a default here take the
// network's training recipe (training_recipes.cpp) where the user gives none.
po::options_description optimizer_options() {
  po::options_description optim(
      "Optimizer (default: the --model's training recipe, listed below, for the options marked "
      "[recipe])");
  optim.add_options()("optimizer", po::value<std::string>(), "[recipe] sgd, lars, adam or lamb")(
      "lr", po::value<float>(),
      "[recipe] peak learning rate at --lr-reference-batch (a --lr given without --lr-scaling is "
      "the job's own peak rate)")(
      "lr-reference-batch", po::value<long>(),
      "[recipe] the global batch --lr is meant for (0: the job's --global-batch)")(
      "lr-scaling", po::value<std::string>(),
      "[recipe] how --lr follows the job's --global-batch from --lr-reference-batch: none, "
      "linear or sqrt")("momentum", po::value<float>(), "[recipe] SGD/LARS momentum")(
      "nesterov", po::value<bool>()->default_value(false), "Nesterov momentum for SGD/LARS")(
      "weight-decay", po::value<float>(),
      "[recipe] weight decay (not applied to biases and normalization parameters): L2 added to "
      "the gradient for sgd, lars and adam, decoupled for lamb")(
      "beta1", po::value<float>()->default_value(0.9f), "Adam/LAMB first-moment decay")(
      "beta2", po::value<float>()->default_value(0.999f), "Adam/LAMB second-moment decay")(
      "eps", po::value<float>(), "[recipe] Adam/LAMB denominator guard")(
      "lamb-max-grad-norm", po::value<float>()->default_value(1.0f),
      "LAMB: scale all gradients together down to this norm when larger (apex FusedLAMB's "
      "max_grad_norm; 0: never)")("lars-eta", po::value<float>()->default_value(0.001f),
                                  "LARS trust coefficient")(
      "larc-clip", po::value<bool>()->default_value(true),
      "LARC: clip the layer-wise rate at the global rate")(
      "warmup-steps", po::value<long>(), "[recipe] linear learning-rate warm-up steps")(
      "warmup-fraction", po::value<float>(),
      "[recipe] warm-up as a fraction of the job's steps instead (0: --warmup-steps)")(
      "lr-decay", po::value<std::string>(),
      "[recipe] learning-rate decay after warm-up: none, cosine, poly, step or multistep")(
      "final-lr-fraction", po::value<float>(),
      "[recipe] cosine/poly floor as a fraction of the peak rate")(
      "lr-milestones", po::value<std::string>(),
      "[recipe] multistep: where the rate changes, e.g. 0.25,0.5 (fractions of the job's steps) "
      "or 1200 (steps); none")(
      "lr-milestone-factors", po::value<std::string>(),
      "[recipe] multistep: the rate from each milestone on, as a factor of the peak, e.g. "
      "0.25,0.125; none")(
      "divergence-factor", po::value<double>()->default_value(2.0),
      "report the job as diverging (event training_diverging, a line on stderr; nothing else) "
      "when the loss stays above this many times its early level, the first step's loss (0: "
      "never)")("divergence-window", po::value<long>()->default_value(20),
                "... for this many consecutive steps");
  return optim;
}

}  // namespace

// One table of every training option, by group: name, default, help. Types follow the defaults.
po::options_description train_options() {
  po::options_description all("hardy train options");
  all.add(job_options())
      .add(parallelism_options())
      .add(checkpoint_options())
      .add(resilience_options())
      .add(domain_options())
      .add(data_options())
      .add(model_options())
      .add(optimizer_options());
  return all;
}

}  // namespace hardy::jobs
