//===- IRGenRecipe.cpp - the train recipe to md.train and its hooks -------===//
//
// Turns `train { ... }` into `md.train`: its settings become the op's
// attributes (data source, batch sizes, optimizer, schedule, seed, clipping),
// checked here at their .mdl locations before the attributes' own verifiers
// could complain; its statements become the ops of the `hooks` region, which
// runs after every step on every rank. Scalars are i64, f64 and i1 values of
// arith; the loss and reduced metrics are tensor<f32>. Rank-dependent control
// flow is kept as written: the desync checker judges it later.
//
// The emitter is one class (RecipeEmitter.h); this file holds its driver;
// the settings, hooks and expressions live in IRGenRecipeSettings.cpp,
// IRGenRecipeHooks.cpp and IRGenRecipeExprs.cpp.
//
//===----------------------------------------------------------------------===//

#include "frontend/RecipeEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Casting.h"

#include <cmath>
#include <limits>

namespace md::frontend::recipe {

LogicalResult RecipeEmitter::emit(const TrainDecl &train) {
  unsigned errors = diags.getNumErrors();

  // Settings: each known, each once.
  llvm::StringMap<const Setting *> settings;
  forEachKnownSetting(
      diags, train.settings, "train setting", kSettings,
      [&](const Setting &setting) { settings[setting.key] = &setting; });
  for (StringRef key : kRequiredSettings)
    if (!settings.count(key)) {
      diags.error(train.loc,
                  "train is missing the required setting '" + key + "'");
      noteNearMiss(train, key);
    }
  auto get = [&](StringRef key) -> const Setting * {
    return settings.lookup(key);
  };

  DataAttr data;
  if (const Setting *s = get("data"))
    data = getDataSource(*s->value, "data");
  std::optional<int64_t> global, micro;
  if (const Setting *s = get("global_batch"))
    global = getPositive(*s);
  if (const Setting *s = get("micro_batch"))
    micro = getPositive(*s);
  if (global && micro) {
    const Setting *globalSetting = get("global_batch");
    std::optional<uint64_t> world = model.getWorldSize();
    if (*global % *micro != 0) {
      diags.error(globalSetting->value->loc,
                  "global_batch " + std::to_string(*global) +
                      " is not a multiple of micro_batch " +
                      std::to_string(*micro));
      diags.note(get("micro_batch")->value->loc, "micro_batch is set here");
    } else if (world && *global % (*micro * static_cast<int64_t>(*world))) {
      int64_t w = static_cast<int64_t>(*world);
      diags.error(globalSetting->value->loc,
                  "global_batch " + std::to_string(*global) +
                      " is not a multiple of micro_batch x world size = " +
                      std::to_string(*micro) + " x " + std::to_string(w) +
                      " = " + std::to_string(*micro * w));
    }
  }
  Attribute optimizer;
  if (const Setting *s = get("optimizer"))
    optimizer = getOptimizer(*s->value);
  ScheduleAttr schedule =
      ScheduleAttr::get(&ctx.context, ScheduleKind::constant, 0,
                        std::numeric_limits<int64_t>::max(), APFloat(0.0));
  if (const Setting *s = get("schedule"))
    schedule = getSchedule(*s->value);
  int64_t seed = 0;
  if (const Setting *s = get("seed")) {
    std::optional<Literal> literal = getLiteral(*s->value);
    if (!literal || !literal->isInteger || literal->intValue < 0)
      diags.error(s->value->loc, "'seed' must be a non-negative integer, "
                                 "got " +
                                     describe(*s->value));
    else
      seed = literal->intValue;
  }
  FloatAttr clip;
  if (const Setting *s = get("clip_grad_norm")) {
    std::optional<Literal> literal = getLiteral(*s->value);
    if (!literal || !(literal->floatValue > 0))
      diags.error(s->value->loc, "'clip_grad_norm' must be a positive "
                                 "number, got " +
                                     describe(*s->value));
    else
      clip = builder.getF64FloatAttr(literal->floatValue);
  }
  bool syncBatchNorm = false;
  if (const Setting *s = get("sync_batch_norm"))
    syncBatchNorm = getBool(*s->value, "sync_batch_norm").value_or(false);

  if (!model.getForward() && !diags.hasErrors())
    diags.error(train.loc, "model '" + model.getSymName() +
                               "' has no forward function to train");

  // Hooks, into a region of their own until md.train exists.
  Region hooks;
  hooks.push_back(new Block());
  builder.setInsertionPointToEnd(&hooks.front());
  scopes.emplace_back();
  warnMisspeltSettings(train, settings);
  for (const StmtPtr &stmt : train.body)
    emitStmt(*stmt);
  if (diags.getNumErrors() == errors)
    warnUnusedConstants(train);
  scopes.clear();

  if (diags.getNumErrors() != errors)
    return failure();

  builder.setInsertionPointToEnd(&model.getBody().front());
  auto op = TrainOp::create(builder, ctx.getLoc(train.loc), getForwardSymbol(),
                            data, builder.getI64IntegerAttr(*global),
                            builder.getI64IntegerAttr(*micro), optimizer,
                            schedule, builder.getI64IntegerAttr(seed), clip,
                            syncBatchNorm ? builder.getUnitAttr() : UnitAttr());
  op.getStep().push_back(new Block());
  op.getHooks().takeBody(hooks);
  return success();
}

} // namespace md::frontend::recipe

namespace md::frontend {

mlir::LogicalResult emitTrain(const TrainDecl &train, ModelOp model,
                              IRGenContext &ctx) {
  // A plan that runs on one rank pins W = 1, where resolvePlan could not
  // (generateIR did not hand it the model op).
  if (PlanAttr plan = model.getPlanAttr(); plan && plan.isSingleRank()) {
    std::optional<uint64_t> world = model.getWorldSize();
    if (world && *world != 1) {
      ctx.diags.error(llvm::SMLoc(),
                      "plan '" + plan.getName() +
                          "' runs on one rank, but the world size "
                          "is pinned to " +
                          llvm::Twine(*world));
      return mlir::failure();
    }
    model.setWorldSize(1);
  }
  return recipe::RecipeEmitter(model, ctx).emit(train);
}

} // namespace md::frontend
