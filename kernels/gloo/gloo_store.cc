/* gloo_store.cc — a blocking client of dtrain's control store (the protocol
 * of distributed/store_protocol.ts: length-prefixed frames, an AUTH frame with
 * the run's token first), serving as Gloo's rendezvous store. Gloo's pair
 * addresses therefore travel only through the run's authenticated store. */
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "gloo_internal.h"

namespace {

enum : uint8_t { OP_AUTH = 1, OP_SET = 2, OP_GET = 3, OP_WAIT = 4, OP_LIST = 7 };
enum : uint8_t { ST_OK = 0, ST_NOT_FOUND = 1, ST_TIMEOUT = 2, ST_ERROR = 3 };
constexpr uint32_t kMaxFrame = 16u << 20;
constexpr uint32_t kWaitForever = 0x7fffffff;
/* the client's own deadline trails the server's wait by this much, so the
 * server's TIMEOUT answer arrives before the client gives up on the socket */
constexpr int64_t kAnswerSlackMs = 5000;

void put_u32(std::string& s, uint32_t v) {
  char b[4] = {(char)(v & 0xff), (char)((v >> 8) & 0xff), (char)((v >> 16) & 0xff), (char)(v >> 24)};
  s.append(b, 4);
}

void put_str(std::string& s, const std::string& v) {
  put_u32(s, (uint32_t)v.size());
  s.append(v);
}

/* Reads fields of an answer body, checking lengths. */
struct Reader {
  const std::string& body;
  size_t pos = 0;
  uint32_t u32() {
    if (pos + 4 > body.size()) throw std::runtime_error("the store sent a truncated answer");
    const unsigned char* p = (const unsigned char*)body.data() + pos;
    pos += 4;
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
  }
  std::string str() {
    uint32_t n = u32();
    if (pos + n > body.size()) throw std::runtime_error("the store sent a truncated answer");
    std::string out = body.substr(pos, n);
    pos += n;
    return out;
  }
};

uint32_t clamp_wait(int64_t ms) {
  if (ms <= 0) return 1; /* 0 would mean "do not wait" */
  return ms >= kWaitForever ? kWaitForever : (uint32_t)ms;
}

}  // namespace

DtStore::DtStore(const std::string& host, int port, const std::string& token, const std::string& identity,
                 const std::string& prefix, int64_t deadline_ms)
    : deadline_ms_(deadline_ms), where_(host + ":" + std::to_string(port)), prefix_(prefix) {
  std::string last = "no address";
  int64_t delay = 50;
  for (;;) {
    struct addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo* res = nullptr;
    int rv = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rv != 0) {
      last = gai_strerror(rv);
    } else {
      for (struct addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          last = strerror(errno);
          close(fd);
        }
      }
      freeaddrinfo(res);
    }
    if (fd_ >= 0) break;
    if (dt_gloo_now_ms_() + delay > deadline_ms_) {
      throw std::runtime_error("cannot connect to the dtrain store at " + where_ + ": " + last);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    delay = delay * 2 > 1000 ? 1000 : delay * 2;
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_storage ss = {};
  socklen_t len = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "";
  if (getsockname(fd_, (struct sockaddr*)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in*)&ss)->sin_addr, ip, sizeof ip);
    if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &((struct sockaddr_in6*)&ss)->sin6_addr, ip, sizeof ip);
  }
  local_ip_ = ip;
  std::string body;
  put_str(body, token);
  put_str(body, identity);
  uint8_t status;
  std::string answer;
  request(OP_AUTH, body, &status, &answer, deadline_ms_);
  if (status != ST_OK) throw std::runtime_error("the dtrain store at " + where_ + " refused this rank");
}

DtStore::~DtStore() {
  if (fd_ >= 0) close(fd_);
}

void DtStore::send_all(const char* p, size_t n, int64_t deadline_ms) {
  while (n > 0) {
    ssize_t w = send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      throw std::runtime_error("lost the dtrain store at " + where_ + ": " + strerror(errno));
    }
    int64_t left = deadline_ms - dt_gloo_now_ms_();
    if (left <= 0) throw std::runtime_error("the dtrain store at " + where_ + " does not take requests");
    struct pollfd pfd = {fd_, POLLOUT, 0};
    poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
  }
}

void DtStore::recv_all(char* p, size_t n, int64_t deadline_ms) {
  while (n > 0) {
    ssize_t r = recv(fd_, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
      continue;
    }
    if (r == 0) throw std::runtime_error("lost the dtrain store at " + where_ + ": it closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw std::runtime_error("lost the dtrain store at " + where_ + ": " + strerror(errno));
    }
    int64_t left = deadline_ms - dt_gloo_now_ms_();
    if (left <= 0) throw std::runtime_error("the dtrain store at " + where_ + " did not answer in time");
    struct pollfd pfd = {fd_, POLLIN, 0};
    poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
  }
}

void DtStore::request(uint8_t op, const std::string& body, uint8_t* status, std::string* answer,
                      int64_t deadline_ms) {
  const uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;
  std::string frame;
  put_u32(frame, (uint32_t)(5 + body.size()));
  frame.push_back((char)op);
  put_u32(frame, id);
  frame.append(body);
  send_all(frame.data(), frame.size(), deadline_ms);
  unsigned char head[9];
  recv_all((char*)head, sizeof head, deadline_ms);
  uint32_t len = (uint32_t)head[0] | ((uint32_t)head[1] << 8) | ((uint32_t)head[2] << 16) | ((uint32_t)head[3] << 24);
  uint32_t got = (uint32_t)head[5] | ((uint32_t)head[6] << 8) | ((uint32_t)head[7] << 16) | ((uint32_t)head[8] << 24);
  if (len < 5 || len > kMaxFrame) throw std::runtime_error("the dtrain store sent a malformed answer");
  if (got != id) throw std::runtime_error("the dtrain store answered another request");
  answer->assign(len - 5, '\0');
  if (len > 5) recv_all(&(*answer)[0], len - 5, deadline_ms);
  *status = head[4];
  if (*status == ST_ERROR) {
    Reader r{*answer};
    std::string msg = r.str();
    throw std::runtime_error("the dtrain store at " + where_ + " answered: " + msg);
  }
}

void DtStore::put_raw(const std::string& key, const std::string& value) {
  std::string body;
  put_str(body, key);
  put_str(body, value);
  uint8_t status;
  std::string answer;
  /* a set is answered at once: bounded by the call's deadline or a few seconds from now */
  int64_t soon = dt_gloo_now_ms_() + kAnswerSlackMs;
  request(OP_SET, body, &status, &answer, deadline_ms_ > soon ? deadline_ms_ : soon);
}

bool DtStore::get_raw(const std::string& key, uint32_t wait_ms, std::string* value) {
  std::string body;
  put_str(body, key);
  put_u32(body, wait_ms);
  uint8_t status;
  std::string answer;
  request(OP_GET, body, &status, &answer, dt_gloo_now_ms_() + wait_ms + kAnswerSlackMs);
  if (status == ST_NOT_FOUND || status == ST_TIMEOUT) return false;
  Reader r{answer};
  *value = r.str();
  return true;
}

std::vector<DtStoreEntry> DtStore::list_raw(const std::string& prefix) {
  std::string body;
  put_str(body, prefix);
  uint8_t status;
  std::string answer;
  request(OP_LIST, body, &status, &answer, dt_gloo_now_ms_() + kAnswerSlackMs);
  Reader r{answer};
  uint32_t n = r.u32();
  std::vector<DtStoreEntry> out;
  for (uint32_t i = 0; i < n; i++) {
    DtStoreEntry e;
    e.key = r.str();
    e.value = r.str();
    e.age_ms = r.u32();
    out.push_back(std::move(e));
  }
  return out;
}

void DtStore::set(const std::string& key, const std::vector<char>& data) {
  put_raw(prefix_ + key, std::string(data.begin(), data.end()));
}

std::vector<char> DtStore::get(const std::string& key) {
  std::string value;
  int64_t left = deadline_ms_ - dt_gloo_now_ms_();
  if (!get_raw(prefix_ + key, clamp_wait(left), &value)) {
    throw DtStoreTimeout("timed out waiting for store key " + prefix_ + key, {key});
  }
  return std::vector<char>(value.begin(), value.end());
}

void DtStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(deadline_ms_ - dt_gloo_now_ms_()));
}

void DtStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  int64_t left = deadline_ms_ - dt_gloo_now_ms_();
  if (timeout.count() < left) left = timeout.count();
  std::string body;
  put_u32(body, (uint32_t)keys.size());
  for (const auto& k : keys) put_str(body, prefix_ + k);
  put_u32(body, clamp_wait(left));
  uint8_t status;
  std::string answer;
  request(OP_WAIT, body, &status, &answer, dt_gloo_now_ms_() + (left > 0 ? left : 0) + kAnswerSlackMs);
  if (status == ST_TIMEOUT) {
    Reader r{answer};
    uint32_t n = r.u32();
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < n; i++) {
      std::string k = r.str();
      missing.push_back(k.compare(0, prefix_.size(), prefix_) == 0 ? k.substr(prefix_.size()) : k);
    }
    throw DtStoreTimeout("timed out waiting for store keys", missing);
  }
}
