//===- MdInterfaces.cpp - md op interfaces --------------------------------===//

#include "dialect/MdOps.h"

#include "dialect/MdInterfaces.cpp.inc"
