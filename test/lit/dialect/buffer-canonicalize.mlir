// RUN: md-opt %s -canonicalize | FileCheck %s

// CHECK-LABEL: func.func @cast_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NOT: md.cast
// CHECK: return %[[X]]
func.func @cast_identity(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = md.cast %x : tensor<4xf32> to tensor<4xf32>
  return %0 : tensor<4xf32>
}

// f32 -> bf16 rounds: the round trip is not the identity and must stay.
// CHECK-LABEL: func.func @cast_f32_bf16_f32_stays
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[H:.*]] = md.cast %[[X]] : tensor<4xf32> to tensor<4xbf16>
// CHECK: %[[Y:.*]] = md.cast %[[H]] : tensor<4xbf16> to tensor<4xf32>
// CHECK: return %[[Y]]
func.func @cast_f32_bf16_f32_stays(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = md.cast %x : tensor<4xf32> to tensor<4xbf16>
  %1 = md.cast %0 : tensor<4xbf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// f32 -> f16 rounds too, so f32 -> f16 -> bf16 is not f32 -> bf16.
// CHECK-LABEL: func.func @cast_f32_f16_bf16_stays
// CHECK: %[[H:.*]] = md.cast %{{.*}} : tensor<4xf32> to tensor<4xf16>
// CHECK: md.cast %[[H]] : tensor<4xf16> to tensor<4xbf16>
func.func @cast_f32_f16_bf16_stays(%x: tensor<4xf32>) -> tensor<4xbf16> {
  %0 = md.cast %x : tensor<4xf32> to tensor<4xf16>
  %1 = md.cast %0 : tensor<4xf16> to tensor<4xbf16>
  return %1 : tensor<4xbf16>
}

// bf16 -> f16 loses range, so bf16 -> f16 -> f32 is not bf16 -> f32.
// CHECK-LABEL: func.func @cast_bf16_f16_f32_stays
// CHECK: %[[H:.*]] = md.cast %{{.*}} : tensor<4xbf16> to tensor<4xf16>
// CHECK: md.cast %[[H]] : tensor<4xf16> to tensor<4xf32>
func.func @cast_bf16_f16_f32_stays(%x: tensor<4xbf16>) -> tensor<4xf32> {
  %0 = md.cast %x : tensor<4xbf16> to tensor<4xf16>
  %1 = md.cast %0 : tensor<4xf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// bf16 -> f32 is exact: the round trip is the identity.
// CHECK-LABEL: func.func @cast_bf16_f32_bf16
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xbf16>)
// CHECK-NOT: md.cast
// CHECK: return %[[X]]
func.func @cast_bf16_f32_bf16(%x: tensor<2x3xbf16>) -> tensor<2x3xbf16> {
  %0 = md.cast %x : tensor<2x3xbf16> to tensor<2x3xf32>
  %1 = md.cast %0 : tensor<2x3xf32> to tensor<2x3xbf16>
  return %1 : tensor<2x3xbf16>
}

// CHECK-LABEL: func.func @cast_f16_f32_f16
// CHECK-SAME: (%[[X:.*]]: tensor<8xf16>)
// CHECK-NOT: md.cast
// CHECK: return %[[X]]
func.func @cast_f16_f32_f16(%x: tensor<8xf16>) -> tensor<8xf16> {
  %0 = md.cast %x : tensor<8xf16> to tensor<8xf32>
  %1 = md.cast %0 : tensor<8xf32> to tensor<8xf16>
  return %1 : tensor<8xf16>
}

// Through an exact f32 the chain becomes one cast; the intermediate cast
// stays for its other use.
// CHECK-LABEL: func.func @cast_bf16_f32_f16
// CHECK-SAME: (%[[X:.*]]: tensor<8xbf16>)
// CHECK-DAG: %[[W:.*]] = md.cast %[[X]] : tensor<8xbf16> to tensor<8xf32>
// CHECK-DAG: %[[H:.*]] = md.cast %[[X]] : tensor<8xbf16> to tensor<8xf16>
// CHECK: return %[[H]], %[[W]]
func.func @cast_bf16_f32_f16(%x: tensor<8xbf16>) -> (tensor<8xf16>, tensor<8xf32>) {
  %0 = md.cast %x : tensor<8xbf16> to tensor<8xf32>
  %1 = md.cast %0 : tensor<8xf32> to tensor<8xf16>
  return %1, %0 : tensor<8xf16>, tensor<8xf32>
}

// CHECK-LABEL: func.func @cast_f16_f32_bf16
// CHECK-SAME: (%[[X:.*]]: tensor<8xf16>)
// CHECK-NEXT: %[[H:.*]] = md.cast %[[X]] : tensor<8xf16> to tensor<8xbf16>
// CHECK-NEXT: return %[[H]]
func.func @cast_f16_f32_bf16(%x: tensor<8xf16>) -> tensor<8xbf16> {
  %0 = md.cast %x : tensor<8xf16> to tensor<8xf32>
  %1 = md.cast %0 : tensor<8xf32> to tensor<8xbf16>
  return %1 : tensor<8xbf16>
}

// An identity cast in the middle of a chain folds first.
// CHECK-LABEL: func.func @cast_identity_in_chain
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[H:.*]] = md.cast %[[X]] : tensor<4xf32> to tensor<4xbf16>
// CHECK-NEXT: return %[[H]]
func.func @cast_identity_in_chain(%x: tensor<4xf32>) -> tensor<4xbf16> {
  %0 = md.cast %x : tensor<4xf32> to tensor<4xf32>
  %1 = md.cast %0 : tensor<4xf32> to tensor<4xbf16>
  return %1 : tensor<4xbf16>
}

// Constants fold with round-to-nearest-even: 1 + 2^-8 lies halfway between
// the bf16 neighbours 1 and 1 + 2^-7 and goes to the even one, 1;
// 1 + 3 * 2^-8 goes to the even 1 + 2^-6; 0.1 becomes 0.100097656;
// 1e5 overflows f16 to +inf.
// CHECK-LABEL: func.func @cast_constant
// CHECK-DAG: arith.constant dense<1.000000e+00> : tensor<4xbf16>
// CHECK-DAG: arith.constant dense<[1.000000e+00, 1.015630e+00, 1.000980e-01, -2.000000e+00]> : tensor<4xbf16>
// CHECK-DAG: arith.constant dense<0x7C00> : tensor<2xf16>
// CHECK-NOT: md.cast
func.func @cast_constant() -> (tensor<4xbf16>, tensor<4xbf16>, tensor<2xf16>) {
  %s = arith.constant dense<1.00390625> : tensor<4xf32>
  %0 = md.cast %s : tensor<4xf32> to tensor<4xbf16>
  %d = arith.constant dense<[1.00390625, 1.01171875, 0.1, -2.0]> : tensor<4xf32>
  %1 = md.cast %d : tensor<4xf32> to tensor<4xbf16>
  %big = arith.constant dense<1.0e5> : tensor<2xf32>
  %2 = md.cast %big : tensor<2xf32> to tensor<2xf16>
  return %0, %1, %2 : tensor<4xbf16>, tensor<4xbf16>, tensor<2xf16>
}

// A constant f32 -> bf16 -> f32 folds step by step to the rounded value.
// CHECK-LABEL: func.func @cast_constant_round_trip
// CHECK: %[[C:.*]] = arith.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-NOT: md.cast
// CHECK: return %[[C]]
func.func @cast_constant_round_trip() -> tensor<4xf32> {
  %s = arith.constant dense<1.00390625> : tensor<4xf32>
  %0 = md.cast %s : tensor<4xf32> to tensor<4xbf16>
  %1 = md.cast %0 : tensor<4xbf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// CHECK-LABEL: func.func @view_of_flatten
// CHECK-SAME: (%[[W:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NOT: md.view
// CHECK: return %[[W]], %[[B]]
func.func @view_of_flatten(%w: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %flat = md.flatten %w, %b : tensor<4x8xf32>, tensor<8xf32> to tensor<48xf32>
  %0 = md.view %flat[0] : tensor<48xf32> to tensor<4x8xf32>
  %1 = md.view %flat[32] : tensor<48xf32> to tensor<8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<8xf32>
}

// Views that are not exactly one operand stay: another shape at the right
// offset, a part of an operand, a range across two operands, the padding.
// CHECK-LABEL: func.func @view_of_flatten_stays
// CHECK: %[[F:.*]] = md.flatten
// CHECK: md.view %[[F]][0] : tensor<48xf32> to tensor<32xf32>
// CHECK: md.view %[[F]][32] : tensor<48xf32> to tensor<2x4xf32>
// CHECK: md.view %[[F]][8] : tensor<48xf32> to tensor<8xf32>
// CHECK: md.view %[[F]][28] : tensor<48xf32> to tensor<8xf32>
// CHECK: md.view %[[F]][40] : tensor<48xf32> to tensor<8xf32>
func.func @view_of_flatten_stays(%w: tensor<4x8xf32>, %b: tensor<8xf32>)
    -> (tensor<32xf32>, tensor<2x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %flat = md.flatten %w, %b : tensor<4x8xf32>, tensor<8xf32> to tensor<48xf32>
  %0 = md.view %flat[0] : tensor<48xf32> to tensor<32xf32>
  %1 = md.view %flat[32] : tensor<48xf32> to tensor<2x4xf32>
  %2 = md.view %flat[8] : tensor<48xf32> to tensor<8xf32>
  %3 = md.view %flat[28] : tensor<48xf32> to tensor<8xf32>
  %4 = md.view %flat[40] : tensor<48xf32> to tensor<8xf32>
  return %0, %1, %2, %3, %4 : tensor<32xf32>, tensor<2x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// Two operands of the same type: each offset finds its own.
// CHECK-LABEL: func.func @view_of_flatten_same_types
// CHECK-SAME: (%[[A:.*]]: tensor<8xbf16>, %[[B:.*]]: tensor<8xbf16>)
// CHECK-NOT: md.view
// CHECK: return %[[B]], %[[A]]
func.func @view_of_flatten_same_types(%a: tensor<8xbf16>, %b: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %flat = md.flatten %a, %b : tensor<8xbf16>, tensor<8xbf16> to tensor<16xbf16>
  %0 = md.view %flat[8] : tensor<16xbf16> to tensor<8xbf16>
  %1 = md.view %flat[0] : tensor<16xbf16> to tensor<8xbf16>
  return %0, %1 : tensor<8xbf16>, tensor<8xbf16>
}

// A view of a whole buffer with the buffer's type is the buffer.
// CHECK-LABEL: func.func @view_whole_buffer
// CHECK-SAME: (%[[F:.*]]: tensor<64xf32>)
// CHECK-NEXT: %[[V:.*]] = md.view %[[F]][0] : tensor<64xf32> to tensor<8x8xf32>
// CHECK-NEXT: return %[[F]], %[[V]]
func.func @view_whole_buffer(%flat: tensor<64xf32>) -> (tensor<64xf32>, tensor<8x8xf32>) {
  %0 = md.view %flat[0] : tensor<64xf32> to tensor<64xf32>
  %1 = md.view %flat[0] : tensor<64xf32> to tensor<8x8xf32>
  return %0, %1 : tensor<64xf32>, tensor<8x8xf32>
}

// Flattening one 1-D tensor into a buffer of its size is the identity;
// with padding or from another shape it is not.
// CHECK-LABEL: func.func @flatten_identity
// CHECK-SAME: (%[[A:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<4x4xf32>)
// CHECK-NEXT: %[[P:.*]] = md.flatten %[[A]] : tensor<16xf32> to tensor<32xf32>
// CHECK-NEXT: %[[R:.*]] = md.flatten %[[B]] : tensor<4x4xf32> to tensor<16xf32>
// CHECK-NEXT: return %[[A]], %[[P]], %[[R]]
func.func @flatten_identity(%a: tensor<16xf32>, %b: tensor<4x4xf32>) -> (tensor<16xf32>, tensor<32xf32>, tensor<16xf32>) {
  %0 = md.flatten %a : tensor<16xf32> to tensor<16xf32>
  %1 = md.flatten %a : tensor<16xf32> to tensor<32xf32>
  %2 = md.flatten %b : tensor<4x4xf32> to tensor<16xf32>
  return %0, %1, %2 : tensor<16xf32>, tensor<32xf32>, tensor<16xf32>
}
