//===- ParamGroups.h - which optimizer group each parameter is in -*- C++
//-*-===//
//
// An optimizer's `groups` (#md.param_group) select parameters by name glob
// and number of dims; the first group a trainable parameter matches is its
// group and a parameter matching none is in the default group (the
// optimizer's own weight decay, lr scale 1). The frontend (its errors), the
// explain report and the plan emitter all assign groups through this one
// function, so they cannot disagree.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_PARAMGROUPS_H
#define MD_DIALECT_PARAMGROUPS_H

#include "dialect/MdOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/GlobPattern.h"

namespace md {

/// Most `{a,b}` alternatives one parameter glob may expand to.
inline constexpr size_t kMaxGlobAlternatives = 1024;

/// The glob of a parameter group's `match` (and of every pattern over
/// parameter names): `*`, `?`, `[abc]` and `{a,b}` alternatives, up to
/// kMaxGlobAlternatives of them. Every caller compiles patterns here, so the
/// frontend's check, the dialect's verifier and the matching agree.
llvm::Expected<llvm::GlobPattern> compileParamGlob(llvm::StringRef pattern);

/// The `groups` of an optimizer attribute (#md.adamw or #md.sgd); null when
/// it has none.
mlir::ArrayAttr getOptimizerGroups(mlir::Attribute optimizer);

/// The weight decay of an optimizer attribute (its default group's).
double getOptimizerWeightDecay(mlir::Attribute optimizer);

/// One group of an assignment: index 0 is the default group, index i > 0
/// the optimizer's groups[i - 1].
struct ParamGroupInfo {
  ParamGroupAttr attr; // null for the default group
  double weightDecay = 0;
  double lrScale = 1;
  int64_t members = 0; // trainable parameters in the group
  int64_t numel = 0;   // their elements
};

struct ParamGroupAssignment {
  llvm::SmallVector<ParamGroupInfo> groups;
  /// The group index of every trainable parameter.
  llvm::DenseMap<mlir::Operation *, unsigned> groupOf;
  /// For each optimizer group (index i - 1), how many trainable parameters
  /// its selectors match before first-match-wins: 0 is an error the
  /// frontend reports, and a group with matches but no members has lost
  /// them all to earlier groups.
  llvm::SmallVector<int64_t> matched;
};

/// Assigns every trainable `md.param` of `model` to a group of `optimizer`
/// (first match wins). Without groups, everything is in the default group.
ParamGroupAssignment assignParamGroups(ModelOp model,
                                       mlir::Attribute optimizer);

} // namespace md

#endif // MD_DIALECT_PARAMGROUPS_H
