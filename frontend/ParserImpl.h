//===- ParserImpl.h - the .mdl parser's class -------------------*- C++ -*-===//
//
// Private to frontend/. The recursive-descent parser is one class whose
// token handling, error recovery and shared list/body helpers live here;
// its grammar rules are defined by concern:
//
//   Parser.cpp             the module and its declarations (block, param,
//                          forward, train, plan), and parseModule;
//   ParserStatements.cpp   bodies and statements;
//   ParserExpressions.cpp  expressions, by precedence.
//
// The conventions every rule follows are in Parser.cpp's top comment.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_PARSERIMPL_H
#define MD_FRONTEND_PARSERIMPL_H

#include "frontend/Parser.h"

#include <algorithm>
#include <deque>
#include <optional>

#include "frontend/Lexer.h"

#include "llvm/ADT/STLExtras.h"

namespace md::frontend::parser {

using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

/// Nesting of expressions and bodies (and chained operators) past this is an
/// error; it bounds the parser's recursion and the height of the AST.
constexpr unsigned kMaxDepth = 256;
/// Bodies (if, for, every) nest at most this deep, which leaves expressions
/// inside them room to nest too.
constexpr unsigned kMaxStatementDepth = 128;

/// A binary operator and the token that spells it; each precedence level
/// of ParserExpressions.cpp is a table of these.
struct BinaryOperator {
  TokenKind token;
  BinaryOp op;
};

/// The operator of `level` that `kind` spells, if any.
inline std::optional<BinaryOp> operatorOf(llvm::ArrayRef<BinaryOperator> level,
                                          TokenKind kind) {
  for (const BinaryOperator &entry : level)
    if (entry.token == kind)
      return entry.op;
  return std::nullopt;
}

/// Keywords that start a statement or block item and cannot appear inside an
/// expression.
inline bool isStatementKeyword(TokenKind kind) {
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
    lexer.setErrorLimit(maxErrors());
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

  /// After the diagnostics' error limit (mdc --error-limit) the parser
  /// stops: nothing after it would be shown.
  unsigned maxErrors() const {
    return diags.getErrorLimit() == 0 ? ~0u : diags.getErrorLimit();
  }

  /// Past maxErrors() errors, says so and turns the rest into end of file.
  void checkErrorLimit() {
    if (stopped || diags.getNumErrors() - startErrors < maxErrors())
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
    if ((tok.is(TokenKind::Eof) || tok.newlineBefore) && tok.index > stmtStart)
      return prevEnd;
    return tok.getLoc();
  }

  //===--------------------------------------------------------------------===//
  // Diagnostics and recovery
  //===--------------------------------------------------------------------===//

  /// Whether the current token is a `kind`; if not, reports `message` where
  /// the token is missing. Consumes nothing either way.
  bool expect(TokenKind kind, const Twine &message) {
    if (tok.is(kind))
      return true;
    error(missingLoc(), message);
    return false;
  }

  /// expect, then consumes the `kind` token: for punctuation and keywords
  /// that only separate what comes before and after them.
  bool expectAndConsume(TokenKind kind, const Twine &message) {
    if (!expect(kind, message))
      return false;
    consume();
    return true;
  }

  /// An optional `<kind> expr` clause (`= default`, `init expr`): when the
  /// current token is a `kind`, consumes it and parses the expression after
  /// it into `out`. False only when that expression does not parse.
  bool parseOptionalClause(TokenKind kind, ExprPtr &out) {
    if (!tok.is(kind))
      return true;
    consume();
    out = parseExpr();
    return out != nullptr;
  }

  /// An identifier naming a `what` ("a hyper-parameter name"): stores its
  /// spelling and location and consumes it. Otherwise reports "expected
  /// <what>, found <token>" at the token and consumes nothing.
  bool parseName(StringRef what, std::string &name, SMLoc &loc) {
    if (!tok.is(TokenKind::Identifier)) {
      error(tok.getLoc(), "expected " + what + ", found " + describe(tok));
      return false;
    }
    takeName(name, loc);
    return true;
  }

  /// The current token, a name already checked, as `name` at `loc`;
  /// consumes it.
  void takeName(std::string &name, SMLoc &loc) {
    name = tok.spelling.str();
    loc = tok.getLoc();
    consume();
  }

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
      if (depth == 0 &&
          (tok.is(TokenKind::LBrace) || tok.is(TokenKind::RBrace)))
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
    error(tok.getLoc(),
          "expected a newline or ';' after the statement, found " +
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

  /// The operand of the operator at `opLoc`, the current token: consumes
  /// the operator and parses the operand with `parse`. Null after "expression
  /// nested too deeply" at the operator when `tooDeep`.
  ExprPtr parseOperandOf(SMLoc opLoc, bool tooDeep,
                         llvm::function_ref<ExprPtr()> parse) {
    if (tooDeep) {
      error(opLoc, "expression nested too deeply");
      return nullptr;
    }
    consume();
    return parse();
  }

  /// The binary operators of `levels`, loosest first (ParserExpressions.cpp),
  /// over the operands `operand` parses: at each level a left-associative
  /// chain `next (op next)*` on one logical line, `next` being the next level.
  ExprPtr
  parseBinaryLevels(llvm::ArrayRef<llvm::ArrayRef<BinaryOperator>> levels,
                    ExprPtr (Parser::*operand)()) {
    if (levels.empty())
      return (this->*operand)();
    auto parseNext = [&] {
      return parseBinaryLevels(levels.drop_front(), operand);
    };
    ExprPtr lhs = parseNext();
    if (!lhs)
      return nullptr;
    ChainGuard chain(*this);
    for (;;) {
      std::optional<BinaryOp> op = operatorOf(levels.front(), tok.kind);
      if (!op || !continuesLine())
        break;
      SMLoc opLoc = tok.getLoc();
      ExprPtr rhs = parseOperandOf(opLoc, !chain.add(), parseNext);
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
    ExprPtr operand =
        parseOperandOf(loc, guard.tooDeep(), [&] { return (this->*self)(); });
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
  ExprPtr parseNot();
  ExprPtr parseComparison();
  ExprPtr parseAdditive();
  ExprPtr parseUnary();
  ExprPtr parsePostfix();
  ExprPtr parsePrimary();
  ExprPtr parseNumber();
  ExprPtr parseParenthesized();
  ExprPtr parseList();
  ExprPtr parseRecord();
  bool parseCallArgs(std::vector<Argument> &args);
  bool parseIndexItems(std::vector<IndexItem> &items);

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
  bool lastErrorWasEcho = false;      // its notes are quiet too
  unsigned errorParenDepth = 0, errorRecordDepth = 0, errorTokIndex = 0;
};

} // namespace md::frontend::parser

#endif // MD_FRONTEND_PARSERIMPL_H
