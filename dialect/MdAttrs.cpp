//===- MdAttrs.cpp - md attributes: parsing, printing, verification -------===//

#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

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

LogicalResult AdamWAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                APFloat lrF, APFloat beta1F, APFloat beta2F,
                                APFloat epsF, APFloat weightDecayF) {
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
                              bool nesterov) {
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

LogicalResult
ScheduleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     ScheduleKind kind, int64_t warmup, int64_t steps,
                     APFloat minLrF) {
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
