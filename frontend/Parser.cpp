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
// The parser is one class (ParserImpl.h, with its token handling and
// recovery); this file holds the module and its declarations, and
// ParserStatements.cpp and ParserExpressions.cpp the rest of the grammar.
//
//===----------------------------------------------------------------------===//

#include "frontend/ParserImpl.h"

namespace md::frontend::parser {

namespace {

bool isDType(StringRef s) {
  return s == "f32" || s == "bf16" || s == "f16" || s == "i32" || s == "i64";
}

bool isTrainSetting(StringRef s) {
  return s == "data" || s == "global_batch" || s == "micro_batch" ||
         s == "optimizer" || s == "schedule" || s == "clip_grad_norm" ||
         s == "seed" || s == "sync_batch_norm" || s == "freeze";
}

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
    error(missingLoc(),
          "expected a name after '" + kw + "', found " + describe(tok));
    skipToTopLevel();
    return;
  }
  takeName(decl.name, decl.loc);
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
        HyperParam hp;
        if (!parseName("a hyper-parameter name", hp.name, hp.loc))
          return false;
        if (!parseOptionalClause(TokenKind::Equal, hp.defaultValue))
          return false;
        decl.hyperParams.push_back(std::move(hp));
        return true;
      });
}

bool Parser::parseParam(BlockDecl &decl) {
  consume(); // 'param'
  if (!expect(TokenKind::Identifier,
              "expected a parameter name after 'param', found " +
                  describe(tok)))
    return false;
  ParamDecl param;
  takeName(param.name, param.loc);
  if (!expectAndConsume(TokenKind::Colon,
                        "expected ':' after parameter name '" + param.name +
                            "'"))
    return false;

  if (tok.is(TokenKind::Identifier) && peek().is(TokenKind::LBracket)) {
    // A raw tensor: `f32[a, b] [init expr]`.
    param.isRaw = true;
    if (!parseTensorType(param.type))
      return false;
    if (!parseOptionalClause(TokenKind::KwInit, param.init))
      return false;
  } else if (tok.is(TokenKind::Identifier)) {
    // A layer or block instance: `Linear(d, 4 * d)`, `Block(d)[layers]`.
    takeName(param.layer, param.layerLoc);
    if (!expect(TokenKind::LParen, "expected '(' after layer '" + param.layer +
                                       "' (write '" + param.layer +
                                       "()' when it takes no arguments)"))
      return false;
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
  // `frozen`: no gradient, no optimizer state (a contextual word, not a
  // keyword: a parameter may still be named so).
  if (tok.is(TokenKind::Identifier) && tok.spelling == "frozen") {
    param.frozen = true;
    param.frozenLoc = tok.getLoc();
    consume();
  }
  decl.params.push_back(std::move(param));
  return parseStatementEnd();
}

bool Parser::parseTensorType(TypeExpr &type) {
  if (!expect(TokenKind::Identifier,
              "expected an element type (f32, bf16, f16, i32 or "
              "i64), found " +
                  describe(tok)))
    return false;
  type.loc = tok.getLoc();
  type.dtype = tok.spelling.str();
  if (!isDType(type.dtype))
    error(tok.getLoc(), "unknown element type '" + type.dtype +
                            "'; expected f32, bf16, f16, i32 or i64");
  consume();
  if (!expect(TokenKind::LBracket,
              "expected '[' after element type '" + type.dtype +
                  "' (a tensor type reads like 'f32[a, b]')"))
    return false;
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
  if (!expect(TokenKind::LParen, "expected '(' after 'forward'"))
    return false;
  if (!parseForwardArgs(forward))
    skipPast(TokenKind::RParen);
  if (!expect(TokenKind::LBrace, "expected '{' after 'forward(...)'"))
    return false;
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
  return parseCommaList(TokenKind::RParen, parenDepth,
                        "the argument list of 'forward'", [&] {
                          ForwardArg arg;
                          if (!parseName("an argument name", arg.name, arg.loc))
                            return false;
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
        train.settings.push_back(Setting{
            let->targets[0].name, let->targets[0].loc, std::move(let->value)});
        continue;
      }
    }
    train.body.push_back(std::move(stmt));
  }
  module.trains.push_back(std::move(train));
}

bool Parser::parsePlanName(std::string &name, SMLoc &loc, StringRef what) {
  if (!expect(TokenKind::Identifier,
              "expected " + what + ", found " + describe(tok)))
    return false;
  loc = tok.getLoc();
  name = tok.spelling.str();
  consume();
  // `fsdp-grad-op`, `hybrid-8`: '-' and identifier (or integer) parts with
  // no space between.
  while (tok.is(TokenKind::Minus) && adjacentToPrevious()) {
    const Token &next = peek();
    if (!(next.isIdentifierLike() || next.is(TokenKind::Integer)) ||
        next.spelling.data() != tok.spelling.data() + tok.spelling.size()) {
      error(tok.getLoc(),
            "expected a name part after '-' in plan name '" + name + "-'");
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
    takeName(option.key, option.keyLoc);
    if (!expectAndConsume(TokenKind::Equal, "expected '=' after plan option '" +
                                                option.key + "'"))
      return false;
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

} // namespace md::frontend::parser

namespace md::frontend {

std::unique_ptr<Module> parseModule(unsigned bufferId, Diagnostics &diags) {
  parser::Parser impl(bufferId, diags);
  return impl.parseModule();
}

} // namespace md::frontend
