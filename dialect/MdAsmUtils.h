//===- MdAsmUtils.h - custom<> directives shared by md's op groups -*- C++ -*-===//
//
// md prints its enums as bare keywords inside ops (`md.every 10 steps`,
// `md.all_reduce sum world %x`), not as `#md.group<world>`. One template
// serves every enum attribute.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDASMUTILS_H
#define MD_DIALECT_MDASMUTILS_H

#include "dialect/MdOps.h"

namespace md {
namespace detail {
template <typename AttrT>
mlir::ParseResult parseEnumKeyword(mlir::OpAsmParser &parser, AttrT &attr) {
  using EnumT = decltype(std::declval<AttrT>().getValue());
  llvm::SMLoc loc = parser.getCurrentLocation();
  llvm::StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return mlir::failure();
  std::optional<EnumT> value = ::md::symbolizeEnum<EnumT>(keyword);
  if (!value) {
    std::string expected;
    for (int64_t i = 0;; ++i) {
      std::optional<EnumT> v = ::md::symbolizeEnum<EnumT>(
          stringifyEnum(static_cast<EnumT>(i)));
      if (!v || stringifyEnum(*v).empty())
        break;
      if (i)
        expected += ", ";
      expected += stringifyEnum(*v).str();
    }
    return parser.emitError(loc) << "unknown keyword '" << keyword
                                 << "'; expected one of: " << expected;
  }
  attr = AttrT::get(parser.getContext(), *value);
  return mlir::success();
}
template <typename AttrT>
void printEnumKeyword(mlir::OpAsmPrinter &printer, AttrT attr) {
  printer << stringifyEnum(attr.getValue());
}
} // namespace detail

#define MD_ENUM_KEYWORD_DIRECTIVE(NAME, ATTR)                                  \
  inline mlir::ParseResult parse##NAME(mlir::OpAsmParser &parser, ATTR &attr) { \
    return ::md::detail::parseEnumKeyword(parser, attr);                       \
  }                                                                            \
  inline void print##NAME(mlir::OpAsmPrinter &printer, mlir::Operation *,      \
                          ATTR attr) {                                         \
    ::md::detail::printEnumKeyword(printer, attr);                             \
  }

MD_ENUM_KEYWORD_DIRECTIVE(PeriodUnit, PeriodUnitAttr)
MD_ENUM_KEYWORD_DIRECTIVE(CheckpointFormat, CheckpointFormatAttr)
MD_ENUM_KEYWORD_DIRECTIVE(Group, GroupAttr)
MD_ENUM_KEYWORD_DIRECTIVE(StateRole, StateRoleAttr)
MD_ENUM_KEYWORD_DIRECTIVE(Reduction, ReductionKindAttr)

#undef MD_ENUM_KEYWORD_DIRECTIVE
} // namespace md

#endif // MD_DIALECT_MDASMUTILS_H
