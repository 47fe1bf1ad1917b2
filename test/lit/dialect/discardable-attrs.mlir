// RUN: md-opt %s -split-input-file | md-opt -split-input-file | FileCheck %s
// The md dialect's discardable attributes (MdBase.td) round-trip with their
// declared types; discardable-attrs-invalid.mlir shows the refusals.

// CHECK-LABEL: func.func @marks
// CHECK: md.scale %{{.*}} by 2.0{{.*}} {md.backward, md.phase = "backward", md.recompute, md.record = 3 : i64, md.stream = 1 : i64, md.unit = 2 : i64, md.units = array<i64: 1, 2>, md.wait = array<i64: 0, 1>}
func.func @marks(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = md.scale %x by 2.0 {md.unit = 2 : i64, md.units = array<i64: 1, 2>, md.backward, md.phase = "backward", md.recompute, md.stream = 1 : i64, md.record = 3 : i64, md.wait = array<i64: 0, 1>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @grad
// CHECK-SAME: (tensor<4xf32> {md.grad_of = @w})
func.func @grad(%x: tensor<4xf32>) -> (tensor<4xf32> {md.grad_of = @w}) {
  return %x : tensor<4xf32>
}
