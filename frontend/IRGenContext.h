//===- IRGenContext.h - state shared by the IR generators -------*- C++ -*-===//
//
// IRGen.cpp and its phases (ModelGen.h) emit the model (params, blocks,
// forward); IRGenRecipe.cpp and its parts (RecipeEmitter.h) emit the recipe
// (md.train and its hooks); Plans.cpp resolves plans and presets into the
// `#md.plan` attribute. They share this context and these entry points.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_IRGENCONTEXT_H
#define MD_FRONTEND_IRGENCONTEXT_H

#include "frontend/AST.h"
#include "frontend/Diagnostics.h"

#include "mlir/IR/Attributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LLVM.h"

namespace md {
class ModelOp;
} // namespace md

namespace md::frontend {

class IRGenContext {
public:
  IRGenContext(mlir::MLIRContext &context, Diagnostics &diags)
      : context(context), diags(diags) {}

  /// A FileLineColLoc for `loc` in the .mdl file (UnknownLoc if invalid).
  mlir::Location getLoc(llvm::SMLoc loc) {
    if (!loc.isValid())
      return mlir::UnknownLoc::get(&context);
    llvm::SourceMgr &sm = diags.getSourceMgr();
    unsigned buffer = sm.FindBufferContainingLoc(loc);
    if (!buffer)
      return mlir::UnknownLoc::get(&context);
    auto [line, col] = sm.getLineAndColumn(loc, buffer);
    llvm::StringRef file = sm.getMemoryBuffer(buffer)->getBufferIdentifier();
    return mlir::FileLineColLoc::get(&context, file, line, col);
  }

  mlir::MLIRContext &context;
  Diagnostics &diags;

  /// The model being generated and its `md.model` op (an md::ModelOp), set by
  /// generateIR once it has chosen them and before it calls checkPlans or
  /// resolvePlan: `blocks(h)` in a plan must name a repeated param of this
  /// model, and a plan that runs on one rank (`single`) pins `world_size = 1`
  /// on this op. When `modelDecl` is null the plans are checked against the
  /// file's first model.
  const BlockDecl *modelDecl = nullptr;
  mlir::Operation *modelOp = nullptr;
  /// Set by checkPlans, so that resolvePlan does not report a plan's errors
  /// a second time.
  bool plansChecked = false;
  /// `mdc`'s plan flags, each `option = value` in .mdl syntax, applied over
  /// the selected plan by resolvePlan (IRGenOptions::planOptions).
  llvm::ArrayRef<std::string> planOverrides;
};

/// Emits `md.train` for `train` at the end of `model`'s body; the forward it
/// trains is the model's `md.forward`. Reports errors and returns failure
/// when the recipe is invalid.
mlir::LogicalResult emitTrain(const TrainDecl &train, md::ModelOp model,
                              IRGenContext &ctx);

/// Checks every plan the file declares (options, values, `extends`), whether
/// or not it is selected, reporting all errors.
mlir::LogicalResult checkPlans(const Module &module, IRGenContext &ctx);

/// Resolves `name` — a plan of the file, else a built-in preset — to the
/// `#md.plan` attribute. An unknown name is an error listing the valid ones.
mlir::FailureOr<mlir::Attribute> resolvePlan(const Module &module,
                                             llvm::StringRef name,
                                             IRGenContext &ctx);

} // namespace md::frontend

#endif // MD_FRONTEND_IRGENCONTEXT_H
