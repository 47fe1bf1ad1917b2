// RUN: md-opt %s -canonicalize -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @reshape_to_same_type
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: md.reshape
// CHECK: return %[[X]]
func.func @reshape_to_same_type(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = md.reshape %x : tensor<4x8xf32> to tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_of_reshape
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[R:.*]] = md.reshape %[[X]] : tensor<4x8xf32> to tensor<2x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_of_reshape(%x: tensor<4x8xf32>) -> tensor<2x16xf32> {
  %0 = md.reshape %x : tensor<4x8xf32> to tensor<32xf32>
  %1 = md.reshape %0 : tensor<32xf32> to tensor<2x16xf32>
  return %1 : tensor<2x16xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_round_trip
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: md.reshape
// CHECK: return %[[X]]
func.func @reshape_round_trip(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = md.reshape %x : tensor<4x8xf32> to tensor<32xf32>
  %1 = md.reshape %0 : tensor<32xf32> to tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: md.transpose
// CHECK: return %[[X]]
func.func @transpose_identity(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = md.transpose %x perm [0, 1] : tensor<4x8xf32> to tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_of_transpose
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.*]] = md.transpose %[[X]] perm [2, 1, 0] : tensor<2x3x4xf32> to tensor<4x3x2xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_of_transpose(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  %0 = md.transpose %x perm [1, 0, 2] : tensor<2x3x4xf32> to tensor<3x2x4xf32>
  %1 = md.transpose %0 perm [2, 0, 1] : tensor<3x2x4xf32> to tensor<4x3x2xf32>
  return %1 : tensor<4x3x2xf32>
}

// -----

// Three transposes whose first two cancel.
// CHECK-LABEL: func.func @transpose_chain
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.*]] = md.transpose %[[X]] perm [2, 0, 1] : tensor<2x3x4xf32> to tensor<4x2x3xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_chain(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = md.transpose %x perm [1, 2, 0] : tensor<2x3x4xf32> to tensor<3x4x2xf32>
  %1 = md.transpose %0 perm [2, 0, 1] : tensor<3x4x2xf32> to tensor<2x3x4xf32>
  %2 = md.transpose %1 perm [2, 0, 1] : tensor<2x3x4xf32> to tensor<4x2x3xf32>
  return %2 : tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_inverse
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: md.transpose
// CHECK: return %[[X]]
func.func @transpose_inverse(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = md.transpose %x perm [1, 0] : tensor<4x8xf32> to tensor<8x4xf32>
  %1 = md.transpose %0 perm [1, 0] : tensor<8x4xf32> to tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @sum_to_same_type
// CHECK-SAME: (%[[G:.*]]: tensor<4x8xf32>)
// CHECK-NOT: md.sum_to
// CHECK: return %[[G]]
func.func @sum_to_same_type(%g: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = md.sum_to %g : tensor<4x8xf32> to tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @scale
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[S:.*]] = md.scale %[[X]] by 1.500000e+00 : tensor<4xf32>
// CHECK-NEXT: return %[[X]], %[[S]]
func.func @scale(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = md.scale %x by 1.0 : tensor<4xf32>
  %1 = md.scale %x by 0.5 : tensor<4xf32>
  %2 = md.scale %1 by 3.0 : tensor<4xf32>
  return %0, %2 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A slice of the whole range with step 1, a concat of one tensor and an
// expand to x's own type are x.
// CHECK-LABEL: func.func @layout_identities
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: md.slice
// CHECK-NOT: md.concat
// CHECK-NOT: md.expand
// CHECK: return %[[X]], %[[X]], %[[X]]
func.func @layout_identities(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = md.slice %x axis 1 start 0 step 1 : tensor<4x8xf32> to tensor<4x8xf32>
  %1 = md.concat %x axis 0 : tensor<4x8xf32> to tensor<4x8xf32>
  %2 = md.expand %x : tensor<4x8xf32> to tensor<4x8xf32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A slice that takes every other element, or a part, stays.
// CHECK-LABEL: func.func @slices_that_stay
// CHECK: md.slice %{{.*}} axis 1 start 0 step 2
// CHECK: md.slice %{{.*}} axis 1 start 1 step 1
func.func @slices_that_stay(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x7xf32>) {
  %0 = md.slice %x axis 1 start 0 step 2 : tensor<4x8xf32> to tensor<4x4xf32>
  %1 = md.slice %x axis 1 start 1 step 1 : tensor<4x8xf32> to tensor<4x7xf32>
  return %0, %1 : tensor<4x4xf32>, tensor<4x7xf32>
}
