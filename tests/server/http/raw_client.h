// A blocking loopback TCP client for the HTTP front-end tests that must see the bytes a client
// library would hide: pipelining, half-closes, bodies written before any read, clients that
// stall or never read.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace banyan::server::http::http_test {

class RawClient {
 public:
  // `rcvbuf_bytes` > 0: the socket's receive buffer, set before connecting (a small one makes
  // a client that does not read stall the server's writes quickly).
  explicit RawClient(int port, int rcvbuf_bytes = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf_bytes > 0) {
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof(rcvbuf_bytes));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    SetReadTimeout(std::chrono::seconds(30));
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void SetReadTimeout(std::chrono::milliseconds t) {
    timeval tv{.tv_sec = static_cast<time_t>(t.count() / 1000),
               .tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  // Writes all of `data`; false when the connection refused it (reset, closed).
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // shutdown(SHUT_WR): the server reads end of stream; we can still read its answer.
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  // Reads up to `max` bytes; "" at end of stream, on a reset or on timeout.
  std::string ReadSome(size_t max = 65536) {
    std::string buf(max, '\0');
    const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
    buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return buf;
  }
  // Reads until the peer closes (or the read timeout passes).
  std::string ReadAll() {
    std::string all;
    for (std::string s = ReadSome(); !s.empty(); s = ReadSome()) all += s;
    return all;
  }
  // Whether the server has closed the connection: true once a read returns end of stream or
  // a reset, reading (and dropping) whatever arrives first; false if `timeout` passes first.
  bool WaitClosed(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    SetReadTimeout(std::chrono::milliseconds(100));
    while (std::chrono::steady_clock::now() < end) {
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
  }
  // Reads `count` responses with a Content-Length body each; stops early at end of stream.
  std::vector<std::pair<int, std::string>> ReadResponses(int count) {
    std::vector<std::pair<int, std::string>> out;
    std::string buf;
    while (static_cast<int>(out.size()) < count) {
      const size_t head_end = buf.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const std::string head = buf.substr(0, head_end);
        size_t length = 0;
        const size_t cl = absl::AsciiStrToLower(head).find("content-length:");
        if (cl != std::string::npos) {
          size_t v = 0;
          (void)absl::SimpleAtoi(head.substr(cl + 15, head.find("\r\n", cl) - cl - 15), &v);
          length = v;
        }
        if (buf.size() >= head_end + 4 + length) {
          int status = 0;
          (void)absl::SimpleAtoi(head.substr(9, 3), &status);
          out.emplace_back(status, buf.substr(head_end + 4, length));
          last_head_ = head;
          buf.erase(0, head_end + 4 + length);
          continue;
        }
      }
      std::string more = ReadSome();
      if (more.empty()) break;
      buf += more;
    }
    return out;
  }
  // The status line and headers of the last response ReadResponses returned.
  const std::string& last_head() const { return last_head_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string last_head_;
};

// One HTTP/1.1 request's bytes; POST gets a JSON Content-Type and the body's Content-Length.
inline std::string Request(const std::string& method, const std::string& path,
                           const std::string& body = "", const std::string& extra_headers = "") {
  std::string r = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                               extra_headers);
  if (method == "POST") {
    absl::StrAppend(&r, "Content-Type: application/json\r\nContent-Length: ", body.size(),
                    "\r\n");
  }
  absl::StrAppend(&r, "\r\n", body);
  return r;
}

}  // namespace banyan::server::http::http_test
