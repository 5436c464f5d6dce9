/* gloo_group.cc — a Gloo group's life: the TCP device on the chosen
 * interface, the full-mesh rendezvous through dtrain's store, the check that
 * every pair connection belongs to the run (each side sends an HMAC of the
 * run's token that the caller computed; Gloo's own pair setup accepts the
 * first connection to a listening port), failure bookkeeping shared with the
 * peers through the store, and close. */
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "gloo_internal.h"

namespace {

/* Slots of the group's own messages (Gloo's collectives use prefixes 0x01-0x08). */
constexpr uint64_t kProofSlot = (uint64_t)0xD7 << 56;
/* How long a rank that lost a peer waits for the launcher to say why. */
constexpr uint32_t kCauseWaitMs = 3000;

std::string sockaddr_text(const struct sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = (const struct sockaddr_in*)&ss;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    port = ntohs(a->sin_port);
    return std::string(ip) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = (const struct sockaddr_in6*)&ss;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    port = ntohs(a->sin6_port);
  }
  return "[" + std::string(ip) + "]:" + std::to_string(port);
}

bool same_endpoint(const struct sockaddr_storage& a, const struct sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    auto *x = (const struct sockaddr_in*)&a, *y = (const struct sockaddr_in*)&b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    auto *x = (const struct sockaddr_in6*)&a, *y = (const struct sockaddr_in6*)&b;
    return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
  }
  return false;
}

/* The remote end of a connected pair, for the log of a refused connection:
 * Gloo exposes only the pair's local endpoint, so find the socket with that
 * local address among this process's descriptors and ask it for its peer. */
std::string remote_of(gloo::transport::Pair* pair) {
  std::vector<char> bytes = pair->address().bytes();
  if (bytes.size() < sizeof(struct sockaddr_storage)) return "an unknown address";
  struct sockaddr_storage self;
  memcpy(&self, bytes.data(), sizeof self);
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return "an unknown address";
  std::string found = "an unknown address";
  while (struct dirent* e = readdir(dir)) {
    int fd = atoi(e->d_name);
    if (fd <= 2) continue;
    struct sockaddr_storage ss = {}, peer = {};
    socklen_t len = sizeof ss, plen = sizeof peer;
    if (getsockname(fd, (struct sockaddr*)&ss, &len) != 0 || !same_endpoint(ss, self)) continue;
    if (getpeername(fd, (struct sockaddr*)&peer, &plen) == 0) {
      found = sockaddr_text(peer);
      break;
    }
  }
  closedir(dir);
  return found;
}

/* The interface's IPv4 address family when it has one (Gloo would otherwise
 * take the interface's first address, possibly an IPv6 link-local one). */
bool interface_exists(const std::string& name, bool* has_ipv4, std::string* all) {
  struct ifaddrs* ifap = nullptr;
  if (getifaddrs(&ifap) != 0) return false;
  bool found = false;
  *has_ipv4 = false;
  for (struct ifaddrs* a = ifap; a; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    if (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6) continue;
    if (all->find(std::string(" ") + a->ifa_name + ",") == std::string::npos) *all += std::string(" ") + a->ifa_name + ",";
    if (name == a->ifa_name) {
      found = true;
      if (a->ifa_addr->sa_family == AF_INET) *has_ipv4 = true;
    }
  }
  freeifaddrs(ifap);
  if (!all->empty()) all->pop_back();
  return found;
}

/* Gloo's TCP device on `iface` (GLOO_SOCKET_IFNAME) or else on `host` (an address of this machine). */
dt_status create_device(const std::string& iface, const std::string& host,
                        std::shared_ptr<gloo::transport::Device>* out) {
  gloo::transport::tcp::attr attr;
  if (!iface.empty()) {
    bool v4 = false;
    std::string all;
    if (!interface_exists(iface, &v4, &all)) {
      return dt_gloo_fail_(DT_ERR_ARG, "GLOO_SOCKET_IFNAME=%s: this machine has no network interface of that name with an address (it has:%s)",
                           iface.c_str(), all.c_str());
    }
    attr.iface = iface;
    if (v4) attr.ai_family = AF_INET;
  } else {
    attr.hostname = host;
  }
  try {
    *out = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return dt_gloo_fail_(DT_ERR_SYS, "cannot open a Gloo TCP device on %s %s: %s",
                         iface.empty() ? "address" : "interface", iface.empty() ? host.c_str() : iface.c_str(),
                         dt_gloo_text_(e).c_str());
  }
  return DT_OK;
}

/* Which member a rendezvous key belongs to ("rank_3" and "3" are Gloo's keys of member 3). */
int member_of_key(const std::string& key) {
  const char* s = key.c_str();
  if (key.compare(0, 5, "rank_") == 0) s += 5;
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  return (end && *end == '\0' && end != s) ? (int)v : -1;
}

std::string join_labels(const dt_gloo_group* g, const std::vector<int>& members) {
  std::string out;
  for (size_t i = 0; i < members.size(); i++) {
    if (i) out += i + 1 == members.size() ? " and " : ", ";
    int m = members[i];
    out += m >= 0 && m < (int)g->labels.size() ? g->labels[m] : "member " + std::to_string(m);
  }
  return out;
}

/* Pulls "detail":"…" out of the launcher's abort record (JSON written by launch/attempt.ts). */
std::string json_string_field(const std::string& json, const std::string& field) {
  std::string needle = "\"" + field + "\":\"";
  size_t at = json.find(needle);
  if (at == std::string::npos) return "";
  std::string out;
  for (size_t i = at + needle.size(); i < json.size(); i++) {
    char c = json[i];
    if (c == '"') break;
    if (c == '\\' && i + 1 < json.size()) {
      char n = json[++i];
      out.push_back(n == 'n' ? ' ' : n == 't' ? ' ' : n);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

/* Pulls "field":<integer> out of the same record; -1 when absent. */
long json_int_field(const std::string& json, const std::string& field) {
  std::string needle = "\"" + field + "\":";
  size_t at = json.find(needle);
  if (at == std::string::npos) return -1;
  return strtol(json.c_str() + at + needle.size(), nullptr, 10);
}

/* Exchanges the membership proofs over every pair; any pair whose proof is
 * wrong is refused (and named, with its remote address). */
dt_status verify_pairs(dt_gloo_group* g, const uint8_t* proofs_out, const uint8_t* proofs_in, int64_t deadline) {
  const int n = g->size;
  std::vector<uint8_t> in((size_t)n * DT_GLOO_PROOF_BYTES, 0);
  std::vector<uint8_t> out(proofs_out, proofs_out + (size_t)n * DT_GLOO_PROOF_BYTES);
  std::vector<bool> got((size_t)n, false);
  auto inb = g->ctx->createUnboundBuffer(in.data(), in.size());
  auto outb = g->ctx->createUnboundBuffer(out.data(), out.size());
  for (int p = 0; p < n; p++) {
    if (p == g->rank) continue;
    inb->recv(p, kProofSlot, (size_t)p * DT_GLOO_PROOF_BYTES, DT_GLOO_PROOF_BYTES);
    outb->send(p, kProofSlot, (size_t)p * DT_GLOO_PROOF_BYTES, DT_GLOO_PROOF_BYTES);
  }
  try {
    for (int k = 0; k < n - 1; k++) {
      int src = -1;
      int64_t left = deadline - dt_gloo_now_ms_();
      inb->waitRecv(&src, std::chrono::milliseconds(left > 1 ? left : 1));
      if (src < 0 || src >= n) continue;
      got[(size_t)src] = true;
      unsigned diff = 0;
      for (int i = 0; i < DT_GLOO_PROOF_BYTES; i++) {
        diff |= in[(size_t)src * DT_GLOO_PROOF_BYTES + i] ^ proofs_in[(size_t)src * DT_GLOO_PROOF_BYTES + i];
      }
      if (diff != 0) {
        std::string from = remote_of(g->ctx->getPair(src).get());
        return dt_gloo_fail_(DT_GLOO_ERR_REFUSED,
                             "%s refused the Gloo connection from %s that claimed to be %s: it did not prove it "
                             "holds this run's token (a process outside the run, or a launcher with another "
                             "token); the process group cannot start",
                             g->labels[g->rank].c_str(), from.c_str(), g->labels[src].c_str());
      }
    }
    for (int k = 0; k < n - 1; k++) {
      int64_t left = deadline - dt_gloo_now_ms_();
      outb->waitSend(nullptr, std::chrono::milliseconds(left > 1 ? left : 1));
    }
  } catch (const std::exception& e) {
    std::vector<int> missing;
    for (int p = 0; p < n; p++) {
      if (p != g->rank && !got[(size_t)p]) missing.push_back(p);
    }
    return dt_gloo_fail_(DT_ERR_SYS,
                         "the Gloo connection(s) with %s did not prove membership of this run (%s); the process "
                         "group cannot start",
                         join_labels(g, missing).c_str(), dt_gloo_text_(e).c_str());
  }
  return DT_OK;
}

}  // namespace

char* dt_gloo_scratch_(dt_gloo_group* g, size_t bytes) {
  if (g->scratch.size() < bytes) g->scratch.resize(bytes);
  return g->scratch.data();
}

dt_status dt_gloo_abort_with_(dt_gloo_group* g, dt_status status) {
  std::string text = dt_gloo_error_text_();
  if (g->dead == DT_OK) {
    g->dead = status;
    g->dead_text = text;
    try {
      g->store->set_deadline(dt_gloo_now_ms_() + 5000);
      g->store->put_raw(g->store->prefix() + "abort/" + std::to_string(g->rank), text);
    } catch (const std::exception&) { /* the store is gone: the closed connections still stop the peers */
    }
    if (g->ctx) g->ctx->closeConnections();
  }
  dt_gloo_fail_(status, "%s", text.c_str());
  return status;
}

dt_status dt_gloo_peer_failure_(dt_gloo_group* g, const std::string& what, const std::string& what_failed,
                                int64_t timeout_ms) {
  const std::string& me = g->labels[g->rank];
  const bool timed_out = what_failed.find("Timed out") != std::string::npos ||
                         what_failed.find("timeout") != std::string::npos;
  std::string why;
  try {
    g->store->set_deadline(dt_gloo_now_ms_() + 10000);
    auto aborts = g->store->list_raw(g->store->prefix() + "abort/");
    const DtStoreEntry* first = nullptr;
    for (const auto& e : aborts) {
      if (!first || e.age_ms > first->age_ms) first = &e;
    }
    if (first) {
      int m = atoi(first->key.c_str() + g->store->prefix().size() + 6);
      why = "stopped: " + join_labels(g, {m}) + " aborted the process group: " + first->value;
    } else if (timed_out) {
      dt_gloo_fail_(DT_ERR_TIMEOUT, "%s on %s timed out after %lld ms (DTRAIN_TIMEOUT): a peer stopped sending partway (gloo: %s)",
                    what.c_str(), me.c_str(), (long long)timeout_ms, what_failed.c_str());
      return dt_gloo_abort_with_(g, DT_ERR_TIMEOUT);
    } else {
      auto closed = g->store->list_raw(g->store->prefix() + "closed/");
      std::vector<int> who;
      for (const auto& e : closed) who.push_back(atoi(e.key.c_str() + g->store->prefix().size() + 7));
      if (!who.empty()) {
        why = "cannot complete: " + join_labels(g, who) +
              (who.size() == 1 ? " closed its process group" : " closed their process groups");
      } else {
        std::string record;
        if (!g->attempt_abort_key.empty() && g->store->get_raw(g->attempt_abort_key, kCauseWaitMs, &record)) {
          std::string detail = json_string_field(record, "detail");
          long rank = json_int_field(record, "rank"), node = json_int_field(record, "node");
          if (detail.empty()) detail = record;
          if (rank >= 0 && json_string_field(record, "reason") == "rank-failed") {
            detail = "rank " + std::to_string(rank) + " (node " + std::to_string(node) + ") failed: " + detail;
          }
          why = "stopped: lost its connection to a peer (gloo: " + what_failed +
                "); the launcher is stopping the run: " + detail;
        }
      }
    }
  } catch (const std::exception& e) {
    why = "cannot complete: lost its connection to a peer (gloo: " + what_failed +
          ") and the control store too (" + e.what() + "): the launcher of node 0 is gone";
  }
  if (why.empty()) {
    why = "cannot complete: lost its connection to a peer (gloo: " + what_failed +
          "): that peer's process exited or was killed, or the network between them failed";
  }
  dt_gloo_fail_(DT_ERR_SYS, "%s on %s %s", what.c_str(), me.c_str(), why.c_str());
  std::string text = dt_gloo_error_text_();
  if (g->dead == DT_OK) {
    g->dead = DT_ERR_SYS;
    g->dead_text = text;
    if (g->ctx) g->ctx->closeConnections(); /* a follower: no abort record of its own */
  }
  dt_gloo_fail_(DT_ERR_SYS, "%s", text.c_str());
  return DT_ERR_SYS;
}

/** Joins a Gloo group of `size` members through the store at
 *  store_host:store_port (keys under `prefix`): binds a TCP device on `iface`
 *  (GLOO_SOCKET_IFNAME) or else `bind_host`, or else the address this
 *  machine reaches the store from; publishes its pair addresses; connects to
 *  every member; and checks each pair's membership proof (proofs_out[p] is
 *  sent to member p, proofs_in[p] expected from it; 32 bytes each).
 *  `labels` holds `size` NUL-terminated names ("rank 3 (node 1)") back to
 *  back. Returns once every pair is connected and proven, or fails within
 *  timeout_ms naming the members that did not join. */
DT_EXPORT dt_status dt_gloo_open(const char* store_host, int32_t store_port, const char* token,
                                 const char* identity, const char* prefix, const char* attempt_abort_key,
                                 int32_t rank, int32_t size, const char* labels, const char* iface,
                                 const char* bind_host, const uint8_t* proofs_out, const uint8_t* proofs_in,
                                 int32_t flags, int64_t timeout_ms, uint64_t* out_handle) {
  if (!store_host || !token || !identity || !prefix || !attempt_abort_key || !labels || !iface || !bind_host ||
      !proofs_out || !proofs_in || !out_handle) {
    return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_open: a pointer argument is NULL");
  }
  if (size < 1 || rank < 0 || rank >= size || timeout_ms <= 0 || store_port <= 0 || store_port > 65535) {
    return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_open: rank %d of %d, port %d, timeout %lld ms are not valid", rank,
                         size, store_port, (long long)timeout_ms);
  }
  *out_handle = 0;
  auto g = std::make_unique<dt_gloo_group>();
  g->rank = rank;
  g->size = size;
  g->flags = flags;
  g->attempt_abort_key = attempt_abort_key;
  const char* l = labels;
  for (int i = 0; i < size; i++) {
    g->labels.emplace_back(l);
    l += strlen(l) + 1;
  }
  const int64_t deadline = dt_gloo_now_ms_() + timeout_ms;
  try {
    g->store.reset(new DtStore(store_host, store_port, token, identity, prefix, deadline));
  } catch (const std::exception& e) {
    return dt_gloo_fail_(DT_ERR_SYS, "%s cannot join the Gloo process group: %s", g->labels[rank].c_str(), e.what());
  }
  std::string host = *bind_host ? bind_host : g->store->local_ip();
  dt_status st = create_device(iface, host, &g->device);
  if (st) return st;
  g->device_text = g->device->str();
  if (size > 1) {
    try {
      g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
      g->ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
      g->ctx->connectFullMesh(*g->store, g->device);
    } catch (const DtStoreTimeout& e) {
      std::vector<int> missing;
      for (const auto& k : e.missing) missing.push_back(member_of_key(k));
      return dt_gloo_fail_(DT_ERR_TIMEOUT,
                           "Gloo rendezvous timed out on %s after %lld ms: %s did not join (never reached "
                           "initProcessGroup, or its node never started)",
                           g->labels[rank].c_str(), (long long)timeout_ms, join_labels(g.get(), missing).c_str());
    } catch (const std::exception& e) {
      return dt_gloo_fail_(DT_ERR_SYS, "Gloo rendezvous failed on %s (device %s): %s", g->labels[rank].c_str(),
                           g->device_text.c_str(), dt_gloo_text_(e).c_str());
    }
    st = verify_pairs(g.get(), proofs_out, proofs_in, deadline);
    if (st) {
      g->ctx->closeConnections();
      return st;
    }
  }
  g->store->set_deadline(dt_gloo_now_ms_() + 30000);
  *out_handle = (uint64_t)(uintptr_t)g.release();
  return DT_OK;
}

/** Leaves the group: peers waiting on this member fail at once, naming it. */
DT_EXPORT dt_status dt_gloo_close(dt_gloo_group* g) {
  if (!g) return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_close: handle is NULL");
  if (g->dead == DT_OK && g->size > 1) {
    try {
      g->store->set_deadline(dt_gloo_now_ms_() + 5000);
      g->store->put_raw(g->store->prefix() + "closed/" + std::to_string(g->rank), "1");
    } catch (const std::exception&) { /* peers still see the connections close */
    }
  }
  for (auto& b : g->check_in_buf) b.reset();
  g->check_out_buf.reset();
  g->ctx.reset();
  g->device.reset();
  g->store.reset();
  delete g;
  return DT_OK;
}

/** Fails the group for every member with `reason` (e.g. a bad argument on this rank). */
DT_EXPORT dt_status dt_gloo_abort(dt_gloo_group* g, int32_t status, const char* reason) {
  if (!g) return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_abort: handle is NULL");
  dt_gloo_fail_(status == DT_OK ? DT_ERR_ARG : status, "%s", reason ? reason : "aborted");
  dt_gloo_abort_with_(g, status == DT_OK ? DT_ERR_ARG : status);
  return DT_OK;
}

/** Writes Gloo's description of the group's device ("tcp, pci=…, iface=eth0,
 *  speed=…, addr=[…]") into out (NUL-terminated, cut to cap). */
DT_EXPORT dt_status dt_gloo_info(dt_gloo_group* g, char* out, int64_t cap) {
  if (!g || !out || cap <= 0) return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_info: bad arguments");
  snprintf(out, (size_t)cap, "%s", g->device_text.c_str());
  return DT_OK;
}

/** What a group would use, without joining one: opens a Gloo TCP device on
 *  `iface`, or else on the address from which this machine reaches `toward`
 *  (a host name or address; UDP routing lookup, nothing is sent), and writes
 *  Gloo's description of it into out. */
DT_EXPORT dt_status dt_gloo_probe(const char* iface, const char* toward, char* out, int64_t cap) {
  if (!iface || !toward || !out || cap <= 0) return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_probe: bad arguments");
  std::string host;
  if (!*iface) {
    struct addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    struct addrinfo* res = nullptr;
    int rv = getaddrinfo(toward, "29500", &hints, &res);
    if (rv != 0) return dt_gloo_fail_(DT_ERR_ARG, "cannot resolve %s: %s", toward, gai_strerror(rv));
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
    struct sockaddr_storage ss = {};
    socklen_t len = sizeof ss;
    if (ok) ok = getsockname(fd, (struct sockaddr*)&ss, &len) == 0;
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    if (!ok) return dt_gloo_fail_(DT_ERR_SYS, "no route from this machine to %s", toward);
    host = sockaddr_text(ss);
    host = host[0] == '[' ? host.substr(1, host.rfind(']') - 1) : host.substr(0, host.rfind(':'));
  }
  std::shared_ptr<gloo::transport::Device> dev;
  dt_status st = create_device(iface, host, &dev);
  if (st) return st;
  snprintf(out, (size_t)cap, "%s", dev->str().c_str());
  return DT_OK;
}
