// vessel-bench: the project's benchmark tool. Every benchmark measures vessel against a peer
// in the same invocation (interleaved runs, medians) and reports the ratio, so that numbers
// from a noisy 2-core VM still compare like with like.
//
//   vessel-bench MODE [--transport tcp|shm|all] [--sizes 8,64,1K,1M] [--iterations N]
//                     [--runs R] [--ranks N] [--csv FILE] [--verbose]

#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using vessel::bench::bench_options;
using vessel::bench::mode_entry;

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: vessel-bench MODE [--transport T|all] [--sizes LIST] [--iterations N]\n"
               "                         [--runs R] [--ranks N] [--csv FILE] [--verbose]\n"
               "  LIST: comma-separated sizes in bytes, K/M/G suffixes (powers of 1024)\n"
               "modes:\n");
  std::vector<mode_entry> entries(vessel::bench::registered_modes().begin(),
                                  vessel::bench::registered_modes().end());
  std::sort(entries.begin(), entries.end(), [](const mode_entry& a, const mode_entry& b) {
    return a.mode != b.mode ? a.mode < b.mode : a.transport < b.transport;
  });
  for (const auto& e : entries)
    std::fprintf(to, "  %-10.*s --transport %-5.*s %.*s\n", static_cast<int>(e.mode.size()),
                 e.mode.data(), static_cast<int>(e.transport.size()), e.transport.data(),
                 static_cast<int>(e.description.size()), e.description.data());
}

std::optional<std::size_t> parse_count(std::string_view s) {
  std::size_t v = 0;
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc{} || p == s.data())
    return std::nullopt;
  std::size_t mult = 1;
  if (p != end) {
    switch (*p) {
    case 'k': case 'K': mult = std::size_t{1} << 10; break;
    case 'm': case 'M': mult = std::size_t{1} << 20; break;
    case 'g': case 'G': mult = std::size_t{1} << 30; break;
    default: return std::nullopt;
    }
    ++p;
    if (p != end && (*p == 'i' || *p == 'I'))
      ++p;
    if (p != end && (*p == 'b' || *p == 'B'))
      ++p;
    if (p != end)
      return std::nullopt;
  }
  return v * mult;
}

std::optional<std::vector<std::size_t>> parse_sizes(std::string_view s) {
  std::vector<std::size_t> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const auto item = s.substr(0, comma);
    auto v = parse_count(item);
    if (!v || *v == 0)
      return std::nullopt;
    out.push_back(*v);
    if (comma == std::string_view::npos)
      break;
    s.remove_prefix(comma + 1);
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string mode = argv[1];
  std::string transport = "all";
  std::string csv;
  bench_options opts;

  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "vessel-bench: %s needs a value\n", argv[i]);
        return std::nullopt;
      }
      return std::string_view(argv[++i]);
    };
    const auto count = [&](std::size_t& into) {
      auto v = value();
      auto n = v ? parse_count(*v) : std::nullopt;
      if (!n) {
        std::fprintf(stderr, "vessel-bench: bad number for %.*s\n", static_cast<int>(arg.size()),
                     arg.data());
        return false;
      }
      into = *n;
      return true;
    };
    if (arg == "--transport") {
      auto v = value();
      if (!v)
        return 2;
      transport = *v;
    } else if (arg == "--sizes") {
      auto v = value();
      auto sizes = v ? parse_sizes(*v) : std::nullopt;
      if (!sizes) {
        std::fprintf(stderr, "vessel-bench: bad --sizes list\n");
        return 2;
      }
      opts.sizes = std::move(*sizes);
    } else if (arg == "--iterations") {
      if (!count(opts.iterations))
        return 2;
    } else if (arg == "--runs") {
      if (!count(opts.runs) || opts.runs == 0)
        return 2;
    } else if (arg == "--ranks") {
      if (!count(opts.ranks))
        return 2;
    } else if (arg == "--csv") {
      auto v = value();
      if (!v)
        return 2;
      csv = *v;
    } else if (arg == "--verbose" || arg == "-v") {
      opts.verbose = true;
    } else {
      std::fprintf(stderr, "vessel-bench: unknown argument %s\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }

  std::vector<mode_entry> selected;
  for (const auto& e : vessel::bench::registered_modes())
    if (e.mode == mode && (transport == "all" || e.transport == transport))
      selected.push_back(e);
  if (selected.empty()) {
    std::fprintf(stderr, "vessel-bench: no benchmark for mode '%s' transport '%s'\n",
                 mode.c_str(), transport.c_str());
    usage(stderr);
    return 2;
  }
  std::sort(selected.begin(), selected.end(),
            [](const mode_entry& a, const mode_entry& b) { return a.transport < b.transport; });

  vessel::bench::report out;
  int rc = 0;
  for (const auto& e : selected) {
    if (int r = e.run(opts, out); r != 0) {
      std::fprintf(stderr, "vessel-bench: %s/%.*s failed (%d)\n", mode.c_str(),
                   static_cast<int>(e.transport.size()), e.transport.data(), r);
      rc = 1;
    }
  }
  out.print_table(std::cout);
  if (!csv.empty() && !out.write_csv(csv)) {
    std::fprintf(stderr, "vessel-bench: cannot write %s\n", csv.c_str());
    rc = 1;
  }
  return rc;
}
