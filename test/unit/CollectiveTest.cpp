//===- CollectiveTest.cpp - md's collectives through CollectiveOpInterface -===//
//
// The numbers the scheduler, the bucketing cost model and the plan emitter
// read from collectives: kind, group, reduction, bucket, and the bytes sent
// and full bytes under nccl-tests' ring conventions for n = 1, 2, 4, 8.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class CollectiveTest : public ::testing::Test {
protected:
  CollectiveTest() {
    context.loadDialect<md::MdDialect, arith::ArithDialect,
                        tensor::TensorDialect>();
  }

  /// Parses `source` and returns its collectives in order.
  SmallVector<md::CollectiveOpInterface> collectives(StringRef source) {
    module = parseSourceString<ModuleOp>(source, &context);
    SmallVector<md::CollectiveOpInterface> ops;
    if (module)
      module->walk([&](md::CollectiveOpInterface op) { ops.push_back(op); });
    return ops;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

constexpr int64_t kGroupSizes[] = {1, 2, 4, 8};

TEST_F(CollectiveTest, AllGatherOfBf16) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 4 : i64} {
      md.func @f(%x: tensor<128xbf16>) -> tensor<512xbf16> {
        %0 = md.all_gather %x group shard bucket 3 : tensor<128xbf16> -> tensor<512xbf16>
        md.return %0 : tensor<512xbf16>
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 1u);
  md::CollectiveOpInterface op = ops[0];
  EXPECT_EQ(op.getCollectiveKind(), md::CollectiveKind::all_gather);
  EXPECT_EQ(op.getCollectiveGroup(), md::Group::shard);
  EXPECT_EQ(op.getReduction(), std::nullopt);
  EXPECT_EQ(op.getBucketId(), std::optional<int64_t>(3));
  // The shard is 128 x 2 = 256 bytes; the full buffer n x 256.
  const int64_t full[] = {256, 512, 1024, 2048};
  const int64_t sent[] = {0, 256, 768, 1792};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(op.getFullBytes(kGroupSizes[i]), full[i]) << "n=" << kGroupSizes[i];
    EXPECT_EQ(op.getBytesSent(kGroupSizes[i]), sent[i]) << "n=" << kGroupSizes[i];
  }
  EXPECT_EQ(md::getStaticGroupSize(op, op.getCollectiveGroup()), 4);
}

TEST_F(CollectiveTest, ReduceScatterOfF32) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 8 : i64} {
      md.func @f(%g: tensor<8x256xf32>) -> tensor<8x32xf32> {
        %0 = md.reduce_scatter %g avg axis 1 group world : tensor<8x256xf32> -> tensor<8x32xf32>
        md.return %0 : tensor<8x32xf32>
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 1u);
  md::CollectiveOpInterface op = ops[0];
  EXPECT_EQ(op.getCollectiveKind(), md::CollectiveKind::reduce_scatter);
  EXPECT_EQ(op.getCollectiveGroup(), md::Group::world);
  EXPECT_EQ(op.getReduction(), md::ReductionKind::avg);
  EXPECT_EQ(op.getBucketId(), std::nullopt);
  // The shard is 8 x 32 x 4 = 1024 bytes.
  const int64_t full[] = {1024, 2048, 4096, 8192};
  const int64_t sent[] = {0, 1024, 3072, 7168};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(op.getFullBytes(kGroupSizes[i]), full[i]) << "n=" << kGroupSizes[i];
    EXPECT_EQ(op.getBytesSent(kGroupSizes[i]), sent[i]) << "n=" << kGroupSizes[i];
  }
  // At the model's own n = 8 the full buffer is the input.
  EXPECT_EQ(op.getFullBytes(8), md::getTensorBytes(op->getOperand(0).getType()));
}

TEST_F(CollectiveTest, AllReduceSendsTwiceTheRingShare) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 4 : i64} {
      md.func @f(%x: tensor<1000xbf16>, %y: tensor<3xf32>, %z: tensor<f32>) -> tensor<f32> {
        %0 = md.all_reduce %x sum group world bucket 0 : tensor<1000xbf16>
        %1 = md.all_reduce %y max group world : tensor<3xf32>
        %2 = md.all_reduce %z avg group world : tensor<f32>
        md.return %2 : tensor<f32>
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 3u);
  md::CollectiveOpInterface bf16 = ops[0], f32 = ops[1], scalar = ops[2];
  EXPECT_EQ(bf16.getCollectiveKind(), md::CollectiveKind::all_reduce);
  EXPECT_EQ(bf16.getReduction(), md::ReductionKind::sum);
  EXPECT_EQ(bf16.getBucketId(), std::optional<int64_t>(0));
  EXPECT_EQ(f32.getReduction(), md::ReductionKind::max);
  EXPECT_EQ(scalar.getReduction(), md::ReductionKind::avg);
  EXPECT_EQ(scalar.getBucketId(), std::nullopt);
  // 2000 bytes: 2(n-1)/n x 2000.
  const int64_t bf16Sent[] = {0, 2000, 3000, 3500};
  // 12 bytes: 2(n-1) x 12 / n, multiplied before dividing (8: 168 / 8 = 21).
  const int64_t f32Sent[] = {0, 12, 18, 21};
  // 4 bytes: 8: 56 / 8 = 7.
  const int64_t scalarSent[] = {0, 4, 6, 7};
  for (int i = 0; i < 4; ++i) {
    int64_t n = kGroupSizes[i];
    EXPECT_EQ(bf16.getFullBytes(n), 2000) << "n=" << n;
    EXPECT_EQ(bf16.getBytesSent(n), bf16Sent[i]) << "n=" << n;
    EXPECT_EQ(f32.getFullBytes(n), 12) << "n=" << n;
    EXPECT_EQ(f32.getBytesSent(n), f32Sent[i]) << "n=" << n;
    EXPECT_EQ(scalar.getFullBytes(n), 4) << "n=" << n;
    EXPECT_EQ(scalar.getBytesSent(n), scalarSent[i]) << "n=" << n;
  }
  // A non-power-of-two group truncates: 2 x 2 x 12 / 3 = 16.
  EXPECT_EQ(f32.getBytesSent(3), 16);
}

TEST_F(CollectiveTest, BroadcastSendsTheBufferFromTheRoot) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 8 : i64} {
      md.func @f(%x: tensor<64x32xbf16>) -> tensor<64x32xbf16> {
        %0 = md.broadcast %x root 5 group world bucket 9 : tensor<64x32xbf16>
        md.return %0 : tensor<64x32xbf16>
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 1u);
  md::CollectiveOpInterface op = ops[0];
  EXPECT_EQ(op.getCollectiveKind(), md::CollectiveKind::broadcast);
  EXPECT_EQ(op.getReduction(), std::nullopt);
  EXPECT_EQ(op.getBucketId(), std::optional<int64_t>(9));
  EXPECT_EQ(cast<md::BroadcastOp>(op.getOperation()).getRoot(), 5u);
  const int64_t sent[] = {0, 4096, 4096, 4096};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(op.getFullBytes(kGroupSizes[i]), 4096) << "n=" << kGroupSizes[i];
    EXPECT_EQ(op.getBytesSent(kGroupSizes[i]), sent[i]) << "n=" << kGroupSizes[i];
  }
}

TEST_F(CollectiveTest, BarrierMovesNoData) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 4 : i64} {
      md.func @f() {
        md.barrier group replicate bucket 2
        md.return
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 1u);
  md::CollectiveOpInterface op = ops[0];
  EXPECT_EQ(op.getCollectiveKind(), md::CollectiveKind::barrier);
  EXPECT_EQ(op.getCollectiveGroup(), md::Group::replicate);
  EXPECT_EQ(op.getReduction(), std::nullopt);
  EXPECT_EQ(op.getBucketId(), std::optional<int64_t>(2));
  for (int64_t n : kGroupSizes) {
    EXPECT_EQ(op.getFullBytes(n), 0) << "n=" << n;
    EXPECT_EQ(op.getBytesSent(n), 0) << "n=" << n;
  }
}

TEST_F(CollectiveTest, HybridMeshGroups) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
      md.func @f(%x: tensor<128xbf16>, %g: tensor<64xf32>) -> tensor<16xf32> {
        %0 = md.all_gather %x group shard : tensor<128xbf16> -> tensor<256xbf16>
        %1 = md.all_reduce %0 avg group replicate : tensor<256xbf16>
        %2 = md.reduce_scatter %g sum group replicate : tensor<64xf32> -> tensor<16xf32>
        %3 = md.all_gather %x group world : tensor<128xbf16> -> tensor<1024xbf16>
        md.return %2 : tensor<16xf32>
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 4u);
  // Each at its own group's size: shard n = 2, replicate n = 4, world n = 8.
  auto atOwnSize = [](md::CollectiveOpInterface op) {
    std::optional<int64_t> n = md::getStaticGroupSize(op, op.getCollectiveGroup());
    EXPECT_TRUE(n.has_value());
    return std::pair<int64_t, int64_t>(op.getBytesSent(n.value_or(0)),
                                       op.getFullBytes(n.value_or(0)));
  };
  using Bytes = std::pair<int64_t, int64_t>; // (sent, full)
  EXPECT_EQ(md::getStaticGroupSize(ops[0], ops[0].getCollectiveGroup()), 2);
  EXPECT_EQ(md::getStaticGroupSize(ops[1], ops[1].getCollectiveGroup()), 4);
  EXPECT_EQ(md::getStaticGroupSize(ops[3], ops[3].getCollectiveGroup()), 8);
  // all_gather shard: 256-byte shard, 512 full, sends 256.
  EXPECT_EQ(atOwnSize(ops[0]), Bytes(256, 512));
  // all_reduce replicate of 512 bytes: 2 x 3 x 512 / 4 = 768.
  EXPECT_EQ(atOwnSize(ops[1]), Bytes(768, 512));
  // reduce_scatter replicate: 64-byte shard, 256 full, sends 3 x 64 = 192.
  EXPECT_EQ(atOwnSize(ops[2]), Bytes(192, 256));
  // all_gather world: 256-byte shard, 2048 full, sends 7 x 256 = 1792.
  EXPECT_EQ(atOwnSize(ops[3]), Bytes(1792, 2048));
}

TEST_F(CollectiveTest, SymbolicWorldStillCountsFromTheStaticSide) {
  auto ops = collectives(R"mlir(
    md.model @m {
      md.func @f(%x: tensor<16xf32>, %g: tensor<?x8xbf16>) -> tensor<?xf32> {
        %0 = md.all_gather %x group world : tensor<16xf32> -> tensor<?xf32>
        %1 = md.reduce_scatter %g sum group shard : tensor<?x8xbf16> -> tensor<4x8xbf16>
        md.return %0 : tensor<?xf32>
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(md::getStaticGroupSize(ops[0], ops[0].getCollectiveGroup()),
            std::nullopt);
  for (int64_t n : kGroupSizes) {
    EXPECT_EQ(ops[0].getFullBytes(n), n * 64) << "n=" << n;
    EXPECT_EQ(ops[0].getBytesSent(n), (n - 1) * 64) << "n=" << n;
    EXPECT_EQ(ops[1].getFullBytes(n), n * 64) << "n=" << n;
    EXPECT_EQ(ops[1].getBytesSent(n), (n - 1) * 64) << "n=" << n;
  }
}

TEST_F(CollectiveTest, CollectivesAreNeverDeadOrFree) {
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 4 : i64} {
      md.func @f(%x: tensor<4xf32>) {
        %0 = md.all_reduce %x sum group world : tensor<4xf32>
        %1 = md.all_gather %x group world : tensor<4xf32> -> tensor<16xf32>
        %2 = md.reduce_scatter %1 sum group world : tensor<16xf32> -> tensor<4xf32>
        %3 = md.broadcast %x root 0 group world : tensor<4xf32>
        md.barrier group world
        md.return
      }
    }
  )mlir");
  ASSERT_EQ(ops.size(), 5u);
  for (md::CollectiveOpInterface op : ops) {
    EXPECT_FALSE(isMemoryEffectFree(op)) << op->getName().getStringRef().str();
    EXPECT_FALSE(wouldOpBeTriviallyDead(op))
        << op->getName().getStringRef().str();
  }
}

TEST_F(CollectiveTest, RankZeroOnlyCollectiveIsRejected) {
  // Keep the expected diagnostic out of the test log.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  auto ops = collectives(R"mlir(
    md.model @m attributes {world_size = 4 : i64} {
      md.func @f() {
        md.barrier group world {rank0_only}
        md.return
      }
    }
  )mlir");
  EXPECT_FALSE(module);
  EXPECT_TRUE(ops.empty());
}

} // namespace
