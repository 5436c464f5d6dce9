/* gloo_internal.h — what the files of libdtrain_gloo.so share: the group
 * handle (a Gloo context over TCP, its store connection and its failure
 * state), the error text helpers, the store client, and the reductions.
 * The library is C++ inside and exports only extern "C" dt_* functions. */
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "dt_common.h"

/* dtype code of f64 (the shared-memory library's own code until dt_common.h has one) */
#define DT_GLOO_F64 6
/* reduce ops, as the shared-memory library numbers them */
enum { DT_GLOO_SUM = 0, DT_GLOO_AVG = 1, DT_GLOO_MAX = 2, DT_GLOO_MIN = 3 };
/* dt_gloo_open's status when a pair connection failed its membership proof
 * (a refusal the caller logs); the other statuses are dt_common.h's */
#define DT_GLOO_ERR_REFUSED 9
/* dt_gloo_open flags */
enum { DT_GLOO_FLAG_DETAIL = 1 };
/* bytes of a pair's membership proof (an HMAC-SHA256 computed by the caller) */
#define DT_GLOO_PROOF_BYTES 32

/* ---- error text (gloo_runtime.cc) ---- */

/* Sets this thread's error text; returns status. */
dt_status dt_gloo_fail_(dt_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* This thread's error text. */
const char* dt_gloo_error_text_();
/* Milliseconds of a monotonic clock. */
int64_t dt_gloo_now_ms_();

/* Gloo's exception text without the "[file:line] " it starts with. */
std::string dt_gloo_text_(const std::exception& e);

/* ---- the control store's client (gloo_store.cc) ---- */

/* A store call that ran past its deadline; `missing` lists the keys it lacked. */
struct DtStoreTimeout : std::runtime_error {
  std::vector<std::string> missing;
  DtStoreTimeout(const std::string& what, std::vector<std::string> keys)
      : std::runtime_error(what), missing(std::move(keys)) {}
};

/* One key of a list() answer. */
struct DtStoreEntry {
  std::string key;
  std::string value;
  uint32_t age_ms;
};

/* A blocking, authenticated connection to dtrain's control store
 * (distributed/store_protocol.ts), usable as Gloo's rendezvous store. Keys
 * given to the Gloo interface are put under `prefix`. Every call is bounded
 * by the deadline set with set_deadline() (ms of dt_gloo_now_ms_). */
class DtStore : public gloo::rendezvous::Store {
 public:
  DtStore(const std::string& host, int port, const std::string& token, const std::string& identity,
          const std::string& prefix, int64_t deadline_ms);
  ~DtStore() override;

  void set_deadline(int64_t deadline_ms) { deadline_ms_ = deadline_ms; }
  /* the local address of the connection (the interface that reaches the store) */
  const std::string& local_ip() const { return local_ip_; }
  const std::string& prefix() const { return prefix_; }

  /* Gloo's interface: keys under prefix; get() waits for the key until the deadline. */
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  /* Raw keys (no prefix). */
  void put_raw(const std::string& key, const std::string& value);
  /* false when absent after waiting wait_ms (0: no wait) */
  bool get_raw(const std::string& key, uint32_t wait_ms, std::string* value);
  std::vector<DtStoreEntry> list_raw(const std::string& prefix);

 private:
  void request(uint8_t op, const std::string& body, uint8_t* status, std::string* answer, int64_t deadline_ms);
  void send_all(const char* p, size_t n, int64_t deadline_ms);
  void recv_all(char* p, size_t n, int64_t deadline_ms);

  int fd_ = -1;
  uint32_t next_id_ = 1;
  int64_t deadline_ms_;
  std::string where_;
  std::string prefix_;
  std::string local_ip_;
};

/* ---- the group (gloo_group.cc) ---- */

struct dt_gloo_group {
  int rank = 0;
  int size = 0;
  int32_t flags = 0;
  /* "rank 3 (node 1)" for each member, for messages */
  std::vector<std::string> labels;
  std::unique_ptr<DtStore> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  /* the launcher's abort record of this attempt (raw key), or "" */
  std::string attempt_abort_key;
  /* collectives issued so far (the #n of messages) */
  uint64_t seq = 0;
  /* != DT_OK after a failure: every later call fails with dead_text */
  dt_status dead = DT_OK;
  std::string dead_text;
  /* Gloo's description of the device: "tcp, pci=…, iface=eth0, speed=…, addr=[…]" */
  std::string device_text;
  /* scratch for 16-bit widening and reduce-scatter, grown on demand */
  std::vector<char> scratch;
  /* The call-record exchange (gloo_collectives.cc): the records of call n are
   * received into check_in[n & 1], whose receives are posted as soon as call
   * n-1's exchange completes, so a peer's record goes out without waiting for
   * a receive notice; check_out holds this rank's record, once per peer. */
  std::vector<char> check_in[2];
  std::unique_ptr<gloo::transport::UnboundBuffer> check_in_buf[2];
  std::vector<char> check_out;
  std::unique_ptr<gloo::transport::UnboundBuffer> check_out_buf;
  /* the call whose receives are (being) posted, and from which members they are */
  uint64_t check_posted_seq = 0;
  std::vector<bool> check_posted_from;
};

/* Marks the group failed with `status` and this thread's error text, tells
 * the peers through the store (first writer wins for their messages) and
 * closes every connection so that peers waiting on this rank fail at once. */
dt_status dt_gloo_abort_with_(dt_gloo_group* g, dt_status status);

/* After Gloo reported `what_failed` (an I/O error or a timeout) during `what`
 * on this rank: finds who caused it (a peer's abort record, a peer that
 * closed its group, the launcher's abort record) and returns the status with
 * a message naming them. */
dt_status dt_gloo_peer_failure_(dt_gloo_group* g, const std::string& what, const std::string& what_failed,
                                int64_t timeout_ms);

/* A grown scratch area of at least `bytes`. */
char* dt_gloo_scratch_(dt_gloo_group* g, size_t bytes);

/* ---- reductions (gloo_reduce.cc) ---- */

/* Bytes per element of a dtype code (0: unknown). */
size_t dt_gloo_dtype_size_(int32_t dtype);
/* Whether (dtype, redop) is supported. */
bool dt_gloo_reduce_supported_(int32_t dtype, int32_t redop);
/* out[i] = combine(a[i], b[i]) for n elements of a native dtype (not 16-bit
 * floats, which are reduced in f32); avg combines as sum. */
void dt_gloo_combine_(int32_t dtype, int32_t redop, void* out, const void* a, const void* b, size_t n);
/* out[i] /= divisor for floats (f32, f64), in the element type */
void dt_gloo_divide_(int32_t dtype, void* buf, size_t n, int64_t divisor);
/* 16-bit floats <-> f32 */
void dt_gloo_widen_(int32_t dtype, float* out, const void* in, size_t n);
void dt_gloo_narrow_(int32_t dtype, void* out, const float* in, size_t n);
/* out = src[0] op src[1] op … op src[w-1] (rank order), 16-bit floats combined in f32 and rounded once */
void dt_gloo_reduce_in_order_(int32_t dtype, int32_t redop, void* out, const char* src, size_t stride_bytes, int w,
                              size_t n, int64_t divisor);
