// replay_main: the main() of the fuzz harnesses in builds without libFuzzer (gcc, CI). Feeds every
// regular file of the given files and directories (directories recursively, in sorted order) to
// LLVMFuzzerTestOneInput once. A finding aborts the process (the test fails) after the file's name
// was printed. Exit 2 if an argument does not exist or nothing was replayed.
//   fuzz_<harness> [-q] FILE_OR_DIR...
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  bool quiet = false;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-q") {
      quiet = true;
      continue;
    }
    std::error_code ec;
    if (fs::is_directory(a, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.is_regular_file()) in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(a, ec)) {
      files.push_back(a);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", a.c_str());
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs (usage: %s [-q] FILE_OR_DIR...)\n", argv[0]);
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: %s: cannot read\n", f.c_str());
      return 2;
    }
    if (!quiet) std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "replay: %zu input(s) ok in %.2f s\n", files.size(), s);
  return 0;
}
