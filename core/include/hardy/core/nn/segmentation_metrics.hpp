#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace hardy::core {

// Confusion matrix over pixels; intersection-over-union per class and its mean.
class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int classes);
  void add(std::span<const std::int32_t> truth, std::span<const std::int32_t> predicted);
  // IoU = TP / (TP + FP + FN); a class that appears in neither truth nor prediction has no IoU
  // (NaN) and is left out of the mean.
  std::vector<double> iou() const;
  double mean_iou() const;
  double pixel_accuracy() const;
  void merge(const ConfusionMatrix& other);
  // The same pixels scored against a model that predicts `predicted` everywhere: the baseline
  // a trained model must beat (all background, for the rare-event classes of climate data).
  ConfusionMatrix with_constant_prediction(int predicted) const;
  std::span<const std::uint64_t> counts() const { return counts_; }  // row = truth, col = predicted
  std::span<std::uint64_t> counts() { return counts_; }
  int classes() const { return classes_; }

 private:
  int classes_;
  std::vector<std::uint64_t> counts_;
};

}  // namespace hardy::core
