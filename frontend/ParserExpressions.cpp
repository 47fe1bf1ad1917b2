//===- ParserExpressions.cpp - .mdl expressions ---------------------------===//
//
// Expressions by precedence (or, and, not, comparison, additive,
// multiplicative, unary, postfix) down to primaries: numbers, names,
// parenthesised expressions and tuples, lists and records.
//
//===----------------------------------------------------------------------===//

#include "frontend/ParserImpl.h"

#include <cmath>

namespace md::frontend::parser {

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

// The precedence levels of the binary operators, loosest first. 'not' binds
// between 'and' and the comparisons, and comparisons do not chain.
constexpr BinaryOperator kOrOps[] = {{TokenKind::KwOr, BinaryOp::Or}};
constexpr BinaryOperator kAndOps[] = {{TokenKind::KwAnd, BinaryOp::And}};
constexpr BinaryOperator kComparisonOps[] = {
    {TokenKind::EqualEqual, BinaryOp::Eq},
    {TokenKind::NotEqual, BinaryOp::Ne},
    {TokenKind::Less, BinaryOp::Lt},
    {TokenKind::LessEqual, BinaryOp::Le},
    {TokenKind::Greater, BinaryOp::Gt},
    {TokenKind::GreaterEqual, BinaryOp::Ge}};
constexpr BinaryOperator kAdditiveOps[] = {{TokenKind::Plus, BinaryOp::Add},
                                           {TokenKind::Minus, BinaryOp::Sub}};
constexpr BinaryOperator kMultiplicativeOps[] = {
    {TokenKind::Star, BinaryOp::Mul},
    {TokenKind::Slash, BinaryOp::Div},
    {TokenKind::Percent, BinaryOp::Rem},
    {TokenKind::At, BinaryOp::MatMul}};

// 'or', then 'and', over 'not'.
ExprPtr Parser::parseOr() {
  return parseBinaryLevels({kOrOps, kAndOps}, &Parser::parseNot);
}

ExprPtr Parser::parseNot() {
  return parsePrefixed(TokenKind::KwNot, UnaryOp::Not, &Parser::parseNot,
                       &Parser::parseComparison);
}

ExprPtr Parser::parseComparison() {
  ExprPtr lhs = parseAdditive();
  if (!lhs)
    return nullptr;
  std::optional<BinaryOp> op = operatorOf(kComparisonOps, tok.kind);
  if (!op || !continuesLine())
    return lhs;
  SMLoc opLoc = tok.getLoc();
  ChainGuard chain(*this);
  ExprPtr rhs =
      parseOperandOf(opLoc, !chain.add(), [&] { return parseAdditive(); });
  if (!rhs)
    return nullptr;
  if (operatorOf(kComparisonOps, tok.kind) && continuesLine()) {
    error(tok.getLoc(), "comparisons cannot be chained; combine them with "
                        "'and' or use parentheses");
    note(opLoc, "previous comparison is here");
    return nullptr;
  }
  SMLoc loc = lhs->loc;
  return std::make_unique<BinaryExpr>(loc, *op, std::move(lhs), std::move(rhs),
                                      opLoc);
}

// '+' '-', then '*' '/' '%' '@', over unary minus.
ExprPtr Parser::parseAdditive() {
  return parseBinaryLevels({kAdditiveOps, kMultiplicativeOps},
                           &Parser::parseUnary);
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
      if (!expect(TokenKind::Identifier,
                  "expected a member name after '.', found " + describe(tok)))
        return nullptr;
      SMLoc loc = expr->loc;
      expr = std::make_unique<MemberExpr>(loc, std::move(expr),
                                          tok.spelling.str(), tok.getLoc());
      consume();
      continue;
    }
    if (tok.is(TokenKind::LBracket)) {
      if (!chain.add()) {
        error(tok.getLoc(), "expression nested too deeply");
        return nullptr;
      }
      std::vector<IndexItem> items;
      if (!parseIndexItems(items))
        return nullptr;
      SMLoc loc = expr->loc;
      expr = std::make_unique<IndexExpr>(loc, std::move(expr), std::move(items));
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

// `[` item (`,` item)* `]`, each item `...`, an expression, or a range
// `[start] : [end] [: [step]]`.
bool Parser::parseIndexItems(std::vector<IndexItem> &items) {
  auto endsPart = [&] {
    return tok.is(TokenKind::Colon) || tok.is(TokenKind::Comma) ||
           tok.is(TokenKind::RBracket);
  };
  return parseCommaList(
      TokenKind::RBracket, parenDepth, "the index", [&] {
        IndexItem item;
        item.loc = tok.getLoc();
        if (tok.is(TokenKind::DotDot) && peek().is(TokenKind::Dot)) {
          consume();
          consume();
          item.kind = IndexItem::Kind::Ellipsis;
          items.push_back(std::move(item));
          return true;
        }
        ExprPtr first;
        if (!endsPart()) {
          first = parseExpr();
          if (!first)
            return false;
        }
        if (!tok.is(TokenKind::Colon)) {
          if (!first) {
            error(tok.getLoc(), "expected a position, a range 'a:b' or '...' "
                                "in the index, found " + describe(tok));
            return false;
          }
          item.position = std::move(first);
          items.push_back(std::move(item));
          return true;
        }
        item.kind = IndexItem::Kind::Range;
        item.start = std::move(first);
        consume(); // ':'
        if (!endsPart()) {
          item.end = parseExpr();
          if (!item.end)
            return false;
        }
        if (tok.is(TokenKind::Colon)) {
          consume();
          if (!endsPart()) {
            item.step = parseExpr();
            if (!item.step)
              return false;
          }
        }
        items.push_back(std::move(item));
        return true;
      });
}

bool Parser::parseCallArgs(std::vector<Argument> &args) {
  return parseCommaList(
      TokenKind::RParen, parenDepth, "the argument list", [&] {
        Argument arg;
        if (tok.isIdentifierLike() && peek().is(TokenKind::Equal)) {
          takeName(arg.name, arg.nameLoc);
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
        takeName(field.key, field.keyLoc);
        if (!expectAndConsume(TokenKind::Equal, "expected '=' after field '" +
                                                    field.key +
                                                    "' in the record"))
          return false;
        field.value = parseExpr();
        if (!field.value)
          return false;
        fields.push_back(std::move(field));
        return true;
      }))
    return nullptr;
  return std::make_unique<RecordExpr>(lbrace, std::move(fields));
}

} // namespace md::frontend::parser
