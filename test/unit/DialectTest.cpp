//===- DialectTest.cpp - the md dialect's C++ API -------------------------===//
//
// What lit cannot see: helper functions and interface methods that passes
// and the plan emitter call directly.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"

#include "llvm/ADT/STLExtras.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class DialectTest : public ::testing::Test {
protected:
  DialectTest() {
    context.loadDialect<md::MdDialect, arith::ArithDialect,
                        tensor::TensorDialect>();
  }

  OwningOpRef<ModuleOp> parse(StringRef source) {
    return parseSourceString<ModuleOp>(source, &context);
  }

  md::ModelOp firstModel(ModuleOp module) {
    for (auto model : module.getOps<md::ModelOp>())
      return model;
    return {};
  }

  MLIRContext context;
};

TEST_F(DialectTest, GroupSizesOfAOneDimensionalMesh) {
  auto module = parse(R"mlir(
    md.model @m attributes {world_size = 8 : i64} {
    }
  )mlir");
  ASSERT_TRUE(module);
  md::ModelOp model = firstModel(*module);
  ASSERT_TRUE(model);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::world), 8);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::shard), 8);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::replicate), 1);
}

TEST_F(DialectTest, GroupSizesOfAHybridMesh) {
  auto module = parse(R"mlir(
    md.model @m attributes {world_size = 16 : i64, shard_group_size = 4 : i64} {
    }
  )mlir");
  ASSERT_TRUE(module);
  md::ModelOp model = firstModel(*module);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::world), 16);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::shard), 4);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::replicate), 4);
}

TEST_F(DialectTest, GroupSizesAreSymbolicWithoutAPinnedWorld) {
  auto module = parse("md.model @m {\n}\n");
  ASSERT_TRUE(module);
  md::ModelOp model = firstModel(*module);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::world), std::nullopt);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::shard), std::nullopt);
  EXPECT_EQ(model.getStaticGroupSize(md::Group::replicate), 1);
}

TEST_F(DialectTest, InitAttrChecksItsArguments) {
  auto emitError = [&] { return mlir::emitError(UnknownLoc::get(&context)); };
  // Keep the expected diagnostics out of the test log.
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  auto init = [&](md::InitKind kind, std::vector<double> args) {
    SmallVector<APFloat> values;
    for (double v : args)
      values.push_back(APFloat(v));
    return md::InitAttr::getChecked(emitError, &context, kind,
                                    ArrayRef<APFloat>(values));
  };
  EXPECT_TRUE(init(md::InitKind::normal, {0.0, 0.02}));
  EXPECT_FALSE(init(md::InitKind::normal, {0.0, -1.0}));
  EXPECT_FALSE(init(md::InitKind::zeros, {1.0}));
  EXPECT_FALSE(init(md::InitKind::uniform, {1.0, 1.0}));
  EXPECT_TRUE(init(md::InitKind::constant, {0.5}));
}

TEST_F(DialectTest, TensorBytesAndShapes) {
  Builder b(&context);
  EXPECT_EQ(md::getTensorBytes(RankedTensorType::get({4, 8}, b.getBF16Type())),
            64);
  EXPECT_EQ(md::getTensorBytes(RankedTensorType::get({3}, b.getF32Type())), 12);
  EXPECT_EQ(md::getTensorBytes(
                RankedTensorType::get({ShapedType::kDynamic}, b.getF32Type())),
            0);
  EXPECT_EQ(md::formatShape({4, ShapedType::kDynamic, 2}), "4x?x2");
}

TEST_F(DialectTest, RankZeroOnlyEffectsThatCommunicateAreFound) {
  auto module = parse(R"mlir(
    md.model @m {
      md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
        %l = arith.constant dense<0.0> : tensor<f32>
        md.return %l : tensor<f32>
      }
      md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
          optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
          schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
          seed 1 step {
      } hooks {
        md.every 2 steps {
          md.save sharded
        }
        md.every 3 steps {
          md.log "x"
        }
      }
    }
  )mlir");
  ASSERT_TRUE(module);
  SmallVector<md::EveryOp> hooks;
  module->walk([&](md::EveryOp op) { hooks.push_back(op); });
  ASSERT_EQ(hooks.size(), 2u);
  EXPECT_TRUE(md::containsCollective(hooks[0]));
  EXPECT_FALSE(md::containsCollective(hooks[1]));
}

// The plan emitter turns md.<name> into the kernel row "name" of
// runtime/core/Opcodes.def and reads each attribute slot from the op's
// attribute of the slot's name: every kernel row must be an md op that has
// an attribute of each of its slots' names.
struct KernelRow {
  const char *name;
  std::vector<const char *> slots;
};

#define MD_EXPAND(...) __VA_ARGS__
#define MD_I(field, name, Kind) name,
#define MD_I_NOARG(field, name, Kind) name,
#define MD_I_OPT(field, name, Kind) name,
#define MD_I_LIST(field, name, Kind, min) name,
#define MD_F(field, name, Kind) name,
#define MD_F_LIST(field, name, min) name,
#define MD_KERNEL(Name, Value, Str, Flags, Since, Rule, Entry, Args, Ins,      \
                  Outs, Ints, Floats)                                          \
  KernelRow{Str, {MD_EXPAND Ints MD_EXPAND Floats}},
const KernelRow kKernelRows[] = {
#include "runtime/core/Opcodes.def"
};
#undef MD_EXPAND

TEST_F(DialectTest, EveryKernelRowIsAnOpWithAnAttributePerSlot) {
  EXPECT_GE(std::size(kKernelRows), 38u);
  for (const KernelRow &row : kKernelRows) {
    std::string opName = std::string("md.") + row.name;
    std::optional<RegisteredOperationName> op =
        RegisteredOperationName::lookup(opName, &context);
    ASSERT_TRUE(op.has_value()) << opName << " is not an op of the dialect";
    std::vector<std::string> attributes;
    for (StringAttr attribute : op->getAttributeNames())
      attributes.push_back(attribute.str());
    for (const char *slot : row.slots)
      EXPECT_TRUE(llvm::is_contained(attributes, slot))
          << opName << " has no attribute '" << slot
          << "' for the plan's slot of that name";
  }
}

} // namespace
