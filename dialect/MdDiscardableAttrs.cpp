//===- MdDiscardableAttrs.cpp - what passes leave on ops -----------------===//
//
// The accessors read and write each attribute under the name and with the
// type its declaration in MdBase.td gives (the helper classes mlir-tblgen
// writes into MdDialect), and the dialect's verifier checks them.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"

#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

#include <utility>

using namespace mlir;

namespace {

/// The attribute type a helper declares.
template <typename Helper>
using AttrOf = decltype(std::declval<Helper &>().getAttr(nullptr));

template <typename Helper> AttrOf<Helper> get(Operation *op) {
  return op->getAttrOfType<AttrOf<Helper>>(Helper::getNameStr());
}
template <typename Helper> void set(Operation *op, AttrOf<Helper> value) {
  op->setAttr(Helper::getNameStr(), value);
}

using Md = md::MdDialect;

std::optional<int64_t> intOf(IntegerAttr attr) {
  if (!attr)
    return std::nullopt;
  return attr.getInt();
}
std::optional<ArrayRef<int64_t>> arrayOf(DenseI64ArrayAttr attr) {
  if (!attr)
    return std::nullopt;
  return attr.asArrayRef();
}
IntegerAttr i64(Operation *op, int64_t value) {
  return IntegerAttr::get(IntegerType::get(op->getContext(), 64), value);
}

} // namespace

namespace md::mark {

std::optional<int64_t> unit(Operation *op) {
  return intOf(get<Md::UnitAttrHelper>(op));
}
void setUnit(Operation *op, int64_t unit) {
  set<Md::UnitAttrHelper>(op, i64(op, unit));
}
void copyUnit(Operation *from, Operation *to) {
  if (IntegerAttr unit = get<Md::UnitAttrHelper>(from))
    set<Md::UnitAttrHelper>(to, unit);
}

std::optional<ArrayRef<int64_t>> units(Operation *op) {
  return arrayOf(get<Md::UnitsAttrHelper>(op));
}
void setUnits(Operation *op, ArrayRef<int64_t> units) {
  set<Md::UnitsAttrHelper>(op, DenseI64ArrayAttr::get(op->getContext(), units));
}

bool isBackward(Operation *op) {
  return static_cast<bool>(get<Md::BackwardAttrHelper>(op));
}
void setBackward(Operation *op) {
  set<Md::BackwardAttrHelper>(op, UnitAttr::get(op->getContext()));
}
void clearBackward(Operation *op) {
  op->removeAttr(Md::BackwardAttrHelper::getNameStr());
}

std::optional<StringRef> phase(Operation *op) {
  if (StringAttr phase = get<Md::PhaseAttrHelper>(op))
    return phase.getValue();
  return std::nullopt;
}
void setPhase(Operation *op, StringRef phase) {
  set<Md::PhaseAttrHelper>(op, StringAttr::get(op->getContext(), phase));
}

bool isRecompute(Operation *op) {
  return static_cast<bool>(get<Md::RecomputeAttrHelper>(op));
}
void setRecompute(Operation *op) {
  set<Md::RecomputeAttrHelper>(op, UnitAttr::get(op->getContext()));
}

FlatSymbolRefAttr gradOf(FunctionOpInterface fn, unsigned result) {
  return fn.getResultAttrOfType<FlatSymbolRefAttr>(
      result, Md::GradOfAttrHelper::getNameStr());
}
void setGradOf(FunctionOpInterface fn, unsigned result,
               FlatSymbolRefAttr param) {
  fn.setResultAttr(result, Md::GradOfAttrHelper::getNameStr(), param);
}

bool isBucketBuffer(Operation *op) {
  return static_cast<bool>(get<Md::BucketBufferAttrHelper>(op));
}
void setBucketBuffer(Operation *op) {
  set<Md::BucketBufferAttrHelper>(op, UnitAttr::get(op->getContext()));
}

ArrayAttr bucketTable(Operation *model) {
  return get<Md::BucketTableAttrHelper>(model);
}
void setBucketTable(Operation *model, ArrayAttr table) {
  set<Md::BucketTableAttrHelper>(model, table);
}

bool isSyncBatchNorm(Operation *op) {
  return static_cast<bool>(get<Md::SyncBatchNormAttrHelper>(op));
}
void setSyncBatchNorm(Operation *op) {
  set<Md::SyncBatchNormAttrHelper>(op, UnitAttr::get(op->getContext()));
}

std::optional<int64_t> stream(Operation *op) {
  return intOf(get<Md::StreamAttrHelper>(op));
}
void setStream(Operation *op, int64_t stream) {
  set<Md::StreamAttrHelper>(op, i64(op, stream));
}
std::optional<int64_t> record(Operation *op) {
  return intOf(get<Md::RecordAttrHelper>(op));
}
void setRecord(Operation *op, int64_t event) {
  set<Md::RecordAttrHelper>(op, i64(op, event));
}
std::optional<ArrayRef<int64_t>> waits(Operation *op) {
  return arrayOf(get<Md::WaitAttrHelper>(op));
}
void setWaits(Operation *op, ArrayRef<int64_t> events) {
  set<Md::WaitAttrHelper>(op, DenseI64ArrayAttr::get(op->getContext(), events));
}
void clearStreamOrder(Operation *op) {
  op->removeAttr(Md::StreamAttrHelper::getNameStr());
  op->removeAttr(Md::RecordAttrHelper::getNameStr());
  op->removeAttr(Md::WaitAttrHelper::getNameStr());
}

DictionaryAttr memory(Operation *model) {
  return get<Md::MemoryAttrHelper>(model);
}
void setMemory(Operation *model, DictionaryAttr bytes) {
  set<Md::MemoryAttrHelper>(model, bytes);
}

} // namespace md::mark

//===----------------------------------------------------------------------===//
// The dialect's verifier of its discardable attributes
//===----------------------------------------------------------------------===//

namespace {

/// How a message names an attribute type.
template <typename A> const char *describe();
template <> const char *describe<IntegerAttr>() { return "an integer"; }
template <> const char *describe<DenseI64ArrayAttr>() {
  return "an array<i64>";
}
template <> const char *describe<UnitAttr>() { return "a unit attribute"; }
template <> const char *describe<StringAttr>() { return "a string"; }
template <> const char *describe<FlatSymbolRefAttr>() {
  return "a flat symbol reference";
}
template <> const char *describe<ArrayAttr>() { return "an array"; }
template <> const char *describe<DictionaryAttr>() { return "a dictionary"; }

struct Declared {
  StringRef name;
  bool (*hasType)(Attribute);
  const char *type;
  /// Only on a function's results (md.grad_of), not on ops.
  bool onResults;
};

template <typename Helper> Declared declared(bool onResults = false) {
  using A = AttrOf<Helper>;
  return {Helper::getNameStr(), [](Attribute a) { return isa<A>(a); },
          describe<A>(), onResults};
}

/// Every discardable attribute MdBase.td declares; a declaration without a
/// row here is refused as unknown, which the lit tests of the passes that
/// set it show at once.
ArrayRef<Declared> declaredAttrs() {
  static const Declared all[] = {
      declared<Md::UnitAttrHelper>(),
      declared<Md::UnitsAttrHelper>(),
      declared<Md::BackwardAttrHelper>(),
      declared<Md::PhaseAttrHelper>(),
      declared<Md::RecomputeAttrHelper>(),
      declared<Md::GradOfAttrHelper>(/*onResults=*/true),
      declared<Md::BucketBufferAttrHelper>(),
      declared<Md::BucketTableAttrHelper>(),
      declared<Md::SyncBatchNormAttrHelper>(),
      declared<Md::StreamAttrHelper>(),
      declared<Md::RecordAttrHelper>(),
      declared<Md::WaitAttrHelper>(),
      declared<Md::MemoryAttrHelper>(),
      declared<Md::GradAccumulationAttrHelper>(),
      declared<Md::InterconnectAttrHelper>(),
      declared<Md::MaxInflightAllgathersAttrHelper>(),
  };
  return all;
}

LogicalResult verifyDeclared(Operation *op, NamedAttribute attr,
                             bool onResult) {
  for (const Declared &d : declaredAttrs()) {
    if (d.name != attr.getName().getValue())
      continue;
    if (d.onResults != onResult)
      return op->emitError() << "'" << d.name << "' belongs on "
                             << (d.onResults ? "a function result"
                                             : "an operation")
                             << ", not on "
                             << (onResult ? "a function result"
                                          : "an operation");
    if (!d.hasType(attr.getValue()))
      return op->emitError()
             << "'" << d.name << "' must be " << d.type << ", not "
             << attr.getValue();
    return success();
  }
  return op->emitError() << "unknown md attribute '"
                         << attr.getName().getValue()
                         << "' (MdBase.td declares the md dialect's "
                            "discardable attributes)";
}

} // namespace

LogicalResult md::MdDialect::verifyOperationAttribute(Operation *op,
                                                      NamedAttribute attr) {
  return verifyDeclared(op, attr, /*onResult=*/false);
}

LogicalResult md::MdDialect::verifyRegionResultAttribute(Operation *op,
                                                         unsigned,
                                                         unsigned,
                                                         NamedAttribute attr) {
  return verifyDeclared(op, attr, /*onResult=*/true);
}
