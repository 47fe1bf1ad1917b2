//===- GenPlanSchema.cpp - plan.fbs from plan.fbs.in and Opcodes.def -----===//
//
// A build-time tool: md-plan-schema IN OUT writes OUT, the FlatBuffers
// schema flatc compiles, as IN with its line "  // @OPCODES@" replaced by
// the rows of the Opcode enum, one per row of Opcodes.def:
//
//   MatmulGelu = 79,  // in [a, b, [bias]] out [out, pre]; ints [transpose_a:
//                     // bool, ...] (kernel md.matmul_gelu, schema_version 4)
//
// so that an opcode's value and layout are written once, in the table. OUT
// is rewritten only when its text changes, so that a change to the table
// that leaves the schema as it was rebuilds nothing that includes
// plan_generated.h. It depends on nothing but the table and the standard
// library: it runs before flatc.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int32_t kMany = INT32_MAX;

/// One row of Opcodes.def, as the schema's comment describes it.
struct Row {
  const char *name;
  int value;
  const char *str;
  bool kernel;
  int since;
  std::vector<std::string> ins, outs, ints, floats;
  int32_t stringsMin, stringsMax, blocksMin, blocksMax;
};

// What a slot's kind adds to its name ("eps > 0", "transpose_a: bool"); an
// int kind not listed is a plan.fbs enum (": Group"), a float kind not
// listed adds nothing.
struct KindText {
  const char *kind, *text;
};
constexpr KindText kIntKinds[] = {
    {"Any", ""},          {"Bool", ": bool"},
    {"Positive", " > 0"}, {"NonNegative", " >= 0"},
    {"Bucket", " >= -1"}, {"Dataset", ": dataset index"}};
constexpr KindText kFloatKinds[] = {{"Positive", " > 0"},
                                    {"NonNegative", " >= 0"},
                                    {"UnitInterval", " in [0, 1)"},
                                    {"Bound", " (a number, or -inf / inf)"}};

template <size_t N>
std::string kindText(const KindText (&table)[N], const std::string &kind,
                     const std::string &otherwise) {
  for (const KindText &entry : table)
    if (kind == entry.kind)
      return entry.text;
  return otherwise;
}
std::string intKind(const char *kind) {
  return kindText(kIntKinds, kind, std::string(": ") + kind);
}
std::string floatKind(const char *kind) {
  return kindText(kFloatKinds, kind, "");
}
std::string optional(const std::string &item) { return "[" + item + "]"; }
std::string repeated(const std::string &item, int min) {
  return min > 0 ? item + ", ..." : "[" + item + ", ...]";
}

std::vector<Row> rows() {
  return {
#define MD_EXPAND(...) __VA_ARGS__
#define MD_T(field) #field,
#define MD_T_OPT(field) optional(#field),
#define MD_T_LIST(field, min) repeated(#field, min),
#define MD_HOST_F(field) #field ": f32 scalar",
#define MD_HOST_I(field) #field ": i64 scalar",
#define MD_I(field, name, Kind) name + intKind(#Kind),
#define MD_I_NOARG(field, name, Kind) name + intKind(#Kind),
#define MD_I_OPT(field, name, Kind) optional(name + intKind(#Kind)),
#define MD_I_LIST(field, name, Kind, min) repeated(name + intKind(#Kind), min),
#define MD_F(field, name, Kind) name + floatKind(#Kind),
#define MD_F_LIST(field, name, min) repeated(name, min),
#define MD_ROW(Name, Value, Str, Flags, Since, Rule, Kernel, Ins, Outs, Ints,  \
               Floats, Strings, Blocks)                                        \
  Row{#Name,                                                                   \
      Value,                                                                   \
      Str,                                                                     \
      Kernel,                                                                  \
      Since,                                                                   \
      {MD_EXPAND Ins},                                                         \
      {MD_EXPAND Outs},                                                        \
      {MD_EXPAND Ints},                                                        \
      {MD_EXPAND Floats},                                                      \
      MD_EXPAND Strings,                                                       \
      MD_EXPAND Blocks},
#include "runtime/core/Opcodes.def"
#undef MD_EXPAND
  };
}

std::string list(const std::vector<std::string> &items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + items[i];
  return out + "]";
}

std::string count(const char *what, int32_t min, int32_t max) {
  if (max == 0)
    return "";
  std::string n = min == max ? std::to_string(min)
                  : max == kMany
                      ? std::to_string(min) + " or more"
                      : std::to_string(min) + " to " + std::to_string(max);
  return std::string("; ") + what + " " + n;
}

/// The comment of one enum value: its layout, then what it mirrors.
std::string describe(const Row &row) {
  std::string text = "in " + list(row.ins) + " out " + list(row.outs);
  if (!row.ints.empty())
    text += "; ints " + list(row.ints);
  if (!row.floats.empty())
    text += "; floats " + list(row.floats);
  text += count("strings", row.stringsMin, row.stringsMax);
  text += count("blocks", row.blocksMin, row.blocksMax);
  std::vector<std::string> notes;
  if (row.kernel)
    notes.push_back(std::string("kernel md.") + row.str);
  if (row.since > 1)
    notes.push_back("schema_version " + std::to_string(row.since));
  if (!notes.empty())
    text += " (" + list(notes).substr(1, list(notes).size() - 2) + ")";
  return text;
}

/// `text` broken into comment lines of at most `width` characters, the
/// continuation lines indented to `column`.
std::string wrap(const std::string &text, size_t column, size_t width) {
  std::istringstream words(text);
  std::string out, line, word;
  while (words >> word) {
    if (!line.empty() && column + 3 + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(column, ' ') + "// ";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

std::string opcodeRows() {
  constexpr size_t kColumn = 24, kWidth = 100;
  std::string out;
  for (const Row &row : rows()) {
    std::string head =
        std::string("  ") + row.name + " = " + std::to_string(row.value) + ",";
    head += std::string(head.size() < kColumn ? kColumn - head.size() : 1, ' ');
    out += head + "// " + wrap(describe(row), kColumn, kWidth) + "\n";
  }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::cerr << "usage: md-plan-schema plan.fbs.in plan.fbs\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "md-plan-schema: cannot read " << argv[1] << "\n";
    return 1;
  }
  const std::string marker = "// @OPCODES@";
  std::string schema, line;
  int markers = 0;
  while (std::getline(in, line)) {
    if (line.find(marker) != std::string::npos) {
      schema += opcodeRows();
      ++markers;
    } else {
      schema += line + "\n";
    }
  }
  if (markers != 1) {
    std::cerr << "md-plan-schema: " << argv[1] << " has " << markers
              << " lines with \"" << marker << "\"; it needs exactly one\n";
    return 1;
  }
  std::ifstream old(argv[2]);
  std::stringstream current;
  current << old.rdbuf();
  if (old && current.str() == schema)
    return 0;
  std::ofstream out(argv[2], std::ios::trunc);
  out << schema;
  out.close();
  if (!out) {
    std::cerr << "md-plan-schema: cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
