//===- Lexer.cpp - tokens of the .mdl language ----------------------------===//

#include "frontend/Lexer.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace md::frontend;
using llvm::SMLoc;
using llvm::StringRef;

llvm::StringRef md::frontend::getTokenKindSpelling(TokenKind kind) {
  switch (kind) {
  case TokenKind::Eof: return "end of file";
  case TokenKind::Identifier: return "identifier";
  case TokenKind::Integer: return "integer";
  case TokenKind::Float: return "number";
  case TokenKind::String: return "string";
  case TokenKind::KwBlock: return "'block'";
  case TokenKind::KwModel: return "'model'";
  case TokenKind::KwParam: return "'param'";
  case TokenKind::KwForward: return "'forward'";
  case TokenKind::KwReturn: return "'return'";
  case TokenKind::KwTrain: return "'train'";
  case TokenKind::KwPlan: return "'plan'";
  case TokenKind::KwExtends: return "'extends'";
  case TokenKind::KwInit: return "'init'";
  case TokenKind::KwIf: return "'if'";
  case TokenKind::KwElse: return "'else'";
  case TokenKind::KwFor: return "'for'";
  case TokenKind::KwIn: return "'in'";
  case TokenKind::KwEvery: return "'every'";
  case TokenKind::KwStop: return "'stop'";
  case TokenKind::KwSave: return "'save'";
  case TokenKind::KwAnd: return "'and'";
  case TokenKind::KwOr: return "'or'";
  case TokenKind::KwNot: return "'not'";
  case TokenKind::KwTrue: return "'true'";
  case TokenKind::KwFalse: return "'false'";
  case TokenKind::LBrace: return "'{'";
  case TokenKind::RBrace: return "'}'";
  case TokenKind::LParen: return "'('";
  case TokenKind::RParen: return "')'";
  case TokenKind::LBracket: return "'['";
  case TokenKind::RBracket: return "']'";
  case TokenKind::Comma: return "','";
  case TokenKind::Colon: return "':'";
  case TokenKind::Semicolon: return "';'";
  case TokenKind::Equal: return "'='";
  case TokenKind::Plus: return "'+'";
  case TokenKind::Minus: return "'-'";
  case TokenKind::Star: return "'*'";
  case TokenKind::Slash: return "'/'";
  case TokenKind::Percent: return "'%'";
  case TokenKind::At: return "'@'";
  case TokenKind::Dot: return "'.'";
  case TokenKind::DotDot: return "'..'";
  case TokenKind::EqualEqual: return "'=='";
  case TokenKind::NotEqual: return "'!='";
  case TokenKind::Less: return "'<'";
  case TokenKind::LessEqual: return "'<='";
  case TokenKind::Greater: return "'>'";
  case TokenKind::GreaterEqual: return "'>='";
  }
  return "token";
}

bool Token::isIdentifierLike() const {
  return kind == TokenKind::Identifier ||
         (kind >= TokenKind::KwBlock && kind <= TokenKind::KwFalse);
}

bool md::frontend::getSizeUnitMultiplier(StringRef s, int64_t &multiplier) {
  multiplier = llvm::StringSwitch<int64_t>(s)
                   .Case("B", 1)
                   .Case("KB", 1000)
                   .Case("MB", 1000 * 1000)
                   .Case("GB", 1000 * 1000 * 1000)
                   .Case("KiB", int64_t(1) << 10)
                   .Case("MiB", int64_t(1) << 20)
                   .Case("GiB", int64_t(1) << 30)
                   .Default(0);
  return multiplier != 0;
}

static bool isIdentStart(char c) { return llvm::isAlpha(c) || c == '_'; }
static bool isIdentChar(char c) { return llvm::isAlnum(c) || c == '_'; }

Lexer::Lexer(unsigned bufferId, Diagnostics &diags)
    : diags(diags), startErrors(diags.getNumErrors()) {
  const llvm::MemoryBuffer *buffer =
      diags.getSourceMgr().getMemoryBuffer(bufferId);
  begin = cur = buffer->getBufferStart();
  end = buffer->getBufferEnd();
}

void Lexer::error(SMLoc loc, const llvm::Twine &message) {
  if (diags.getNumErrors() - startErrors >= errorLimit) {
    // Give up: the next lex() returns Eof. (Not by moving `cur` here: the
    // caller may still step over the offending characters.)
    lastErrorLoc = loc;
    gaveUp = true;
    return;
  }
  lastErrorLoc = loc;
  diags.error(loc, message);
}

void Lexer::skipWhitespaceAndComments(bool &sawNewline) {
  while (cur != end) {
    char c = *cur;
    if (c == '\n') {
      sawNewline = true;
      ++cur;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++cur;
    } else if (c == '#') {
      while (cur != end && *cur != '\n')
        ++cur;
    } else {
      return;
    }
  }
}

Token Lexer::lex() {
  for (;;) {
    if (gaveUp)
      cur = end;
    Token tok;
    bool sawNewline = cur == begin;
    skipWhitespaceAndComments(sawNewline);
    tok.newlineBefore = sawNewline;
    tok.index = nextIndex;
    const char *start = cur;
    if (cur == end) {
      tok.kind = TokenKind::Eof;
      tok.spelling = StringRef(end, 0);
      return tok;
    }

    char c = *cur;
    auto punct = [&](TokenKind kind, unsigned length) {
      cur += length;
      tok.kind = kind;
      tok.spelling = StringRef(start, length);
      ++nextIndex;
      return tok;
    };
    auto peekIs = [&](char next) { return cur + 1 != end && cur[1] == next; };
    // '=', '<' and '>' alone or followed by '=' ("==", "<=", ">=").
    auto punctOrWithEqual = [&](TokenKind alone, TokenKind withEqual) {
      return peekIs('=') ? punct(withEqual, 2) : punct(alone, 1);
    };

    if (isIdentStart(c)) {
      lexIdentifier(tok);
      ++nextIndex;
      return tok;
    }
    if (llvm::isDigit(c)) {
      lexNumber(tok);
      ++nextIndex;
      return tok;
    }
    switch (c) {
    case '"':
      lexString(tok);
      ++nextIndex;
      return tok;
    case '{': return punct(TokenKind::LBrace, 1);
    case '}': return punct(TokenKind::RBrace, 1);
    case '(': return punct(TokenKind::LParen, 1);
    case ')': return punct(TokenKind::RParen, 1);
    case '[': return punct(TokenKind::LBracket, 1);
    case ']': return punct(TokenKind::RBracket, 1);
    case ',': return punct(TokenKind::Comma, 1);
    case ':': return punct(TokenKind::Colon, 1);
    case ';': return punct(TokenKind::Semicolon, 1);
    case '+': return punct(TokenKind::Plus, 1);
    case '-': return punct(TokenKind::Minus, 1);
    case '*': return punct(TokenKind::Star, 1);
    case '/': return punct(TokenKind::Slash, 1);
    case '%': return punct(TokenKind::Percent, 1);
    case '@': return punct(TokenKind::At, 1);
    case '.':
      if (peekIs('.'))
        return punct(TokenKind::DotDot, 2);
      // `.5` is a malformed number, but `h.3` is a member access (reported
      // by the parser).
      if (cur + 1 != end && llvm::isDigit(cur[1]) &&
          !(cur != begin && (isIdentChar(cur[-1]) || cur[-1] == ')' ||
                             cur[-1] == ']'))) {
        error(SMLoc::getFromPointer(start),
                    "malformed number: write a digit before '.' (0.5, not .5)");
        ++cur;
        lexNumber(tok);
        tok.spelling = StringRef(start, cur - start);
        ++nextIndex;
        return tok;
      }
      return punct(TokenKind::Dot, 1);
    case '=':
      return punctOrWithEqual(TokenKind::Equal, TokenKind::EqualEqual);
    case '<':
      return punctOrWithEqual(TokenKind::Less, TokenKind::LessEqual);
    case '>':
      return punctOrWithEqual(TokenKind::Greater, TokenKind::GreaterEqual);
    case '!':
      if (peekIs('='))
        return punct(TokenKind::NotEqual, 2);
      error(SMLoc::getFromPointer(start),
                  "invalid character '!'; use 'not' for negation");
      ++cur;
      continue;
    case '&':
    case '|': {
      bool doubled = peekIs(c);
      error(SMLoc::getFromPointer(start),
                  llvm::Twine("invalid character '") + llvm::Twine(c) +
                      "'; use '" + (c == '&' ? "and" : "or") + "'");
      cur += doubled ? 2 : 1;
      continue;
    }
    default:
      break;
    }

    // Anything else is an invalid character. A run of non-ASCII bytes (a
    // UTF-8 sequence, or garbage) is one error.
    if (static_cast<unsigned char>(c) >= 0x80) {
      while (cur != end && static_cast<unsigned char>(*cur) >= 0x80)
        ++cur;
      error(SMLoc::getFromPointer(start),
                  "invalid character: non-ASCII characters may appear only "
                  "in strings and comments");
      continue;
    }
    ++cur;
    if (llvm::isPrint(c))
      error(SMLoc::getFromPointer(start),
                  llvm::Twine("invalid character '") + llvm::Twine(c) + "'");
    else
      error(SMLoc::getFromPointer(start),
                  "invalid character '\\x" +
                      llvm::Twine(llvm::hexdigit(((unsigned char)c) >> 4, true)) +
                      llvm::Twine(llvm::hexdigit(((unsigned char)c) & 15, true)) +
                      "'");
  }
}

void Lexer::lexIdentifier(Token &tok) {
  const char *start = cur;
  while (cur != end && isIdentChar(*cur))
    ++cur;
  tok.spelling = StringRef(start, cur - start);
  tok.kind = llvm::StringSwitch<TokenKind>(tok.spelling)
                 .Case("block", TokenKind::KwBlock)
                 .Case("model", TokenKind::KwModel)
                 .Case("param", TokenKind::KwParam)
                 .Case("forward", TokenKind::KwForward)
                 .Case("return", TokenKind::KwReturn)
                 .Case("train", TokenKind::KwTrain)
                 .Case("plan", TokenKind::KwPlan)
                 .Case("extends", TokenKind::KwExtends)
                 .Case("init", TokenKind::KwInit)
                 .Case("if", TokenKind::KwIf)
                 .Case("else", TokenKind::KwElse)
                 .Case("for", TokenKind::KwFor)
                 .Case("in", TokenKind::KwIn)
                 .Case("every", TokenKind::KwEvery)
                 .Case("stop", TokenKind::KwStop)
                 .Case("save", TokenKind::KwSave)
                 .Case("and", TokenKind::KwAnd)
                 .Case("or", TokenKind::KwOr)
                 .Case("not", TokenKind::KwNot)
                 .Case("true", TokenKind::KwTrue)
                 .Case("false", TokenKind::KwFalse)
                 .Default(TokenKind::Identifier);
}

void Lexer::lexNumber(Token &tok) {
  const char *start = cur;
  bool isFloat = false;
  bool malformed = false;
  while (cur != end && llvm::isDigit(*cur))
    ++cur;
  // A fraction: '.' and digits. `0..n` is a range, not a fraction.
  if (cur != end && *cur == '.' && !(cur + 1 != end && cur[1] == '.')) {
    ++cur;
    isFloat = true;
    if (cur == end || !llvm::isDigit(*cur))
      malformed = true;
    while (cur != end && llvm::isDigit(*cur))
      ++cur;
  }
  // An exponent: e, an optional sign, digits.
  if (cur != end && (*cur == 'e' || *cur == 'E')) {
    const char *p = cur + 1;
    if (p != end && (*p == '+' || *p == '-'))
      ++p;
    if (p != end && llvm::isDigit(*p)) {
      isFloat = true;
      cur = p;
      while (cur != end && llvm::isDigit(*cur))
        ++cur;
    }
  }
  // A second fraction (`1.2.3`) is malformed.
  if (cur != end && *cur == '.' && cur + 1 != end && llvm::isDigit(cur[1]))
    malformed = true;
  // Letters right after the digits: a size unit (`25MiB`, lexed next as an
  // identifier), or a malformed number (`12abc`, `0x10`, `1e`).
  if (cur != end && isIdentChar(*cur)) {
    const char *p = cur;
    while (p != end && isIdentChar(*p))
      ++p;
    int64_t multiplier;
    if (!getSizeUnitMultiplier(StringRef(cur, p - cur), multiplier)) {
      cur = p;
      malformed = true;
    }
  }
  // Stray '.' and digits after a malformed number belong to it (`1.2.3`).
  if (malformed)
    while (cur != end && (isIdentChar(*cur) ||
                          (*cur == '.' && !(cur + 1 != end && cur[1] == '.'))))
      ++cur;

  tok.spelling = StringRef(start, cur - start);
  tok.kind = isFloat ? TokenKind::Float : TokenKind::Integer;
  SMLoc loc = SMLoc::getFromPointer(start);
  if (malformed) {
    error(loc, "malformed number '" + tok.spelling + "'");
    tok.intValue = 0;
    tok.floatValue = 0;
    return;
  }
  if (!isFloat) {
    uint64_t value = 0;
    bool overflow = false;
    for (char d : tok.spelling) {
      unsigned digit = d - '0';
      if (value > (uint64_t(INT64_MAX) - digit) / 10) {
        overflow = true;
        break;
      }
      value = value * 10 + digit;
    }
    if (overflow) {
      error(loc, "integer literal '" + tok.spelling +
                           "' is out of range; integers must fit in int64");
      value = 0;
    }
    tok.intValue = static_cast<int64_t>(value);
    tok.floatValue = static_cast<double>(value);
    return;
  }
  std::string text = tok.spelling.str();
  errno = 0;
  double value = std::strtod(text.c_str(), nullptr);
  if (errno == ERANGE && std::isinf(value)) {
    error(loc, "floating-point literal '" + tok.spelling +
                         "' is out of range");
    value = 0;
  }
  tok.floatValue = value;
}

void Lexer::lexString(Token &tok) {
  const char *start = cur;
  ++cur; // the opening quote
  tok.kind = TokenKind::String;
  for (;;) {
    if (cur == end || *cur == '\n') {
      error(SMLoc::getFromPointer(start), "unterminated string");
      break;
    }
    char c = *cur;
    if (c == '"') {
      ++cur;
      break;
    }
    if (c != '\\') {
      tok.stringValue.push_back(c);
      ++cur;
      continue;
    }
    // An escape.
    const char *escape = cur;
    ++cur;
    if (cur == end || *cur == '\n')
      continue; // reported as unterminated above
    char e = *cur++;
    switch (e) {
    case '"': tok.stringValue.push_back('"'); break;
    case '\\': tok.stringValue.push_back('\\'); break;
    case 'n': tok.stringValue.push_back('\n'); break;
    case 't': tok.stringValue.push_back('\t'); break;
    default:
      if (llvm::isPrint(e))
        error(SMLoc::getFromPointer(escape),
                    llvm::Twine("unknown escape sequence '\\") + llvm::Twine(e) +
                        "' in string; the escapes are \\\" \\\\ \\n \\t");
      else
        error(SMLoc::getFromPointer(escape),
                    "unknown escape sequence in string; the escapes are \\\" "
                    "\\\\ \\n \\t");
      break;
    }
  }
  tok.spelling = StringRef(start, cur - start);
}
