//===- NameMap.h - other frameworks' tensor names for md's parameters -*- C++
//-*-===//
//
// `mdrun --init FILE --init-map MAP` starts from a safetensors file whose
// tensors are named another way (nanoGPT's GPT-2, say). MAP says where each
// md parameter is in the file, one rule per line:
//
//   # comment
//   map  h.*.attn.q.weight  transformer.h.*.attn.c_attn.weight  rows 0/3
//   map  wte.weight         transformer.wte.weight
//   ignore lm_head.weight   # tied to wte in nanoGPT
//
// `map MD FILE [transpose] [rows K/N]`: the md parameter MD is the file's
// tensor FILE, or with `rows K/N` its K-th of N equal blocks of rows (dim
// 0: nanoGPT's fused q, k, v); with `transpose`, the transpose of the
// file's 2-D tensor (Hugging Face's Conv1D weights, [in, out] where md's
// Linear is [out, in]), `rows K/N` then counting md's rows (the file's
// columns: Hugging Face's fused c_attn). A `*` in both names stands for one
// decimal index (the block number), the same in both. `ignore FILE` names tensors of the file
// that md does not read (`*` as above). Every other tensor of the file must
// be placed by a rule, so a map that misses one is an error, as is a rule
// whose tensor is missing or whose rows do not divide.
//
// Applying a map gives the file's header as md's names would have it: the
// byte ranges of the blocks, so each rank still reads only what it holds
// (a transposed tensor is read whole, then transposed).
// tools/torch/md_names.py reads the same files to convert md's weights
// into the other framework's names.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_NAMEMAP_H
#define MD_RUNTIME_EXEC_NAMEMAP_H

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/exec/Safetensors.h"

namespace md::runtime {

struct NameRule {
  bool ignore = false;
  std::string md, file; // patterns: at most one '*' each
  int64_t part = 0, parts = 1;
  bool transpose = false;
  int line = 0;
};

struct NameMap {
  std::string path;
  std::vector<NameRule> rules;
};

/// Parses a map's text; errors name `path` and the line.
absl::StatusOr<NameMap> ParseNameMap(const std::string &text,
                                     const std::string &path);
/// Reads and parses the map file at `path`.
absl::StatusOr<NameMap> ReadNameMap(const std::string &path);

/// The header of the weights file `weightsPath` under md's names: one entry
/// per md parameter a rule places (its byte range in the file), for every
/// tensor of the file some rule places or ignores. An error names the map's
/// line or the file's tensor that does not fit.
absl::StatusOr<SafetensorsHeader> ApplyNameMap(const NameMap &map,
                                               const SafetensorsHeader &file,
                                               const std::string &weightsPath);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_NAMEMAP_H
