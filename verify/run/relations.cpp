// Relations that need no oracle: planning the related cases, running and reassembling them, judging
// (verify/run/relations.h).
#include "verify/run/relations.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/core/check.h"
#include "verify/judge/candidate.h"
#include "verify/judge/compare.h"
#include "verify/run/worker.h"

namespace assay::relations {

namespace {

// What a relation must know of an op: its state inputs and the outputs they are handed over from,
// the field that says the states are given, and how a packed case lists its sequences.
struct OpSpec {
  std::vector<std::pair<std::string, std::string>> states;  // input -> output
  std::string state_flag;                                   // case field: states given
  enum class Pack { none, seqlens, cu_seqlens } pack = Pack::none;
  std::vector<std::string> pack_inputs;   // inputs that only a packed case has
  bool states_per_sequence = false;       // packed: a state per sequence ([Nseq, ...]); else sequence 0's only
  std::string packed_final;               // ssd: the per-sequence final states of a packed case
  std::vector<std::string> batch_lists;   // list fields with one entry per batch row
  std::string paged_input;                // an input that makes the case paged (no batch relation)
};

const OpSpec* op_spec(std::string_view op) {
  static const std::map<std::string, OpSpec, std::less<>> specs = [] {
    std::map<std::string, OpSpec, std::less<>> m;
    OpSpec ssd;
    ssd.states = {{"initial_states", "final_states"}};
    ssd.state_flag = "initial_states";
    ssd.pack = OpSpec::Pack::seqlens;
    ssd.pack_inputs = {"cu_seqlens", "seq_idx"};
    ssd.packed_final = "varlen_states";
    m["ssd"] = ssd;
    OpSpec gd;
    gd.states = {{"initial_state", "final_state"}};
    gd.state_flag = "initial_state";
    gd.pack = OpSpec::Pack::cu_seqlens;
    gd.pack_inputs = {"cu_seqlens"};
    gd.states_per_sequence = true;
    m["gated_delta"] = gd;
    OpSpec m3;
    m3.states = {{"Angle_State", "final_angle"}, {"K_State", "final_k"}, {"SSM_State", "final_ssm"}, {"V_State", "final_v"}};
    m3.state_flag = "initial_states";
    m3.pack = OpSpec::Pack::cu_seqlens;
    m3.pack_inputs = {"cu_seqlens"};
    m3.states_per_sequence = true;
    m["mamba3"] = m3;
    OpSpec at;
    at.pack_inputs = {"cu_seqlens_q", "cu_seqlens_k"};
    at.batch_lists = {"seqlens_q", "seqlens_k"};
  at.paged_input = "block_table";
    m["attention"] = at;
    return m;
  }();
  auto it = specs.find(op);
  return it == specs.end() ? nullptr : &it->second;
}

bool is_batch_axis(const std::string& a) { return a == "B" || a == "Nseq" || a == "NS" || a == "seq"; }

kernels::TensorSpec spec_of(const Tensor& t) { return {t.name, t.axes, t.shape, t.dtype}; }

std::vector<Tensor> sorted(std::vector<Tensor> v) {
  std::sort(v.begin(), v.end(), [](const Tensor& a, const Tensor& b) { return a.name < b.name; });
  return v;
}
std::vector<kernels::TensorSpec> sorted(std::vector<kernels::TensorSpec> v) {
  std::sort(v.begin(), v.end(), [](const kernels::TensorSpec& a, const kernels::TensorSpec& b) { return a.name < b.name; });
  return v;
}

bool packed(const Golden& g, const OpSpec& s) {
  for (const auto& n : s.pack_inputs)
    if (g.input(n)) return true;
  return false;
}

// Lengths of a packed case's sequences, from its case fields.
std::vector<int64_t> packed_lengths(const Golden& g, const OpSpec& s) {
  std::vector<int64_t> len;
  const auto& f = g.case_fields;
  if (s.pack == OpSpec::Pack::seqlens && f.has_list("seqlens")) {
    for (double v : f.get_list("seqlens")) len.push_back(static_cast<int64_t>(v));
  } else if (s.pack == OpSpec::Pack::cu_seqlens && f.has_list("cu_seqlens")) {
    const auto cu = f.get_list("cu_seqlens");
    for (size_t i = 1; i < cu.size(); ++i) len.push_back(static_cast<int64_t>(cu[i] - cu[i - 1]));
  }
  return len;
}

Shape with_dim(Shape s, int axis, int64_t n) {
  s[static_cast<size_t>(axis)] = n;
  return s;
}

std::vector<int64_t> iota(int64_t b, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = b + i;
  return v;
}

// A copy of the case fields with some replaced.
CaseFields with_fields(const CaseFields& f, const std::map<std::string, CaseFields::Value>& set) {
  CaseFields r = f;
  for (const auto& [k, v] : set) r.set(k, v);
  return r;
}

void add_note_outputs_without(const Golden& g, std::string_view axis, std::vector<std::string>& notes) {
  for (const auto& o : g.outputs)
    if (axis_of(o.expected.axes, axis) < 0 && !(axis == "B" && !o.expected.axes.empty() && is_batch_axis(o.expected.axes[0])))
      notes.push_back(fmt::format("output '{}' has no {} axis: not covered", o.expected.name, axis));
}

// ---- batch -------------------------------------------------------------------------------------------

// A run of the batch rows `idx` (every input and output whose first axis is B gathered).
SubRun batch_run(const Golden& g, const OpSpec& s, const std::vector<int64_t>& idx, std::string label, int seq) {
  SubRun r;
  r.label = std::move(label);
  r.sequence = seq;
  const int64_t B = g.case_fields.get_int("B");
  std::map<std::string, CaseFields::Value> set{{"B", static_cast<int64_t>(idx.size())}};
  for (const auto& lf : s.batch_lists)
    if (g.case_fields.has_list(lf)) {
      const auto v = g.case_fields.get_list(lf);
      if (static_cast<int64_t>(v.size()) == B) {
        std::vector<int64_t> nv;
        for (auto i : idx) nv.push_back(static_cast<int64_t>(v[static_cast<size_t>(i)]));
        set[lf] = nv;
      }
    }
  r.fields = with_fields(g.case_fields, set);
  for (const auto& t : g.inputs)
    r.inputs.push_back(!t.axes.empty() && t.axes[0] == "B" ? gather(t, 0, idx) : t);
  for (const auto& o : g.outputs) {
    const auto& e = o.expected;
    if (!e.axes.empty() && e.axes[0] == "B") r.outputs.push_back({e.name, e.axes, with_dim(e.shape, 0, static_cast<int64_t>(idx.size())), e.dtype});
    else r.outputs.push_back(spec_of(e));
  }
  r.inputs = sorted(std::move(r.inputs));
  r.outputs = sorted(std::move(r.outputs));
  return r;
}

void plan_batch(const Golden& g, const OpSpec& s, bool bitwise, std::vector<Check>& out) {
  Check alone{"batch.alone", "batch", "every sequence of the batch run alone (B = 1)", "", bitwise, {}, {}};
  Check ext{"batch.extended", "batch", "the batch with a copy of its last sequence appended (B + 1)", "", bitwise, {}, {}};
  const int64_t B = g.case_fields.get_int("B", 0);
  const Tensor* any_b = nullptr;
  for (const auto& t : g.inputs)
    if (!t.axes.empty() && t.axes[0] == "B") any_b = &t;
  std::string na;
  if (packed(g, s)) na = "a packed (varlen) case: its sequences are checked by the varlen relation";
  else if (!s.paged_input.empty() && g.input(s.paged_input))
    na = "paged KV: the fixture sizes the page pool for the whole batch (a sub-batch would need its own pool)";
  else if (!any_b || B < 1 || any_b->shape[0] != B) na = "no input with a leading batch axis B of the case's B";
  if (!na.empty()) {
    alone.not_applicable = ext.not_applicable = na;
    out.push_back(std::move(alone));
    out.push_back(std::move(ext));
    return;
  }
  if (B < 2) alone.not_applicable = "B = 1: no other sequence to remove";
  for (int64_t b = 0; B >= 2 && b < B; ++b) {
    SubRun r = batch_run(g, s, {b}, fmt::format("sequence {} alone (B = 1)", b), static_cast<int>(b));
    for (const auto& o : g.outputs)
      if (!o.expected.axes.empty() && o.expected.axes[0] == "B") r.places.push_back({o.expected.name, o.expected.name, 0, 0, b, 1});
    alone.runs.push_back(std::move(r));
  }
  auto idx = iota(0, B);
  idx.push_back(B - 1);
  SubRun r = batch_run(g, s, idx, fmt::format("the batch plus a copy of sequence {} (B = {})", B - 1, B + 1), -1);
  for (const auto& o : g.outputs)
    if (!o.expected.axes.empty() && o.expected.axes[0] == "B") r.places.push_back({o.expected.name, o.expected.name, 0, 0, 0, B});
  ext.runs.push_back(std::move(r));
  for (auto* c : {&alone, &ext}) add_note_outputs_without(g, "B", c->notes);
  out.push_back(std::move(alone));
  out.push_back(std::move(ext));
}

// ---- continuation ------------------------------------------------------------------------------------

void plan_continuation(const Golden& g, const OpSpec& s, std::vector<Check>& out) {
  Check c{"continuation", "continuation", "", "", false, {}, {}};
  const int64_t T = g.case_fields.get_int("T", 0);
  if (s.states.empty()) c.not_applicable = fmt::format("op {} hands over no state", g.prov.op);
  else if (packed(g, s)) c.not_applicable = "a packed (varlen) case";
  else if (T < 2) c.not_applicable = fmt::format("T = {}: nothing to split", T);
  for (const auto& [in, o] : s.states)
    if (c.not_applicable.empty() && !g.output(o)) c.not_applicable = fmt::format("the golden has no '{}' output to hand over", o);
  if (!c.not_applicable.empty()) {
    out.push_back(std::move(c));
    return;
  }
  // Split mid-chunk: half of T, moved off a chunk boundary (the chunk cumsum must restart from the
  // handed-over state, not from the chunk grid).
  const int64_t Q = g.case_fields.get_int("chunk_size", 64);
  int64_t T1 = T / 2;
  if (Q > 1 && T1 % Q == 0 && T1 > 1) --T1;
  const int64_t T2 = T - T1;
  c.what = fmt::format("tokens [0, {}) then [{}, {}) with the state handed over (a chunked prefill of T = {})", T1, T1, T, T);
  for (int part = 0; part < 2; ++part) {
    const int64_t t0 = part == 0 ? 0 : T1, n = part == 0 ? T1 : T2;
    SubRun r;
    r.label = fmt::format("tokens [{}, {})", t0, t0 + n);
    std::map<std::string, CaseFields::Value> set{{"T", n}};
    if (part == 1 && !s.state_flag.empty()) set[s.state_flag] = true;
    r.fields = with_fields(g.case_fields, set);
    for (const auto& t : g.inputs) {
      bool is_state = false;
      for (const auto& st : s.states) is_state = is_state || st.first == t.name;
      if (is_state && part == 1) continue;  // handed over below
      const int a = axis_of(t.axes, "T");
      r.inputs.push_back(a >= 0 ? gather(t, a, iota(t0, n)) : t);
    }
    if (part == 1)
      for (const auto& [in, o] : s.states) {
        const Output* go = g.output(o);
        const Tensor* gi = g.input(in);
        Tensor h;
        h.name = in;
        h.axes = go->expected.axes;
        h.shape = go->expected.shape;
        h.dtype = gi ? gi->dtype : go->expected.dtype;
        r.inputs.push_back(std::move(h));
        r.handovers.push_back({in, o, 0});
      }
    for (const auto& o : g.outputs) {
      const auto& e = o.expected;
      const int a = axis_of(e.axes, "T");
      bool is_state = false;
      for (const auto& st : s.states) is_state = is_state || st.second == e.name;
      r.outputs.push_back({e.name, e.axes, a >= 0 ? with_dim(e.shape, a, n) : e.shape, e.dtype});
      if (a >= 0) r.places.push_back({e.name, e.name, a, 0, t0, n});
      else if (is_state && part == 1) r.places.push_back({e.name, e.name, 0, 0, 0, e.shape.empty() ? 1 : e.shape[0]});
    }
    r.inputs = sorted(std::move(r.inputs));
    r.outputs = sorted(std::move(r.outputs));
    c.runs.push_back(std::move(r));
  }
  for (const auto& o : g.outputs) {
    bool placed = false;
    for (const auto& r : c.runs)
      for (const auto& p : r.places) placed = placed || p.golden_output == o.expected.name;
    if (!placed) c.notes.push_back(fmt::format("output '{}' has no T axis and is no handed-over state: not covered", o.expected.name));
  }
  out.push_back(std::move(c));
}

// ---- varlen ------------------------------------------------------------------------------------------

void plan_varlen(const Golden& g, const OpSpec& s, std::vector<Check>& out) {
  Check c{"varlen", "varlen", "every packed sequence run as a dense case of its own", "", false, {}, {}};
  const auto lens = packed_lengths(g, s);
  if (s.pack == OpSpec::Pack::none) c.not_applicable = fmt::format("op {}: no varlen relation yet", g.prov.op);
  else if (!packed(g, s) || lens.empty()) c.not_applicable = "not a packed (varlen) case";
  else if (g.case_fields.get_int("B", 1) != 1) c.not_applicable = "a packed case with B > 1";
  if (!c.not_applicable.empty()) {
    out.push_back(std::move(c));
    return;
  }
  int64_t last_nonempty = -1, start = 0;
  for (size_t i = 0; i < lens.size(); ++i)
    if (lens[i] > 0) last_nonempty = static_cast<int64_t>(i);
  for (size_t si = 0; si < lens.size(); ++si) {
    const int64_t n = lens[si], t0 = start;
    start += n;
    if (n == 0) {
      c.notes.push_back(fmt::format("sequence {} is empty: not run (a kernel call needs a token), its states not covered", si));
      continue;
    }
    SubRun r;
    r.label = fmt::format("sequence {} (tokens [{}, {})) as a dense case", si, t0, t0 + n);
    r.sequence = static_cast<int>(si);
    std::map<std::string, CaseFields::Value> set{{"T", n}, {"B", int64_t{1}}};
    if (s.pack == OpSpec::Pack::seqlens) set["seqlens"] = std::vector<int64_t>{};
    else set["cu_seqlens"] = std::vector<int64_t>{};
    if (g.case_fields.has("varlen_states")) set["varlen_states"] = false;  // ssd: a dense case has none
    bool has_state = false;
    for (const auto& t : g.inputs) {
      if (std::find(s.pack_inputs.begin(), s.pack_inputs.end(), t.name) != s.pack_inputs.end()) continue;
      bool is_state = false;
      for (const auto& st : s.states) is_state = is_state || st.first == t.name;
      if (is_state) {
        if (s.states_per_sequence) {
          Tensor st = gather(t, 0, {static_cast<int64_t>(si)});
          st.axes[0] = "B";
          r.inputs.push_back(std::move(st));
          has_state = true;
        } else if (si == 0) {  // ssd: the initial states belong to sequence 0
          r.inputs.push_back(t);
          has_state = true;
        }
        continue;
      }
      const int a = axis_of(t.axes, "T");
      r.inputs.push_back(a >= 0 ? gather(t, a, iota(t0, n)) : t);
    }
    if (!s.state_flag.empty()) set[s.state_flag] = has_state;
    r.fields = with_fields(g.case_fields, set);
    for (const auto& o : g.outputs) {
      const auto& e = o.expected;
      if (e.name == s.packed_final) continue;  // a packed case's output only
      const int a = axis_of(e.axes, "T");
      bool is_state = false;
      for (const auto& st : s.states) is_state = is_state || st.second == e.name;
      if (a >= 0) {
        r.outputs.push_back({e.name, e.axes, with_dim(e.shape, a, n), e.dtype});
        r.places.push_back({e.name, e.name, a, 0, t0, n});
      } else if (is_state && s.states_per_sequence) {
        auto axes = e.axes;
        axes[0] = "B";
        r.outputs.push_back({e.name, axes, with_dim(e.shape, 0, 1), e.dtype});
        r.places.push_back({e.name, e.name, 0, 0, static_cast<int64_t>(si), 1});
      } else if (is_state) {  // ssd: final_states [B = 1, ...]
        r.outputs.push_back(spec_of(e));
        if (!s.packed_final.empty() && g.output(s.packed_final))
          r.places.push_back({e.name, s.packed_final, 0, 0, static_cast<int64_t>(si), 1});
        if (static_cast<int64_t>(si) == last_nonempty) r.places.push_back({e.name, e.name, 0, 0, 0, 1});
      } else {
        r.outputs.push_back(spec_of(e));
      }
    }
    r.inputs = sorted(std::move(r.inputs));
    r.outputs = sorted(std::move(r.outputs));
    c.runs.push_back(std::move(r));
  }
  out.push_back(std::move(c));
}

// Row-major strides.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * s[k];
  return st;
}

}  // namespace

const std::vector<std::string>& families() {
  static const std::vector<std::string> f{"batch", "continuation", "varlen"};
  return f;
}

bool known_family(std::string_view f) {
  for (const auto& x : families())
    if (x == f) return true;
  return false;
}

int axis_of(const std::vector<std::string>& axes, std::string_view a) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] == a) return static_cast<int>(i);
  return -1;
}

Tensor gather(const Tensor& t, int axis, const std::vector<int64_t>& idx) {
  ASSAY_CHECK(axis >= 0 && static_cast<size_t>(axis) < t.shape.size(), "gather: axis out of range");
  Tensor r = t;
  r.shape[static_cast<size_t>(axis)] = static_cast<int64_t>(idx.size());
  const int64_t n_axis = t.shape[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < axis; ++k) outer *= t.shape[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < t.shape.size(); ++k) inner *= t.shape[k];
  r.data.assign(static_cast<size_t>(outer * static_cast<int64_t>(idx.size()) * inner), 0.0);
  if (t.data.empty()) {
    r.data.clear();
    return r;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (size_t j = 0; j < idx.size(); ++j) {
      ASSAY_CHECK(idx[j] >= 0 && idx[j] < n_axis, "gather: index out of range");
      std::copy_n(t.data.begin() + static_cast<std::ptrdiff_t>((o * n_axis + idx[j]) * inner), inner,
                  r.data.begin() + static_cast<std::ptrdiff_t>((o * static_cast<int64_t>(idx.size()) + static_cast<int64_t>(j)) * inner));
    }
  return r;
}

std::vector<Check> plan_checks(const Golden& g, const std::vector<std::string>& fams, bool batch_invariant) {
  for (const auto& f : fams)
    if (!known_family(f)) throw InputError(fmt::format("relation '{}': expected batch, continuation or varlen", f));
  std::vector<Check> out;
  static const OpSpec none;
  const OpSpec* s = op_spec(g.prov.op);
  const bool backward = g.case_fields.get_bool("backward", false);
  for (const auto& f : families()) {
    if (std::find(fams.begin(), fams.end(), f) == fams.end()) continue;
    const size_t first = out.size();
    if (f == "batch") plan_batch(g, s ? *s : none, batch_invariant, out);
    if (f == "continuation") plan_continuation(g, s ? *s : none, out);
    if (f == "varlen") plan_varlen(g, s ? *s : none, out);
    for (size_t i = first; i < out.size(); ++i) {
      if (!s && out[i].not_applicable.empty()) out[i].not_applicable = fmt::format("op {} declares no relations", g.prov.op);
      if (backward && out[i].not_applicable.empty()) out[i].not_applicable = "a backward case: relations check forward outputs";
      if (!g.sample.empty() && out[i].not_applicable.empty())
        out[i].not_applicable =
            "a sampled golden: relations judge whole outputs element by element, and it keeps only some (golden/SCHEMA.md "
            "\"Sampled outputs\")";
      if (!out[i].not_applicable.empty()) out[i].runs.clear();
    }
  }
  return out;
}

kernels::KernelCase kernel_case_of(const Golden& g, const SubRun& r) {
  kernels::KernelCase kc;
  kc.op = g.prov.op;
  kc.case_name = g.prov.case_name;
  kc.case_toml = g.prov.case_toml;
  kc.fields = r.fields;
  for (const auto& t : r.inputs) kc.inputs.push_back(spec_of(t));
  kc.outputs = r.outputs;
  return kc;
}

Executed execute_check(const Check& c, const Golden& g, const SupportFn& support, const RunFn& run) {
  Executed e;
  for (const auto& o : g.outputs) {
    e.codes.emplace_back(static_cast<size_t>(o.expected.size()), 0);
    e.covered.emplace_back(static_cast<size_t>(o.expected.size()), 0);
  }
  std::vector<std::map<std::string, std::vector<uint64_t>>> outs(c.runs.size());
  for (size_t ri = 0; ri < c.runs.size(); ++ri) {
    const SubRun& r = c.runs[ri];
    std::vector<Tensor> inputs = r.inputs;
    for (const auto& h : r.handovers) {
      auto it = std::find_if(inputs.begin(), inputs.end(), [&](const Tensor& t) { return t.name == h.input; });
      const auto& src = c.runs[static_cast<size_t>(h.from_run)];
      auto so = std::find_if(src.outputs.begin(), src.outputs.end(), [&](const kernels::TensorSpec& t) { return t.name == h.from_output; });
      ASSAY_CHECK(it != inputs.end() && so != src.outputs.end(), "relation handover names an unknown tensor");
      const auto& codes = outs[static_cast<size_t>(h.from_run)].at(h.from_output);
      it->data.resize(codes.size());
      for (size_t i = 0; i < codes.size(); ++i) {
        // Re-encoded in the input's dtype (RNE where it is narrower; exact where it is the same).
        const double v = worker::decode_code(so->dtype, codes[i]);
        it->data[i] = decode(it->dtype, encode(it->dtype, v));
      }
    }
    const auto kc = kernel_case_of(g, r);
    if (support) {
      kernels::Support s;
      try {
        s = support(kc);
      } catch (const std::exception& ex) {
        s = {false, std::string("can_implement threw: ") + ex.what()};
      }
      if (!s.ok) {
        e.status = "not_supported";
        e.message = fmt::format("{}: {}", r.label, s.reason);
        return e;
      }
    }
    std::string err;
    try {
      err = run(kc, inputs, outs[ri]);
    } catch (const std::exception& ex) {
      err = std::string("threw: ") + ex.what();
    }
    if (!err.empty()) {
      e.status = "error";
      e.message = fmt::format("{}: {}", r.label, err);
      return e;
    }
    for (const auto& spec : r.outputs) {
      auto it = outs[ri].find(spec.name);
      if (it == outs[ri].end() || static_cast<int64_t>(it->second.size()) != spec.numel()) {
        e.status = "error";
        e.message = fmt::format("{}: output '{}' missing or of the wrong size", r.label, spec.name);
        return e;
      }
    }
    for (const auto& p : r.places) {
      size_t k = 0;
      while (k < g.outputs.size() && g.outputs[k].expected.name != p.golden_output) ++k;
      auto so = std::find_if(r.outputs.begin(), r.outputs.end(), [&](const kernels::TensorSpec& t) { return t.name == p.run_output; });
      ASSAY_CHECK(k < g.outputs.size() && so != r.outputs.end(), "relation placement names an unknown tensor");
      const Shape& ss = so->shape;
      const Shape& ds = g.outputs[k].expected.shape;
      const auto& src = outs[ri].at(p.run_output);
      // Iterate over the run output's elements along the placed slab.
      const auto sst = strides_of(ss), dst = strides_of(ds);
      const int64_t n = numel(ss);
      std::vector<int64_t> idx(ss.size());
      for (int64_t f = 0; f < n; ++f) {
        int64_t rem = f, d = 0;
        bool in = true;
        for (size_t a = 0; a < ss.size(); ++a) {
          idx[a] = rem / sst[a];
          rem %= sst[a];
        }
        for (size_t a = 0; a < ss.size(); ++a) {
          int64_t x = idx[a];
          if (static_cast<int>(a) == p.axis) {
            if (x < p.src0 || x >= p.src0 + p.len) in = false;
            x = x - p.src0 + p.dst0;
          }
          if (x < 0 || x >= ds[a]) in = false;
          d += x * dst[a];
        }
        if (!in) continue;
        e.codes[k][static_cast<size_t>(d)] = src[static_cast<size_t>(f)];
        e.covered[k][static_cast<size_t>(d)] = 1;
      }
    }
  }
  return e;
}

namespace {

h5::Elem code_elem(size_t bytes) {
  switch (bytes) {
    case 1: return h5::Elem::u8;
    case 2: return h5::Elem::u16;
    case 4: return h5::Elem::u32;
    default: return h5::Elem::u64;
  }
}

std::vector<uint64_t> read_shaped(const h5::File& f, const std::string& ds, const Tensor& e) {
  ASSAY_INPUT_CHECK(f.exists(ds), "{}: {}: missing", f.path(), ds);
  const auto inf = f.info(ds);
  ASSAY_INPUT_CHECK(inf.shape == e.shape, "{}: {}: shape {} != {}", f.path(), ds, shape_str(inf.shape), shape_str(e.shape));
  return f.read_u64(ds);
}

}  // namespace

void write_executed(h5::File& f, const Golden& g, const std::vector<Check>& checks, const std::vector<Executed>& done) {
  ASSAY_CHECK(checks.size() == done.size(), "write_executed: {} checks, {} results", checks.size(), done.size());
  if (checks.empty()) return;
  f.create_group("/relations");
  for (size_t ci = 0; ci < checks.size(); ++ci) {
    const std::string grp = "/relations/" + checks[ci].name;
    f.create_group(grp);
    const auto& ex = done[ci];
    const bool na = !checks[ci].not_applicable.empty();
    f.set_attr(grp, "status", na ? std::string("not_applicable") : ex.status);
    f.set_attr(grp, "message", na ? checks[ci].not_applicable : ex.message);
    if (na || ex.status != "ok") continue;
    f.create_group(grp + "/covered");
    for (size_t oi = 0; oi < g.outputs.size(); ++oi) {
      const Tensor& e = g.outputs[oi].expected;
      const size_t eb = static_cast<size_t>(info(e.dtype).storage_bytes);
      std::vector<uint8_t> packed(ex.codes[oi].size() * eb);
      for (size_t i = 0; i < ex.codes[oi].size(); ++i) std::memcpy(packed.data() + i * eb, &ex.codes[oi][i], eb);
      f.write(grp + "/" + e.name, code_elem(eb), e.shape, packed.data());
      f.set_attr(grp + "/" + e.name, "dtype", std::string(name(e.dtype)));
      f.write(grp + "/covered/" + e.name, h5::Elem::u8, e.shape, ex.covered[oi].data());
    }
  }
}

Executed read_executed(const h5::File& f, const Golden& g, const Check& c) {
  Executed e;
  const std::string grp = "/relations/" + c.name;
  ASSAY_INPUT_CHECK(f.exists(grp), "{}: {}: missing (a worker run without --relations?)", f.path(), grp);
  e.status = f.attr_str(grp, "status");
  e.message = f.attr_str(grp, "message");
  if (e.status != "ok") return e;
  for (const auto& o : g.outputs) {
    e.codes.push_back(read_shaped(f, grp + "/" + o.expected.name, o.expected));
    const auto m = read_shaped(f, grp + "/covered/" + o.expected.name, o.expected);
    e.covered.emplace_back(m.begin(), m.end());
  }
  return e;
}

int run_of(const Check& c, const Golden& g, const std::string& out, int64_t flat) {
  const Output* o = g.output(out);
  if (!o) return -1;
  const auto idx = o->expected.unravel(flat);
  for (size_t ri = 0; ri < c.runs.size(); ++ri)
    for (const auto& p : c.runs[ri].places)
      if (p.golden_output == out && p.axis < static_cast<int>(idx.size()) && idx[static_cast<size_t>(p.axis)] >= p.dst0 &&
          idx[static_cast<size_t>(p.axis)] < p.dst0 + p.len)
        return static_cast<int>(ri);
  return -1;
}

namespace {

// The one judgement of every check, from values: covered elements by the golden's tolerance, and bit
// for bit against the one run when asked.
struct Judging {
  std::string name, what;
  bool bitwise = false;
  size_t runs = 0;
  std::vector<std::string> notes;
  std::vector<std::vector<double>> rel, base;
  std::vector<std::vector<uint8_t>> covered;
  std::function<std::string(const Tensor& out, int64_t flat)> where;  // "sequence 1 (label)"
};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

CheckVerdict judge_values(const Judging& j, const Golden& g, const TolerancePolicy& policy, std::string_view profile) {
  CheckVerdict v;
  const std::string head = fmt::format("relation {}", j.name);
  ASSAY_CHECK(j.rel.size() == g.outputs.size() && j.base.size() == g.outputs.size() && j.covered.size() == g.outputs.size(),
              "relation: output count mismatch");
  std::string first_bad, first_diff;
  double worst_diff = 0;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Output& o = g.outputs[k];
    const Tensor& ex = o.expected;
    const Tolerance tol = policy.lookup(g.prov.op, ex.name, ex.dtype, profile);
    ASSAY_CHECK(j.rel[k].size() == static_cast<size_t>(ex.size()) && j.base[k].size() == j.rel[k].size() &&
                    j.covered[k].size() == j.rel[k].size(),
                "relation: output size mismatch");
    for (size_t i = 0; i < j.rel[k].size(); ++i) {
      if (!j.covered[k][i]) continue;
      ++v.covered;
      const double a = j.rel[k][i], b = j.base[k][i];
      auto where = [&] { return fmt::format("{}, '{}' {}", j.where(ex, static_cast<int64_t>(i)), ex.name, o.element_str(static_cast<int64_t>(i))); };
      if (!same_bits(a, b)) {
        ++v.differing;
        if (std::isfinite(a) && std::isfinite(b)) worst_diff = std::max(worst_diff, std::fabs(a - b));
        if (first_diff.empty()) first_diff = fmt::format("{}: {:.9g} vs {:.9g} in the one run", where(), a, b);
      }
      const ElementCheck ec = check_element(o, tol, i, a);
      if (ec.bad && first_bad.empty())
        first_bad = fmt::format("{}: {:.9g} vs {:.9g} in the one run, golden {:.9g}, |error| {:.3g} > allowed {:.3g}", where(), a, b,
                                ex.data[i], ec.err, ec.allowed);
    }
  }
  const std::string runs = fmt::format("{} run{}", j.runs, j.runs == 1 ? "" : "s");
  if (!first_bad.empty()) {
    v.verdict = Verdict::Incorrect;
    v.reason = fmt::format("{} ({}): first element outside the golden's tolerance: {}", head, j.what, first_bad);
  } else if (j.bitwise && v.differing) {
    v.verdict = Verdict::Incorrect;
    v.reason = fmt::format("{} (bitwise: the kernel declares batch invariance): {} of {} elements differ; first: {}", head,
                           v.differing, v.covered, first_diff);
  } else if (v.covered == 0) {
    v.verdict = Verdict::NotSupported;
    v.reason = fmt::format("{}: no output element covered", head);
  } else {
    v.verdict = Verdict::Passed;
    v.reason = v.differing == 0
                   ? fmt::format("{}: {}, {} elements, bitwise equal to the one run", head, runs, v.covered)
                   : fmt::format("{}: {}, {} elements within the golden's tolerance ({} differ from the one run, max |diff| {:.3g})",
                                 head, runs, v.covered, v.differing, worst_diff);
  }
  for (const auto& n : j.notes) v.reason += "; " + n;
  return v;
}

std::string seq_label(int sequence, const std::string& label, const Tensor& ex, int64_t flat) {
  const int64_t s = sequence >= 0 ? sequence : ex.unravel(flat).at(0);
  return fmt::format("sequence {} ({})", s, label.empty() ? std::string("?") : label);
}

}  // namespace

CheckVerdict judge_check(const Check& c, const Golden& g, const TolerancePolicy& policy, std::string_view profile,
                         const std::vector<std::vector<uint64_t>>& base, const Executed& e) {
  CheckVerdict v;
  const std::string head = fmt::format("relation {}", c.name);
  if (!c.not_applicable.empty()) {
    v.verdict = Verdict::NotSupported;
    v.reason = fmt::format("{}: {}", head, c.not_applicable);
    return v;
  }
  if (e.status == "not_supported") {
    v.verdict = Verdict::NotSupported;
    v.reason = fmt::format("{}: the kernel does not take {}", head, e.message);
    return v;
  }
  if (e.status != "ok") {
    v.verdict = Verdict::Failed;
    v.reason = fmt::format("{}: {}", head, e.message);
    return v;
  }
  ASSAY_CHECK(e.codes.size() == g.outputs.size() && base.size() == g.outputs.size(), "relation: output count mismatch");
  Judging j;
  j.name = c.name;
  j.what = c.what;
  j.bitwise = c.bitwise;
  j.runs = c.runs.size();
  j.notes = c.notes;
  j.covered = e.covered;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const DType dt = g.outputs[k].expected.dtype;
    ASSAY_CHECK(e.codes[k].size() == base[k].size(), "relation: output size mismatch");
    std::vector<double> a(e.codes[k].size()), b(base[k].size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = worker::decode_code(dt, e.codes[k][i]), b[i] = worker::decode_code(dt, base[k][i]);
    j.rel.push_back(std::move(a));
    j.base.push_back(std::move(b));
  }
  j.where = [&](const Tensor& ex, int64_t flat) {
    const int ri = run_of(c, g, ex.name, flat);
    const SubRun* r = ri >= 0 ? &c.runs[static_cast<size_t>(ri)] : nullptr;
    return seq_label(r ? r->sequence : -1, r ? r->label : std::string(), ex, flat);
  };
  return judge_values(j, g, policy, profile);
}

CheckVerdict judge_relation_file(const Golden& g, const TolerancePolicy& policy, std::string_view profile,
                                 const h5::File& base, const h5::File& rel) {
  CheckVerdict v;
  const std::string name = rel.attr_str("/", "relation");
  ASSAY_INPUT_CHECK(!name.empty(), "{}: attribute relation is empty", rel.path());
  const std::string status = rel.attr_str("/", "relation_status");
  const std::string message = rel.has_attr("/", "relation_message") ? rel.attr_str("/", "relation_message") : std::string();
  const std::string head = fmt::format("relation {}", name);
  if (status == "not_applicable" || status == "not_supported") {
    v.verdict = Verdict::NotSupported;
    v.reason = fmt::format("{}: {}", head, message);
    return v;
  }
  if (status != "ok") {
    v.verdict = Verdict::Failed;
    v.reason = fmt::format("{}: {}", head, message.empty() ? "status " + status : message);
    return v;
  }
  Judging j;
  j.name = name;
  j.what = rel.attr_str("/", "relation_what");
  j.bitwise = rel.has_attr("/", "relation_bitwise") && rel.attr_str("/", "relation_bitwise") == "1";
  std::vector<std::pair<std::string, int>> runs;
  try {
    const auto rj = nlohmann::json::parse(rel.attr_str("/", "relation_runs"));
    for (const auto& r : rj) runs.emplace_back(r.at(0).get<std::string>(), r.at(1).get<int>());
    if (rel.has_attr("/", "relation_notes"))
      for (const auto& n : nlohmann::json::parse(rel.attr_str("/", "relation_notes"))) j.notes.push_back(n.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: attribute relation_runs / relation_notes: not the JSON assay.relations writes ({})", rel.path(),
                                 e.what()));
  }
  j.runs = runs.size();
  std::vector<std::vector<uint64_t>> run_idx;
  for (const auto& o : g.outputs) {
    j.base.push_back(read_candidate(base, o));
    j.rel.push_back(read_candidate(rel, o));
    const std::string ds = "/relation/run/" + o.expected.name;
    ASSAY_INPUT_CHECK(rel.exists(ds), "{}: {}: missing", rel.path(), ds);
    ASSAY_INPUT_CHECK(rel.info(ds).shape == o.expected.shape, "{}: {}: shape {} != {}", rel.path(), ds, shape_str(rel.info(ds).shape),
                      shape_str(o.expected.shape));
    auto ri = rel.read_u64(ds);
    std::vector<uint8_t> cov(ri.size());
    for (size_t i = 0; i < ri.size(); ++i) {
      ASSAY_INPUT_CHECK(ri[i] <= runs.size(), "{}: {}: element {} names run {} of {}", rel.path(), ds, i, ri[i], runs.size());
      cov[i] = ri[i] > 0;
    }
    j.covered.push_back(std::move(cov));
    run_idx.push_back(std::move(ri));
  }
  j.where = [&](const Tensor& ex, int64_t flat) {
    size_t k = 0;
    while (k < g.outputs.size() && g.outputs[k].expected.name != ex.name) ++k;
    const uint64_t r = run_idx.at(k).at(static_cast<size_t>(flat));
    const Output& o = g.outputs.at(k);
    if (o.sampled) {  // (the layout check: one run of the whole case) element flat of the sample
      int64_t inner = 1;
      for (size_t d = 1; d < o.full_shape.size(); ++d) inner *= o.full_shape[d];
      const int64_t seq = o.sample_offsets.at(static_cast<size_t>(flat)) / std::max<int64_t>(inner, 1);
      return fmt::format("sequence {} ({})", seq, r ? runs[r - 1].first : std::string("?"));
    }
    return r ? seq_label(runs[r - 1].second, runs[r - 1].first, ex, flat) : seq_label(-1, "", ex, flat);
  };
  return judge_values(j, g, policy, profile);
}

}  // namespace assay::relations
