#include "state_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/support/digest.hpp"

namespace hardy::checkpoint::detail {

namespace {

// Where each scalar of a TrainingState lives; docs/checkpoint-format.md lists the same paths.
namespace path {
constexpr const char* step = "/train/step";
constexpr const char* epoch = "/train/epoch";
constexpr const char* loss = "/train/loss";
constexpr const char* sampler_seed = "/train/sampler/seed";
constexpr const char* sampler_epoch = "/train/sampler/epoch";
constexpr const char* sampler_cursor = "/train/sampler/cursor";
constexpr const char* rng_seed = "/train/rng/seed";
constexpr const char* lr_base = "/train/lr/base_lr";
constexpr const char* lr_warmup = "/train/lr/warmup_steps";
constexpr const char* lr_total = "/train/lr/total_steps";
constexpr const char* lr_decay = "/train/lr/decay";
constexpr const char* lr_final_fraction = "/train/lr/final_fraction";
constexpr const char* lr_poly_power = "/train/lr/poly_power";
constexpr const char* lr_step_every = "/train/lr/step_every";
constexpr const char* lr_step_gamma = "/train/lr/step_gamma";
constexpr const char* loss_scale = "/train/loss_scale/scale";
constexpr const char* loss_scale_good_steps = "/train/loss_scale/good_steps";
constexpr const char* optimizer_kind = "/train/optimizer/kind";
constexpr const char* optimizer_steps = "/train/optimizer/steps";
constexpr const char* config = "/job/config";
constexpr const char* world_size = "/job/world_size";
constexpr const char* hardy_version = "/job/hardy_version";
constexpr const char* hosts = "/job/hosts";
constexpr const char* unix_time = "/job/unix_time";
}  // namespace path

template <class T>
constexpr FieldType field_type() {
  if constexpr (std::is_same_v<T, float>) return FieldType::f32;
  if constexpr (std::is_same_v<T, double>) return FieldType::f64;
  if constexpr (std::is_same_v<T, std::int64_t>) return FieldType::i64;
  if constexpr (std::is_same_v<T, std::uint64_t>) return FieldType::u64;
}

template <class T>
Field number(const char* field_path, T value) {
  Field field(field_path, field_type<T>());
  field.storage.resize(sizeof(T));
  std::memcpy(field.storage.data(), &value, sizeof(T));
  return field;
}

Field integer(const char* field_path, long value) {
  return number<std::int64_t>(field_path, value);
}

// Fixed-length strings: every element padded with NULs to the longest (at least one byte, as
// HDF5 requires), so the stored bytes, and with them the checksum, are well defined.
Field strings(const char* field_path, const std::vector<std::string>& values, bool scalar) {
  std::size_t size = 1;
  for (const std::string& value : values) size = std::max(size, value.size());
  Field field(field_path, FieldType::str, {}, size);
  if (!scalar) field.shape = {values.size()};
  field.storage.resize(size * values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    std::memcpy(field.storage.data() + i * size, values[i].data(), values[i].size());
  return field;
}

Field text(const char* field_path, const std::string& value) {
  return strings(field_path, {value}, true);
}

// ---- reading ----

using FieldMap = std::map<std::string, Field, std::less<>>;

const Field& find(const FieldMap& fields, const char* field_path, FieldType type, bool scalar,
                  std::string_view source) {
  const auto found = fields.find(field_path);
  if (found == fields.end())
    throw CorruptCheckpoint(fmt::format("{}: has no dataset {}", source, field_path));
  const Field& field = found->second;
  if (field.type != type || (scalar && !field.shape.empty()) ||
      (!scalar && field.shape.size() != 1))
    throw CorruptCheckpoint(
        fmt::format("{}: dataset {} is {} {}, expected {} {}", source, field_path,
                    field.shape.empty() ? "a scalar" : "an array of", type_name(field.type),
                    scalar ? "a scalar" : "a list of", type_name(type)));
  if (field.bytes().size() != field.element_count() * field.element_size())
    throw CorruptCheckpoint(fmt::format("{}: dataset {} holds {} bytes instead of {}", source,
                                        field_path, field.bytes().size(),
                                        field.element_count() * field.element_size()));
  return field;
}

template <class T>
T read_number(const FieldMap& fields, const char* field_path, std::string_view source) {
  const Field& field = find(fields, field_path, field_type<T>(), true, source);
  T value{};
  std::memcpy(&value, field.bytes().data(), sizeof(T));
  return value;
}

std::vector<std::string> read_strings(const FieldMap& fields, const char* field_path, bool scalar,
                                      std::string_view source) {
  const Field& field = find(fields, field_path, FieldType::str, scalar, source);
  const auto bytes = field.bytes();
  std::vector<std::string> values;
  for (std::size_t offset = 0; offset < bytes.size(); offset += field.string_size) {
    std::string value(reinterpret_cast<const char*>(bytes.data()) + offset, field.string_size);
    value.resize(std::strlen(value.c_str()));  // drop the padding
    values.push_back(std::move(value));
  }
  return values;
}

}  // namespace

std::string_view type_name(FieldType type) {
  switch (type) {
    case FieldType::f32:
      return "f32";
    case FieldType::f64:
      return "f64";
    case FieldType::i64:
      return "i64";
    case FieldType::u64:
      return "u64";
    case FieldType::str:
      return "str";
  }
  return "?";
}

std::optional<FieldType> parse_type_name(std::string_view name) {
  for (FieldType type :
       {FieldType::f32, FieldType::f64, FieldType::i64, FieldType::u64, FieldType::str})
    if (type_name(type) == name) return type;
  return std::nullopt;
}

std::uint64_t Field::element_count() const {
  return std::accumulate(shape.begin(), shape.end(), std::uint64_t{1}, std::multiplies<>());
}

std::size_t Field::element_size() const {
  switch (type) {
    case FieldType::f32:
      return 4;
    case FieldType::str:
      return string_size;
    default:
      return 8;
  }
}

Field tensor_field(std::string_view group, const NamedTensor& tensor) {
  Field field(std::string(group) + tensor.name, FieldType::f32,
              std::vector<std::uint64_t>(tensor.dims.begin(), tensor.dims.end()));
  field.borrowed = std::as_bytes(std::span(tensor.values));
  field.borrows = true;
  field.checksum = core::xxhash64(field.bytes());
  return field;
}

std::vector<Field> fields_of(const TrainingState& s) {
  std::vector<Field> fields;
  for (const NamedTensor& t : s.model) fields.push_back(tensor_field(kModelGroup, t));
  for (const NamedTensor& t : s.optimizer) fields.push_back(tensor_field(kOptimizerGroup, t));
  const core::LrSchedule& lr = s.lr_schedule;
  fields.push_back(integer(path::step, s.step));
  fields.push_back(integer(path::epoch, s.epoch));
  fields.push_back(number<double>(path::loss, s.loss));
  fields.push_back(number<std::uint64_t>(path::sampler_seed, s.sampler.seed));
  fields.push_back(number<std::int64_t>(path::sampler_epoch, s.sampler.epoch));
  fields.push_back(number<std::int64_t>(path::sampler_cursor, s.sampler.cursor));
  fields.push_back(number<std::uint64_t>(path::rng_seed, s.rng_seed));
  fields.push_back(number<float>(path::lr_base, lr.base_lr));
  fields.push_back(integer(path::lr_warmup, lr.warmup_steps));
  fields.push_back(integer(path::lr_total, lr.total_steps));
  fields.push_back(text(path::lr_decay, core::to_string(lr.decay)));
  fields.push_back(number<float>(path::lr_final_fraction, lr.final_fraction));
  fields.push_back(number<float>(path::lr_poly_power, lr.poly_power));
  fields.push_back(integer(path::lr_step_every, lr.step_every));
  fields.push_back(number<float>(path::lr_step_gamma, lr.step_gamma));
  fields.push_back(number<float>(path::loss_scale, s.loss_scale));
  fields.push_back(integer(path::loss_scale_good_steps, s.loss_scale_good_steps));
  fields.push_back(text(path::optimizer_kind, s.optimizer_kind));
  fields.push_back(integer(path::optimizer_steps, s.optimizer_steps));
  fields.push_back(text(path::config, s.config_ini));
  fields.push_back(integer(path::world_size, s.world_size));
  fields.push_back(text(path::hardy_version, s.hardy_version));
  fields.push_back(strings(path::hosts, s.hosts, false));
  fields.push_back(number<double>(path::unix_time, s.unix_time));
  for (Field& field : fields)
    if (!field.borrows) field.checksum = core::xxhash64(field.bytes());
  return fields;
}

bool is_tensor_path(std::string_view field_path) {
  return field_path.starts_with(kModelGroup) || field_path.starts_with(kOptimizerGroup);
}

void add_tensor(TrainingState& state, std::string_view field_path, NamedTensor tensor) {
  if (field_path.starts_with(kModelGroup)) {
    tensor.name = field_path.substr(kModelGroup.size());
    state.model.push_back(std::move(tensor));
  } else {
    tensor.name = field_path.substr(kOptimizerGroup.size());
    state.optimizer.push_back(std::move(tensor));
  }
}

void read_scalars(const FieldMap& f, TrainingState& s, std::string_view source) {
  using I = std::int64_t;
  s.step = read_number<I>(f, path::step, source);
  s.epoch = read_number<I>(f, path::epoch, source);
  s.loss = read_number<double>(f, path::loss, source);
  s.sampler.seed = read_number<std::uint64_t>(f, path::sampler_seed, source);
  s.sampler.epoch = read_number<I>(f, path::sampler_epoch, source);
  s.sampler.cursor = read_number<I>(f, path::sampler_cursor, source);
  s.rng_seed = read_number<std::uint64_t>(f, path::rng_seed, source);
  core::LrSchedule& lr = s.lr_schedule;
  lr.base_lr = read_number<float>(f, path::lr_base, source);
  lr.warmup_steps = read_number<I>(f, path::lr_warmup, source);
  lr.total_steps = read_number<I>(f, path::lr_total, source);
  const std::string decay = read_strings(f, path::lr_decay, true, source).front();
  try {
    lr.decay = core::parse_lr_decay(decay);
  } catch (const InvalidArgument& e) {
    throw CorruptCheckpoint(fmt::format("{}: {}: {}", source, path::lr_decay, e.what()));
  }
  lr.final_fraction = read_number<float>(f, path::lr_final_fraction, source);
  lr.poly_power = read_number<float>(f, path::lr_poly_power, source);
  lr.step_every = read_number<I>(f, path::lr_step_every, source);
  lr.step_gamma = read_number<float>(f, path::lr_step_gamma, source);
  s.loss_scale = read_number<float>(f, path::loss_scale, source);
  s.loss_scale_good_steps = read_number<I>(f, path::loss_scale_good_steps, source);
  s.optimizer_kind = read_strings(f, path::optimizer_kind, true, source).front();
  s.optimizer_steps = read_number<I>(f, path::optimizer_steps, source);
  s.config_ini = read_strings(f, path::config, true, source).front();
  s.world_size = static_cast<int>(read_number<I>(f, path::world_size, source));
  s.hardy_version = read_strings(f, path::hardy_version, true, source).front();
  s.hosts = read_strings(f, path::hosts, false, source);
  s.unix_time = read_number<double>(f, path::unix_time, source);
}

}  // namespace hardy::checkpoint::detail
