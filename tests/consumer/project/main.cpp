// Built against an installed vessel: proves headers, generated schema and libraries are exported.
#include <cstdio>

#include "wire/errc.hpp"
#include "wire/frame.capnp.h"

int main() {
  std::error_code ec = vessel::wire::errc::crc_mismatch;
  if (ec.message().empty()) return 1;
  if (vessel::wire::schema::PROTOCOL_VERSION != 1) return 2;
  std::printf("consumer linked vessel: %s\n", ec.message().c_str());
  return 0;
}
