//===- Lexer.h - tokens of the .mdl language --------------------*- C++ -*-===//
//
// Turns one SourceMgr buffer into tokens on demand. Every token carries its
// spelling (a view into the buffer, so its SMLoc is the spelling's start) and
// whether a newline separates it from the previous token: statements end at
// newlines, so the parser needs to know. Lexical errors (invalid characters,
// unterminated strings, malformed or out-of-range numbers) are reported
// through Diagnostics and lexing goes on, so the parser never sees them.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_LEXER_H
#define MD_FRONTEND_LEXER_H

#include <cstdint>
#include <string>

#include "frontend/Diagnostics.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

namespace md::frontend {

enum class TokenKind {
  Eof,
  Identifier,
  Integer, // 42
  Float,   // 6e-4, 0.9
  String,  // "..." (value has escapes resolved)

  // Keywords.
  KwBlock, KwModel, KwParam, KwForward, KwReturn, KwTrain, KwPlan, KwExtends,
  KwInit, KwIf, KwElse, KwFor, KwIn, KwEvery, KwStop, KwSave, KwAnd, KwOr,
  KwNot, KwTrue, KwFalse,

  // Punctuation.
  LBrace, RBrace, LParen, RParen, LBracket, RBracket, Comma, Colon, Semicolon,
  Equal, Plus, Minus, Star, Slash, Percent, At, Dot, DotDot, EqualEqual,
  NotEqual, Less, LessEqual, Greater, GreaterEqual,
};

/// How a token kind reads in a message: `'('`, `identifier`, `end of file`.
llvm::StringRef getTokenKindSpelling(TokenKind kind);

struct Token {
  TokenKind kind = TokenKind::Eof;
  /// The characters of the token in the buffer (empty at the end of file).
  llvm::StringRef spelling;
  /// A newline (or the start of the file) comes between the previous token
  /// and this one.
  bool newlineBefore = false;
  /// Integer: the value; Float: intValue unused.
  int64_t intValue = 0;
  /// Integer and Float: the value as a double.
  double floatValue = 0;
  /// String: the contents, escapes resolved.
  std::string stringValue;
  /// Position in the token stream (0, 1, 2, ...): parsers use it to see that
  /// they made progress.
  unsigned index = 0;

  bool is(TokenKind k) const { return kind == k; }
  bool isNot(TokenKind k) const { return kind != k; }
  /// An identifier or a keyword: anything spelled like an identifier.
  bool isIdentifierLike() const;
  /// One of the keywords that start a top-level declaration.
  bool isTopLevelKeyword() const {
    return kind == TokenKind::KwBlock || kind == TokenKind::KwModel ||
           kind == TokenKind::KwTrain || kind == TokenKind::KwPlan;
  }
  llvm::SMLoc getLoc() const {
    return llvm::SMLoc::getFromPointer(spelling.data());
  }
  /// Just past the last character of the token.
  llvm::SMLoc getEndLoc() const {
    return llvm::SMLoc::getFromPointer(spelling.data() + spelling.size());
  }
};

class Lexer {
public:
  Lexer(unsigned bufferId, Diagnostics &diags);

  /// The next token; Eof forever once the buffer is exhausted.
  Token lex();

  /// From now on only Eof (after too many errors).
  void stop() { cur = end; }

  /// Once the file has this many errors (counted from the lexer's creation)
  /// the lexer reports no more and returns Eof: a binary file must not
  /// produce an error per byte.
  void setErrorLimit(unsigned limit) { errorLimit = limit; }

  /// Where the last lexical error was reported (invalid if none).
  llvm::SMLoc getLastErrorLoc() const { return lastErrorLoc; }

private:
  void error(llvm::SMLoc loc, const llvm::Twine &message);
  void skipWhitespaceAndComments(bool &sawNewline);
  void lexNumber(Token &tok);
  void lexString(Token &tok);
  void lexIdentifier(Token &tok);

  Diagnostics &diags;
  const char *begin;
  const char *cur;
  const char *end;
  unsigned nextIndex = 0;
  llvm::SMLoc lastErrorLoc;
  unsigned startErrors;
  unsigned errorLimit = ~0u;
  bool gaveUp = false; // the error limit was reached
};

/// Whether `s` is a size unit: B KB MB GB KiB MiB GiB; sets its multiplier.
bool getSizeUnitMultiplier(llvm::StringRef s, int64_t &multiplier);

} // namespace md::frontend

#endif // MD_FRONTEND_LEXER_H
