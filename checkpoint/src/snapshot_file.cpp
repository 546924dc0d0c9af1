#include "hardy/checkpoint/snapshot_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <tuple>
#include <utility>

#include "first_valid.hpp"
#include "hardy/checkpoint/scalar_fields.hpp"
#include "hardy/core/support/error.hpp"
#include "posix_file.hpp"
#include "state_stream.hpp"

namespace hardy::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMagicBytes = 16;
// "hdy-snap" read as a little-endian u64: a completion mark that a zeroed or half-written
// header cannot hold by chance.
constexpr std::uint64_t kComplete = 0x70616e732d796468ULL;

struct Header {
  char magic[kMagicBytes];
  std::uint32_t format_version;
  std::uint32_t header_bytes;
  std::int64_t step;
  std::uint64_t payload_bytes;
  std::uint64_t payload_checksum;
  std::uint64_t header_checksum;  // of the bytes before it
  std::uint64_t complete;
};
static_assert(sizeof(Header) == 64 && offsetof(Header, complete) == 56);

// The payload's checksum: XXH3-64 of the XXH3-64 digests of its kHashPiece-byte pieces (the last
// one shorter). A writer hashes each piece as soon as it is written, while it is in cache; a
// reader hashes them on all its cores at once.
constexpr std::size_t kHashPiece = std::size_t{256} << 10;

std::size_t piece_count(std::span<const std::byte> payload) {
  return (payload.size() + kHashPiece - 1) / kHashPiece;
}

std::uint64_t piece_digest(std::span<const std::byte> payload, std::size_t piece) {
  const std::size_t offset = piece * kHashPiece;
  return core::xxh3_64(payload.subspan(offset, std::min(kHashPiece, payload.size() - offset)));
}

class PieceHasher {
 public:
  explicit PieceHasher(std::span<const std::byte> payload) : payload_(payload) {
    digests_.reserve(piece_count(payload));
  }
  // Hashes the whole pieces that lie below `written`.
  void written_up_to(std::size_t written) {
    while ((digests_.size() + 1) * kHashPiece <= written) hash(digests_.size());
  }
  std::uint64_t checksum() {
    written_up_to(payload_.size());
    if (digests_.size() * kHashPiece < payload_.size()) hash(digests_.size());
    return core::xxh3_64(std::as_bytes(std::span(digests_)));
  }

 private:
  void hash(std::size_t piece) { digests_.push_back(piece_digest(payload_, piece)); }
  std::span<const std::byte> payload_;
  std::vector<std::uint64_t> digests_;
};

std::uint64_t payload_checksum_in_parallel(std::span<const std::byte> payload) {
  const auto pieces = static_cast<std::ptrdiff_t>(piece_count(payload));
  std::vector<std::uint64_t> digests(static_cast<std::size_t>(pieces));
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (std::ptrdiff_t i = 0; i < pieces; ++i)
    digests[static_cast<std::size_t>(i)] = piece_digest(payload, static_cast<std::size_t>(i));
  return core::xxh3_64(std::as_bytes(std::span(digests)));
}

// One contiguous stretch of the payload and where its bytes come from.
struct Stretch {
  std::size_t offset;
  std::span<const std::byte> source;
};

// Copies `stretches` (ascending, back to back) into `payload` and hashes it, piece by piece on
// the calling thread's OpenMP team: each thread copies a whole piece and hashes it while it is in
// its cache. Bytes of `payload` outside the stretches must be written already.
std::uint64_t copy_and_checksum(std::span<std::byte> payload, std::span<const Stretch> stretches) {
  const auto pieces = static_cast<std::ptrdiff_t>(piece_count(payload));
  std::vector<std::uint64_t> digests(static_cast<std::size_t>(pieces));
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (std::ptrdiff_t p = 0; p < pieces; ++p) {
    const std::size_t begin = static_cast<std::size_t>(p) * kHashPiece;
    const std::size_t end = std::min(begin + kHashPiece, payload.size());
    // The first stretch that ends after `begin`.
    auto it = std::upper_bound(stretches.begin(), stretches.end(), begin,
                               [](std::size_t at, const Stretch& s) { return at < s.offset; });
    if (it != stretches.begin()) --it;
    for (; it != stretches.end() && it->offset < end; ++it) {
      const std::size_t from = std::max(begin, it->offset);
      const std::size_t to = std::min(end, it->offset + it->source.size());
      if (from < to)
        std::memcpy(payload.data() + from, it->source.data() + (from - it->offset), to - from);
    }
    digests[static_cast<std::size_t>(p)] = piece_digest(payload, static_cast<std::size_t>(p));
  }
  return core::xxh3_64(std::as_bytes(std::span(digests)));
}

std::uint64_t header_checksum(const Header& header) {
  return core::xxh3_64(std::as_bytes(
      std::span(reinterpret_cast<const char*>(&header), offsetof(Header, header_checksum))));
}

bool has_magic(const Header& header) {
  char expected[kMagicBytes] = {};
  std::memcpy(expected, kSnapshotFormatName, std::strlen(kSnapshotFormatName));
  return std::memcmp(header.magic, expected, kMagicBytes) == 0;
}

// Why a header cannot be trusted; nullopt when it can (the payload is not checked here).
std::optional<std::string> header_problem(const Header& header) {
  if (!has_magic(header)) return "not a hardy snapshot";
  if (header.format_version != kSnapshotFormatVersion)
    return fmt::format("snapshot format version {}; this hardy reads version {}",
                       header.format_version, kSnapshotFormatVersion);
  if (header.complete != kComplete)
    return std::string(
        "incomplete: its write was cut short (the writer ended or is still "
        "writing it)");
  if (header.header_bytes != sizeof(Header) || header_checksum(header) != header.header_checksum)
    return std::string("its header's checksum does not match");
  return std::nullopt;
}

// A file descriptor closed when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(Descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string system_error(int error) { return std::strerror(error); }

// Reads exactly bytes.size() bytes at offset; false at an early end of file.
bool read_at(int fd, std::span<std::byte> bytes, std::uint64_t offset, const fs::path& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got =
        ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw IoError(fmt::format("cannot read {}: {}", path.string(), system_error(errno)));
    if (got == 0) return false;
    done += static_cast<std::size_t>(got);
  }
  return true;
}

// Opens a file to read without following a link; InvalidArgument when it is not a regular file.
Descriptor open_to_read(const fs::path& path, struct stat& status) {
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT)
      throw InvalidArgument(fmt::format("checkpoint file {} does not exist", path.string()));
    if (error == ELOOP)
      throw InvalidArgument(fmt::format(
          "{} is a symbolic link; snapshots are read only from the file itself", path.string()));
    throw IoError(fmt::format("cannot open {}: {}", path.string(), system_error(error)));
  }
  if (::fstat(fd.get(), &status) != 0)
    throw IoError(fmt::format("cannot stat {}: {}", path.string(), system_error(errno)));
  if (!S_ISREG(status.st_mode))
    throw InvalidArgument(fmt::format("{} is not a file", path.string()));
  return fd;
}

std::optional<Header> read_header(int fd, const fs::path& path) {
  Header header{};
  if (!read_at(fd, std::as_writable_bytes(std::span(&header, 1)), 0, path)) return std::nullopt;
  return header;
}

CheckpointContents read_validated(const fs::path& path, bool require_owner) {
  struct stat status {};
  Descriptor fd = open_to_read(path, status);
  const std::string source = path.string();
  if (require_owner && status.st_uid != ::geteuid())
    throw CorruptCheckpoint(fmt::format("{}: owned by uid {}, not by this user (uid {})", source,
                                        status.st_uid, ::geteuid()));
  const auto header = read_header(fd.get(), path);
  if (!header || !has_magic(*header))
    throw InvalidArgument(fmt::format("{} is not a hardy snapshot", source));
  if (const auto problem = header_problem(*header))
    throw CorruptCheckpoint(fmt::format("{}: {}", source, *problem));
  const auto file_bytes = static_cast<std::uint64_t>(status.st_size);
  if (file_bytes - sizeof(Header) != header->payload_bytes)
    throw CorruptCheckpoint(fmt::format("{}: holds {} bytes after its header, the header says {}",
                                        source, file_bytes - sizeof(Header),
                                        header->payload_bytes));
  std::vector<std::byte> payload(static_cast<std::size_t>(header->payload_bytes));
  if (!read_at(fd.get(), payload, sizeof(Header), path))
    throw CorruptCheckpoint(fmt::format("{}: ends before its last byte", source));
  if (payload_checksum_in_parallel(payload) != header->payload_checksum)
    throw CorruptCheckpoint(fmt::format("{}: the checksum of its contents does not match", source));
  CheckpointContents contents;
  contents.state = detail::read_stream(payload, source, &contents.datasets);
  if (contents.state.step != header->step)
    throw CorruptCheckpoint(fmt::format("{}: the header says step {}, the contents step {}", source,
                                        header->step, contents.state.step));
  contents.format_version = static_cast<int>(header->format_version);
  contents.file_bytes = file_bytes;
  return contents;
}

}  // namespace

bool is_snapshot_file(const fs::path& path) {
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return false;
  Header header{};
  try {
    return read_at(fd.get(), std::as_writable_bytes(std::span(&header, 1)), 0, path) &&
           has_magic(header);
  } catch (const IoError&) {
    return false;
  }
}

CheckpointContents read_snapshot_file(const fs::path& path) {
  return read_validated(path, /*require_owner=*/false);
}

fs::path snapshot_slot_path(const fs::path& dir, int slot) {
  return dir / fmt::format("slot-{}.snapshot", slot);
}

std::vector<SnapshotEntry> list_snapshots(const fs::path& dir) {
  std::vector<SnapshotEntry> entries;
  for (int slot = 0; slot < SnapshotSlots::kSlots; ++slot) {
    const fs::path path = snapshot_slot_path(dir, slot);
    std::error_code error;
    if (!fs::exists(fs::symlink_status(path, error))) continue;
    SnapshotEntry entry{path, std::nullopt};
    try {
      struct stat status {};
      Descriptor fd = open_to_read(path, status);
      if (const auto header = read_header(fd.get(), path); header && !header_problem(*header))
        entry.step = header->step;
    } catch (const Error&) {  // a link, a directory, unreadable: listed without a step
    }
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(), [](const SnapshotEntry& a, const SnapshotEntry& b) {
    return a.step.value_or(-1) < b.step.value_or(-1);
  });
  return entries;
}

std::optional<ValidCheckpoint> load_newest_snapshot(const fs::path& dir,
                                                    std::vector<std::string>* skipped,
                                                    const UnfitReason& unfit) {
  const auto entries = list_snapshots(dir);
  // A slot without a complete header (a write cut short, damage) is passed over whatever else
  // is found: say why.
  for (const SnapshotEntry& entry : entries)
    if (!entry.step) try {
        read_validated(entry.path, true);
      } catch (const Error& e) {
        if (skipped) skipped->push_back(e.what());
      }
  std::vector<fs::path> complete;  // newest first
  for (auto entry = entries.rbegin(); entry != entries.rend() && entry->step; ++entry)
    complete.push_back(entry->path);
  return detail::first_valid(
      complete, [](const fs::path& path) { return read_validated(path, true).state; }, unfit,
      skipped);
}

// ---- SnapshotSlots ----

SnapshotSlots::SnapshotSlots(fs::path dir) : dir_(std::move(dir)) {
  for (const SnapshotEntry& entry : list_snapshots(dir_))
    for (int slot = 0; slot < kSlots; ++slot)
      if (entry.path == snapshot_slot_path(dir_, slot)) slots_[slot].step = entry.step;
}

SnapshotSlots::~SnapshotSlots() { close(); }

void SnapshotSlots::release(Slot& slot) {
  if (slot.map != nullptr) ::munmap(slot.map, slot.mapped);
  if (slot.fd >= 0) ::close(slot.fd);
  slot.map = nullptr;
  slot.mapped = 0;
  slot.fd = -1;
}

void SnapshotSlots::close() {
  for (Slot& slot : slots_) release(slot);
}

int SnapshotSlots::older_slot() const {
  // A slot without a complete snapshot first, then the lower step.
  return slots_[0].step.value_or(-1) <= slots_[1].step.value_or(-1) ? 0 : 1;
}

void SnapshotSlots::open(int index) {
  Slot& slot = slots_[index];
  if (slot.fd >= 0) return;
  const fs::path path = snapshot_slot_path(dir_, index);
  // O_NOFOLLOW: a link planted at the slot's name is refused, never written through.
  Descriptor fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0)
    throw IoError(fmt::format("cannot open the node-local snapshot {}: {}", path.string(),
                              system_error(errno)));
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0)
    throw IoError(fmt::format("cannot stat {}: {}", path.string(), system_error(errno)));
  if (!S_ISREG(status.st_mode) || status.st_uid != ::geteuid() || status.st_nlink != 1)
    throw IoError(fmt::format(
        "refusing the node-local snapshot {}: not a regular file of this user's with one link",
        path.string()));
  if ((status.st_mode & 0777) != 0600 && ::fchmod(fd.get(), 0600) != 0)
    throw IoError(fmt::format("cannot make {} private: {}", path.string(), system_error(errno)));
  slot.fd = fd.release();
}

void SnapshotSlots::reserve(int index, std::size_t bytes) {
  Slot& slot = slots_[index];
  if (slot.mapped == bytes) return;
  const fs::path path = snapshot_slot_path(dir_, index);
  if (slot.map != nullptr) ::munmap(slot.map, slot.mapped);
  slot.map = nullptr;
  slot.mapped = 0;
  slot.step.reset();
  if (::ftruncate(slot.fd, static_cast<off_t>(bytes)) != 0)
    throw IoError(fmt::format("cannot size the node-local snapshot {}: {}", path.string(),
                              system_error(errno)));
  // Every page allocated now, so a full /dev/shm is an error here and never a SIGBUS later, when
  // the copy touches a page that could not be had.
  if (const int error = ::posix_fallocate(slot.fd, 0, static_cast<off_t>(bytes)); error != 0)
    throw IoError(fmt::format("cannot write the node-local snapshot {}: {}", path.string(),
                              system_error(error)));
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, slot.fd, 0);
  if (map == MAP_FAILED)
    throw IoError(fmt::format("cannot map the node-local snapshot {}: {}", path.string(),
                              system_error(errno)));
  slot.map = static_cast<std::byte*>(map);
  slot.mapped = bytes;
}

int SnapshotSlots::begin(std::uint64_t payload) {
  const std::size_t bytes = sizeof(Header) + static_cast<std::size_t>(payload);
  const int index = older_slot();
  if (const auto budget = detail::injected_failure_budget(); budget && *budget < bytes)
    throw IoError(fmt::format("cannot write the node-local snapshot {}: {} (injected)",
                              snapshot_slot_path(dir_, index).string(), system_error(ENOSPC)));
  open(index);
  reserve(index, bytes);
  Slot& slot = slots_[index];
  // Incomplete before anything else changes: a writer killed from here on leaves this slot
  // rejected and the other one, the previous snapshot, the newest valid.
  slot.step.reset();
  auto* header = reinterpret_cast<Header*>(slot.map);
  std::atomic_ref<std::uint64_t>(header->complete).store(0, std::memory_order_release);
  return index;
}

SavedCheckpoint SnapshotSlots::finish(int index, long step, std::uint64_t payload,
                                      std::uint64_t checksum) {
  Slot& slot = slots_[index];
  const fs::path path = snapshot_slot_path(dir_, index);
  auto* header = reinterpret_cast<Header*>(slot.map);
  Header complete{};
  std::memcpy(complete.magic, kSnapshotFormatName, std::strlen(kSnapshotFormatName));
  complete.format_version = kSnapshotFormatVersion;
  complete.header_bytes = sizeof(Header);
  complete.step = step;
  complete.payload_bytes = payload;
  complete.payload_checksum = checksum;
  complete.header_checksum = header_checksum(complete);
  std::memcpy(header, &complete, offsetof(Header, complete));
  std::atomic_ref<std::uint64_t>(header->complete).store(kComplete, std::memory_order_release);
  slot.step = step;
  // Stores through a mapping need not move the file's modification time, which is how stale runs
  // are told from live ones (stale_snapshots.hpp): set it.
  if (::futimens(slot.fd, nullptr) != 0)
    throw IoError(fmt::format("cannot touch the node-local snapshot {}: {}", path.string(),
                              system_error(errno)));
  return {path, slot.mapped, {}};
}

SavedCheckpoint SnapshotSlots::write(const TrainingState& state) {
  const std::vector<detail::Field> fields = detail::fields_of(state, detail::Checksums::skip);
  const std::uint64_t payload = detail::stream_size(fields);
  const int index = begin(payload);
  std::byte* const base = slots_[index].map + sizeof(Header);
  PieceHasher hasher({base, static_cast<std::size_t>(payload)});
  std::size_t offset = 0;
  detail::write_stream(fields, [&](std::span<const std::byte> piece) {
    std::memcpy(base + offset, piece.data(), piece.size());
    offset += piece.size();
    hasher.written_up_to(offset);
  });
  return finish(index, state.step, payload, hasher.checksum());
}

const SnapshotSlots::TensorLayout& SnapshotSlots::layout_for(const StateSources& tensors,
                                                             std::size_t scalar_count) {
  const auto same = [](const std::vector<TensorSource>& sources,
                       const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& kept) {
    return sources.size() == kept.size() && std::equal(sources.begin(), sources.end(), kept.begin(),
                                                       [](const auto& a, const auto& b) {
                                                         return a.name == b.first &&
                                                                a.tensor->dims() == b.second;
                                                       });
  };
  TensorLayout& layout = layout_;
  if (layout.scalar_count == scalar_count && same(tensors.model, layout.model) &&
      same(tensors.optimizer, layout.optimizer))
    return layout;
  layout = {};
  layout.scalar_count = scalar_count;
  const std::size_t count = tensors.model.size() + tensors.optimizer.size();
  std::vector<std::byte> encoded;
  detail::append_preamble(encoded, count + scalar_count);
  std::uint64_t offset = 0;
  for (const auto& [group, sources, kept] :
       {std::tuple{std::string_view(kModelGroup), &tensors.model, &layout.model},
        std::tuple{std::string_view(kOptimizerGroup), &tensors.optimizer, &layout.optimizer}}) {
    for (const TensorSource& source : *sources) {
      const auto& dims = source.tensor->dims();
      kept->emplace_back(source.name, dims);
      const detail::Field field(std::string(group) + source.name, detail::FieldType::f32,
                                std::vector<std::uint64_t>(dims.begin(), dims.end()));
      const auto bytes = static_cast<std::uint64_t>(source.tensor->numel()) * sizeof(float);
      detail::append_description(encoded, field, bytes);
      encoded.resize(detail::aligned(offset + encoded.size()) - offset);
      offset += encoded.size() + bytes;
      layout.descriptions.push_back(std::move(encoded));
      layout.data_bytes.push_back(bytes);
      encoded.clear();
    }
  }
  layout.end = offset;
  return layout;
}

SavedCheckpoint SnapshotSlots::write(const StateSources& tensors, const TrainingState& scalars) {
  // The stream of write(TrainingState), with each tensor's bytes copied by the backend straight
  // from where it lives into its (aligned) place in the slot. The tensors' part of the stream
  // is the same at every step: laid out once.
  const std::vector<detail::Field> scalar_fields =
      detail::scalar_fields_of(scalars, detail::Checksums::skip);
  const TensorLayout& layout = layout_for(tensors, scalar_fields.size());
  std::uint64_t payload = layout.end;
  for (const detail::Field& field : scalar_fields)
    payload = detail::aligned(payload + detail::description_size(field)) + field.bytes().size();
  std::vector<const core::Tensor*> live;
  live.reserve(layout.descriptions.size());
  for (const auto* sources : {&tensors.model, &tensors.optimizer})
    for (const TensorSource& source : *sources) live.push_back(source.tensor);

  const int index = begin(payload);
  std::byte* base = slots_[index].map + sizeof(Header);
  const std::span<std::byte> slot(base, static_cast<std::size_t>(payload));
  std::uint64_t offset = layout.end;
  detail::write_stream_fields(scalar_fields, offset, [&](std::span<const std::byte> piece) {
    std::memcpy(base + offset, piece.data(), piece.size());
    offset += piece.size();
  });
  if (tensors.backend->device() == core::Device::host) {
    // The snapshot is taken between steps, in the step's time, when the kernels' threads have
    // nothing else to do: they copy and hash it together (--snapshot-every 1 cost the large
    // step 1.09% on one thread).
    std::vector<Stretch> stretches;
    stretches.reserve(2 * live.size());
    offset = 0;
    for (std::size_t i = 0; i < live.size(); ++i) {
      const std::vector<std::byte>& description = layout.descriptions[i];
      stretches.push_back({offset, description});
      offset += description.size();
      stretches.push_back({offset, std::as_bytes(live[i]->f32())});
      offset += layout.data_bytes[i];
    }
    return finish(index, scalars.step, payload, copy_and_checksum(slot, stretches));
  }
  // A device backend copies asynchronously: the pieces are hashed once every copy is done.
  offset = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    const std::vector<std::byte>& description = layout.descriptions[i];
    std::memcpy(base + offset, description.data(), description.size());
    offset += description.size();
    copy_to_host(*tensors.backend, *live[i],
                 std::span(reinterpret_cast<float*>(base + offset),
                           static_cast<std::size_t>(live[i]->numel())));
    offset += layout.data_bytes[i];
  }
  tensors.backend->synchronize();
  return finish(index, scalars.step, payload, payload_checksum_in_parallel(slot));
}

std::vector<fs::path> SnapshotSlots::discard_newer_than(long step) {
  std::vector<fs::path> removed;
  for (int index = 0; index < kSlots; ++index) {
    Slot& slot = slots_[index];
    if (!slot.step || *slot.step <= step) continue;
    release(slot);
    slot.step.reset();
    std::error_code error;
    const fs::path path = snapshot_slot_path(dir_, index);
    if (fs::remove(path, error)) removed.push_back(path);
  }
  return removed;
}

}  // namespace hardy::checkpoint
