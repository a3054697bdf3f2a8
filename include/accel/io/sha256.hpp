// SHA-256 over OpenSSL's libcrypto, for fingerprinting tensor bytes in `accel inspect`.
//
//   Sha256 h; h.update(p, n); ...; std::string hex = h.hex_digest();
//   sha256_hex(p, n), sha256_hex(bytes)         one-shot
//
// libcrypto picks the fastest code the CPU runs (SHA extensions, AVX2), several times faster than
// portable C; the accel::accel target links OpenSSL::Crypto for it.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <openssl/evp.h>

#include "accel/core/errors.hpp"

namespace accel::io {

/// Incremental SHA-256; update() any number of times, then digest() or hex_digest() once.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) fail("EVP_DigestInit_ex");
  }

  Sha256& update(const void* data, std::size_t n) {
    if (done_) throw ValueError("Sha256::update after digest(): the digest is final");
    if (n && EVP_DigestUpdate(ctx_.get(), data, n) != 1) fail("EVP_DigestUpdate");
    return *this;
  }
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }

  /// The 32-byte digest; the object takes no more updates afterwards.
  std::array<unsigned char, 32> digest() {
    if (done_) throw ValueError("Sha256::digest called twice");
    std::array<unsigned char, 32> out{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), out.data(), &len) != 1 || len != out.size()) fail("EVP_DigestFinal_ex");
    done_ = true;
    return out;
  }
  /// Lower-case hex of digest().
  std::string hex_digest() {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    s.reserve(64);
    for (const unsigned char c : digest()) {
      s += digits[c >> 4];
      s += digits[c & 15];
    }
    return s;
  }

 private:
  [[noreturn]] static void fail(const char* what) { throw Error(std::string("SHA-256: OpenSSL ") + what + " failed"); }

  struct CtxFree {
    void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx_;
  bool done_ = false;
};

/// SHA-256 of `n` bytes as lower-case hex.
inline std::string sha256_hex(const void* data, std::size_t n) { return Sha256().update(data, n).hex_digest(); }
inline std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

}  // namespace accel::io
