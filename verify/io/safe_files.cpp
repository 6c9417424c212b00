#include "verify/io/safe_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "reference/core/check.h"

namespace assay {

namespace {
std::mutex g_inputs_mutex;
bool g_guard = false;
std::set<std::pair<dev_t, ino_t>>& inputs() {
  static std::set<std::pair<dev_t, ino_t>> s;
  return s;
}

std::string escape(std::string_view s, size_t max, bool keep_newlines) {
  std::string o;
  o.reserve(std::min(s.size(), max) + 16);
  size_t i = 0;
  for (; i < s.size() && o.size() < max; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch == '\n' && keep_newlines) o += '\n';
    else if (ch == '\t') o += keep_newlines ? "\t" : " ";
    else if (ch < 0x20 || ch == 0x7f) o += fmt::format("\\x{:02x}", ch);
    else o += static_cast<char>(ch);
  }
  if (i < s.size()) o += fmt::format("... ({} bytes)", s.size());
  return o;
}
}  // namespace

void guard_inputs() {
  std::lock_guard<std::mutex> lk(g_inputs_mutex);
  g_guard = true;
}

void note_input(const std::string& path) {
  {
    std::lock_guard<std::mutex> lk(g_inputs_mutex);
    if (!g_guard) return;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  std::lock_guard<std::mutex> lk(g_inputs_mutex);
  inputs().insert({st.st_dev, st.st_ino});
}

void check_output_path(const std::string& path, std::string_view option) {
  const std::string who = option.empty() ? path : fmt::format("{} {}", option, path);
  if (path.empty()) throw InputError(fmt::format("{}: empty output path", option));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw InputError(fmt::format("{}: cannot stat the output path: {}", printable(who), std::strerror(errno)));
  }
  if (S_ISLNK(st.st_mode))
    throw InputError(fmt::format("{}: the output path is a symbolic link; refused (give the file it points to)", printable(who)));
  if (!S_ISREG(st.st_mode))
    throw InputError(fmt::format("{}: the output path exists and is not a regular file (a device, FIFO, socket or directory); "
                                 "refused",
                                 printable(who)));
  std::lock_guard<std::mutex> lk(g_inputs_mutex);
  if (inputs().count({st.st_dev, st.st_ino}))
    throw InputError(fmt::format("{}: the output path is one of this run's inputs; refused (it would be overwritten)",
                                 printable(who)));
}

SmallText read_small_text(const std::string& path, size_t cap) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    throw InputError(fmt::format("{}: cannot read: {}", printable(path),
                                 errno == ELOOP ? "a symbolic link (refused)" : std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("{}: not a regular file (a FIFO, device, socket or directory); refused", printable(path)));
  }
  SmallText r;
  r.text.resize(cap);
  size_t got = 0;
  while (got < cap) {
    const ssize_t n = ::read(fd, r.text.data() + got, cap - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  r.text.resize(got);
  char extra = 0;
  r.truncated = got == cap && ::read(fd, &extra, 1) == 1;
  ::close(fd);
  return r;
}

std::string printable(std::string_view s, size_t max) { return escape(s, max, false); }
std::string printable_lines(std::string_view s, size_t max) { return escape(s, max, true); }

}  // namespace assay
