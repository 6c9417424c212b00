// What the generated scripts of `assay bisect --git` report about each commit: they append one line
// per event to <work>/progress ("start H SUBJECT", "build H RC", "judge H RC", "done H RC MAPPED");
// Progress reads them back (for -v and for the messages), with each commit's logs and report.json.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verify/bisect/git_supervisor.h"

namespace assay::git_bisect {
namespace fs = std::filesystem;

// What the scripts said about one commit (from the progress file).
struct CommitState {
  std::string subject;
  int build_rc = -1, judge_rc = -1, rc = -1, mapped = -1;
  bool done = false;
};

class Progress {
 public:
  Progress(fs::path file, fs::path commits, bool verbose) : file_(std::move(file)), commits_(std::move(commits)), verbose_(verbose) {}
  // Reads the lines appended since the last call.
  void poll() {
    const std::string s = slurp(file_);
    while (pos_ < s.size()) {
      const auto nl = s.find('\n', pos_);
      if (nl == std::string::npos) return;
      handle(s.substr(pos_, nl - pos_));
      pos_ = nl + 1;
    }
  }
  const CommitState* get(const std::string& h) const {
    auto it = states_.find(h);
    return it == states_.end() ? nullptr : &it->second;
  }
  // "Passed", "1 Incorrect, 2 Passed", "build failed (exit 2)", "timed out", ...
  std::string summary(const std::string& h, double timeout_s) const {
    const auto* c = get(h);
    if (!c) return "not run";
    if (c->rc == 124 || c->rc == 137) return fmt::format("timed out after {:g} s (build and judge)", timeout_s);
    if (c->build_rc > 0) {
      // The first line that says "error", else the last line.
      const std::string log = slurp(commits_ / h / "build.log");
      std::string tail = last_line(log);
      std::istringstream ls(log);
      for (std::string l; std::getline(ls, l);)
        if (l.find("error") != std::string::npos) {
          tail = trim(l);
          break;
        }
      return fmt::format("build failed (exit {}){}", c->build_rc, tail.empty() ? "" : ": " + tail);
    }
    try {
      const auto j = nlohmann::json::parse(slurp(commits_ / h / "report.json"));
      std::map<std::string, int> n;
      for (const auto& cj : j.at("cases")) n[cj.at("verdict").get<std::string>()]++;
      std::string o;
      for (const char* v : {"Incorrect", "Failed", "Hung", "Stale", "NotRun", "NotSupported", "Passed"})
        if (n.count(v)) o += fmt::format("{}{} {}", o.empty() ? "" : ", ", n[v], v);
      if (!o.empty()) return o;
    } catch (const std::exception&) {
    }
    if (c->judge_rc >= 0) {
      const auto tail = last_line(slurp(commits_ / h / "judge.log"));
      return fmt::format("could not judge (assay exit {}){}", c->judge_rc, tail.empty() ? "" : ": " + tail);
    }
    return fmt::format("could not judge (exit {})", c->rc);
  }
  // "op/case: Verdict: reason" for every case that did not pass.
  std::vector<std::string> failing(const std::string& h) const {
    std::vector<std::string> out;
    try {
      const auto j = nlohmann::json::parse(slurp(commits_ / h / "report.json"));
      for (const auto& cj : j.at("cases")) {
        const auto v = cj.at("verdict").get<std::string>();
        if (v == "Passed") continue;
        out.push_back(fmt::format("{}/{}: {}: {}", cj.value("op", "?"), cj.value("case", "?"), v, cj.value("reason", "")));
      }
    } catch (const std::exception&) {
    }
    return out;
  }
  double timeout_s = 0;

 private:
  void handle(const std::string& line) {
    std::istringstream ss(line);
    std::string kind, h;
    ss >> kind >> h;
    auto& c = states_[h];
    if (kind == "start") {
      c = CommitState{};
      std::getline(ss, c.subject);
      c.subject = trim(c.subject);
    } else if (kind == "build") {
      ss >> c.build_rc;
    } else if (kind == "judge") {
      ss >> c.judge_rc;
    } else if (kind == "done") {
      ss >> c.rc >> c.mapped;
      c.done = true;
      if (verbose_)
        std::cerr << fmt::format("bisect: {} {}: {} -> {} ({})\n", h.substr(0, 12), c.subject, summary(h, timeout_s), c.mapped,
                                 c.mapped == 0 ? "good" : c.mapped == 1 ? "bad" : "skip")
                  << std::flush;
    }
  }
  fs::path file_, commits_;
  bool verbose_;
  size_t pos_ = 0;
  std::map<std::string, CommitState> states_;
};

}  // namespace assay::git_bisect
