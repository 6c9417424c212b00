// Files named or written by people assay should not trust: a candidate, a golden, a `.error` file
// or a path on the command line must never make assay read, replace or print something it was
// not asked to. Three rules, used by every command:
//
//   - an output path (a report, a repro bundle, a decoded dump, a golden) that exists and is not a
//     regular file (a device such as /dev/null, a FIFO, a socket, a directory or a symbolic link)
//     is refused, never replaced by a regular file; so is an output path that is one of the run's
//     inputs (the same file: device and inode), registered with note_input;
//   - a small text file written by someone else (a candidate's `<case>.error`) is read only when it
//     is a regular file (not a link, FIFO or device), up to a cap;
//   - text from inputs reaches the terminal escaped (control characters as \xNN, at most a cap of
//     characters): a one-line error stays one line.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace assay {

// Remembers `path` (when it names an existing file) as an input of this run: an output path that is
// the same file is then refused by check_output_path. Thread-safe. Off until guard_inputs() is
// called: the assay binary calls it first thing (one run, one process); a library user or a test
// that writes and reads the same file over and over does not.
void guard_inputs();
void note_input(const std::string& path);

// InputError "<option> <path>: ..." when `path` exists and is not a regular file, or is a file
// noted with note_input. A path that does not exist yet is fine (its parent is created later).
void check_output_path(const std::string& path, std::string_view option);

struct SmallText {
  std::string text;
  bool truncated = false;  // the file was longer than the cap
};
// Reads a regular file (never through a symbolic link; never a FIFO, device or directory) up to
// `cap` bytes. InputError naming the path otherwise.
SmallText read_small_text(const std::string& path, size_t cap);

// `s` with C0 controls (newline included), DEL and ESC sequences shown as \xNN and at most `max`
// bytes (then "... (N bytes)"): safe to print on one terminal line.
std::string printable(std::string_view s, size_t max = 2000);

// The same, keeping newlines (for multi-line tails such as a worker log): every other control
// character escaped, at most `max` bytes.
std::string printable_lines(std::string_view s, size_t max = 16000);

}  // namespace assay
