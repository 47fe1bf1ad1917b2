// RUN: md-opt %s | md-opt | FileCheck %s


// An integer tensor converts to a float one (positions for a table of angles).
// CHECK-LABEL: func.func @cast_index
func.func @cast_index(%p: tensor<64xi64>, %q: tensor<8xi32>) -> (tensor<64xf32>, tensor<8xbf16>) {
  // CHECK: md.cast %{{.*}} : tensor<64xi64> to tensor<64xf32>
  %0 = md.cast %p : tensor<64xi64> to tensor<64xf32>
  // CHECK: md.cast %{{.*}} : tensor<8xi32> to tensor<8xbf16>
  %1 = md.cast %q : tensor<8xi32> to tensor<8xbf16>
  return %0, %1 : tensor<64xf32>, tensor<8xbf16>
}

// CHECK-LABEL: func.func @cast
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[H:.*]]: tensor<16xf16>)
func.func @cast(%x: tensor<4x8xf32>, %h: tensor<16xf16>) -> (tensor<4x8xbf16>, tensor<16xf32>, tensor<4x8xf32>) {
  // CHECK: md.cast %[[X]] : tensor<4x8xf32> to tensor<4x8xbf16>
  %0 = md.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
  // CHECK: md.cast %[[H]] : tensor<16xf16> to tensor<16xf32>
  %1 = md.cast %h : tensor<16xf16> to tensor<16xf32>
  // The identity cast is valid (it folds away).
  // CHECK: md.cast %[[X]] : tensor<4x8xf32> to tensor<4x8xf32>
  %2 = md.cast %x : tensor<4x8xf32> to tensor<4x8xf32>
  return %0, %1, %2 : tensor<4x8xbf16>, tensor<16xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @cast_scalar
func.func @cast_scalar(%x: tensor<bf16>) -> tensor<f16> {
  // CHECK: md.cast %{{.*}} : tensor<bf16> to tensor<f16>
  %0 = md.cast %x : tensor<bf16> to tensor<f16>
  return %0 : tensor<f16>
}

// CHECK-LABEL: func.func @flatten
// CHECK-SAME: (%[[W:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
func.func @flatten(%w: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<40xf32>, tensor<48xf32>) {
  // CHECK: md.flatten %[[W]], %[[B]] : tensor<4x8xf32>, tensor<8xf32> to tensor<40xf32>
  %0 = md.flatten %w, %b : tensor<4x8xf32>, tensor<8xf32> to tensor<40xf32>
  // Padded to a multiple of 16 ranks.
  // CHECK: md.flatten %[[W]], %[[B]] : tensor<4x8xf32>, tensor<8xf32> to tensor<48xf32>
  %1 = md.flatten %w, %b : tensor<4x8xf32>, tensor<8xf32> to tensor<48xf32>
  return %0, %1 : tensor<40xf32>, tensor<48xf32>
}

// CHECK-LABEL: func.func @flatten_one
func.func @flatten_one(%g: tensor<3x5xbf16>, %s: tensor<i64>) -> (tensor<16xbf16>, tensor<2xi64>) {
  // CHECK: md.flatten %{{.*}} : tensor<3x5xbf16> to tensor<16xbf16>
  %0 = md.flatten %g : tensor<3x5xbf16> to tensor<16xbf16>
  // CHECK: md.flatten %{{.*}} : tensor<i64> to tensor<2xi64>
  %1 = md.flatten %s : tensor<i64> to tensor<2xi64>
  return %0, %1 : tensor<16xbf16>, tensor<2xi64>
}

// CHECK-LABEL: func.func @view
// CHECK-SAME: (%[[F:.*]]: tensor<1024xf32>)
func.func @view(%flat: tensor<1024xf32>) -> (tensor<4x8xf32>, tensor<992xf32>, tensor<f32>) {
  // CHECK: md.view %[[F]][128] : tensor<1024xf32> to tensor<4x8xf32>
  %0 = md.view %flat[128] : tensor<1024xf32> to tensor<4x8xf32>
  // Up to the last element.
  // CHECK: md.view %[[F]][32] : tensor<1024xf32> to tensor<992xf32>
  %1 = md.view %flat[32] : tensor<1024xf32> to tensor<992xf32>
  // CHECK: md.view %[[F]][1023] : tensor<1024xf32> to tensor<f32>
  %2 = md.view %flat[1023] : tensor<1024xf32> to tensor<f32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<992xf32>, tensor<f32>
}

// A gradient bucket: flatten, all-reduce (elided), view back.
// CHECK-LABEL: func.func @bucket
func.func @bucket(%g0: tensor<768x768xbf16>, %g1: tensor<768xbf16>) -> (tensor<768x768xbf16>, tensor<768xbf16>) {
  // CHECK: %[[FLAT:.*]] = md.flatten
  // CHECK: md.view %[[FLAT]][0] : tensor<590592xbf16> to tensor<768x768xbf16>
  // CHECK: md.view %[[FLAT]][589824] : tensor<590592xbf16> to tensor<768xbf16>
  %flat = md.flatten %g0, %g1 : tensor<768x768xbf16>, tensor<768xbf16> to tensor<590592xbf16>
  %v0 = md.view %flat[0] : tensor<590592xbf16> to tensor<768x768xbf16>
  %v1 = md.view %flat[589824] : tensor<590592xbf16> to tensor<768xbf16>
  return %v0, %v1 : tensor<768x768xbf16>, tensor<768xbf16>
}
