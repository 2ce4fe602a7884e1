// A dipu_store over a c10d::Store (dipu_store_callback_create), so the
// dicl backend's process groups meet through whatever store torch made:
// the PrefixStore over TCP, file or hash stores. A c10d exception becomes
// the callback's error status and message: a store that fails or times out
// fails the collective that used it.
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/exception.h>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "common.h"

namespace torch_dipu::dicl {

dipu_store* make_store(c10::intrusive_ptr<c10d::Store> store,
                       std::chrono::milliseconds timeout);

namespace {

using Store = c10::intrusive_ptr<c10d::Store>;

Store& of(void* ctx) { return *static_cast<Store*>(ctx); }

std::chrono::milliseconds timeout_of(int64_t ms) {
  return ms < 0 ? c10d::Store::kNoTimeout : std::chrono::milliseconds(ms);
}

std::vector<std::string> keys_of(const char* const* keys, size_t n) {
  return std::vector<std::string>(keys, keys + n);
}

// Runs `body`; an exception becomes a status and the reply's message (a
// timeout of the store is DIPU_STATUS_TIMEOUT). Nothing unwinds into Rust.
template <typename F>
int32_t guarded(dipu_store_reply* reply, F&& body) {
  try {
    body();
    return DIPU_OK;
  } catch (const c10::DistError& e) {
    dipu_store_reply_error(reply, e.what_without_backtrace());
    std::string msg = e.what_without_backtrace();
    bool timeout = msg.find("imeout") != std::string::npos ||
                   msg.find("timed out") != std::string::npos;
    return timeout ? DIPU_STATUS_TIMEOUT : DIPU_STATUS_VENDOR_ERROR;
  } catch (const c10::Error& e) {
    dipu_store_reply_error(reply, e.what_without_backtrace());
    return DIPU_STATUS_VENDOR_ERROR;
  } catch (const std::exception& e) {
    dipu_store_reply_error(reply, e.what());
    return DIPU_STATUS_VENDOR_ERROR;
  } catch (...) {
    dipu_store_reply_error(reply, "an unknown C++ exception");
    return DIPU_STATUS_VENDOR_ERROR;
  }
}

int32_t set(void* ctx, const char* key, const void* value, size_t len, dipu_store_reply* r) {
  return guarded(r, [&] {
    auto p = static_cast<const uint8_t*>(value);
    of(ctx)->set(key, std::vector<uint8_t>(p, p + len));
  });
}

int32_t get(void* ctx, const char* key, int64_t ms, dipu_store_reply* r) {
  return guarded(r, [&] {
    of(ctx)->wait({key}, timeout_of(ms));
    std::vector<uint8_t> v = of(ctx)->get(key);
    dipu_store_reply_value(r, v.data(), v.size());
  });
}

int32_t add(void* ctx, const char* key, int64_t delta, int64_t* out, dipu_store_reply* r) {
  return guarded(r, [&] { *out = of(ctx)->add(key, delta); });
}

int32_t compare_set(void* ctx, const char* key, const void* expected, size_t elen,
                    const void* desired, size_t dlen, dipu_store_reply* r) {
  return guarded(r, [&] {
    auto e = static_cast<const uint8_t*>(expected);
    auto d = static_cast<const uint8_t*>(desired);
    std::vector<uint8_t> v = of(ctx)->compareSet(key, std::vector<uint8_t>(e, e + elen),
                                                 std::vector<uint8_t>(d, d + dlen));
    dipu_store_reply_value(r, v.data(), v.size());
  });
}

int32_t check(void* ctx, const char* const* keys, size_t n, int32_t* out, dipu_store_reply* r) {
  return guarded(r, [&] { *out = of(ctx)->check(keys_of(keys, n)) ? 1 : 0; });
}

int32_t wait(void* ctx, const char* const* keys, size_t n, int64_t ms, dipu_store_reply* r) {
  return guarded(r, [&] { of(ctx)->wait(keys_of(keys, n), timeout_of(ms)); });
}

int32_t delete_key(void* ctx, const char* key, int32_t* out, dipu_store_reply* r) {
  return guarded(r, [&] { *out = of(ctx)->deleteKey(key) ? 1 : 0; });
}

int32_t num_keys(void* ctx, int64_t* out, dipu_store_reply* r) {
  return guarded(r, [&] { *out = of(ctx)->getNumKeys(); });
}

void destroy(void* ctx) { delete static_cast<Store*>(ctx); }

}  // namespace

dipu_store* make_store(c10::intrusive_ptr<c10d::Store> store,
                       std::chrono::milliseconds timeout) {
  dipu_store_callbacks c{};
  c.ctx = new Store(std::move(store));
  c.set = set;
  c.get = get;
  c.add = add;
  c.compare_set = compare_set;
  c.check = check;
  c.wait = wait;
  c.delete_key = delete_key;
  c.num_keys = num_keys;
  c.destroy = destroy;
  dipu_store* out = nullptr;
  dipu_status st = dipu_store_callback_create(&c, timeout.count() > 0 ? timeout.count() : -1, &out);
  if (st != DIPU_OK) {
    destroy(c.ctx);
    throw_status("dipu_store_callback_create", st);
  }
  return out;
}

}  // namespace torch_dipu::dicl
