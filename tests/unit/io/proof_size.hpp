#pragma once
// Which size the transport proofs run at. Full size (1 GiB over TCP; 10 M small frames
// and 10 GiB of large ones over shm between two processes) in io_long_tests, which is compiled
// with VESSEL_FULL_SIZE_PROOFS, labelled `long` and run by `make long` from a release build; or
// anywhere with VESSEL_LONG_TESTS=1. Elsewhere (io_tcp_tests, io_shm_tests under ASan and TSan,
// and the release build's own run of them) the same tests run at reduced sizes.

#include <cstdlib>

namespace vessel::io::test {

inline bool full_size_proofs() {
#if defined(VESSEL_FULL_SIZE_PROOFS)
  return true;
#else
  const char* v = std::getenv("VESSEL_LONG_TESTS");
  return v != nullptr && v[0] == '1';
#endif
}

}  // namespace vessel::io::test
