#pragma once
// Running a shell command line the way a user would (vessel-run, mpirun) and reading what it
// printed: shared by the integration tests that drive launchers through popen.

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace vessel::test {

/// Runs `command` through /bin/sh, returns its stdout; `status` is its exit status, 128 + the
/// signal if it was killed, or -1 if it could not be started.
inline std::string run_capture(const std::string& command, int& status) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int raw = ::pclose(p);
  status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return out;
}

/// How often `what` occurs in `text` (overlapping occurrences counted).
inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

inline bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

/// mpirun that cannot start processes here (no slots, no ORTE) says so: not vessel's failure.
/// `ok_marker` is what a rank prints when it succeeded.
inline bool mpirun_cannot_start(const std::string& out, int status, const std::string& ok_marker) {
  return out.find("not enough slots") != std::string::npos ||
         (status != 0 && out.find("orte_") != std::string::npos &&
          out.find(ok_marker) == std::string::npos);
}

}  // namespace vessel::test
