#pragma once
// etcd for the store benchmark only. gloo has no etcd store, so hardy's training path could use
// etcd only through a client written for it; to measure what such a client would see, the
// benchmark talks to etcd's v3 HTTP/JSON gateway (the gRPC API's JSON mapping, keys and values
// base64) over one kept-alive HTTP/1.1 connection per leader: a range request per look, a
// transaction that puts only when the key was never created per write (write-once, as gloo's
// stores). No gloo group can connect through it (gloo_store() throws).
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "hardy/comm/rendezvous/server_process.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::bench {

inline constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

inline std::string base64(std::string_view bytes) {
  std::string text;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t left = bytes.size() - i;
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (left > 1) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (left > 2) n |= static_cast<unsigned char>(bytes[i + 2]);
    text += kBase64[(n >> 18) & 63];
    text += kBase64[(n >> 12) & 63];
    text += left > 1 ? kBase64[(n >> 6) & 63] : '=';
    text += left > 2 ? kBase64[n & 63] : '=';
  }
  return text;
}

inline std::string unbase64(std::string_view text) {
  std::string bytes;
  unsigned n = 0;
  int bits = 0;
  for (char c : text) {
    const auto value = kBase64.find(c);
    if (value == std::string_view::npos) break;  // '=' padding ends it
    n = n << 6 | static_cast<unsigned>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((n >> bits) & 0xff);
    }
  }
  return bytes;
}

// One kept-alive HTTP/1.1 connection to 127.0.0.1:port that posts JSON and reads JSON back.
// Enough for etcd's gateway, whose answers are small and carry a Content-Length.
class JsonConnection {
 public:
  explicit JsonConnection(int port) : port_(port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) fail("socket");
    sockaddr_in where{};
    where.sin_family = AF_INET;
    where.sin_port = htons(static_cast<std::uint16_t>(port));
    where.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
      const int saved = errno;
      ::close(fd_);
      errno = saved;
      fail("connect");
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~JsonConnection() { ::close(fd_); }
  JsonConnection(const JsonConnection&) = delete;
  JsonConnection& operator=(const JsonConnection&) = delete;

  nlohmann::json post(const std::string& path, const nlohmann::json& body) {
    const std::string payload = body.dump();
    const std::string request = fmt::format(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n{}",
        path, port_, payload.size(), payload);
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) fail("send");
      sent += static_cast<std::size_t>(n);
    }
    std::size_t header_end;
    while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) receive();
    const std::string head = buffer_.substr(0, header_end);
    if (head.rfind("HTTP/1.1 200", 0) != 0)
      throw IoError(fmt::format("etcd at 127.0.0.1:{} answered {} with '{}'", port_, path,
                                head.substr(0, head.find("\r\n"))));
    const auto length_at = lowercase(head).find("content-length:");
    if (length_at == std::string::npos)
      throw IoError(
          fmt::format("etcd at 127.0.0.1:{}: no Content-Length in the answer to {}", port_, path));
    const std::size_t length = std::stoul(head.substr(length_at + 15));
    while (buffer_.size() < header_end + 4 + length) receive();
    const std::string answer = buffer_.substr(header_end + 4, length);
    buffer_.erase(0, header_end + 4 + length);
    return nlohmann::json::parse(answer);
  }

 private:
  static std::string lowercase(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }
  void receive() {
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n == 0) throw IoError(fmt::format("etcd at 127.0.0.1:{} closed the connection", port_));
    if (n < 0) fail("recv");
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
  [[noreturn]] void fail(const char* call) const {
    throw IoError(
        fmt::format("etcd at 127.0.0.1:{}: {} failed: {}", port_, call, std::strerror(errno)));
  }

  int port_;
  int fd_ = -1;
  std::string buffer_;
};

class EtcdGatewayStore final : public comm::RendezvousStore {
 public:
  explicit EtcdGatewayStore(int port) : connection_(port) {}

  void set(const std::string& key, const std::string& value) override {
    const std::string k = base64(key);
    // Put only if the key was never created: gloo's stores refuse a second write too.
    const auto answer = connection_.post(
        "/v3/kv/txn",
        {{"compare",
          {{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}}},
         {"success", {{{"request_put", {{"key", k}, {"value", base64(value)}}}}}}});
    if (!answer.value("succeeded", false))
      throw IoError(fmt::format("cannot set '{}' in etcd: it is set already", key));
  }
  std::optional<std::string> try_get(const std::string& key) override {
    const auto answer = connection_.post("/v3/kv/range", {{"key", base64(key)}});
    if (!answer.contains("kvs") || answer["kvs"].empty()) return std::nullopt;
    return unbase64(answer["kvs"][0].value("value", ""));
  }
  gloo::rendezvous::Store& gloo_store() override {
    throw std::logic_error("gloo has no etcd store: no gloo group connects through etcd");
  }

 private:
  JsonConnection connection_;
};

// A private single-member etcd on loopback, its data in `directory`, stopped when destroyed.
class EtcdServer {
 public:
  explicit EtcdServer(const std::filesystem::path& directory)
      : port_(comm::ServerProcess::free_port("127.0.0.1")),
        peer_port_(comm::ServerProcess::free_port("127.0.0.1")) {
    const std::string client = fmt::format("http://127.0.0.1:{}", port_);
    const std::string peer = fmt::format("http://127.0.0.1:{}", peer_port_);
    process_ = std::make_unique<comm::ServerProcess>(
        std::vector<std::string>{
            "etcd", "--name", "bench", "--data-dir", (directory / "etcd").string(),
            "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls",
            peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench=" + peer},
        directory / "etcd.log",
        [this](pid_t) {
          try {
            EtcdGatewayStore probe(port_);
            probe.try_get("probe");
            return true;
          } catch (const std::exception&) {
            return false;
          }
        },
        std::chrono::seconds(30));
  }
  int port() const { return port_; }

 private:
  int port_, peer_port_;
  std::unique_ptr<comm::ServerProcess> process_;
};

inline std::unique_ptr<comm::RendezvousStore> open_etcd_gateway(int port) {
  return std::make_unique<EtcdGatewayStore>(port);
}

}  // namespace hardy::bench
