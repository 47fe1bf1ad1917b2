//===- ModelGen.h - the generator of the model part -------------*- C++ -*-===//
//
// Private to frontend/. The generator of the model part of a .mdl file is one
// class, ModelGen, whose members are defined along its phases:
//
//   IRGen.cpp          declaration checks, model selection, the driver;
//   IRGenParams.cpp    compile-time evaluation and the instance tree of params;
//   IRGenForward.cpp   the forward: statements, expressions, calls, blocks;
//   IRGenBuiltins.cpp  built-in layers, operators and functions with their
//                      shape inference.
//
// This header holds the class and the values it passes between them.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_MODELGEN_H
#define MD_FRONTEND_MODELGEN_H

#include "frontend/AST.h"
#include "frontend/ExprText.h"
#include "frontend/IRGen.h"
#include "frontend/IRGenContext.h"
#include "frontend/Sema.h"

#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace md::frontend::irgen {

using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;
using mlir::RankedTensorType;
using mlir::ShapedType;
using mlir::Type;

//===----------------------------------------------------------------------===//
// Instances: the tree of a model's params
//===----------------------------------------------------------------------===//

enum class LayerKind {
  Linear,
  Embedding,
  LayerNorm,
  RMSNorm,
  BatchNorm,
  Attention,
  Mlp,
  GatedMlp
};

/// One formal argument of a layer, a block or a built-in function.
struct Formal {
  std::string name;
  bool required;
};

/// The built-in Attention's options beyond d and heads (defaults: none).
struct AttentionOptions {
  /// Key/value heads (grouped-query attention when below the query heads;
  /// 0: as many as the query heads) and the sliding window (0: none).
  int64_t kvHeads = 0, window = 0;
  /// Each head's size (0: d / heads); q and k, v project to heads and
  /// kv_heads of it, proj from heads of it back to d.
  int64_t headDim = 0;
  /// RoPE in the rotate-half layout with base theta (0: none) and, with
  /// ropeLlama3, Llama 3.1's frequency scaling (Hugging Face's rope_type
  /// "llama3": factor, low_freq_factor, high_freq_factor and
  /// original_max_position_embeddings).
  double ropeTheta = 0;
  bool ropeLlama3 = false;
  double ropeFactor = 1, ropeLow = 1, ropeHigh = 4, ropeOriginal = 8192;
  /// An RMSNorm over each head's query and key before RoPE (Qwen3's q_norm,
  /// k_norm), with this eps.
  bool qkNorm = false;
  double qkEps = 1e-6;
};

struct LayerInfo {
  LayerKind kind;
  std::vector<Formal> formals;
};

/// The built-in layers by name, with their formal arguments.
const std::map<std::string, LayerInfo> &builtinLayers();
/// The built-in functions by name, with their formal arguments.
const std::map<std::string, std::vector<Formal>> &builtinFunctions();
/// The built-ins of IRGenLayout.cpp (ModelGen::layoutBuiltin).
bool isLayoutBuiltin(llvm::StringRef name);

struct Val;
using Env = llvm::StringMap<Val>;

struct Instance {
  enum class Kind {
    Raw,      // a tensor parameter: a leaf
    Layer,    // a built-in layer; its children are its params
    Block,    // a user block (or the model itself)
    Repeated, // `[n]`: children "0" .. "n-1"
    Invalid,  // could not be built (already reported)
  };
  Kind kind = Kind::Invalid;
  std::string name; // local name: "fc", "0", "weight"
  std::string path; // dotted path from the model: "h.0.mlp.fc"
  SMLoc loc;        // the declaration to point at

  // Raw.
  RankedTensorType type;
  md::InitAttr init;
  int64_t unit = 0;
  /// Declared `frozen` (itself or a declaration it is part of), or matched
  /// by the recipe's `freeze`.
  bool frozen = false;

  // Layer.
  LayerKind layer = LayerKind::Linear;
  int64_t dimA = 0, dimB = 0; // in/out, n/d, d, d/heads, d/hidden
  bool bias = true;
  double eps = 0;
  /// Attention: grouped-query heads, window, RoPE and q/k norms (kvHeads
  /// is set: dimB unless fewer were asked for).
  AttentionOptions attn;
  std::string signature; // "Linear(768, 3072)", "Block(d = 768, heads = 12)"

  // Block.
  const BlockDecl *block = nullptr;
  std::unique_ptr<Env> hyper;
  std::string hyperKey;

  std::vector<std::unique_ptr<Instance>> children;

  Instance *child(StringRef childName) const {
    for (const auto &c : children)
      if (c->name == childName)
        return c.get();
    return nullptr;
  }
  void collectLeaves(std::vector<Instance *> &leaves) {
    if (kind == Kind::Raw) {
      leaves.push_back(this);
      return;
    }
    for (auto &c : children)
      c->collectLeaves(leaves);
  }
  std::vector<Instance *> leaves() {
    std::vector<Instance *> out;
    collectLeaves(out);
    return out;
  }
};

//===----------------------------------------------------------------------===//
// Values of the forward
//===----------------------------------------------------------------------===//

struct Val {
  enum class Kind { Error, Number, Bool, Tensor, Tuple, Instance };
  Kind kind = Kind::Error;
  Num num;
  bool boolean = false;
  mlir::Value value;
  std::vector<Val> elements;
  irgen::Instance *instance = nullptr;

  static Val error() { return Val(); }
  static Val number(Num n) {
    Val v;
    v.kind = Kind::Number;
    v.num = n;
    return v;
  }
  static Val boolVal(bool b) {
    Val v;
    v.kind = Kind::Bool;
    v.boolean = b;
    return v;
  }
  static Val tensor(mlir::Value value) {
    Val v;
    v.kind = Kind::Tensor;
    v.value = value;
    return v;
  }
  static Val tuple(std::vector<Val> elements) {
    Val v;
    v.kind = Kind::Tuple;
    v.elements = std::move(elements);
    return v;
  }
  static Val inst(irgen::Instance *instance) {
    Val v;
    v.kind = Kind::Instance;
    v.instance = instance;
    return v;
  }
  bool isError() const { return kind == Kind::Error; }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isNumber() const { return kind == Kind::Number; }
  RankedTensorType type() const {
    return llvm::cast<RankedTensorType>(value.getType());
  }
};

/// The value of a number or bool literal, which compile-time evaluation and
/// the forward read alike.
Val literalValue(const Expr &e);

/// How a value is named in a diagnostic: "the number 3", "tensor<4xf32>".
std::string describe(const Val &v);

inline bool isFloatType(Type t) { return t.isF32() || t.isBF16() || t.isF16(); }
inline bool isIndexType(Type t) { return t.isInteger(32) || t.isInteger(64); }

/// "2 arguments", "at most 3 arguments", "no arguments".
std::string formalsPhrase(llvm::ArrayRef<Formal> formals);
/// A user block's formal arguments are its hyper-parameters.
std::vector<Formal> hyperFormals(const BlockDecl &block);

//===----------------------------------------------------------------------===//
// The generator
//===----------------------------------------------------------------------===//

/// One user-block specialisation: (block, hyper-parameters, argument types).
struct Spec {
  std::string symbol;
  std::vector<Type> results;
  bool ok = false;
};

/// The state of the function being emitted (md.forward or one md.func).
struct FnState {
  Instance *self = nullptr; // whose params and hyper-parameters are in scope
  bool isFunc = false;
  std::string owner; // "model 'mlp'" or "block 'Block'"
  llvm::DenseMap<const Instance *, mlir::Value> leafArgs; // md.func only
  llvm::StringMap<std::pair<Val, SMLoc>> locals;
};

class ModelGen {
public:
  ModelGen(const Module &module, IRGenContext &ctx, const IRGenOptions &options)
      : module(module), ctx(ctx), options(options), mctx(ctx.context),
        b(&ctx.context) {}

  mlir::OwningOpRef<mlir::ModuleOp> run();

private:
  // Diagnostics -----------------------------------------------------------
  void error(SMLoc loc, const Twine &message);
  void note(SMLoc loc, const Twine &message);
  /// The number of `result`, or its error reported at `loc`.
  Val numberOrError(const NumResult &result, SMLoc loc);

  // Declarations ----------------------------------------------------------
  void checkDeclarations();
  void checkRecursion();
  std::optional<std::vector<const Expr *>>
  bindArgs(llvm::ArrayRef<Argument> args, llvm::ArrayRef<Formal> formals,
           StringRef callee, SMLoc loc);
  const BlockDecl *selectModel();
  bool bindModelHyperParams(const BlockDecl &model, Env &env);

  // Compile-time evaluation -----------------------------------------------
  Val evalConst(const Expr &e, const Env &env, bool allowBatch);
  std::optional<int64_t> evalDim(const Expr &e, const Env &env,
                                 bool allowBatch);
  std::optional<int64_t> dimOf(const Val &v, SMLoc loc, const Twine &what);
  RankedTensorType evalTensorType(const TypeExpr &t, const Env &env,
                                  bool allowBatch, bool floatOnly,
                                  StringRef what);
  md::InitAttr evalInit(const Expr *init, int64_t rank, const Env &env);
  Num batchNum() const {
    return batch ? Num::integer(*batch) : Num::dynamicBatch();
  }

  // Instances -------------------------------------------------------------
  std::unique_ptr<Instance> buildParam(const ParamDecl &p, const Env &env,
                                       const std::string &prefix, int64_t unit,
                                       std::vector<const BlockDecl *> &stack);
  /// buildParam before `frozen` is applied to the leaves.
  std::unique_ptr<Instance>
  buildParamInstance(const ParamDecl &p, const Env &env,
                     const std::string &prefix, int64_t unit,
                     std::vector<const BlockDecl *> &stack);
  /// Marks the leaves the recipe's `freeze = ["glob", ...]` names frozen;
  /// false after an error (a pattern that is no glob or matches nothing).
  bool applyFreeze(Instance &root);
  std::unique_ptr<Instance> buildOne(const ParamDecl &p, const Env &env,
                                     const std::string &name,
                                     const std::string &path, int64_t unit,
                                     std::vector<const BlockDecl *> &stack);
  /// A built-in layer param: its arguments checked, its shape settled.
  std::unique_ptr<Instance> buildLayer(const ParamDecl &p,
                                       const LayerInfo &layer, const Env &env,
                                       const std::string &name,
                                       const std::string &path, int64_t unit);
  /// A user-block param: its hyper-parameters bound, then buildBlock.
  std::unique_ptr<Instance>
  buildUserBlock(const ParamDecl &p, const Env &env, const std::string &name,
                 const std::string &path, int64_t unit,
                 std::vector<const BlockDecl *> &stack);
  std::unique_ptr<Instance>
  buildBlock(const BlockDecl &decl, std::unique_ptr<Env> env,
             const std::string &name, const std::string &path, int64_t unit,
             SMLoc loc, std::vector<const BlockDecl *> &stack);
  /// An instance of `kind` with its name, path and location; the rest is
  /// the caller's to fill.
  static std::unique_ptr<Instance> newInstance(Instance::Kind kind,
                                               const std::string &name,
                                               const std::string &path,
                                               SMLoc loc);
  std::unique_ptr<Instance> makeRaw(const std::string &name,
                                    const std::string &path,
                                    RankedTensorType type, md::InitAttr init,
                                    int64_t unit, SMLoc loc);
  std::unique_ptr<Instance>
  makeLayer(LayerKind kind, int64_t a, int64_t bDim, bool bias, double eps,
            const std::string &signature, const std::string &name,
            const std::string &path, int64_t unit, SMLoc loc,
            const AttentionOptions &attn = {});
  /// Attention's `rope` and `qk_norm` arguments into `attn`; false after
  /// reporting one that is not of their forms.
  bool attentionRope(const Expr &e, const Env &env, AttentionOptions &attn);
  bool attentionQkNorm(const Expr &e, const Env &env, AttentionOptions &attn);
  /// The value of `e`, argument `formal` of `callee`, when it is a positive
  /// number; nullopt after reporting it.
  std::optional<double> positiveArg(const Expr &e, const Env &env,
                                    StringRef formal, StringRef callee);
  /// RoPE's cos and sin tables f32[T, 1, hd] (rotate-half: each frequency
  /// for both halves) and their application to x [B, T, h, hd].
  std::optional<std::pair<Val, Val>>
  ropeTables(const AttentionOptions &attn, int64_t T, int64_t hd, SMLoc loc);
  Val applyRope(const Val &x, const std::pair<Val, Val> &tables, SMLoc loc);
  md::InitAttr initNormal(double mean, double stddev);
  md::InitAttr initSimple(md::InitKind kind);

  // Forward ---------------------------------------------------------------
  void genModelForward(Instance &root, const BlockDecl &model);
  bool genBody(FnState &fn, const ForwardDecl &fwd, std::vector<Val> &results,
               SMLoc &returnLoc);
  void bindLocal(FnState &fn, const std::string &name, SMLoc loc, Val v);
  Val eval(FnState &fn, const Expr &e);
  Val evalName(FnState &fn, const std::string &name, SMLoc loc);
  Val evalMember(FnState &fn, const MemberExpr &e);
  Val evalCall(FnState &fn, const CallExpr &e);
  Val evalUnary(FnState &fn, const UnaryExpr &e);
  Val evalBinary(FnState &fn, const BinaryExpr &e);
  Val leafValue(FnState &fn, Instance *leaf, SMLoc loc);
  Val instanceMember(FnState &fn, Instance *inst, SMLoc loc);

  Val callInstance(FnState &fn, Instance *inst, const CallExpr &call);
  std::vector<Val> applyInstance(FnState &fn, Instance *inst,
                                 const std::vector<Val> &args,
                                 const std::string &calleeName, SMLoc loc);
  Val applyLayer(FnState &fn, Instance *inst, const Val &x,
                 const std::string &calleeName, SMLoc loc);
  std::vector<Val> applyBlock(FnState &fn, Instance *inst,
                              const std::vector<Val> &args,
                              const std::string &calleeName, SMLoc loc);
  Spec *specialise(Instance *inst, const std::vector<Type> &argTypes);
  Val callBuiltin(FnState &fn, const CallExpr &call,
                  const std::vector<Formal> &formals);

  // Tensor helpers --------------------------------------------------------
  bool expectTensor(const Val &v, SMLoc loc, const Twine &what);
  bool expectFloat(const Val &v, SMLoc loc, const Twine &what);
  std::optional<int64_t> constInt(FnState &fn, const Expr &e,
                                  const Twine &what);
  std::optional<bool> constBool(FnState &fn, const Expr &e, const Twine &what);
  /// constInt and constBool of an optional argument `e`: `fallback` when it
  /// is absent (null).
  std::optional<int64_t> constIntOr(FnState &fn, const Expr *e,
                                    int64_t fallback, const Twine &what);
  std::optional<bool> constBoolOr(FnState &fn, const Expr *e, bool fallback,
                                  const Twine &what);
  Val linear(FnState &fn, Instance *lin, const Val &x,
             const std::string &calleeName, SMLoc loc);
  Val scale(const Val &x, double factor, SMLoc loc);
  /// `value` as a tensor of `like`'s element type and rank with every dim 1
  /// (it broadcasts against `like`): md.arange [1, 2) cast to the type and
  /// scaled by value, so the number is rounded to that type once.
  Val numberLike(double value, const Val &like, SMLoc loc);
  Val matmul(const Val &a, const Val &bVal, SMLoc loc);
  Val elementwise(BinaryOp op, const Val &l, const Val &r, SMLoc loc);
  /// The type of an elementwise op of float tensors `l` and `r` (`what`,
  /// quoted in errors): their shared dtype at the broadcast shape; null
  /// after an error.
  RankedTensorType broadcastFloatType(const Val &l, const Val &r, SMLoc at,
                                      const std::string &what);
  Val reduce(FnState &fn, const CallExpr &call, const Val &x, const Expr *dims,
             const Expr *keepdim, bool isMean);
  Val reshape(FnState &fn, const Val &x, const Expr &shape, SMLoc loc);

  // Layout (IRGenLayout.cpp) ---------------------------------------------
  Val evalIndex(FnState &fn, const IndexExpr &e);
  Val layoutBuiltin(FnState &fn, const CallExpr &call,
                    llvm::ArrayRef<const Expr *> args);
  /// A dim argument in [-rank, rank), normalised; `fallback` when `e` is
  /// absent (an error naming `what` at `at` without one).
  std::optional<int64_t> dimArg(FnState &fn, const Expr *e,
                                std::optional<int64_t> fallback, int64_t rank,
                                const Twine &what, SMLoc at);
  /// x's elements start, start + step, ... (count of them) along axis.
  Val sliceDim(const Val &x, int64_t axis, int64_t start, int64_t step,
               int64_t count, SMLoc loc);
  Val reshapeTo(const Val &x, llvm::ArrayRef<int64_t> shape, SMLoc loc);
  Val concatDim(llvm::ArrayRef<Val> parts, int64_t axis, SMLoc loc);
  /// Whether x's size along axis is known; else an error naming `what`.
  bool staticDim(const Val &x, int64_t axis, SMLoc loc, const Twine &what);

  mlir::Location loc(SMLoc l) { return ctx.getLoc(l); }
  RankedTensorType tensorType(llvm::ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  }

  const Module &module;
  IRGenContext &ctx;
  const IRGenOptions &options;
  mlir::MLIRContext &mctx;
  mlir::OpBuilder b;

  std::set<std::pair<const char *, std::string>> reported;
  bool lastErrorShown = false;
  unsigned errorCount = 0; // every error found, shown or deduplicated

  llvm::StringMap<const BlockDecl *> decls; // first definition of each name
  std::set<std::string> cyclic;             // blocks on an instantiation cycle
  std::optional<int64_t> batch;             // the train's micro_batch
  int64_t nextUnit = 1;

  md::ModelOp modelOp;
  md::ForwardOp forwardOp;
  llvm::StringSet<> symbols;
  std::map<std::string, Spec> specs;
  std::map<std::string, unsigned> specCount;
};

} // namespace md::frontend::irgen

#endif // MD_FRONTEND_MODELGEN_H
