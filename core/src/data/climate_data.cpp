#include "hardy/core/data/climate_data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "data/portable_math.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::core {
namespace {

using namespace portable;

double square(double x) { return x * x; }

float gaussian(double distance, double scale) {
  const double z = distance / scale;
  return static_cast<float>(exp_portable(-z * z));
}

// ---- the grid ----

struct Grid {
  int height, width;
  double scale;  // min(height, width): feature sizes are fractions of it
  std::size_t pixels() const { return static_cast<std::size_t>(height) * width; }
  // Latitude-like coordinate in (-1, 1), north positive, of row i.
  double latitude(int row) const { return 1.0 - 2.0 * (row + 0.5) / height; }
  double row_of_latitude(double latitude) const { return (1.0 - latitude) * 0.5 * height; }
  // Shortest signed longitude distance in pixels (the grid wraps around in longitude).
  double wrap(double dx) const { return dx - width * std::round(dx / width); }
};

// A smooth random field: a few planetary waves, periodic in longitude, red spectrum, normalized
// to unit variance. Also gives the gradient (per `scale` pixels, northward y) for winds.
struct Wave {
  double amplitude, zonal_number, meridional_number, phase;
};

std::vector<Wave> random_waves(Random& random, int count, int max_zonal, double max_meridional) {
  std::vector<Wave> waves(static_cast<std::size_t>(count));
  double power = 0;
  for (Wave& wave : waves) {
    wave.zonal_number = random.integer(1, max_zonal);
    wave.meridional_number = random.uniform(-max_meridional, max_meridional);
    wave.phase = random.uniform(0, 2 * kPi);
    wave.amplitude = random.uniform(0.5, 1.0) / wave.zonal_number;
    power += wave.amplitude * wave.amplitude / 2;
  }
  for (Wave& wave : waves) wave.amplitude /= std::sqrt(power);
  return waves;
}

// sin(A + B) = sin A cos B + cos A sin B: sines only per row and per column, not per pixel.
void evaluate_waves(const std::vector<Wave>& waves, const Grid& grid, float* value,
                    float* d_east = nullptr, float* d_north = nullptr) {
  const int H = grid.height, W = grid.width;
  std::fill(value, value + grid.pixels(), 0.0f);
  if (d_east != nullptr) std::fill(d_east, d_east + grid.pixels(), 0.0f);
  if (d_north != nullptr) std::fill(d_north, d_north + grid.pixels(), 0.0f);
  std::vector<double> sin_col(W), cos_col(W), sin_row(H), cos_row(H);
  for (const Wave& wave : waves) {
    for (int j = 0; j < W; ++j)
      sincos_portable(2 * kPi * wave.zonal_number * (j + 0.5) / W, sin_col[j], cos_col[j]);
    for (int i = 0; i < H; ++i)
      sincos_portable(2 * kPi * wave.meridional_number * (i + 0.5) / H + wave.phase, sin_row[i],
                      cos_row[i]);
    const double east_factor = wave.amplitude * 2 * kPi * wave.zonal_number * grid.scale / W;
    const double north_factor = -wave.amplitude * 2 * kPi * wave.meridional_number * grid.scale / H;
    for (int i = 0; i < H; ++i) {
      for (int j = 0; j < W; ++j) {
        const std::size_t p = static_cast<std::size_t>(i) * W + j;
        value[p] += static_cast<float>(wave.amplitude *
                                       (sin_col[j] * cos_row[i] + cos_col[j] * sin_row[i]));
        const double cosine = cos_col[j] * cos_row[i] - sin_col[j] * sin_row[i];
        if (d_east != nullptr) d_east[p] += static_cast<float>(east_factor * cosine);
        if (d_north != nullptr) d_north[p] += static_cast<float>(north_factor * cosine);
      }
    }
  }
}

// Everything a sample's channels are composed from, per pixel.
struct Latents {
  explicit Latents(std::size_t pixels)
      : pressure(pixels),
        pressure_east(pixels),
        pressure_north(pixels),
        temperature(pixels),
        moisture(pixels),
        feature_pressure(pixels),
        feature_u(pixels),
        feature_v(pixels),
        feature_moisture(pixels),
        feature_rain(pixels),
        warm_core(pixels) {}
  std::vector<float> pressure, pressure_east, pressure_north, temperature, moisture;
  std::vector<float> feature_pressure, feature_u, feature_v, feature_moisture, feature_rain,
      warm_core;
};

// ---- features ----

struct Vortex {
  double row, col, radius, intensity, spiral_phase, hemisphere;
  bool cyclone;  // false: a weak, shallow low without warm core, not labelled
};

Vortex random_vortex(Random& random, const Grid& grid, bool cyclone) {
  Vortex vortex{};
  vortex.cyclone = cyclone;
  vortex.hemisphere = random.sign();
  const double latitude = cyclone ? random.uniform(0.12, 0.55) : random.uniform(0.05, 0.8);
  vortex.row = grid.row_of_latitude(vortex.hemisphere * latitude);
  vortex.col = random.uniform(0, grid.width);
  vortex.radius = std::max(1.5, grid.scale * random.uniform(0.075, 0.115));
  vortex.intensity = cyclone ? random.uniform(0.8, 1.3) : random.uniform(0.25, 0.45);
  vortex.spiral_phase = random.uniform(0, 2 * kPi);
  return vortex;
}

void render_vortex(const Vortex& vortex, const Grid& grid, Latents& latents,
                   std::span<std::int32_t> labels) {
  const double R = vortex.radius, I = vortex.intensity;
  const double max_wind_radius = 0.45 * R;
  const double reach = 3.2 * R;
  const int row_begin = std::max(0, static_cast<int>(std::floor(vortex.row - reach)));
  const int row_end = std::min(grid.height, static_cast<int>(std::ceil(vortex.row + reach)) + 1);
  const int col_begin = static_cast<int>(std::floor(vortex.col - reach));
  const int col_count = std::min(grid.width, static_cast<int>(2 * reach) + 2);
  // Weak lows are shallow: no warm core, little moisture and rain.
  const double moisture_scale = vortex.cyclone ? 1.5 : 0.6;
  const double rain_scale = vortex.cyclone ? 1.0 : 0.3;
  for (int i = row_begin; i < row_end; ++i) {
    for (int c = col_begin; c < col_begin + col_count; ++c) {
      const int j = ((c % grid.width) + grid.width) % grid.width;
      const std::size_t p = static_cast<std::size_t>(i) * grid.width + j;
      const double dx = grid.wrap(j + 0.5 - vortex.col);
      const double dy = vortex.row - (i + 0.5);  // northward
      const double r2 = dx * dx + dy * dy;
      const double r = std::sqrt(r2);
      if (r > reach) continue;
      latents.feature_pressure[p] -= static_cast<float>(2.4 * I) * gaussian(r, 0.8 * R);
      latents.feature_moisture[p] += static_cast<float>(moisture_scale * I) * gaussian(r, 1.1 * R);
      if (vortex.cyclone)
        latents.warm_core[p] += static_cast<float>(1.4 * I) * gaussian(r, 0.7 * R);
      double rain = 2.5 * gaussian(r, 0.55 * R);
      if (r > 0) {
        // Cyclonic rotation (counter-clockwise in the north) with some inflow, so the winds
        // spiral in; rain bands spiral out: cos(2 theta - psi) without an atan2.
        const double rm = r / max_wind_radius;
        const double speed = 2.6 * I * rm * exp_portable(0.5 * (1 - rm * rm));
        const double h = vortex.hemisphere;
        latents.feature_u[p] += static_cast<float>(speed * (-h * dy - 0.25 * dx) / r);
        latents.feature_v[p] += static_cast<float>(speed * (h * dx - 0.25 * dy) / r);
        double sin_psi, cos_psi;
        sincos_portable(h * (4.0 * r / R + vortex.spiral_phase), sin_psi, cos_psi);
        const double band = ((dx * dx - dy * dy) * cos_psi + 2 * dx * dy * sin_psi) / r2;
        rain += 1.2 * gaussian(r, 1.4 * R) * std::max(0.0, band);
      }
      latents.feature_rain[p] += static_cast<float>(rain_scale * I * rain);
      if (vortex.cyclone && r <= R) labels[p] = kTropicalCyclone;
    }
  }
}

struct River {
  double row, col, direction_row, direction_col, length, bend, wiggle, wiggle_cycles, wiggle_phase,
      half_width, intensity;
};

River random_river(Random& random, const Grid& grid) {
  River river{};
  const double hemisphere = random.sign();
  river.row = grid.row_of_latitude(hemisphere * random.uniform(0.05, 0.35));
  river.col = random.uniform(0, grid.width);
  const double angle = random.uniform(10, 40) * kPi / 180;  // poleward from due east
  double sine, cosine;
  sincos_portable(angle, sine, cosine);
  river.direction_row = -hemisphere * sine;
  river.direction_col = cosine;
  river.length = grid.scale * random.uniform(0.8, 1.3);
  river.bend = random.uniform(-0.25, 0.25);
  river.wiggle = random.uniform(0.0, 0.06);
  river.wiggle_cycles = random.uniform(1.0, 2.0);
  river.wiggle_phase = random.uniform(0, 2 * kPi);
  river.half_width = std::max(1.0, grid.scale * random.uniform(0.04, 0.06));
  river.intensity = random.uniform(0.8, 1.3);
  return river;
}

// Strength along the filament: full in the middle, fading over the last 12% at each end.
double river_taper(double t) { return std::min(1.0, t / 0.12) * std::min(1.0, (1 - t) / 0.12); }

void render_river(const River& river, const Grid& grid, Latents& latents,
                  std::span<std::int32_t> labels) {
  // The centreline as a polyline in unwrapped pixel coordinates (rows, columns).
  constexpr int kPoints = 48;
  std::vector<double> rows(kPoints), cols(kPoints);
  for (int m = 0; m < kPoints; ++m) {
    const double t = static_cast<double>(m) / (kPoints - 1);
    double wiggle_sine, unused;
    sincos_portable(2 * kPi * river.wiggle_cycles * t + river.wiggle_phase, wiggle_sine, unused);
    const double offset =
        river.length * (river.bend * 4 * t * (1 - t) + river.wiggle * wiggle_sine);
    rows[m] = river.row + river.length * t * river.direction_row + offset * river.direction_col;
    cols[m] = river.col + river.length * t * river.direction_col - offset * river.direction_row;
  }
  const double margin = 3 * river.half_width + 1;
  const auto [row_min, row_max] = std::minmax_element(rows.begin(), rows.end());
  const int row_begin = std::max(0, static_cast<int>(std::floor(*row_min - margin)));
  const int row_end = std::min(grid.height, static_cast<int>(std::ceil(*row_max + margin)) + 1);
  if (row_begin >= row_end) return;

  // Distance to the centreline, the position t along it and its direction there; the minimum
  // over the columns' periodic images.
  const std::size_t box = static_cast<std::size_t>(row_end - row_begin) * grid.width;
  std::vector<double> distance(box, 1e30), along(box, 0), east(box, 0), north(box, 0);
  // Each segment updates the pixels within `margin` of it; farther ones get no contribution.
  for (int m = 0; m + 1 < kPoints; ++m) {
    const double sy = rows[m + 1] - rows[m], sx = cols[m + 1] - cols[m];
    const double s2 = sy * sy + sx * sx, s = std::sqrt(s2);
    const int i_begin =
        std::max(row_begin, static_cast<int>(std::floor(std::min(rows[m], rows[m + 1]) - margin)));
    const int i_end =
        std::min(row_end, static_cast<int>(std::ceil(std::max(rows[m], rows[m + 1]) + margin)) + 1);
    const int c_begin = static_cast<int>(std::floor(std::min(cols[m], cols[m + 1]) - margin));
    const int c_end = static_cast<int>(std::ceil(std::max(cols[m], cols[m + 1]) + margin)) + 1;
    for (int i = i_begin; i < i_end; ++i) {
      for (int c = c_begin; c < c_end; ++c) {
        const std::size_t b = static_cast<std::size_t>(i - row_begin) * grid.width +
                              ((c % grid.width) + grid.width) % grid.width;
        const double y = i + 0.5, x = c + 0.5;
        const double u = std::clamp(((y - rows[m]) * sy + (x - cols[m]) * sx) / s2, 0.0, 1.0);
        const double d = std::sqrt(square(y - rows[m] - u * sy) + square(x - cols[m] - u * sx));
        if (d < distance[b]) {
          distance[b] = d;
          along[b] = (m + u) / (kPoints - 1);
          east[b] = sx / s;
          north[b] = -sy / s;
        }
      }
    }
  }
  const double hw = river.half_width, A = river.intensity;
  for (std::size_t b = 0; b < box; ++b) {
    const double d = distance[b];
    if (d > margin) continue;
    const std::size_t p = static_cast<std::size_t>(row_begin) * grid.width + b;
    const double taper = river_taper(along[b]);
    // A low-level jet along the filament carries the moisture (the integrated vapour transport
    // by which rivers are defined), so the label needs vapour and wind together.
    const double jet = 2.0 * A * taper * gaussian(d, 1.8 * hw);
    latents.feature_moisture[p] += static_cast<float>(1.5 * A * taper) * gaussian(d, 1.3 * hw);
    latents.feature_u[p] += static_cast<float>(jet * east[b]);
    latents.feature_v[p] += static_cast<float>(jet * north[b]);
    latents.feature_rain[p] += static_cast<float>(0.9 * A * taper) * gaussian(d, 0.9 * hw);
    if (taper > 0 && d <= hw * std::sqrt(taper) && labels[p] == kBackground)
      labels[p] = kAtmosphericRiver;
  }
}

// A round patch of moisture without a jet: looks like a river in vapour alone, is not one.
void render_plume(Random& random, const Grid& grid, Latents& latents) {
  const double row = grid.row_of_latitude(random.uniform(-0.6, 0.6));
  const double col = random.uniform(0, grid.width);
  const double radius = grid.scale * random.uniform(0.06, 0.11);
  const double amplitude = random.uniform(0.9, 1.4);
  for (int i = 0; i < grid.height; ++i) {
    const double dy = i + 0.5 - row;
    if (std::abs(dy) > 3 * radius) continue;
    for (int j = 0; j < grid.width; ++j) {
      const double dx = grid.wrap(j + 0.5 - col);
      const double r = std::sqrt(dx * dx + dy * dy);
      if (r > 3 * radius) continue;
      const std::size_t p = static_cast<std::size_t>(i) * grid.width + j;
      latents.feature_moisture[p] += static_cast<float>(amplitude) * gaussian(r, radius);
      latents.feature_rain[p] += static_cast<float>(0.4 * amplitude) * gaussian(r, 0.7 * radius);
    }
  }
}

// Mean and standard deviation of each raw channel, measured over 2048 samples at 64x64 (each of
// another seed); dividing by them makes channels roughly zero-mean with unit variance, as
// ClimateNet's published normalization statistics do for the real data.
struct ChannelStatistics {
  float mean, stddev;
};
constexpr std::array<ChannelStatistics, 16> kChannelStatistics = {{
    {0.7318f, 0.8577f},   // TMQ
    {0.4162f, 0.9117f},   // U850
    {-0.0002f, 0.7026f},  // V850
    {0.2789f, 0.6239f},   // UBOT
    {-0.0003f, 0.4857f},  // VBOT
    {0.5151f, 0.6845f},   // QREFHT
    {-0.1406f, 0.9700f},  // PS
    {0.0995f, 0.8375f},   // PSL
    {-0.2017f, 0.6772f},  // T200
    {0.4858f, 0.7972f},   // T500
    {0.2684f, 0.4087f},   // PRECT
    {0.6042f, 0.8144f},   // TS
    {0.5922f, 0.8206f},   // TREFHT
    {0.1363f, 0.7622f},   // Z1000
    {0.4858f, 0.9147f},   // Z200
    {0.4400f, 0.6408f},   // ZBOT
}};

constexpr std::uint64_t kParameterStream = 1, kNoiseStream = 2, kPlanetStream = 3;

}  // namespace

SyntheticClimate::SyntheticClimate(SampleShape shape, std::size_t samples, std::uint64_t seed)
    : shape_(shape), samples_(samples), seed_(seed) {
  if (shape.channels < 1 || shape.channels > static_cast<int>(kClimateChannelNames.size()) ||
      shape.height < 16 || shape.width < 16)
    throw InvalidArgument(fmt::format(
        "synthetic climate samples need 1 to {} channels and a grid of at least 16x16, not {}",
        kClimateChannelNames.size(), to_string(shape)));
  // The planet (its topography) belongs to the seed, not to the sample, as in a real dataset.
  const Grid grid{shape.height, shape.width,
                  static_cast<double>(std::min(shape.height, shape.width))};
  Random random(seed, 0, kPlanetStream);
  elevation_.resize(grid.pixels());
  evaluate_waves(random_waves(random, 6, 4, 2.0), grid, elevation_.data());
  // Every planet gets 30% land of the same mean height, so that the normalization below fits
  // every seed.
  std::vector<float> sorted = elevation_;
  const auto sea_level = sorted.begin() + static_cast<std::ptrdiff_t>(0.7 * sorted.size());
  std::nth_element(sorted.begin(), sea_level, sorted.end());
  double total_height = 0;
  for (float& e : elevation_) total_height += e = std::max(0.0f, e - *sea_level);
  const auto scale = static_cast<float>(0.12 * elevation_.size() / std::max(total_height, 1e-9));
  for (float& e : elevation_) e *= scale;
}

void SyntheticClimate::load(std::size_t index, std::span<float> fields_chw,
                            std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  const Grid grid{shape_.height, shape_.width,
                  static_cast<double>(std::min(shape_.height, shape_.width))};
  Random random(seed_, index, kParameterStream);
  Latents latents(grid.pixels());

  // The draws come in a fixed order and number whatever the grid, so a sample shows the same
  // weather at every resolution.
  const double itcz = random.uniform(-0.15, 0.15);  // the tropical rain belt moves with season
  const double jet_latitude = random.uniform(0.5, 0.7);
  const std::vector<Wave> pressure_waves = random_waves(random, 5, 3, 1.5);
  const std::vector<Wave> temperature_waves = random_waves(random, 4, 3, 1.2);
  const std::vector<Wave> moisture_waves = random_waves(random, 5, 4, 1.8);
  std::vector<Vortex> vortices;
  for (int k = random.integer(0, 2); k > 0; --k)
    vortices.push_back(random_vortex(random, grid, false));
  for (int k = random.integer(0, 3); k > 0; --k)
    vortices.push_back(random_vortex(random, grid, true));
  std::vector<River> rivers;
  for (int k = random.integer(0, 2); k > 0; --k) rivers.push_back(random_river(random, grid));
  const int plumes = random.integer(0, 2);

  evaluate_waves(pressure_waves, grid, latents.pressure.data(), latents.pressure_east.data(),
                 latents.pressure_north.data());
  evaluate_waves(temperature_waves, grid, latents.temperature.data());
  evaluate_waves(moisture_waves, grid, latents.moisture.data());
  std::fill(labels_hw.begin(), labels_hw.end(), kBackground);
  for (int k = 0; k < plumes; ++k) render_plume(random, grid, latents);
  for (const River& river : rivers) render_river(river, grid, latents, labels_hw);
  // Cyclones last: they overwrite river labels where they overlap.
  for (const Vortex& vortex : vortices) render_vortex(vortex, grid, latents, labels_hw);

  Random noise(seed_, index, kNoiseStream);
  const std::size_t plane = grid.pixels();
  std::array<float, 16> raw{};
  for (int i = 0; i < grid.height; ++i) {
    const double lat = grid.latitude(i);
    const double tropics = exp_portable(-square((lat - itcz) / 0.35));
    const double warmth = 1 - 1.6 * lat * lat;
    const double jet = 1.3 * exp_portable(-square((std::abs(lat) - jet_latitude) / 0.15)) -
                       0.7 * exp_portable(-square((lat - itcz) / 0.25));
    const double subtropical_high = 0.7 * exp_portable(-square((std::abs(lat) - 0.35) / 0.15));
    const double coriolis = lat / std::sqrt(lat * lat + 0.04);  // smooth sign of the latitude
    // Weather systems are strongest in mid-latitudes: the planetary waves of pressure are scaled
    // by a storm-track envelope (its northward derivative enters the geostrophic wind).
    const double track = exp_portable(-square((std::abs(lat) - 0.55) / 0.25));
    const double storminess = 0.35 + 0.65 * track;
    const double storminess_north = 0.65 * track * -2 * (std::abs(lat) - 0.55) / 0.0625 *
                                    (lat < 0 ? -1 : 1) * 2 * grid.scale / grid.height;
    for (int j = 0; j < grid.width; ++j) {
      const std::size_t p = static_cast<std::size_t>(i) * grid.width + j;
      const double elevation = elevation_[p];
      const double pressure = storminess * latents.pressure[p];
      const double pressure_north =
          storminess * latents.pressure_north[p] + storminess_north * latents.pressure[p];
      const double temperature = latents.temperature[p];
      const double moisture = latents.moisture[p];
      const double vapour = latents.feature_moisture[p], warm = latents.warm_core[p];
      // Geostrophic balance: the wind blows along the isobars.
      const double u850 = jet - 0.08 * coriolis * pressure_north + latents.feature_u[p];
      const double v850 =
          0.08 * coriolis * storminess * latents.pressure_east[p] + latents.feature_v[p];
      const double friction = 0.7 - 0.25 * std::min(1.0, elevation);
      const double psl = subtropical_high + 1.1 * pressure + latents.feature_pressure[p];
      const double ts = 1.5 * warmth + 0.3 * temperature - 0.8 * elevation;
      raw[0] = static_cast<float>(1.5 * tropics + 0.5 * moisture * (0.4 + tropics) + vapour);
      raw[1] = static_cast<float>(u850);
      raw[2] = static_cast<float>(v850);
      raw[3] = static_cast<float>(friction * u850);
      raw[4] = static_cast<float>(friction * v850);
      raw[5] = static_cast<float>(1.3 * tropics + 0.35 * moisture + 0.6 * vapour - 0.4 * elevation);
      raw[6] = static_cast<float>(psl - 2.0 * elevation);
      raw[7] = static_cast<float>(psl);
      raw[8] = static_cast<float>(-0.5 * warmth + 0.6 * temperature + warm);
      raw[9] = static_cast<float>(warmth + 0.6 * temperature + 0.6 * warm);
      raw[10] = static_cast<float>(0.3 * tropics * (1 + moisture) + latents.feature_rain[p]);
      raw[11] = static_cast<float>(ts);
      raw[12] = static_cast<float>(ts - 0.1 * elevation);
      raw[13] = static_cast<float>(0.9 * psl + 0.1 * warmth);
      raw[14] = static_cast<float>(warmth + 0.7 * temperature + 0.4 * pressure + 0.6 * warm);
      raw[15] = static_cast<float>(2.5 * elevation + 0.3 * warmth);
      for (std::size_t c = 0; c < raw.size(); ++c) {
        float value = raw[c] + 0.15f * noise.noise();
        if (c == 10) value = std::max(0.0f, value);  // no negative rain
        if (c < static_cast<std::size_t>(shape_.channels))
          fields_chw[c * plane + p] =
              (value - kChannelStatistics[c].mean) / kChannelStatistics[c].stddev;
      }
    }
  }
}

std::string SyntheticClimate::describe() const {
  return fmt::format("synthetic climate {}, {} samples, seed {}", to_string(shape_), samples_,
                     seed_);
}

std::vector<std::string> SyntheticClimate::channel_names() const {
  return {kClimateChannelNames.begin(), kClimateChannelNames.begin() + shape_.channels};
}

std::array<double, kNumClasses> class_frequencies(const SampleSource& source,
                                                  std::size_t max_samples) {
  const SampleShape shape = source.shape();
  std::vector<float> fields(shape.field_elements());
  std::vector<std::int32_t> labels(shape.label_elements());
  std::array<std::uint64_t, kNumClasses> counts{};
  const std::size_t samples = std::min(source.size(), max_samples);
  std::size_t counted = 0;
  for (std::size_t index = 0; index < samples; ++index) {
    try {
      source.load(index, fields, labels);
    } catch (const BadSample&) {
      continue;  // the training step meets it again and applies the job's --bad-samples policy
    }
    for (std::int32_t label : labels) ++counts.at(static_cast<std::size_t>(label));
    ++counted;
  }
  std::array<double, kNumClasses> frequencies{};
  const double total = static_cast<double>(counted) * shape.label_elements();
  for (int k = 0; k < kNumClasses; ++k) frequencies[k] = total > 0 ? counts[k] / total : 0.0;
  return frequencies;
}

}  // namespace hardy::core
