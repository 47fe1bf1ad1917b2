//===- AST.h - abstract syntax tree of the .mdl language --------*- C++ -*-===//
//
// The parser builds this tree; semantic analysis and IR generation read it.
// Every node keeps the location of its first token (and of the names it
// mentions) so that diagnostics and the IR's FileLineColLoc point at the
// user's source. Nodes own their children through std::unique_ptr.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_AST_H
#define MD_FRONTEND_AST_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llvm/Support/SMLoc.h"
#include "llvm/Support/raw_ostream.h"

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace md::frontend {

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Number, // 3, 6e-4, 0.9
    String, // "data/train.bin"
    Bool,   // true, false
    Name,   // x, rank, step, loss, full
    Member, // wte.weight
    Call,   // gelu(x), adamw(lr = 6e-4), fc(x), checkpoint(full)
    Unary,  // -x, not c
    Binary, // a + b, x @ w, rank == 0, a and b
    Tuple,  // (0.9, 0.95)
    List,   // [B, seq], [0, 1]
    Size,   // 25 MiB
    Record, // { param = bf16, reduce = f32 }
    Index,  // x[..., 0:8], x[:, -1]
  };

  Expr(Kind kind, llvm::SMLoc loc) : kind(kind), loc(loc) {}
  virtual ~Expr() = default;

  const Kind kind;
  llvm::SMLoc loc;
};

struct NumberExpr : Expr {
  NumberExpr(llvm::SMLoc loc, bool isInteger, int64_t intValue,
             double floatValue)
      : Expr(Kind::Number, loc), isInteger(isInteger), intValue(intValue),
        floatValue(floatValue) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Number; }
  bool isInteger;   // written without '.' or exponent
  int64_t intValue; // valid when isInteger
  double floatValue; // always valid (the integer converted when isInteger)
};

struct StringExpr : Expr {
  StringExpr(llvm::SMLoc loc, std::string value)
      : Expr(Kind::String, loc), value(std::move(value)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::String; }
  std::string value; // escapes resolved
};

struct BoolExpr : Expr {
  BoolExpr(llvm::SMLoc loc, bool value) : Expr(Kind::Bool, loc), value(value) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Bool; }
  bool value;
};

struct NameExpr : Expr {
  NameExpr(llvm::SMLoc loc, std::string name)
      : Expr(Kind::Name, loc), name(std::move(name)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Name; }
  std::string name;
};

struct MemberExpr : Expr {
  MemberExpr(llvm::SMLoc loc, ExprPtr base, std::string member,
             llvm::SMLoc memberLoc)
      : Expr(Kind::Member, loc), base(std::move(base)),
        member(std::move(member)), memberLoc(memberLoc) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Member; }
  ExprPtr base;
  std::string member;
  llvm::SMLoc memberLoc;
};

/// One argument of a call: positional when `name` is empty.
struct Argument {
  std::string name;
  llvm::SMLoc nameLoc;
  ExprPtr value;
};

struct CallExpr : Expr {
  CallExpr(llvm::SMLoc loc, std::string callee, std::vector<Argument> args)
      : Expr(Kind::Call, loc), callee(std::move(callee)),
        args(std::move(args)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Call; }
  std::string callee; // a name: built-in function, layer instance, block
  std::vector<Argument> args;
};

enum class UnaryOp { Neg, Not };

struct UnaryExpr : Expr {
  UnaryExpr(llvm::SMLoc loc, UnaryOp op, ExprPtr operand)
      : Expr(Kind::Unary, loc), op(op), operand(std::move(operand)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Unary; }
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp {
  Add, Sub, Mul, Div, MatMul,     // + - * / @
  Rem,                            // % (recipe values only)
  Eq, Ne, Lt, Le, Gt, Ge,         // == != < <= > >=
  And, Or,                        // and or
};

struct BinaryExpr : Expr {
  BinaryExpr(llvm::SMLoc loc, BinaryOp op, ExprPtr lhs, ExprPtr rhs,
             llvm::SMLoc opLoc)
      : Expr(Kind::Binary, loc), op(op), lhs(std::move(lhs)),
        rhs(std::move(rhs)), opLoc(opLoc) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Binary; }
  BinaryOp op;
  ExprPtr lhs, rhs;
  llvm::SMLoc opLoc; // the operator token: shape mismatches point here
};

struct TupleExpr : Expr {
  TupleExpr(llvm::SMLoc loc, std::vector<ExprPtr> elements)
      : Expr(Kind::Tuple, loc), elements(std::move(elements)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Tuple; }
  std::vector<ExprPtr> elements;
};

struct ListExpr : Expr {
  ListExpr(llvm::SMLoc loc, std::vector<ExprPtr> elements)
      : Expr(Kind::List, loc), elements(std::move(elements)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::List; }
  std::vector<ExprPtr> elements;
};

/// One item between the brackets of an index: `i` (picks one position and
/// drops the dim), `a:b`, `a:b:s` with any part left out (a range, keeps
/// the dim), or `...` (every dim not named by the others).
struct IndexItem {
  enum class Kind { Position, Range, Ellipsis };
  Kind kind = Kind::Position;
  llvm::SMLoc loc;
  ExprPtr position;         // Position
  ExprPtr start, end, step; // Range: each may be null
};

/// `x[items]`: static indexing and slicing of a tensor, as numpy's.
struct IndexExpr : Expr {
  IndexExpr(llvm::SMLoc loc, ExprPtr base, std::vector<IndexItem> items)
      : Expr(Kind::Index, loc), base(std::move(base)), items(std::move(items)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Index; }
  ExprPtr base;
  std::vector<IndexItem> items;
};

/// `25 MiB`: a number followed by B, KB, MB, GB, KiB, MiB or GiB.
struct SizeExpr : Expr {
  SizeExpr(llvm::SMLoc loc, double value, std::string unit, int64_t bytes)
      : Expr(Kind::Size, loc), value(value), unit(std::move(unit)),
        bytes(bytes) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Size; }
  double value;
  std::string unit;
  int64_t bytes;
};

/// One `key = value` entry (record fields, train settings, plan options).
struct Setting {
  std::string key;
  llvm::SMLoc keyLoc;
  ExprPtr value;
};

struct RecordExpr : Expr {
  RecordExpr(llvm::SMLoc loc, std::vector<Setting> fields)
      : Expr(Kind::Record, loc), fields(std::move(fields)) {}
  static bool classof(const Expr *e) { return e->kind == Kind::Record; }
  std::vector<Setting> fields;
};

//===----------------------------------------------------------------------===//
// Types: `f32[a, b]`, `i32[B, seq]`
//===----------------------------------------------------------------------===//

struct TypeExpr {
  llvm::SMLoc loc;
  std::string dtype;          // f32, bf16, f16, i32, i64
  std::vector<ExprPtr> dims;  // each an expression over hyper-parameters, or `B`
};

//===----------------------------------------------------------------------===//
// Statements (forward bodies and the train recipe)
//===----------------------------------------------------------------------===//

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { Let, Return, Expr, If, For, Every, Stop, Save };
  Stmt(Kind kind, llvm::SMLoc loc) : kind(kind), loc(loc) {}
  virtual ~Stmt() = default;
  const Kind kind;
  llvm::SMLoc loc;
};

/// `x = e` or `a, b = e` (tuple destructuring).
struct LetStmt : Stmt {
  struct Target {
    std::string name;
    llvm::SMLoc loc;
  };
  LetStmt(llvm::SMLoc loc, std::vector<Target> targets, ExprPtr value)
      : Stmt(Kind::Let, loc), targets(std::move(targets)),
        value(std::move(value)) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::Let; }
  std::vector<Target> targets;
  ExprPtr value;
};

struct ReturnStmt : Stmt {
  ReturnStmt(llvm::SMLoc loc, std::vector<ExprPtr> values)
      : Stmt(Kind::Return, loc), values(std::move(values)) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::Return; }
  std::vector<ExprPtr> values;
};

/// A call for its effect: `log("val", v)`, `print("step", step)`.
struct ExprStmt : Stmt {
  ExprStmt(llvm::SMLoc loc, ExprPtr expr)
      : Stmt(Kind::Expr, loc), expr(std::move(expr)) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::Expr; }
  ExprPtr expr;
};

/// `if c { ... } else { ... }`; `else if` nests an IfStmt in `elseBody`.
struct IfStmt : Stmt {
  IfStmt(llvm::SMLoc loc, ExprPtr condition, Body thenBody, Body elseBody,
         bool hasElse)
      : Stmt(Kind::If, loc), condition(std::move(condition)),
        thenBody(std::move(thenBody)), elseBody(std::move(elseBody)),
        hasElse(hasElse) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::If; }
  ExprPtr condition;
  Body thenBody, elseBody;
  bool hasElse;
};

/// `for i in lo..hi { ... }` (hi exclusive).
struct ForStmt : Stmt {
  ForStmt(llvm::SMLoc loc, std::string var, llvm::SMLoc varLoc, ExprPtr lo,
          ExprPtr hi, Body body)
      : Stmt(Kind::For, loc), var(std::move(var)), varLoc(varLoc),
        lo(std::move(lo)), hi(std::move(hi)), body(std::move(body)) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::For; }
  std::string var;
  llvm::SMLoc varLoc;
  ExprPtr lo, hi;
  Body body;
};

/// `every 250 steps { ... }`, `every 30 minutes { ... }`.
struct EveryStmt : Stmt {
  EveryStmt(llvm::SMLoc loc, ExprPtr period, std::string unit,
            llvm::SMLoc unitLoc, Body body)
      : Stmt(Kind::Every, loc), period(std::move(period)),
        unit(std::move(unit)), unitLoc(unitLoc), body(std::move(body)) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::Every; }
  ExprPtr period;
  std::string unit; // as written: step(s), second(s), minute(s)
  llvm::SMLoc unitLoc;
  Body body;
};

/// `stop`: end training after this step.
struct StopStmt : Stmt {
  explicit StopStmt(llvm::SMLoc loc) : Stmt(Kind::Stop, loc) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::Stop; }
};

/// `save checkpoint(full)`, `save checkpoint(sharded, "ckpt/dir")`.
struct SaveStmt : Stmt {
  SaveStmt(llvm::SMLoc loc, std::vector<Argument> args)
      : Stmt(Kind::Save, loc), args(std::move(args)) {}
  static bool classof(const Stmt *s) { return s->kind == Kind::Save; }
  std::vector<Argument> args; // the arguments of checkpoint(...)
};

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

/// `d`, `heads = 12`, `eps = 1e-5` in `block Name(...)` / `model Name(...)`.
struct HyperParam {
  std::string name;
  llvm::SMLoc loc;
  ExprPtr defaultValue; // null: required
};

/// `param fc: Linear(d, hidden)`, `param h: Block(d, heads)[layers]`,
/// `param w: f32[a, b] init normal(0.02)`.
struct ParamDecl {
  std::string name;
  llvm::SMLoc loc;
  // A layer or user-block instance (when `isRaw` is false).
  std::string layer;
  llvm::SMLoc layerLoc;
  std::vector<Argument> args;
  ExprPtr repeat; // `[n]`; null when not repeated
  // A raw tensor parameter (when `isRaw` is true).
  bool isRaw = false;
  TypeExpr type;
  ExprPtr init; // `normal(0.02)`, `zeros`, ...; null: the default
  // `frozen` after the declaration: every parameter it makes is frozen.
  bool frozen = false;
  llvm::SMLoc frozenLoc;
};

struct ForwardArg {
  std::string name;
  llvm::SMLoc loc;
  std::optional<TypeExpr> type; // required on a model's forward
};

struct ForwardDecl {
  llvm::SMLoc loc;
  std::vector<ForwardArg> args;
  Body body;
};

/// `block` and `model` share their form; a model is the root of a program.
struct BlockDecl {
  bool isModel = false;
  std::string name;
  llvm::SMLoc loc;
  std::vector<HyperParam> hyperParams;
  std::vector<ParamDecl> params;
  std::optional<ForwardDecl> forward;
};

/// `train { settings... statements... }`. Top-level `key = value` lines whose
/// key is a recipe setting (data, global_batch, micro_batch, optimizer,
/// schedule, clip_grad_norm, seed, sync_batch_norm) are settings; every other
/// statement runs after each step.
struct TrainDecl {
  llvm::SMLoc loc;
  std::vector<Setting> settings;
  Body body;
};

/// `plan NAME [extends PRESET] { option = value ... }`.
struct PlanDecl {
  std::string name;
  llvm::SMLoc loc;
  std::string extends; // empty when not extending
  llvm::SMLoc extendsLoc;
  std::vector<Setting> options;
};

/// One .mdl file.
struct Module {
  std::vector<BlockDecl> blocks; // blocks and models, in source order
  std::vector<TrainDecl> trains; // at most one is legal; sema reports extras
  std::vector<PlanDecl> plans;
  /// The SourceMgr the module was parsed from (set by parseModule); dumpAST
  /// prints line numbers through it. Null for a hand-built module.
  const llvm::SourceMgr *sourceMgr = nullptr;
};

/// Prints the tree in an indented, stable form (`mdc --emit=ast`).
void dumpAST(const Module &module, llvm::raw_ostream &os);

} // namespace md::frontend

#endif // MD_FRONTEND_AST_H
