#pragma once
// Turns a rank's byte stream into whole lines prefixed with "[rank] ", so that the output of many
// ranks sharing one terminal never interleaves mid-line.

#include <string>
#include <string_view>

namespace vessel::tools {

class line_prefixer {
 public:
  /// A line longer than this is cut and emitted as it stands: a rank printing megabytes without a
  /// newline must not grow the launcher without bound.
  static constexpr std::size_t max_line_bytes = 64 * 1024;

  explicit line_prefixer(int rank) : prefix_("[" + std::to_string(rank) + "] ") {}

  /// Appends `bytes`; calls `emit(text)` with each completed, prefixed line (newline included).
  template <class Emit>
  void feed(std::string_view bytes, Emit&& emit) {
    while (!bytes.empty()) {
      auto newline = bytes.find('\n');
      auto take = newline == std::string_view::npos ? bytes.size() : newline + 1;
      if (pending_.empty()) pending_ = prefix_;
      pending_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (newline != std::string_view::npos) {
        emit(std::string_view{pending_});
        pending_.clear();
      } else if (pending_.size() >= max_line_bytes + prefix_.size()) {
        pending_.push_back('\n');
        emit(std::string_view{pending_});
        pending_.clear();
      }
    }
  }

  /// At end of stream: a last line without its newline is emitted with one.
  template <class Emit>
  void finish(Emit&& emit) {
    if (pending_.empty()) return;
    pending_.push_back('\n');
    emit(std::string_view{pending_});
    pending_.clear();
  }

 private:
  std::string prefix_;
  std::string pending_;
};

}  // namespace vessel::tools
