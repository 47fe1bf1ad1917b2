//===- Parser.cpp - recursive-descent parser for .mdl ---------------------===//
//
// One function per grammar rule of docs/language.md. Conventions:
//  - A parse function that fails has already reported its error and consumed
//    nothing after the offending token; callers pass the failure up without
//    adding errors of their own.
//  - Statements, block items, plan options and declarations recover: after a
//    failure the parser skips to the end of that statement (a newline or ';'
//    outside brackets, the '}' that closes the enclosing body, or the next
//    top-level keyword), so that one run reports several errors.
//  - Every loop consumes a token or ends, and recursion is bounded
//    (kMaxDepth), so no input can hang the parser or blow its stack.
//  - Newlines end statements. Inside ( ) and [ ] (and records) they are
//    whitespace; elsewhere a binary operator, '.', or a call's '(' must be on
//    the line of its left operand.
//
//===----------------------------------------------------------------------===//

#include "frontend/Parser.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "frontend/Lexer.h"

#include "llvm/ADT/STLExtras.h"

using namespace md::frontend;
using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

namespace {

/// Nesting of expressions and bodies (and chained operators) past this is an
/// error; it bounds the parser's recursion and the height of the AST.
constexpr unsigned kMaxDepth = 256;
/// Bodies (if, for, every) nest at most this deep, which leaves expressions
/// inside them room to nest too.
constexpr unsigned kMaxStatementDepth = 128;
/// After this many errors in one file the parser stops.
constexpr unsigned kMaxErrors = 20;

bool isDType(StringRef s) {
  return s == "f32" || s == "bf16" || s == "f16" || s == "i32" || s == "i64";
}

bool isEveryUnit(StringRef s) {
  return s == "step" || s == "steps" || s == "second" || s == "seconds" ||
         s == "minute" || s == "minutes";
}

bool isTrainSetting(StringRef s) {
  return s == "data" || s == "global_batch" || s == "micro_batch" ||
         s == "optimizer" || s == "schedule" || s == "clip_grad_norm" ||
         s == "seed" || s == "sync_batch_norm";
}

/// Keywords that start a statement or block item and cannot appear inside an
/// expression.
bool isStatementKeyword(TokenKind kind) {
  switch (kind) {
  case TokenKind::KwParam:
  case TokenKind::KwForward:
  case TokenKind::KwReturn:
  case TokenKind::KwIf:
  case TokenKind::KwFor:
  case TokenKind::KwEvery:
  case TokenKind::KwStop:
  case TokenKind::KwSave:
    return true;
  default:
    return false;
  }
}

class Parser {
public:
  Parser(unsigned bufferId, Diagnostics &diags)
      : lexer(bufferId, diags), diags(diags),
        startErrors(diags.getNumErrors()) {
    lexer.setErrorLimit(kMaxErrors);
    tok = lexer.lex();
    prevEnd = tok.getLoc();
    checkErrorLimit();
  }

  std::unique_ptr<Module> parseModule();

private:
  //===--------------------------------------------------------------------===//
  // Tokens
  //===--------------------------------------------------------------------===//

  void consume() {
    prevEnd = tok.getEndLoc();
    if (!lookahead.empty()) {
      tok = std::move(lookahead.front());
      lookahead.pop_front();
    } else {
      tok = lexer.lex();
    }
    checkErrorLimit();
  }

  /// Past kMaxErrors errors, says so and turns the rest into end of file.
  void checkErrorLimit() {
    if (stopped || diags.getNumErrors() - startErrors < kMaxErrors)
      return;
    // Where the lexer gave up, if it did, else at the current token.
    SMLoc loc = tok.getLoc();
    if (tok.is(TokenKind::Eof) && lexer.getLastErrorLoc().isValid())
      loc = lexer.getLastErrorLoc();
    diags.error(loc, "too many errors emitted, stopping now");
    stopped = true;
    lexer.stop();
    lookahead.clear();
    tok = lexer.lex();
  }

  const Token &peek() {
    if (lookahead.empty())
      lookahead.push_back(lexer.lex());
    return lookahead.front();
  }

  /// The token continues the current line's expression: it is on the same
  /// line as the previous one, or inside brackets.
  bool continuesLine() const {
    return !tok.newlineBefore || parenDepth > 0 || recordDepth > 0;
  }

  /// The token starts right where the previous one ends.
  bool adjacentToPrevious() const {
    return tok.spelling.data() == prevEnd.getPointer();
  }

  /// `'xyz'` for a message, or `end of file`.
  std::string describe(const Token &t) const {
    if (t.is(TokenKind::Eof))
      return "end of file";
    StringRef s = t.spelling;
    if (s.size() > 40)
      return ("'" + s.take_front(37) + "...'").str();
    return ("'" + s + "'").str();
  }

  /// Where to report that something is missing: just after the previous token
  /// when the current one is on a later line (or the end of the file), so the
  /// caret lands at the end of the incomplete line.
  SMLoc missingLoc() const {
    if ((tok.is(TokenKind::Eof) || tok.newlineBefore) &&
        tok.index > stmtStart)
      return prevEnd;
    return tok.getLoc();
  }

  //===--------------------------------------------------------------------===//
  // Diagnostics and recovery
  //===--------------------------------------------------------------------===//

  /// A syntax error at `loc` that follows a lexical error on the same line
  /// of the same statement is most likely its echo (`a = 1 $ 2`).
  bool isEchoOfLexicalError(SMLoc loc) const {
    const char *lexError = lexer.getLastErrorLoc().getPointer();
    const char *at = loc.getPointer();
    if (!lexError || !stmtStartPtr || lexError < stmtStartPtr || at < lexError)
      return false;
    return std::find(lexError, at, '\n') == at;
  }

  void error(SMLoc loc, const Twine &message) {
    // Echoes of lexical errors: recover, but stay quiet.
    lastErrorWasEcho = isEchoOfLexicalError(loc);
    if (!stopped && !lastErrorWasEcho)
      diags.error(loc, message);
    errorParenDepth = parenDepth;
    errorRecordDepth = recordDepth;
    errorTokIndex = tok.index;
  }
  void note(SMLoc loc, const Twine &message) {
    if (!stopped && !lastErrorWasEcho)
      diags.note(loc, message);
  }

  /// After a failed statement that began at token `start`: skips to its end
  /// (see the file comment).
  void skipToStatementEnd(unsigned start) {
    // A missing piece at the end of a line: the next line is a new statement.
    if (tok.index == errorTokIndex && tok.newlineBefore && tok.index != start)
      return;
    unsigned parens = errorParenDepth, braces = errorRecordDepth;
    for (;;) {
      if (tok.is(TokenKind::Eof) || tok.isTopLevelKeyword())
        return;
      if (braces == 0 && tok.index != errorTokIndex) {
        if (parens == 0 && tok.newlineBefore)
          return;
        // Inside unclosed brackets, a keyword that only starts statements
        // or block items ends the statement that is missing its ')'.
        if (isStatementKeyword(tok.kind))
          return;
      }
      switch (tok.kind) {
      case TokenKind::Semicolon:
        if (parens == 0 && braces == 0) {
          consume();
          return;
        }
        break;
      case TokenKind::LParen:
      case TokenKind::LBracket:
        ++parens;
        break;
      case TokenKind::RParen:
      case TokenKind::RBracket:
        if (parens > 0)
          --parens;
        break;
      case TokenKind::LBrace:
        ++braces;
        break;
      case TokenKind::RBrace:
        if (braces == 0)
          return;
        --braces;
        break;
      default:
        break;
      }
      consume();
    }
  }

  /// After a failure in a bracketed list: skips past its `close` bracket,
  /// stopping (without consuming) at a '{' or '}' outside brackets, a
  /// top-level keyword, or the end of the file.
  void skipPast(TokenKind close) {
    unsigned depth = 0;
    for (;;) {
      if (tok.is(TokenKind::Eof) || tok.isTopLevelKeyword())
        return;
      if (depth == 0 && (tok.is(TokenKind::LBrace) || tok.is(TokenKind::RBrace)))
        return;
      if (depth == 0 && tok.is(close)) {
        consume();
        return;
      }
      if (tok.is(TokenKind::LParen) || tok.is(TokenKind::LBracket))
        ++depth;
      else if ((tok.is(TokenKind::RParen) || tok.is(TokenKind::RBracket)) &&
               depth > 0)
        --depth;
      consume();
    }
  }

  /// Skips to the next top-level keyword (or the end of the file).
  void skipToTopLevel() {
    while (!tok.is(TokenKind::Eof) && !tok.isTopLevelKeyword())
      consume();
  }

  /// Skips a body whose nesting is too deep: up to and including its
  /// matching '}'.
  void skipBalancedBraces() {
    unsigned depth = 0;
    while (!tok.is(TokenKind::Eof)) {
      if (tok.is(TokenKind::LBrace)) {
        ++depth;
      } else if (tok.is(TokenKind::RBrace)) {
        if (depth <= 1) {
          consume();
          return;
        }
        --depth;
      }
      consume();
    }
  }

  /// Skips what is left of an if/else chain: up to and including the next
  /// balanced body, then any `else ...` after it.
  void skipIfChain() {
    for (;;) {
      while (!tok.is(TokenKind::Eof) && !tok.is(TokenKind::LBrace) &&
             !tok.is(TokenKind::RBrace) && !tok.isTopLevelKeyword())
        consume();
      if (!tok.is(TokenKind::LBrace))
        return;
      skipBalancedBraces();
      if (!tok.is(TokenKind::KwElse))
        return;
      consume();
    }
  }

  /// Runs a statement-like parse; on failure skips to the statement's end and
  /// makes sure at least one token was consumed.
  template <typename Fn> void parseRecovering(Fn &&fn) {
    unsigned before = tok.index;
    stmtStart = before;
    const char *savedStartPtr = stmtStartPtr;
    stmtStartPtr = tok.spelling.data();
    bool ok = fn();
    stmtStartPtr = savedStartPtr;
    if (ok)
      return;
    skipToStatementEnd(before);
    if (tok.index == before && !tok.is(TokenKind::Eof) &&
        !tok.is(TokenKind::RBrace) && !tok.isTopLevelKeyword())
      consume();
  }

  /// Accepts the end of a simple statement: ';', a newline, or the '}' or end
  /// of file that follows.
  bool parseStatementEnd() {
    if (tok.is(TokenKind::Semicolon)) {
      consume();
      return true;
    }
    if (tok.is(TokenKind::RBrace) || tok.is(TokenKind::Eof) ||
        tok.newlineBefore)
      return true;
    error(tok.getLoc(), "expected a newline or ';' after the statement, found " +
                            describe(tok));
    return false;
  }

  /// After the '=' of a statement (a let, a setting, a plan option): the
  /// value must start on the same line, since a newline ends the statement.
  bool parseValueOnSameLine() {
    if (!tok.newlineBefore && !tok.is(TokenKind::Eof))
      return true;
    error(prevEnd, "expected a value after '='");
    return false;
  }

  /// Counts one level of nesting for as long as it lives.
  struct DepthGuard {
    explicit DepthGuard(Parser &p) : p(p) { ++p.depth; }
    ~DepthGuard() { --p.depth; }
    bool tooDeep() const { return p.depth > kMaxDepth; }
    bool tooDeepForStatements() const { return p.depth > kMaxStatementDepth; }
    Parser &p;
  };

  /// Counts the operators of a left-associative chain as nesting: each one
  /// adds a level to the tree.
  struct ChainGuard {
    explicit ChainGuard(Parser &p) : p(p) {}
    ~ChainGuard() { p.depth -= added; }
    bool add() {
      ++added;
      ++p.depth;
      return p.depth <= kMaxDepth;
    }
    Parser &p;
    unsigned added = 0;
  };

  /// Inside brackets, for as long as it lives: newlines are whitespace.
  struct BracketGuard {
    BracketGuard(unsigned &depth) : depth(depth) { ++depth; }
    ~BracketGuard() { --depth; }
    unsigned &depth;
  };

  /// A left-associative chain `operand (op operand)*` on one logical line,
  /// where `opOf` gives the operator a token kind stands for, if any.
  template <typename OpOf>
  ExprPtr parseBinaryChain(ExprPtr (Parser::*parseOperand)(), OpOf opOf) {
    ExprPtr lhs = (this->*parseOperand)();
    if (!lhs)
      return nullptr;
    ChainGuard chain(*this);
    for (;;) {
      std::optional<BinaryOp> op = opOf(tok.kind);
      if (!op || !continuesLine())
        break;
      SMLoc opLoc = tok.getLoc();
      if (!chain.add()) {
        error(opLoc, "expression nested too deeply");
        return nullptr;
      }
      consume();
      ExprPtr rhs = (this->*parseOperand)();
      if (!rhs)
        return nullptr;
      SMLoc loc = lhs->loc;
      lhs = std::make_unique<BinaryExpr>(loc, *op, std::move(lhs),
                                         std::move(rhs), opLoc);
    }
    return lhs;
  }

  /// `prefix operand` with the operand parsed by `self` (so prefixes nest),
  /// or else just what `next` parses.
  ExprPtr parsePrefixed(TokenKind prefix, UnaryOp op, ExprPtr (Parser::*self)(),
                        ExprPtr (Parser::*next)()) {
    if (!tok.is(prefix))
      return (this->*next)();
    DepthGuard guard(*this);
    SMLoc loc = tok.getLoc();
    if (guard.tooDeep()) {
      error(loc, "expression nested too deeply");
      return nullptr;
    }
    consume();
    ExprPtr operand = (this->*self)();
    if (!operand)
      return nullptr;
    return std::make_unique<UnaryExpr>(loc, op, std::move(operand));
  }

  /// Parses a comma-separated list from its opening bracket (the current
  /// token) up to and including `close`; a trailing ',' is allowed. Counts as
  /// brackets in `bracketDepth` meanwhile. Stops at the first item that fails;
  /// after an item followed by neither ',' nor `close`, reports
  /// "expected '<close>' to close <what>".
  template <typename Fn>
  bool parseCommaList(TokenKind close, unsigned &bracketDepth,
                      const Twine &what, Fn &&parseItem) {
    SMLoc open = tok.getLoc();
    StringRef openSpelling = tok.spelling;
    consume();
    BracketGuard guard(bracketDepth);
    while (!tok.is(close)) {
      if (!parseItem())
        return false;
      if (tok.is(TokenKind::Comma)) {
        consume();
        continue;
      }
      if (!tok.is(close)) {
        StringRef closeSpelling = close == TokenKind::RParen     ? ")"
                                  : close == TokenKind::RBracket ? "]"
                                                                 : "}";
        error(missingLoc(),
              "expected '" + closeSpelling + "' to close " + what);
        note(open, "to match this '" + openSpelling + "'");
        return false;
      }
    }
    consume();
    return true;
  }

  /// Parses the items of a braced body whose '{' at `lbrace` has just been
  /// consumed, up to and including its '}': skips ';', reports
  /// "expected '}' to close <closes>" at the end of the file or a top-level
  /// keyword (or, with `stopAtBlockItems`, 'param' and 'forward'), and runs
  /// each item through parseRecovering. Brackets open around the body do not
  /// count inside it.
  template <typename Fn>
  void parseBracedItems(SMLoc lbrace, const Twine &closes, Fn &&parseItem,
                        bool stopAtBlockItems = false) {
    unsigned savedParens = parenDepth, savedRecords = recordDepth;
    parenDepth = recordDepth = 0;
    for (;;) {
      while (tok.is(TokenKind::Semicolon))
        consume();
      if (tok.is(TokenKind::RBrace)) {
        consume();
        break;
      }
      if (tok.is(TokenKind::Eof) || tok.isTopLevelKeyword() ||
          (stopAtBlockItems &&
           (tok.is(TokenKind::KwParam) || tok.is(TokenKind::KwForward)))) {
        stmtStart = tok.index;
        error(tok.is(TokenKind::Eof) ? prevEnd : tok.getLoc(),
              "expected '}' to close " + closes);
        note(lbrace, "to match this '{'");
        break;
      }
      parseRecovering(parseItem);
    }
    parenDepth = savedParens;
    recordDepth = savedRecords;
  }

  //===--------------------------------------------------------------------===//
  // Declarations
  //===--------------------------------------------------------------------===//

  void parseBlockDecl(Module &module);
  bool parseHyperParams(BlockDecl &decl);
  bool parseParam(BlockDecl &decl);
  bool parseForward(BlockDecl &decl);
  bool parseForwardArgs(ForwardDecl &forward);
  bool parseTensorType(TypeExpr &type);
  void parseTrain(Module &module);
  void parsePlan(Module &module);
  bool parsePlanName(std::string &name, SMLoc &loc, StringRef what);

  //===--------------------------------------------------------------------===//
  // Statements
  //===--------------------------------------------------------------------===//

  /// Parses `{ stmt* }` (the current token is the '{'). False only when it
  /// nests too deeply: it was skipped whole.
  bool parseBody(Body &body, SMLoc lbrace, const Twine &what);
  bool parseStatement(Body &body);
  StmtPtr parseIf();
  StmtPtr parseFor();
  StmtPtr parseEvery();
  StmtPtr parseSave();
  StmtPtr parseReturn();
  StmtPtr parseLet();

  //===--------------------------------------------------------------------===//
  // Expressions
  //===--------------------------------------------------------------------===//

  ExprPtr parseExpr();
  ExprPtr parseOr();
  ExprPtr parseAnd();
  ExprPtr parseNot();
  ExprPtr parseComparison();
  ExprPtr parseAdditive();
  ExprPtr parseMultiplicative();
  ExprPtr parseUnary();
  ExprPtr parsePostfix();
  ExprPtr parsePrimary();
  ExprPtr parseNumber();
  ExprPtr parseParenthesized();
  ExprPtr parseList();
  ExprPtr parseRecord();
  bool parseCallArgs(std::vector<Argument> &args);

  Lexer lexer;
  Diagnostics &diags;
  unsigned startErrors;
  bool stopped = false;
  Token tok;
  std::deque<Token> lookahead;
  SMLoc prevEnd;

  unsigned depth = 0;
  unsigned parenDepth = 0;  // open ( and [ since the enclosing body
  unsigned recordDepth = 0; // open record braces since the enclosing body
  unsigned stmtStart = 0;   // index of the current statement's first token
  const char *stmtStartPtr = nullptr; // and where it starts, for error()
  bool lastErrorWasEcho = false; // its notes are quiet too
  unsigned errorParenDepth = 0, errorRecordDepth = 0, errorTokIndex = 0;
};

} // namespace

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

std::unique_ptr<Module> Parser::parseModule() {
  auto module = std::make_unique<Module>();
  module->sourceMgr = &diags.getSourceMgr();
  while (!tok.is(TokenKind::Eof)) {
    stmtStart = tok.index;
    switch (tok.kind) {
    case TokenKind::KwBlock:
    case TokenKind::KwModel:
      parseBlockDecl(*module);
      break;
    case TokenKind::KwTrain:
      parseTrain(*module);
      break;
    case TokenKind::KwPlan:
      parsePlan(*module);
      break;
    case TokenKind::Semicolon:
      consume();
      break;
    default:
      error(tok.getLoc(), "unexpected " + describe(tok) +
                              " at top level; expected 'block', 'model', "
                              "'train' or 'plan'");
      consume();
      skipToTopLevel();
      break;
    }
  }
  return module;
}

void Parser::parseBlockDecl(Module &module) {
  BlockDecl decl;
  decl.isModel = tok.is(TokenKind::KwModel);
  StringRef kw = decl.isModel ? "model" : "block";
  consume();
  if (!tok.is(TokenKind::Identifier)) {
    error(missingLoc(), "expected a name after '" + kw + "', found " +
                            describe(tok));
    skipToTopLevel();
    return;
  }
  decl.name = tok.spelling.str();
  decl.loc = tok.getLoc();
  consume();
  std::string what = (kw + " '" + decl.name + "'").str();

  if (!tok.is(TokenKind::LParen)) {
    error(missingLoc(), "expected '(' after the name of " + what +
                            " (write '()' when it has no hyper-parameters)");
    skipToTopLevel();
    return;
  }
  if (!parseHyperParams(decl))
    skipPast(TokenKind::RParen);

  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' to begin the body of " + what);
    skipToTopLevel();
    return;
  }
  SMLoc lbrace = tok.getLoc();
  consume();
  parseBracedItems(lbrace, "the body of " + what, [&] {
    if (tok.is(TokenKind::KwParam))
      return parseParam(decl);
    if (tok.is(TokenKind::KwForward))
      return parseForward(decl);
    error(tok.getLoc(), "unexpected " + describe(tok) + " in the body of " +
                            what + "; expected 'param' or 'forward'");
    return false;
  });
  module.blocks.push_back(std::move(decl));
}

bool Parser::parseHyperParams(BlockDecl &decl) {
  return parseCommaList(
      TokenKind::RParen, parenDepth, "the hyper-parameter list", [&] {
        if (!tok.is(TokenKind::Identifier)) {
          error(tok.getLoc(),
                "expected a hyper-parameter name, found " + describe(tok));
          return false;
        }
        HyperParam hp;
        hp.name = tok.spelling.str();
        hp.loc = tok.getLoc();
        consume();
        if (tok.is(TokenKind::Equal)) {
          consume();
          hp.defaultValue = parseExpr();
          if (!hp.defaultValue)
            return false;
        }
        decl.hyperParams.push_back(std::move(hp));
        return true;
      });
}

bool Parser::parseParam(BlockDecl &decl) {
  consume(); // 'param'
  if (!tok.is(TokenKind::Identifier)) {
    error(missingLoc(), "expected a parameter name after 'param', found " +
                            describe(tok));
    return false;
  }
  ParamDecl param;
  param.name = tok.spelling.str();
  param.loc = tok.getLoc();
  consume();
  if (!tok.is(TokenKind::Colon)) {
    error(missingLoc(), "expected ':' after parameter name '" + param.name +
                            "'");
    return false;
  }
  consume();

  if (tok.is(TokenKind::Identifier) && peek().is(TokenKind::LBracket)) {
    // A raw tensor: `f32[a, b] [init expr]`.
    param.isRaw = true;
    if (!parseTensorType(param.type))
      return false;
    if (tok.is(TokenKind::KwInit)) {
      consume();
      param.init = parseExpr();
      if (!param.init)
        return false;
    }
  } else if (tok.is(TokenKind::Identifier)) {
    // A layer or block instance: `Linear(d, 4 * d)`, `Block(d)[layers]`.
    param.layer = tok.spelling.str();
    param.layerLoc = tok.getLoc();
    consume();
    if (!tok.is(TokenKind::LParen)) {
      error(missingLoc(), "expected '(' after layer '" + param.layer +
                              "' (write '" + param.layer +
                              "()' when it takes no arguments)");
      return false;
    }
    if (!parseCallArgs(param.args))
      return false;
    if (tok.is(TokenKind::LBracket)) {
      SMLoc lbracket = tok.getLoc();
      consume();
      BracketGuard guard(parenDepth);
      param.repeat = parseExpr();
      if (!param.repeat)
        return false;
      if (!tok.is(TokenKind::RBracket)) {
        error(missingLoc(), "expected ']' to close the repeat count");
        note(lbracket, "to match this '['");
        return false;
      }
      consume();
    }
  } else {
    error(missingLoc(), "expected a layer such as 'Linear(...)' or a tensor "
                        "type such as 'f32[...]' after ':', found " +
                            describe(tok));
    return false;
  }
  decl.params.push_back(std::move(param));
  return parseStatementEnd();
}

bool Parser::parseTensorType(TypeExpr &type) {
  if (!tok.is(TokenKind::Identifier)) {
    error(missingLoc(), "expected an element type (f32, bf16, f16, i32 or "
                        "i64), found " +
                            describe(tok));
    return false;
  }
  type.loc = tok.getLoc();
  type.dtype = tok.spelling.str();
  if (!isDType(type.dtype))
    error(tok.getLoc(), "unknown element type '" + type.dtype +
                            "'; expected f32, bf16, f16, i32 or i64");
  consume();
  if (!tok.is(TokenKind::LBracket)) {
    error(missingLoc(), "expected '[' after element type '" + type.dtype +
                            "' (a tensor type reads like 'f32[a, b]')");
    return false;
  }
  SMLoc lbracket = tok.getLoc();
  consume();
  BracketGuard guard(parenDepth);
  for (;;) {
    ExprPtr dim = parseExpr();
    if (!dim)
      return false;
    type.dims.push_back(std::move(dim));
    if (tok.is(TokenKind::Comma)) {
      consume();
      if (tok.is(TokenKind::RBracket))
        break;
      continue;
    }
    if (tok.is(TokenKind::RBracket))
      break;
    error(missingLoc(), "expected ']' to close the dimensions of the tensor "
                        "type");
    note(lbracket, "to match this '['");
    return false;
  }
  consume();
  return true;
}

bool Parser::parseForward(BlockDecl &decl) {
  ForwardDecl forward;
  forward.loc = tok.getLoc();
  consume(); // 'forward'
  if (!tok.is(TokenKind::LParen)) {
    error(missingLoc(), "expected '(' after 'forward'");
    return false;
  }
  if (!parseForwardArgs(forward))
    skipPast(TokenKind::RParen);
  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' after 'forward(...)'");
    return false;
  }
  SMLoc lbrace = tok.getLoc();
  parseBody(forward.body, lbrace, "the forward body");
  if (decl.forward) {
    error(forward.loc, Twine("duplicate 'forward' in ") +
                           (decl.isModel ? "model" : "block") + " '" +
                           decl.name + "'");
    note(decl.forward->loc, "previous definition is here");
    return true; // reported; the statement itself is complete
  }
  decl.forward = std::move(forward);
  return true;
}

bool Parser::parseForwardArgs(ForwardDecl &forward) {
  return parseCommaList(
      TokenKind::RParen, parenDepth, "the argument list of 'forward'", [&] {
        if (!tok.is(TokenKind::Identifier)) {
          error(tok.getLoc(),
                "expected an argument name, found " + describe(tok));
          return false;
        }
        ForwardArg arg;
        arg.name = tok.spelling.str();
        arg.loc = tok.getLoc();
        consume();
        if (tok.is(TokenKind::Colon)) {
          consume();
          arg.type.emplace();
          if (!parseTensorType(*arg.type))
            return false;
        }
        forward.args.push_back(std::move(arg));
        return true;
      });
}

void Parser::parseTrain(Module &module) {
  TrainDecl train;
  train.loc = tok.getLoc();
  consume(); // 'train'
  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' after 'train'");
    skipToTopLevel();
    return;
  }
  Body body;
  parseBody(body, tok.getLoc(), "the train body");
  // `key = value` lines directly in the body whose key is a recipe setting
  // are settings; everything else runs after each step.
  for (StmtPtr &stmt : body) {
    if (auto *let = llvm::dyn_cast<LetStmt>(stmt.get())) {
      if (let->targets.size() == 1 && isTrainSetting(let->targets[0].name)) {
        train.settings.push_back(Setting{let->targets[0].name,
                                         let->targets[0].loc,
                                         std::move(let->value)});
        continue;
      }
    }
    train.body.push_back(std::move(stmt));
  }
  module.trains.push_back(std::move(train));
}

bool Parser::parsePlanName(std::string &name, SMLoc &loc, StringRef what) {
  if (!tok.is(TokenKind::Identifier)) {
    error(missingLoc(), "expected " + what + ", found " + describe(tok));
    return false;
  }
  loc = tok.getLoc();
  name = tok.spelling.str();
  consume();
  // `fsdp-grad-op`, `hybrid-8`: '-' and identifier (or integer) parts with
  // no space between.
  while (tok.is(TokenKind::Minus) && adjacentToPrevious()) {
    const Token &next = peek();
    if (!(next.isIdentifierLike() || next.is(TokenKind::Integer)) ||
        next.spelling.data() != tok.spelling.data() + tok.spelling.size()) {
      error(tok.getLoc(), "expected a name part after '-' in plan name '" +
                              name + "-'");
      return false;
    }
    consume(); // '-'
    name += "-";
    name += tok.spelling.str();
    consume();
  }
  return true;
}

void Parser::parsePlan(Module &module) {
  consume(); // 'plan'
  PlanDecl plan;
  if (!parsePlanName(plan.name, plan.loc, "a plan name after 'plan'")) {
    skipToTopLevel();
    return;
  }
  if (tok.is(TokenKind::KwExtends)) {
    consume();
    if (!parsePlanName(plan.extends, plan.extendsLoc,
                       "a preset name after 'extends'")) {
      skipToTopLevel();
      return;
    }
  }
  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' after 'plan " + plan.name +
                            (plan.extends.empty() ? "" : " extends ") +
                            plan.extends + "'");
    skipToTopLevel();
    return;
  }
  SMLoc lbrace = tok.getLoc();
  consume();
  parseBracedItems(lbrace, "plan '" + plan.name + "'", [&] {
    if (!tok.isIdentifierLike()) {
      error(tok.getLoc(), "expected a plan option such as 'shard = full', "
                          "found " +
                              describe(tok));
      return false;
    }
    Setting option;
    option.key = tok.spelling.str();
    option.keyLoc = tok.getLoc();
    consume();
    if (!tok.is(TokenKind::Equal)) {
      error(missingLoc(),
            "expected '=' after plan option '" + option.key + "'");
      return false;
    }
    consume();
    if (!parseValueOnSameLine())
      return false;
    option.value = parseExpr();
    if (!option.value)
      return false;
    plan.options.push_back(std::move(option));
    return parseStatementEnd();
  });
  module.plans.push_back(std::move(plan));
}

//===----------------------------------------------------------------------===//
// Statements
//===----------------------------------------------------------------------===//

bool Parser::parseBody(Body &body, SMLoc lbrace, const Twine &what) {
  DepthGuard guard(*this);
  if (guard.tooDeepForStatements()) {
    error(lbrace, "statements nested too deeply");
    skipBalancedBraces();
    return false;
  }
  consume(); // '{'
  parseBracedItems(
      lbrace, what, [&] { return parseStatement(body); },
      /*stopAtBlockItems=*/true);
  return true;
}

bool Parser::parseStatement(Body &body) {
  StmtPtr stmt;
  bool compound = false; // ends with its body's '}'
  switch (tok.kind) {
  case TokenKind::KwIf:
    stmt = parseIf();
    compound = true;
    break;
  case TokenKind::KwFor:
    stmt = parseFor();
    compound = true;
    break;
  case TokenKind::KwEvery:
    stmt = parseEvery();
    compound = true;
    break;
  case TokenKind::KwStop:
    stmt = std::make_unique<StopStmt>(tok.getLoc());
    consume();
    break;
  case TokenKind::KwSave:
    stmt = parseSave();
    break;
  case TokenKind::KwReturn:
    stmt = parseReturn();
    break;
  case TokenKind::Identifier:
    if (peek().is(TokenKind::Equal) || peek().is(TokenKind::Comma)) {
      stmt = parseLet();
      break;
    }
    [[fallthrough]];
  default: {
    if (tok.is(TokenKind::KwElse)) {
      error(tok.getLoc(), "'else' without a matching 'if'");
      return false;
    }
    ExprPtr expr = parseExpr();
    if (!expr)
      return false;
    SMLoc loc = expr->loc;
    stmt = std::make_unique<ExprStmt>(loc, std::move(expr));
    break;
  }
  }
  if (!stmt)
    return false;
  body.push_back(std::move(stmt));
  return compound || parseStatementEnd();
}

StmtPtr Parser::parseLet() {
  std::vector<LetStmt::Target> targets;
  SMLoc loc = tok.getLoc();
  for (;;) {
    if (!tok.is(TokenKind::Identifier)) {
      error(missingLoc(), "expected a name to assign to, found " +
                              describe(tok));
      return nullptr;
    }
    targets.push_back({tok.spelling.str(), tok.getLoc()});
    consume();
    if (!tok.is(TokenKind::Comma))
      break;
    consume();
  }
  if (!tok.is(TokenKind::Equal)) {
    error(missingLoc(), "expected '=' after the names of a destructuring "
                        "assignment");
    return nullptr;
  }
  consume();
  if (!parseValueOnSameLine())
    return nullptr;
  ExprPtr value = parseExpr();
  if (!value)
    return nullptr;
  return std::make_unique<LetStmt>(loc, std::move(targets), std::move(value));
}

StmtPtr Parser::parseReturn() {
  SMLoc loc = tok.getLoc();
  consume(); // 'return'
  if (tok.is(TokenKind::Eof) || tok.is(TokenKind::RBrace) ||
      tok.is(TokenKind::Semicolon) || tok.newlineBefore) {
    error(missingLoc(), "expected a value after 'return'");
    return nullptr;
  }
  std::vector<ExprPtr> values;
  for (;;) {
    ExprPtr value = parseExpr();
    if (!value)
      return nullptr;
    values.push_back(std::move(value));
    if (!tok.is(TokenKind::Comma))
      break;
    consume();
  }
  return std::make_unique<ReturnStmt>(loc, std::move(values));
}

StmtPtr Parser::parseIf() {
  DepthGuard guard(*this);
  SMLoc loc = tok.getLoc();
  if (guard.tooDeepForStatements()) {
    error(loc, "statements nested too deeply");
    skipIfChain();
    return nullptr;
  }
  consume(); // 'if'
  ExprPtr condition = parseExpr();
  if (!condition)
    return nullptr;
  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' after the condition of 'if'");
    return nullptr;
  }
  Body thenBody, elseBody;
  if (!parseBody(thenBody, tok.getLoc(), "the body of 'if'")) {
    skipIfChain();
    return nullptr;
  }
  bool hasElse = false;
  if (tok.is(TokenKind::KwElse)) {
    hasElse = true;
    consume();
    if (tok.is(TokenKind::KwIf)) {
      StmtPtr nested = parseIf();
      if (!nested)
        return nullptr;
      elseBody.push_back(std::move(nested));
    } else if (tok.is(TokenKind::LBrace)) {
      if (!parseBody(elseBody, tok.getLoc(), "the body of 'else'"))
        return nullptr;
    } else {
      error(missingLoc(), "expected '{' or 'if' after 'else'");
      return nullptr;
    }
  }
  return std::make_unique<IfStmt>(loc, std::move(condition),
                                  std::move(thenBody), std::move(elseBody),
                                  hasElse);
}

StmtPtr Parser::parseFor() {
  SMLoc loc = tok.getLoc();
  consume(); // 'for'
  if (!tok.is(TokenKind::Identifier)) {
    error(missingLoc(), "expected a loop variable after 'for', found " +
                            describe(tok));
    return nullptr;
  }
  std::string var = tok.spelling.str();
  SMLoc varLoc = tok.getLoc();
  consume();
  if (!tok.is(TokenKind::KwIn)) {
    error(missingLoc(), "expected 'in' after the loop variable '" + var + "'");
    return nullptr;
  }
  consume();
  ExprPtr lo = parseExpr();
  if (!lo)
    return nullptr;
  if (!tok.is(TokenKind::DotDot)) {
    error(missingLoc(), "expected '..' in the range of 'for' (as in "
                        "'for i in 0..n')");
    return nullptr;
  }
  consume();
  ExprPtr hi = parseExpr();
  if (!hi)
    return nullptr;
  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' after the range of 'for'");
    return nullptr;
  }
  Body body;
  if (!parseBody(body, tok.getLoc(), "the body of 'for'"))
    return nullptr;
  return std::make_unique<ForStmt>(loc, std::move(var), varLoc, std::move(lo),
                                   std::move(hi), std::move(body));
}

StmtPtr Parser::parseEvery() {
  SMLoc loc = tok.getLoc();
  consume(); // 'every'
  ExprPtr period = parseExpr();
  if (!period)
    return nullptr;
  if (!tok.is(TokenKind::Identifier)) {
    error(missingLoc(), "expected a unit (steps, seconds or minutes) after "
                        "the period of 'every', found " +
                            describe(tok));
    return nullptr;
  }
  std::string unit = tok.spelling.str();
  SMLoc unitLoc = tok.getLoc();
  if (!isEveryUnit(unit))
    error(unitLoc, "unknown unit '" + unit +
                       "' in 'every'; expected steps, seconds or minutes");
  consume();
  if (!tok.is(TokenKind::LBrace)) {
    error(missingLoc(), "expected '{' after 'every ... " + unit + "'");
    return nullptr;
  }
  Body body;
  if (!parseBody(body, tok.getLoc(), "the body of 'every'"))
    return nullptr;
  return std::make_unique<EveryStmt>(loc, std::move(period), std::move(unit),
                                     unitLoc, std::move(body));
}

StmtPtr Parser::parseSave() {
  SMLoc loc = tok.getLoc();
  consume(); // 'save'
  if (!tok.is(TokenKind::Identifier) || tok.spelling != "checkpoint") {
    error(missingLoc(), "expected 'checkpoint' after 'save' (as in 'save "
                        "checkpoint(full)'), found " +
                            describe(tok));
    return nullptr;
  }
  consume();
  if (!tok.is(TokenKind::LParen)) {
    error(missingLoc(), "expected '(' after 'save checkpoint'");
    return nullptr;
  }
  std::vector<Argument> args;
  if (!parseCallArgs(args))
    return nullptr;
  return std::make_unique<SaveStmt>(loc, std::move(args));
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

ExprPtr Parser::parseExpr() {
  DepthGuard guard(*this);
  if (guard.tooDeep()) {
    error(tok.getLoc(), "expression nested too deeply");
    return nullptr;
  }
  return parseOr();
}

ExprPtr Parser::parseOr() {
  return parseBinaryChain(&Parser::parseAnd, [](TokenKind kind) {
    return kind == TokenKind::KwOr ? std::optional(BinaryOp::Or) : std::nullopt;
  });
}

ExprPtr Parser::parseAnd() {
  return parseBinaryChain(&Parser::parseNot, [](TokenKind kind) {
    return kind == TokenKind::KwAnd ? std::optional(BinaryOp::And)
                                    : std::nullopt;
  });
}

ExprPtr Parser::parseNot() {
  return parsePrefixed(TokenKind::KwNot, UnaryOp::Not, &Parser::parseNot,
                       &Parser::parseComparison);
}

static std::optional<BinaryOp> getComparisonOp(TokenKind kind) {
  switch (kind) {
  case TokenKind::EqualEqual: return BinaryOp::Eq;
  case TokenKind::NotEqual: return BinaryOp::Ne;
  case TokenKind::Less: return BinaryOp::Lt;
  case TokenKind::LessEqual: return BinaryOp::Le;
  case TokenKind::Greater: return BinaryOp::Gt;
  case TokenKind::GreaterEqual: return BinaryOp::Ge;
  default: return std::nullopt;
  }
}

ExprPtr Parser::parseComparison() {
  ExprPtr lhs = parseAdditive();
  if (!lhs)
    return nullptr;
  std::optional<BinaryOp> op = getComparisonOp(tok.kind);
  if (!op || !continuesLine())
    return lhs;
  SMLoc opLoc = tok.getLoc();
  ChainGuard chain(*this);
  if (!chain.add()) {
    error(opLoc, "expression nested too deeply");
    return nullptr;
  }
  consume();
  ExprPtr rhs = parseAdditive();
  if (!rhs)
    return nullptr;
  if (getComparisonOp(tok.kind) && continuesLine()) {
    error(tok.getLoc(), "comparisons cannot be chained; combine them with "
                        "'and' or use parentheses");
    note(opLoc, "previous comparison is here");
    return nullptr;
  }
  SMLoc loc = lhs->loc;
  return std::make_unique<BinaryExpr>(loc, *op, std::move(lhs), std::move(rhs),
                                      opLoc);
}

ExprPtr Parser::parseAdditive() {
  return parseBinaryChain(&Parser::parseMultiplicative,
                          [](TokenKind kind) -> std::optional<BinaryOp> {
                            if (kind == TokenKind::Plus)
                              return BinaryOp::Add;
                            if (kind == TokenKind::Minus)
                              return BinaryOp::Sub;
                            return std::nullopt;
                          });
}

ExprPtr Parser::parseMultiplicative() {
  return parseBinaryChain(&Parser::parseUnary,
                          [](TokenKind kind) -> std::optional<BinaryOp> {
                            if (kind == TokenKind::Star)
                              return BinaryOp::Mul;
                            if (kind == TokenKind::Slash)
                              return BinaryOp::Div;
                            if (kind == TokenKind::At)
                              return BinaryOp::MatMul;
                            return std::nullopt;
                          });
}

ExprPtr Parser::parseUnary() {
  return parsePrefixed(TokenKind::Minus, UnaryOp::Neg, &Parser::parseUnary,
                       &Parser::parsePostfix);
}

ExprPtr Parser::parsePostfix() {
  ExprPtr expr = parsePrimary();
  if (!expr)
    return nullptr;
  ChainGuard chain(*this);
  while (continuesLine()) {
    if (tok.is(TokenKind::Dot)) {
      if (!chain.add()) {
        error(tok.getLoc(), "expression nested too deeply");
        return nullptr;
      }
      consume();
      if (!tok.is(TokenKind::Identifier)) {
        error(missingLoc(), "expected a member name after '.', found " +
                                describe(tok));
        return nullptr;
      }
      SMLoc loc = expr->loc;
      expr = std::make_unique<MemberExpr>(loc, std::move(expr),
                                          tok.spelling.str(), tok.getLoc());
      consume();
      continue;
    }
    if (tok.is(TokenKind::LParen)) {
      auto *name = llvm::dyn_cast<NameExpr>(expr.get());
      if (!name) {
        error(tok.getLoc(), "only a name can be called, as in 'fc(x)' or "
                            "'gelu(x)'");
        return nullptr;
      }
      std::vector<Argument> args;
      if (!parseCallArgs(args))
        return nullptr;
      expr = std::make_unique<CallExpr>(name->loc, std::move(name->name),
                                        std::move(args));
      continue;
    }
    break;
  }
  return expr;
}

bool Parser::parseCallArgs(std::vector<Argument> &args) {
  return parseCommaList(
      TokenKind::RParen, parenDepth, "the argument list", [&] {
        Argument arg;
        if (tok.isIdentifierLike() && peek().is(TokenKind::Equal)) {
          arg.name = tok.spelling.str();
          arg.nameLoc = tok.getLoc();
          consume();
          consume(); // '='
        }
        arg.value = parseExpr();
        if (!arg.value)
          return false;
        args.push_back(std::move(arg));
        return true;
      });
}

ExprPtr Parser::parsePrimary() {
  SMLoc loc = tok.getLoc();
  switch (tok.kind) {
  case TokenKind::Integer:
  case TokenKind::Float:
    return parseNumber();
  case TokenKind::String: {
    auto expr = std::make_unique<StringExpr>(loc, std::move(tok.stringValue));
    consume();
    return expr;
  }
  case TokenKind::KwTrue:
  case TokenKind::KwFalse: {
    auto expr = std::make_unique<BoolExpr>(loc, tok.is(TokenKind::KwTrue));
    consume();
    return expr;
  }
  case TokenKind::Identifier: {
    auto expr = std::make_unique<NameExpr>(loc, tok.spelling.str());
    consume();
    return expr;
  }
  case TokenKind::LParen:
    return parseParenthesized();
  case TokenKind::LBracket:
    return parseList();
  case TokenKind::LBrace:
    return parseRecord();
  default:
    error(missingLoc(), "expected expression, found " + describe(tok));
    return nullptr;
  }
}

ExprPtr Parser::parseNumber() {
  SMLoc loc = tok.getLoc();
  bool isInteger = tok.is(TokenKind::Integer);
  int64_t intValue = tok.intValue;
  double floatValue = tok.floatValue;
  StringRef spelling = tok.spelling;
  consume();
  int64_t multiplier;
  if (!tok.is(TokenKind::Identifier) || !continuesLine() ||
      !getSizeUnitMultiplier(tok.spelling, multiplier))
    return std::make_unique<NumberExpr>(loc, isInteger, intValue, floatValue);

  // A size literal: `25 MiB`.
  std::string unit = tok.spelling.str();
  int64_t bytes = 0;
  if (isInteger) {
    if (__builtin_mul_overflow(intValue, multiplier, &bytes)) {
      error(loc, "size '" + spelling + " " + unit + "' is out of range");
      bytes = 0;
    }
  } else {
    double product = floatValue * static_cast<double>(multiplier);
    if (!(product < 9.2e18)) {
      error(loc, "size '" + spelling + " " + unit + "' is out of range");
    } else if (product != std::floor(product)) {
      error(loc, "size '" + spelling + " " + unit +
                     "' is not a whole number of bytes");
    } else {
      bytes = static_cast<int64_t>(product);
    }
  }
  consume();
  return std::make_unique<SizeExpr>(loc, floatValue, std::move(unit), bytes);
}

ExprPtr Parser::parseParenthesized() {
  SMLoc lparen = tok.getLoc();
  consume(); // '('
  BracketGuard guard(parenDepth);
  ExprPtr first = parseExpr();
  if (!first)
    return nullptr;
  if (tok.is(TokenKind::RParen)) {
    consume();
    return first;
  }
  if (!tok.is(TokenKind::Comma)) {
    error(missingLoc(), "expected ')' to close the parenthesized expression");
    note(lparen, "to match this '('");
    return nullptr;
  }
  // A tuple: `(a,)`, `(a, b)`.
  std::vector<ExprPtr> elements;
  elements.push_back(std::move(first));
  while (tok.is(TokenKind::Comma)) {
    consume();
    if (tok.is(TokenKind::RParen))
      break;
    ExprPtr element = parseExpr();
    if (!element)
      return nullptr;
    elements.push_back(std::move(element));
  }
  if (!tok.is(TokenKind::RParen)) {
    error(missingLoc(), "expected ')' to close the tuple");
    note(lparen, "to match this '('");
    return nullptr;
  }
  consume();
  return std::make_unique<TupleExpr>(lparen, std::move(elements));
}

ExprPtr Parser::parseList() {
  SMLoc lbracket = tok.getLoc();
  std::vector<ExprPtr> elements;
  if (!parseCommaList(TokenKind::RBracket, parenDepth, "the list", [&] {
        ExprPtr element = parseExpr();
        if (!element)
          return false;
        elements.push_back(std::move(element));
        return true;
      }))
    return nullptr;
  return std::make_unique<ListExpr>(lbracket, std::move(elements));
}

ExprPtr Parser::parseRecord() {
  SMLoc lbrace = tok.getLoc();
  std::vector<Setting> fields;
  if (!parseCommaList(TokenKind::RBrace, recordDepth, "the record", [&] {
        if (!tok.isIdentifierLike()) {
          error(missingLoc(),
                "expected a field name in the record, found " + describe(tok));
          return false;
        }
        Setting field;
        field.key = tok.spelling.str();
        field.keyLoc = tok.getLoc();
        consume();
        if (!tok.is(TokenKind::Equal)) {
          error(missingLoc(),
                "expected '=' after field '" + field.key + "' in the record");
          return false;
        }
        consume();
        field.value = parseExpr();
        if (!field.value)
          return false;
        fields.push_back(std::move(field));
        return true;
      }))
    return nullptr;
  return std::make_unique<RecordExpr>(lbrace, std::move(fields));
}

std::unique_ptr<Module> md::frontend::parseModule(unsigned bufferId,
                                                  Diagnostics &diags) {
  Parser parser(bufferId, diags);
  return parser.parseModule();
}
