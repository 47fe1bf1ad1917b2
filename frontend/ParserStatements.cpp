//===- ParserStatements.cpp - statements of .mdl bodies -------------------===//
//
// Bodies and the statements in them: let, return, if/else, for, every,
// save and stop. See Parser.cpp for the conventions every rule follows.
//
//===----------------------------------------------------------------------===//

#include "frontend/ParserImpl.h"

namespace md::frontend::parser {

namespace {

bool isEveryUnit(StringRef s) {
  return s == "step" || s == "steps" || s == "second" || s == "seconds" ||
         s == "minute" || s == "minutes";
}

} // namespace

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
    if (!expect(TokenKind::Identifier,
                "expected a name to assign to, found " + describe(tok)))
      return nullptr;
    targets.push_back({tok.spelling.str(), tok.getLoc()});
    consume();
    if (!tok.is(TokenKind::Comma))
      break;
    consume();
  }
  if (!expectAndConsume(TokenKind::Equal,
                        "expected '=' after the names of a destructuring "
                        "assignment"))
    return nullptr;
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
  if (!expect(TokenKind::LBrace, "expected '{' after the condition of 'if'"))
    return nullptr;
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
  if (!expect(TokenKind::Identifier,
              "expected a loop variable after 'for', found " + describe(tok)))
    return nullptr;
  std::string var = tok.spelling.str();
  SMLoc varLoc = tok.getLoc();
  consume();
  if (!expectAndConsume(TokenKind::KwIn,
                        "expected 'in' after the loop variable '" + var + "'"))
    return nullptr;
  ExprPtr lo = parseExpr();
  if (!lo)
    return nullptr;
  if (!expectAndConsume(TokenKind::DotDot,
                        "expected '..' in the range of 'for' (as in "
                        "'for i in 0..n')"))
    return nullptr;
  ExprPtr hi = parseExpr();
  if (!hi)
    return nullptr;
  if (!expect(TokenKind::LBrace, "expected '{' after the range of 'for'"))
    return nullptr;
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
  if (!expect(TokenKind::Identifier,
              "expected a unit (steps, seconds or minutes) after "
              "the period of 'every', found " +
                  describe(tok)))
    return nullptr;
  std::string unit = tok.spelling.str();
  SMLoc unitLoc = tok.getLoc();
  if (!isEveryUnit(unit))
    error(unitLoc, "unknown unit '" + unit +
                       "' in 'every'; expected steps, seconds or minutes");
  consume();
  if (!expect(TokenKind::LBrace, "expected '{' after 'every ... " + unit + "'"))
    return nullptr;
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
  if (!expect(TokenKind::LParen, "expected '(' after 'save checkpoint'"))
    return nullptr;
  std::vector<Argument> args;
  if (!parseCallArgs(args))
    return nullptr;
  return std::make_unique<SaveStmt>(loc, std::move(args));
}

} // namespace md::frontend::parser
