//===- MdAttrs.cpp - md attributes: parsing, printing, verification -------===//

#include "dialect/MdOps.h"
#include "dialect/ParamGroups.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/GlobPattern.h"

#include <cmath>

using namespace mlir;
using namespace md;

#define GET_ATTRDEF_CLASSES
#include "dialect/MdAttrs.cpp.inc"

void MdDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialect/MdAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// InitAttr
//===----------------------------------------------------------------------===//

/// How many arguments each initialiser takes.
static unsigned getInitArity(InitKind kind) {
  switch (kind) {
  case InitKind::zeros:
  case InitKind::ones:
    return 0;
  case InitKind::constant:
    return 1;
  case InitKind::normal:
  case InitKind::uniform:
    return 2;
  }
  llvm_unreachable("unknown init kind");
}

Attribute InitAttr::parse(AsmParser &parser, Type) {
  std::string keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeywordOrString(&keyword))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(keyword);
  if (!kind) {
    parser.emitError(loc, "unknown initialiser '")
        << keyword << "'; expected zeros, ones, constant, normal or uniform";
    return {};
  }
  SmallVector<APFloat> args;
  if (succeeded(parser.parseOptionalLParen())) {
    if (parser.parseCommaSeparatedList([&]() {
          double value;
          if (parser.parseFloat(value))
            return failure();
          args.push_back(APFloat(value));
          return success();
        }) ||
        parser.parseRParen())
      return {};
  }
  if (parser.parseGreater())
    return {};
  return InitAttr::getChecked([&] { return parser.emitError(loc); },
                              parser.getContext(), *kind, args);
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyInitKind(getKind());
  if (!getArgs().empty()) {
    printer << "(";
    llvm::interleaveComma(getArgs(), printer,
                          [&](const APFloat &v) { printer << v; });
    printer << ")";
  }
  printer << ">";
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, ArrayRef<APFloat> apArgs) {
  SmallVector<double> args;
  for (const APFloat &v : apArgs)
    args.push_back(v.convertToDouble());
  unsigned arity = getInitArity(kind);
  if (args.size() != arity)
    return emitError() << "initialiser '" << stringifyInitKind(kind)
                       << "' takes " << arity << " argument"
                       << (arity == 1 ? "" : "s") << ", got " << args.size();
  if (kind == InitKind::normal && !(args[1] > 0))
    return emitError() << "normal initialiser needs a positive standard "
                          "deviation, got "
                       << args[1];
  if (kind == InitKind::uniform && !(args[0] < args[1]))
    return emitError() << "uniform initialiser needs low < high, got ["
                       << args[0] << ", " << args[1] << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizer and schedule attributes
//===----------------------------------------------------------------------===//

LogicalResult
ParamGroupAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       StringRef match, int64_t ndim, APFloat weightDecayF,
                       APFloat lrScaleF) {
  if (match.empty() && ndim < 0)
    return emitError() << "a parameter group needs match = \"glob\" or "
                          "ndim = N to select its parameters";
  if (ndim < -1)
    return emitError() << "parameter group ndim must be >= 0, got " << ndim;
  if (!match.empty())
    if (llvm::Error error = compileParamGlob(match).takeError())
      return emitError() << "parameter group match \"" << match
                         << "\" is not a valid glob: "
                         << llvm::toString(std::move(error));
  double weightDecay = weightDecayF.convertToDouble(),
         lrScale = lrScaleF.convertToDouble();
  if (!(weightDecay >= 0 && std::isfinite(weightDecay)))
    return emitError() << "parameter group weight_decay must be >= 0, got "
                       << weightDecay;
  if (!(lrScale >= 0 && std::isfinite(lrScale)))
    return emitError() << "parameter group lr_scale must be >= 0, got "
                       << lrScale;
  return success();
}

bool ParamGroupAttr::matches(StringRef name, int64_t ndim) const {
  if (getNdim() >= 0 && ndim != getNdim())
    return false;
  if (getMatch().empty())
    return true;
  // The verifier accepted the pattern, so it compiles.
  llvm::Expected<llvm::GlobPattern> glob = compileParamGlob(getMatch());
  if (!glob) {
    llvm::consumeError(glob.takeError());
    return false;
  }
  return glob->match(name);
}

std::string ParamGroupAttr::describe() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (!getMatch().empty())
    os << "match = \"" << getMatch() << "\"";
  if (getNdim() >= 0)
    os << (getMatch().empty() ? "" : ", ") << "ndim = " << getNdim();
  return text;
}

/// Every element of an optimizer's `groups` is a #md.param_group.
static LogicalResult
verifyParamGroups(function_ref<InFlightDiagnostic()> emitError,
                  ArrayAttr groups) {
  if (!groups)
    return success();
  if (groups.empty())
    return emitError() << "an optimizer's groups list must not be empty "
                          "(leave it out instead)";
  for (Attribute group : groups)
    if (!isa<ParamGroupAttr>(group))
      return emitError() << "an optimizer's groups must be #md.param_group "
                            "attributes, got "
                         << group;
  return success();
}

LogicalResult AdamWAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                APFloat lrF, APFloat beta1F, APFloat beta2F,
                                APFloat epsF, APFloat weightDecayF,
                                ArrayAttr groups) {
  if (failed(verifyParamGroups(emitError, groups)))
    return failure();
  double lr = lrF.convertToDouble(), beta1 = beta1F.convertToDouble(),
         beta2 = beta2F.convertToDouble(), eps = epsF.convertToDouble(),
         weightDecay = weightDecayF.convertToDouble();
  if (!(lr >= 0))
    return emitError() << "adamw lr must be >= 0, got " << lr;
  if (!(beta1 >= 0 && beta1 < 1))
    return emitError() << "adamw beta1 must be in [0, 1), got " << beta1;
  if (!(beta2 >= 0 && beta2 < 1))
    return emitError() << "adamw beta2 must be in [0, 1), got " << beta2;
  if (!(eps > 0))
    return emitError() << "adamw eps must be > 0, got " << eps;
  if (!(weightDecay >= 0))
    return emitError() << "adamw weight_decay must be >= 0, got "
                       << weightDecay;
  return success();
}

LogicalResult SGDAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              APFloat lrF, APFloat momentumF,
                              APFloat dampeningF, APFloat weightDecayF,
                              bool nesterov, ArrayAttr groups) {
  if (failed(verifyParamGroups(emitError, groups)))
    return failure();
  double lr = lrF.convertToDouble(), momentum = momentumF.convertToDouble(),
         dampening = dampeningF.convertToDouble(),
         weightDecay = weightDecayF.convertToDouble();
  if (!(lr >= 0))
    return emitError() << "sgd lr must be >= 0, got " << lr;
  if (!(momentum >= 0))
    return emitError() << "sgd momentum must be >= 0, got " << momentum;
  if (!(weightDecay >= 0))
    return emitError() << "sgd weight_decay must be >= 0, got " << weightDecay;
  // The same rule as torch.optim.SGD.
  if (nesterov && (momentum <= 0 || dampening != 0))
    return emitError() << "sgd nesterov needs momentum > 0 and dampening = 0, "
                          "got momentum "
                       << momentum << " and dampening " << dampening;
  return success();
}

LogicalResult ScheduleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ScheduleKind kind, int64_t warmup,
                                   int64_t steps, APFloat minLrF) {
  double minLr = minLrF.convertToDouble();
  if (warmup < 0)
    return emitError() << "schedule warmup must be >= 0, got " << warmup;
  if (steps <= 0)
    return emitError() << "schedule steps must be > 0, got " << steps;
  if (warmup > steps)
    return emitError() << "schedule warmup (" << warmup
                       << " steps) is longer than the schedule (" << steps
                       << " steps)";
  if (!(minLr >= 0))
    return emitError() << "schedule min_lr must be >= 0, got " << minLr;
  return success();
}

//===----------------------------------------------------------------------===//
// PlanAttr
//===----------------------------------------------------------------------===//

ArrayRef<StringRef> PlanAttr::getPresetNames() {
  static const StringRef names[] = {"single",       "ddp",       "zero1",
                                    "fsdp-grad-op", "fsdp-full", "fsdp-hybrid"};
  return names;
}

namespace {
/// Parses `key = value, ...` in any order: each key at most once, every key
/// of `keys` present. `parseValue` parses the value of one key.
ParseResult
parseKeyedList(AsmParser &parser, ArrayRef<StringRef> keys,
               function_ref<ParseResult(StringRef key)> parseValue) {
  SmallVector<StringRef> seen;
  SMLoc start = parser.getCurrentLocation();
  if (parser.parseCommaSeparatedList([&]() -> ParseResult {
        SMLoc keyLoc = parser.getCurrentLocation();
        std::string key;
        if (parser.parseKeywordOrString(&key))
          return failure();
        const StringRef *known = llvm::find(keys, key);
        if (known == keys.end()) {
          InFlightDiagnostic diag = parser.emitError(keyLoc)
                                    << "unknown field '" << key
                                    << "'; expected one of: ";
          llvm::interleaveComma(keys, diag);
          return diag;
        }
        if (llvm::is_contained(seen, *known))
          return parser.emitError(keyLoc) << "'" << key << "' is given twice";
        seen.push_back(*known);
        if (parser.parseEqual())
          return failure();
        return parseValue(*known);
      }))
    return failure();
  for (StringRef key : keys)
    if (!llvm::is_contained(seen, key))
      return parser.emitError(start) << "missing '" << key << "'";
  return success();
}

ParseResult parseBool(AsmParser &parser, bool &value) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  if (keyword != "true" && keyword != "false")
    return parser.emitError(loc)
           << "expected true or false, got '" << keyword << "'";
  value = keyword == "true";
  return success();
}

template <typename EnumT>
ParseResult parseEnum(AsmParser &parser, EnumT &value) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<EnumT> parsed = symbolizeEnum<EnumT>(keyword);
  if (!parsed) {
    InFlightDiagnostic diag = parser.emitError(loc)
                              << "unknown keyword '" << keyword
                              << "'; expected one of: ";
    for (int64_t i = 0;; ++i) {
      StringRef name = stringifyEnum(static_cast<EnumT>(i));
      if (name.empty())
        break;
      diag << (i ? ", " : "") << name;
    }
    return diag;
  }
  value = *parsed;
  return success();
}

/// `(name, ...)` after `blocks`.
ParseResult parseNameList(AsmParser &parser,
                          SmallVectorImpl<StringAttr> &names) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Paren, [&]() -> ParseResult {
        std::string name;
        if (parser.parseKeywordOrString(&name))
          return failure();
        names.push_back(StringAttr::get(parser.getContext(), name));
        return success();
      });
}

/// `name = INTEGER` inside `hybrid(...)` and `size(...)`.
ParseResult parseNamedInt(AsmParser &parser, StringRef name,
                          std::optional<int64_t> &value) {
  int64_t v;
  if (parser.parseLParen() || parser.parseKeyword(name) ||
      parser.parseEqual() || parser.parseInteger(v) || parser.parseRParen())
    return failure();
  value = v;
  return success();
}

void printNameList(AsmPrinter &printer, ArrayRef<StringAttr> names) {
  printer << "blocks(";
  llvm::interleaveComma(names, printer, [&](StringAttr name) {
    printer.printKeywordOrString(name.getValue());
  });
  printer << ")";
}
} // namespace

Attribute PlanAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  std::string name, preset;
  ShardKind shard = ShardKind::none;
  std::optional<int64_t> shardGroupSize, wrapMinParams;
  WrapKind wrap = WrapKind::none;
  SmallVector<StringAttr> wrapBlocks, checkpointActivations;
  Type paramType, reduceType, bufferType, masterType;
  int64_t bucketCap = 0;
  bool prefetchForward = false, reshardAfterForward = false;
  PrefetchBackward prefetchBackward = PrefetchBackward::none;

  auto parseField = [&](StringRef key) -> ParseResult {
    if (key == "name")
      return parser.parseString(&name);
    if (key == "preset")
      return parser.parseString(&preset);
    if (key == "shard") {
      if (parseEnum(parser, shard))
        return failure();
      if (shard == ShardKind::hybrid)
        return parseNamedInt(parser, "shard_group", shardGroupSize);
      return success();
    }
    if (key == "wrap") {
      if (parseEnum(parser, wrap))
        return failure();
      if (wrap == WrapKind::blocks)
        return parseNameList(parser, wrapBlocks);
      if (wrap == WrapKind::size)
        return parseNamedInt(parser, "min_params", wrapMinParams);
      return success();
    }
    if (key == "precision") {
      if (parser.parseLBrace() ||
          parseKeyedList(parser, {"param", "reduce", "buffer", "master"},
                         [&](StringRef field) {
                           Type &type = field == "param"    ? paramType
                                        : field == "reduce" ? reduceType
                                        : field == "buffer" ? bufferType
                                                            : masterType;
                           return parser.parseType(type);
                         }))
        return failure();
      return parser.parseRBrace();
    }
    if (key == "bucket_cap")
      return parser.parseInteger(bucketCap);
    if (key == "prefetch") {
      if (parser.parseLBrace() ||
          parseKeyedList(parser, {"forward", "backward"}, [&](StringRef field) {
            if (field == "forward")
              return parseBool(parser, prefetchForward);
            return parseEnum(parser, prefetchBackward);
          }))
        return failure();
      return parser.parseRBrace();
    }
    if (key == "reshard_after_forward")
      return parseBool(parser, reshardAfterForward);
    // checkpoint_activations
    SMLoc valueLoc = parser.getCurrentLocation();
    StringRef keyword;
    if (parser.parseKeyword(&keyword))
      return failure();
    if (keyword == "blocks")
      return parseNameList(parser, checkpointActivations);
    if (keyword != "none")
      return parser.emitError(valueLoc)
             << "expected blocks(...) or none, got '" << keyword << "'";
    return success();
  };

  if (parser.parseLess() ||
      parseKeyedList(parser,
                     {"name", "preset", "shard", "wrap", "precision",
                      "bucket_cap", "prefetch", "reshard_after_forward",
                      "checkpoint_activations"},
                     parseField) ||
      parser.parseGreater())
    return {};
  return PlanAttr::getChecked(
      [&] { return parser.emitError(loc); }, parser.getContext(), name, preset,
      shard, shardGroupSize, wrap, wrapBlocks, wrapMinParams, paramType,
      reduceType, bufferType, masterType, bucketCap, prefetchForward,
      prefetchBackward, reshardAfterForward, checkpointActivations);
}

void PlanAttr::print(AsmPrinter &printer) const {
  printer << "<name = ";
  printer.printString(getName());
  printer << ", preset = ";
  printer.printString(getPreset());
  printer << ", shard = " << stringifyShardKind(getShard());
  if (std::optional<int64_t> group = getShardGroupSize())
    printer << "(shard_group = " << *group << ")";
  printer << ", wrap = ";
  switch (getWrap()) {
  case WrapKind::none:
    printer << "none";
    break;
  case WrapKind::blocks:
    printNameList(printer, getWrapBlocks());
    break;
  case WrapKind::size:
    printer << "size(min_params = " << getWrapMinParams().value_or(0) << ")";
    break;
  }
  printer << ", precision = {param = " << getParamDtype()
          << ", reduce = " << getReduceDtype()
          << ", buffer = " << getBufferDtype()
          << ", master = " << getMasterDtype() << "}";
  printer << ", bucket_cap = " << getBucketCap();
  printer << ", prefetch = {forward = "
          << (getPrefetchForward() ? "true" : "false")
          << ", backward = " << stringifyPrefetchBackward(getPrefetchBackward())
          << "}";
  printer << ", reshard_after_forward = "
          << (getReshardAfterForward() ? "true" : "false");
  printer << ", checkpoint_activations = ";
  if (getCheckpointActivations().empty())
    printer << "none";
  else
    printNameList(printer, getCheckpointActivations());
  printer << ">";
}

/// The names of a `blocks(...)` list are non-empty and distinct.
static LogicalResult
verifyBlockNames(function_ref<InFlightDiagnostic()> emitError, StringRef what,
                 ArrayRef<StringAttr> names) {
  for (auto [i, name] : llvm::enumerate(names)) {
    if (name.getValue().empty())
      return emitError() << what << " names an empty parameter";
    if (llvm::is_contained(names.take_front(i), name))
      return emitError() << what << " names '" << name.getValue() << "' twice";
  }
  return success();
}

LogicalResult PlanAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, StringRef name,
    StringRef preset, ShardKind shard, std::optional<int64_t> shardGroupSize,
    WrapKind wrap, ArrayRef<StringAttr> wrapBlocks,
    std::optional<int64_t> wrapMinParams, Type paramDtype, Type reduceDtype,
    Type bufferDtype, Type masterDtype, int64_t bucketCap, bool,
    PrefetchBackward, bool, ArrayRef<StringAttr> checkpointActivations) {
  if (name.empty())
    return emitError() << "plan name is empty";
  if (!llvm::is_contained(getPresetNames(), preset)) {
    InFlightDiagnostic diag = emitError() << "unknown preset '" << preset
                                          << "'; expected one of: ";
    llvm::interleaveComma(getPresetNames(), diag);
    return diag;
  }
  if (shard == ShardKind::hybrid) {
    if (!shardGroupSize)
      return emitError() << "hybrid sharding needs a shard group size";
    if (*shardGroupSize <= 1)
      return emitError() << "hybrid shard group size must be > 1, got "
                         << *shardGroupSize;
  } else if (shardGroupSize) {
    return emitError() << "a shard group size is only meaningful with hybrid "
                          "sharding, got shard = "
                       << stringifyShardKind(shard);
  }
  switch (wrap) {
  case WrapKind::none:
    if (!wrapBlocks.empty() || wrapMinParams)
      return emitError() << "wrap none takes no blocks and no min_params";
    break;
  case WrapKind::blocks:
    if (wrapBlocks.empty())
      return emitError() << "wrap blocks(...) names no repeated parameter";
    if (wrapMinParams)
      return emitError() << "wrap blocks(...) takes no min_params";
    if (failed(verifyBlockNames(emitError, "wrap", wrapBlocks)))
      return failure();
    break;
  case WrapKind::size:
    if (!wrapBlocks.empty())
      return emitError() << "wrap size(...) takes no blocks";
    if (!wrapMinParams || *wrapMinParams <= 0)
      return emitError() << "wrap size(min_params = N) needs N > 0, got "
                         << wrapMinParams.value_or(0);
    break;
  }
  std::pair<StringRef, Type> dtypes[] = {{"param", paramDtype},
                                         {"reduce", reduceDtype},
                                         {"buffer", bufferDtype},
                                         {"master", masterDtype}};
  for (auto [field, type] : dtypes) {
    if (!type)
      return emitError() << "precision " << field << " is missing";
    if (!(type.isBF16() || type.isF16() || type.isF32()))
      return emitError() << "precision " << field
                         << " must be bf16, f16 or f32, got " << type;
  }
  if (!masterDtype.isF32())
    return emitError() << "precision master must be f32: md's optimizer "
                          "updates keep master weights and optimizer state "
                          "in f32, got "
                       << masterDtype;
  if (bucketCap <= 0)
    return emitError() << "bucket_cap must be > 0 bytes, got " << bucketCap;
  return verifyBlockNames(emitError, "checkpoint_activations",
                          checkpointActivations);
}

//===----------------------------------------------------------------------===//
// DataAttr
//===----------------------------------------------------------------------===//

LogicalResult DataAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               DataKind kind, StringRef path, int64_t seed) {
  if (seed < 0)
    return emitError() << "data seed must be >= 0, got " << seed;
  if (seed != 0 && kind != DataKind::synthetic)
    return emitError() << "only synthetic data has a seed; "
                       << stringifyDataKind(kind) << " data is read from '"
                       << path << "'";
  if (kind == DataKind::synthetic && !path.empty())
    return emitError() << "synthetic data has no path, got '" << path << "'";
  if (kind != DataKind::synthetic && path.empty())
    return emitError() << stringifyDataKind(kind) << " data needs a path";
  return success();
}
