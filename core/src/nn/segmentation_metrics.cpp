#include "hardy/core/nn/segmentation_metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "hardy/core/compute/labels.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

ConfusionMatrix::ConfusionMatrix(int classes)
    : classes_(classes), counts_(static_cast<std::size_t>(classes * classes), 0) {}

void ConfusionMatrix::add(std::span<const std::int32_t> truth,
                          std::span<const std::int32_t> predicted) {
  if (truth.size() != predicted.size())
    throw InvalidArgument(
        fmt::format("{} labels against {} predictions", truth.size(), predicted.size()));
  for (std::size_t i = 0; i < truth.size(); ++i) {
    const auto t = truth[i], p = predicted[i];
    if (t == kIgnoreLabel) continue;  // a skipped sample's pixel
    if (t < 0 || t >= classes_ || p < 0 || p >= classes_)
      throw InvalidArgument(
          fmt::format("label {} or prediction {} outside [0, {})", t, p, classes_));
    ++counts_[static_cast<std::size_t>(t * classes_ + p)];
  }
}

ConfusionMatrix ConfusionMatrix::with_constant_prediction(int predicted) const {
  if (predicted < 0 || predicted >= classes_)
    throw InvalidArgument(fmt::format("class {} outside [0, {})", predicted, classes_));
  ConfusionMatrix baseline(classes_);
  for (int t = 0; t < classes_; ++t)
    for (int p = 0; p < classes_; ++p)
      baseline.counts_[static_cast<std::size_t>(t * classes_ + predicted)] +=
          counts_[static_cast<std::size_t>(t * classes_ + p)];
  return baseline;
}

std::vector<double> ConfusionMatrix::iou() const {
  std::vector<double> result(static_cast<std::size_t>(classes_));
  for (int c = 0; c < classes_; ++c) {
    std::uint64_t tp = counts_[static_cast<std::size_t>(c * classes_ + c)], fp = 0, fn = 0;
    for (int o = 0; o < classes_; ++o) {
      if (o == c) continue;
      fn += counts_[static_cast<std::size_t>(c * classes_ + o)];
      fp += counts_[static_cast<std::size_t>(o * classes_ + c)];
    }
    const auto uni = tp + fp + fn;
    result[static_cast<std::size_t>(c)] = uni == 0
                                              ? std::numeric_limits<double>::quiet_NaN()
                                              : static_cast<double>(tp) / static_cast<double>(uni);
  }
  return result;
}

double ConfusionMatrix::mean_iou() const {
  double sum = 0;
  int present = 0;
  for (double v : iou())
    if (!std::isnan(v)) {
      sum += v;
      ++present;
    }
  return present ? sum / present : 0.0;
}

double ConfusionMatrix::pixel_accuracy() const {
  std::uint64_t correct = 0, total = 0;
  for (int t = 0; t < classes_; ++t)
    for (int p = 0; p < classes_; ++p) {
      const auto n = counts_[static_cast<std::size_t>(t * classes_ + p)];
      total += n;
      if (t == p) correct += n;
    }
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

void ConfusionMatrix::merge(const ConfusionMatrix& other) {
  if (other.classes_ != classes_)
    throw InvalidArgument("confusion matrices of different class counts");
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
}

}  // namespace hardy::core
