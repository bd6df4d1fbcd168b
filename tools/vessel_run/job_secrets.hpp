#pragma once
// What one job's ranks share and nobody else should: a fresh cluster token in a private file, and
// the port rank 0 serves the rendezvous store on.

#include <cstdint>
#include <string>

#include "wire/result.hpp"

namespace vessel::tools {

/// A private directory (0700) holding `token` (0600): 32 random bytes (OpenSSL RAND_bytes) as hex.
/// The token travels as VESSEL_TOKEN_FILE, never on a command line, where ps would show it.
/// Removes both when destroyed.
class token_file {
 public:
  static result<token_file> create();
  token_file(token_file&& other) noexcept;
  token_file& operator=(token_file&&) = delete;
  ~token_file();

  const std::string& path() const noexcept { return path_; }

 private:
  token_file(std::string dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  std::string dir_;
  std::string path_;
};

/// A TCP port free right now on `bind_address` (the kernel's choice of ephemeral port). Another
/// process may take it before rank 0 binds it; the window is short and a clash fails loudly.
result<std::uint16_t> pick_free_port(const std::string& bind_address);

}  // namespace vessel::tools
