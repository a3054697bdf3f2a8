// io/sha256.hpp against the FIPS 180-4 / NIST known answers, in one piece and in odd chunks.
#include <catch2/catch.hpp>

#include <string>

#include "accel/io/sha256.hpp"

using namespace accel;
using namespace accel::io;

TEST_CASE("sha256_hex matches the FIPS 180-4 known answers", "[io][sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("Sha256 fed a million 'a' in odd chunks gives the one-shot digest", "[io][sha256]") {
  const std::string million(1000000, 'a');
  const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(sha256_hex(million) == expected);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{63}, std::size_t{65}, std::size_t{4097}}) {
    INFO("chunk " << chunk);
    Sha256 h;
    for (std::size_t at = 0; at < million.size(); at += chunk) h.update(million.data() + at, std::min(chunk, million.size() - at));
    CHECK(h.hex_digest() == expected);
  }
}

TEST_CASE("a finished Sha256 refuses more input instead of returning a wrong digest", "[io][sha256]") {
  Sha256 h;
  h.update("abc");
  CHECK(h.hex_digest() == sha256_hex("abc"));
  CHECK_THROWS_AS(h.update("d"), ValueError);
  CHECK_THROWS_AS(h.digest(), ValueError);
}
